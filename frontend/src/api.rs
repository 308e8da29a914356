//! Calls to the server's REST API. Same origin, so the HttpOnly login cookie rides along.

use gloo_net::http::{Request, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tandem_protocol::{ApiError, ArtifactId, SessionId};

/// An API call's failure, as the server said it (or as the network failed).
pub type ApiResult<T> = Result<T, ApiError>;

fn network(e: gloo_net::Error) -> ApiError {
    ApiError {
        code: "network".into(),
        message: format!("cannot reach the server: {e}"),
    }
}

async fn read<T: DeserializeOwned>(res: Response) -> ApiResult<T> {
    if res.ok() {
        return res.json::<T>().await.map_err(|e| ApiError {
            code: "decode".into(),
            message: e.to_string(),
        });
    }
    let status = res.status();
    Err(res.json::<ApiError>().await.unwrap_or_else(|_| ApiError {
        code: "http".into(),
        message: format!("the server answered {status}"),
    }))
}

/// `GET path`.
pub async fn get<T: DeserializeOwned>(path: &str) -> ApiResult<T> {
    read(Request::get(path).send().await.map_err(network)?).await
}

/// `POST path` with a JSON body.
pub async fn post<B: Serialize, T: DeserializeOwned>(path: &str, body: &B) -> ApiResult<T> {
    let req = Request::post(path).json(body).map_err(|e| ApiError {
        code: "encode".into(),
        message: e.to_string(),
    })?;
    read(req.send().await.map_err(network)?).await
}

/// `PUT path` with a JSON body.
pub async fn put<B: Serialize, T: DeserializeOwned>(path: &str, body: &B) -> ApiResult<T> {
    let req = Request::put(path).json(body).map_err(|e| ApiError {
        code: "encode".into(),
        message: e.to_string(),
    })?;
    read(req.send().await.map_err(network)?).await
}

/// `PATCH path` with a JSON body.
pub async fn patch<B: Serialize, T: DeserializeOwned>(path: &str, body: &B) -> ApiResult<T> {
    let req = Request::patch(path).json(body).map_err(|e| ApiError {
        code: "encode".into(),
        message: e.to_string(),
    })?;
    read(req.send().await.map_err(network)?).await
}

/// `DELETE path`, expecting no body.
pub async fn delete(path: &str) -> ApiResult<()> {
    let res = Request::delete(path).send().await.map_err(network)?;
    if res.ok() {
        return Ok(());
    }
    let status = res.status();
    Err(res.json::<ApiError>().await.unwrap_or_else(|_| ApiError {
        code: "http".into(),
        message: format!("the server answered {status}"),
    }))
}

/// Where a session's artifact is (same origin: the login cookie rides along), built from ids
/// only, so an `img` or a link to it never points anywhere else.
pub fn artifact_url(session: SessionId, artifact: ArtifactId) -> String {
    format!("/api/sessions/{session}/artifacts/{artifact}")
}

/// True when the error means "sign in first".
pub fn is_unauthorized(e: &ApiError) -> bool {
    e.code == "unauthorized"
}

/// True when the server answered 404: the thing does not exist, or the person may not see it
/// (the server answers both alike).
pub fn is_not_found(e: &ApiError) -> bool {
    e.code == "not_found"
}

/// The error with what was being done in front, for the place it is shown: "Revoking the
/// invite for bob failed: …".
pub fn failed(what: &str, e: ApiError) -> ApiError {
    ApiError {
        message: format!("{what} failed: {}", e.message),
        ..e
    }
}
