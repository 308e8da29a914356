//! The media pipeline's one error type; the server maps each kind to its own.

/// What can go wrong capturing, encoding or sending a desktop.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A viewer's offer (or input) is malformed.
    #[error("{0}")]
    BadRequest(String),
    /// Well-formed but not acceptable (a display name that is not one).
    #[error("{0}")]
    Invalid(String),
    /// Not possible right now (the display is not up, the encoder did not start, …).
    #[error("{0}")]
    Unavailable(String),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Internal(String),
}

/// `Result` with the media pipeline's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
