//! The server's one error type and how it becomes an HTTP answer.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use tandem_protocol::ApiError;

/// Everything that can go wrong in the server library.
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

/// `Result` with the server's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The HTTP status and stable code this error is answered with.
    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            Self::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            Self::Invalid(_) => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_input"),
            Self::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "unauthorized"),
            Self::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden"),
            Self::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            Self::Conflict(_) => (StatusCode::CONFLICT, "conflict"),
            Self::Refused { code, .. } => (StatusCode::CONFLICT, code),
            Self::BadGateway(_) => (StatusCode::BAD_GATEWAY, "bad_gateway"),
            Self::TooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            Self::TooMany(_) => (StatusCode::TOO_MANY_REQUESTS, "too_many_requests"),
            Self::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            Self::Config(_) | Self::Store(_) | Self::Io(_) | Self::Internal(_) => {
                (StatusCode::INTERNAL_SERVER_ERROR, "internal")
            }
        }
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let message = if status == StatusCode::INTERNAL_SERVER_ERROR {
            // Details stay in the server log; the client learns only that it was not its fault.
            tracing::error!(error = %self, "request failed");
            "internal error; the server log has the details".to_string()
        } else {
            self.to_string()
        };
        (
            status,
            Json(ApiError {
                code: code.to_string(),
                message,
            }),
        )
            .into_response()
    }
}

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

/// What the server hands back to the host layer (a hook of its, such as git credentials,
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

impl From<tandem_media::Error> for Error {
    fn from(e: tandem_media::Error) -> Self {
        use tandem_media::Error as M;
        match e {
            M::BadRequest(m) => Self::BadRequest(m),
            M::Invalid(m) => Self::Invalid(m),
            M::Unavailable(m) => Self::Unavailable(m),
            M::Io(e) => Self::Io(e),
            M::Internal(m) => Self::Internal(m),
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

pub use tandem_core::error::conflict_on_unique;

impl From<tandem_core::Error> for Error {
    fn from(e: tandem_core::Error) -> Self {
        use tandem_core::Error as C;
        match e {
            C::BadRequest(m) => Self::BadRequest(m),
            C::Invalid(m) => Self::Invalid(m),
            C::Unauthorized(m) => Self::Unauthorized(m),
            C::Forbidden(m) => Self::Forbidden(m),
            C::NotFound(m) => Self::NotFound(m),
            C::TooLarge(m) => Self::TooLarge(m),
            C::TooMany(m) => Self::TooMany(m),
            C::Conflict(m) => Self::Conflict(m),
            C::Refused { code, message } => Self::Refused { code, message },
            C::BadGateway(m) => Self::BadGateway(m),
            C::Unavailable(m) => Self::Unavailable(m),
            C::Config(m) => Self::Config(m),
            C::Store(e) => Self::Store(e),
            C::Io(e) => Self::Io(e),
            C::Internal(m) => Self::Internal(m),
        }
    }
}

/// What a surface hands back to the core (a hook of its failed): the same kind.
impl From<Error> for tandem_core::Error {
    fn from(e: Error) -> Self {
        use tandem_core::Error as C;
        match e {
            Error::BadRequest(m) => C::BadRequest(m),
            Error::Invalid(m) => C::Invalid(m),
            Error::Unauthorized(m) => C::Unauthorized(m),
            Error::Forbidden(m) => C::Forbidden(m),
            Error::NotFound(m) => C::NotFound(m),
            Error::TooLarge(m) => C::TooLarge(m),
            Error::TooMany(m) => C::TooMany(m),
            Error::Conflict(m) => C::Conflict(m),
            Error::Refused { code, message } => C::Refused { code, message },
            Error::BadGateway(m) => C::BadGateway(m),
            Error::Unavailable(m) => C::Unavailable(m),
            Error::Config(m) => C::Config(m),
            Error::Store(e) => C::Store(e),
            Error::Io(e) => C::Io(e),
            Error::Internal(m) => C::Internal(m),
        }
    }
}
