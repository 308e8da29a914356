//! The host layer's one error type; the server maps each kind to its own (and so to an HTTP
//! status) one for one.

/// Everything that can go wrong running workspaces on this host.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to a workspace (its agent, its runtime) is malformed.
    #[error("{0}")]
    BadRequest(String),
    /// Well-formed but not acceptable (a limit out of range, a bad name, …).
    #[error("{0}")]
    Invalid(String),
    /// Not allowed (a socket that does not lead into its workspace, …).
    #[error("{0}")]
    Forbidden(String),
    /// The thing asked for does not exist (a terminal, a file, …).
    #[error("{0}")]
    NotFound(String),
    /// Bigger than allowed.
    #[error("{0}")]
    TooLarge(String),
    /// It conflicts with what is there (a workspace already running, a busy agent, …).
    #[error("{0}")]
    Conflict(String),
    /// Not possible here right now (no runtime, an agent that does not answer, …).
    #[error("{0}")]
    Unavailable(String),
    /// A service the host's work depends on (the code host a repo is fetched from) failed.
    #[error("{0}")]
    BadGateway(String),
    /// The host's configuration is wrong.
    #[error("configuration: {0}")]
    Config(String),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Internal(String),
}

impl Error {
    /// The same error again, for each of several callers that shared the work that failed (an
    /// i/o error's kind becomes its message).
    pub fn again(&self) -> Self {
        match self {
            Self::BadRequest(m) => Self::BadRequest(m.clone()),
            Self::Invalid(m) => Self::Invalid(m.clone()),
            Self::Forbidden(m) => Self::Forbidden(m.clone()),
            Self::NotFound(m) => Self::NotFound(m.clone()),
            Self::TooLarge(m) => Self::TooLarge(m.clone()),
            Self::Conflict(m) => Self::Conflict(m.clone()),
            Self::Unavailable(m) => Self::Unavailable(m.clone()),
            Self::BadGateway(m) => Self::BadGateway(m.clone()),
            Self::Config(m) => Self::Config(m.clone()),
            Self::Io(e) => Self::Internal(format!("i/o: {e}")),
            Self::Internal(m) => Self::Internal(m.clone()),
        }
    }
}

/// `Result` with the host layer's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
