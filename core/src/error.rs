//! The core's one error type. Each kind says what went wrong in terms a surface can answer
//! with (the server maps them to HTTP statuses); none knows HTTP.

/// Everything that can go wrong in the core.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request is malformed.
    #[error("{0}")]
    BadRequest(String),
    /// Well-formed but not acceptable (unknown repo, empty prompt, …).
    #[error("{0}")]
    Invalid(String),
    /// No or bad credentials.
    #[error("{0}")]
    Unauthorized(String),
    /// Authenticated, but not allowed.
    #[error("{0}")]
    Forbidden(String),
    /// The thing asked for does not exist.
    #[error("{0}")]
    NotFound(String),
    /// Bigger than allowed.
    #[error("{0}")]
    TooLarge(String),
    /// Over a rate or budget (a session's model requests, …); answered 429.
    #[error("{0}")]
    TooMany(String),
    /// It conflicts with what is stored (duplicate name, …).
    #[error("{0}")]
    Conflict(String),
    /// Refused for a reason with its own stable code (`app_not_installed`, `push_rejected`,
    /// `stale_base`, …), answered 409.
    #[error("{message}")]
    Refused { code: &'static str, message: String },
    /// A service the server depends on (GitHub, a model endpoint) failed; answered 502.
    #[error("{0}")]
    BadGateway(String),
    /// A capability this server cannot offer right now (e.g. workspaces on a host without a runtime).
    #[error("{0}")]
    Unavailable(String),
    /// Configuration is wrong; said at start-up.
    #[error("configuration: {0}")]
    Config(String),
    /// The store failed (its details stay in the server log).
    #[error("{0}")]
    Store(tandem_store::Error),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Internal(String),
}

/// `Result` with the core's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<tandem_host::Error> for Error {
    fn from(e: tandem_host::Error) -> Self {
        use tandem_host::Error as H;
        match e {
            H::BadRequest(m) => Self::BadRequest(m),
            H::Invalid(m) => Self::Invalid(m),
            H::Forbidden(m) => Self::Forbidden(m),
            H::NotFound(m) => Self::NotFound(m),
            H::TooLarge(m) => Self::TooLarge(m),
            H::Conflict(m) => Self::Conflict(m),
            H::Unavailable(m) => Self::Unavailable(m),
            H::BadGateway(m) => Self::BadGateway(m),
            H::Config(m) => Self::Config(m),
            H::Io(e) => Self::Io(e),
            H::Internal(m) => Self::Internal(m),
        }
    }
}

/// What the core hands back to the host layer (a hook, such as git credentials,
/// failed): the same kind where the host has it; the details of others stay in the message.
impl From<Error> for tandem_host::Error {
    fn from(e: Error) -> Self {
        use tandem_host::Error as H;
        match e {
            Error::BadRequest(m) => H::BadRequest(m),
            Error::Invalid(m) => H::Invalid(m),
            Error::Unauthorized(m) | Error::Forbidden(m) => H::Forbidden(m),
            Error::NotFound(m) => H::NotFound(m),
            Error::TooLarge(m) => H::TooLarge(m),
            Error::Conflict(m) | Error::TooMany(m) => H::Conflict(m),
            Error::Refused { message, .. } => H::Conflict(message),
            Error::BadGateway(m) => H::BadGateway(m),
            Error::Unavailable(m) => H::Unavailable(m),
            Error::Config(m) => H::Config(m),
            Error::Io(e) => H::Io(e),
            e @ (Error::Store(_) | Error::Internal(_)) => H::Internal(e.to_string()),
        }
    }
}

impl From<tandem_store::Error> for Error {
    fn from(e: tandem_store::Error) -> Self {
        use tandem_store::Error as S;
        match e {
            S::NotFound(m) => Self::NotFound(m),
            S::Config(m) => Self::Config(m),
            S::Internal(m) => Self::Internal(m),
            e => Self::Store(e),
        }
    }
}

/// Maps a unique-constraint violation to 409 with `what` in the message; other errors pass through.
pub fn conflict_on_unique(err: tandem_store::Error, what: &str) -> Error {
    if err.is_unique_violation() {
        Error::Conflict(format!("{what} already exists"))
    } else {
        err.into()
    }
}
