//! The REST API's refusals, each answered with the status and body github.com gives.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::shapes::DOCS;

pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug)]
pub(crate) enum Error {
    /// 404 — also what GitHub says about a private repository the caller cannot see.
    NotFound,
    /// 401 for a token GitHub does not know (or has revoked, or let expire).
    BadCredentials,
    /// 401 for an app JWT that does not verify; the message says why.
    BadJwt(&'static str),
    /// 401 for a request without credentials where some are needed.
    RequiresAuthentication,
    /// 403 with GitHub's message (e.g. "Resource not accessible by integration").
    Forbidden(String),
    /// 422 with a plain message.
    Unprocessable(String),
    /// 422 "Validation Failed" with GitHub's `errors` list.
    Validation(Vec<Value>),
    /// 400 "Problems parsing JSON".
    BadJson,
}

/// GitHub's message for a JWT it cannot decode or verify.
pub(crate) const JWT_UNDECODABLE: &str = "A JSON web token could not be decoded";
/// GitHub's message for an installation token reaching past its grant.
pub(crate) const NOT_ACCESSIBLE: &str = "Resource not accessible by integration";

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let (status, message, errors) = match self {
            Error::NotFound => (StatusCode::NOT_FOUND, "Not Found".to_string(), None),
            Error::BadCredentials => (StatusCode::UNAUTHORIZED, "Bad credentials".into(), None),
            Error::BadJwt(m) => (StatusCode::UNAUTHORIZED, m.into(), None),
            Error::RequiresAuthentication => (
                StatusCode::UNAUTHORIZED,
                "Requires authentication".into(),
                None,
            ),
            Error::Forbidden(m) => (StatusCode::FORBIDDEN, m, None),
            Error::Unprocessable(m) => (StatusCode::UNPROCESSABLE_ENTITY, m, None),
            Error::Validation(e) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "Validation Failed".into(),
                Some(e),
            ),
            Error::BadJson => (
                StatusCode::BAD_REQUEST,
                "Problems parsing JSON".into(),
                None,
            ),
        };
        let mut body = json!({ "message": message, "documentation_url": DOCS, "status": status.as_u16().to_string() });
        if let Some(errors) = errors {
            body["errors"] = Value::Array(errors);
        }
        (status, Json(body)).into_response()
    }
}
