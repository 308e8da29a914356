//! Who is calling: the app (an RS256 JWT it signed), an installation (a `ghs_` token), a user
//! (a `gho_` token) or nobody — and the middleware that works it out and logs every request.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use jsonwebtoken::{Algorithm, Validation};
use serde::Deserialize;
use serde_json::Value;

use crate::error::{Error, JWT_UNDECODABLE};
use crate::shapes::now;
use crate::state::{RequestRecord, Shared};

/// GitHub refuses app JWTs that live longer than this (seconds).
const MAX_JWT_LIFETIME: u64 = 600;
/// Clock drift allowed on `exp`, as GitHub allows some.
const JWT_LEEWAY: u64 = 60;

#[derive(Clone, Debug)]
pub(crate) enum Caller {
    Anonymous,
    App,
    Installation {
        token: String,
        installation: u64,
    },
    User {
        login: String,
    },
    /// Credentials were sent and refused.
    Refused(Refusal),
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Refusal {
    Jwt(&'static str),
    Credentials,
}

impl Caller {
    /// The `who` of a [`RequestRecord`].
    pub fn who(&self) -> String {
        match self {
            Caller::Anonymous | Caller::Refused(_) => "anonymous".into(),
            Caller::App => "app".into(),
            Caller::Installation { installation, .. } => format!("installation:{installation}"),
            Caller::User { login } => format!("user:{login}"),
        }
    }
}

impl From<Refusal> for Error {
    fn from(r: Refusal) -> Self {
        match r {
            Refusal::Jwt(m) => Error::BadJwt(m),
            Refusal::Credentials => Error::BadCredentials,
        }
    }
}

/// Reads `Authorization`: `Bearer`/`token` for the API, `Basic` (token as the password) for git.
pub(crate) fn resolve(shared: &Shared, headers: &HeaderMap) -> Caller {
    let Some(value) = headers.get("authorization").and_then(|v| v.to_str().ok()) else {
        return Caller::Anonymous;
    };
    let (scheme, credential) = value.split_once(' ').unwrap_or((value, ""));
    let credential = credential.trim();
    match scheme.to_ascii_lowercase().as_str() {
        "basic" => {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(credential)
                .ok()
                .and_then(|b| String::from_utf8(b).ok());
            match decoded.as_deref().and_then(|d| d.split_once(':')) {
                Some((_, password)) => token_caller(shared, password),
                None => Caller::Refused(Refusal::Credentials),
            }
        }
        "bearer" | "token" if credential.starts_with("ghs_") || credential.starts_with("gho_") => {
            token_caller(shared, credential)
        }
        "bearer" | "token" if credential.split('.').count() == 3 => app_caller(shared, credential),
        _ => Caller::Refused(Refusal::Credentials),
    }
}

fn token_caller(shared: &Shared, secret: &str) -> Caller {
    let world = shared.world();
    if let Some(login) = world.user_tokens.get(secret) {
        if world
            .user_token_expiry
            .get(secret)
            .is_some_and(|e| *e <= now())
        {
            return Caller::Refused(Refusal::Credentials);
        }
        return Caller::User {
            login: login.clone(),
        };
    }
    match world.token(secret) {
        Some(t) if !t.minted.revoked && t.expires > now() => Caller::Installation {
            token: secret.into(),
            installation: t.minted.installation_id,
        },
        _ => Caller::Refused(Refusal::Credentials),
    }
}

#[derive(Deserialize)]
struct AppClaims {
    /// The app id; octocrab sends a number, other clients a string.
    iss: Value,
    iat: Option<i64>,
    exp: u64,
}

fn app_caller(shared: &Shared, jwt: &str) -> Caller {
    let mut validation = Validation::new(Algorithm::RS256);
    validation.leeway = JWT_LEEWAY;
    // `iss` is checked below: jsonwebtoken reads it only as a string, octocrab sends a number.
    validation.set_required_spec_claims(&["exp"]);
    let claims = match jsonwebtoken::decode::<AppClaims>(jwt, &shared.app_key, &validation) {
        Ok(data) => data.claims,
        Err(e) if matches!(e.kind(), jsonwebtoken::errors::ErrorKind::ExpiredSignature) => {
            return Caller::Refused(Refusal::Jwt(
                "'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires",
            ));
        }
        Err(_) => return Caller::Refused(Refusal::Jwt(JWT_UNDECODABLE)),
    };
    let iss_matches = match &claims.iss {
        Value::Number(n) => n.as_u64() == Some(shared.app_id),
        Value::String(s) => s.parse::<u64>().ok() == Some(shared.app_id),
        _ => false,
    };
    if !iss_matches {
        return Caller::Refused(Refusal::Jwt(JWT_UNDECODABLE));
    }
    if claims.iat.is_none() {
        return Caller::Refused(Refusal::Jwt(
            "'Issued at' claim ('iat') must be an Integer representing the time that the assertion was issued",
        ));
    }
    if claims.exp > now() + MAX_JWT_LIFETIME + JWT_LEEWAY {
        return Caller::Refused(Refusal::Jwt(
            "'Expiration time' claim ('exp') is too far in the future",
        ));
    }
    Caller::App
}

/// Middleware on every route: works out the caller, refuses bad credentials the way GitHub does
/// (JSON for the API, a Basic challenge for git), and logs the request with its status.
pub(crate) async fn observe(
    State(shared): State<Arc<Shared>>,
    mut request: Request,
    next: Next,
) -> Response {
    let method = request.method().to_string();
    let path = request
        .uri()
        .path_and_query()
        .map_or_else(|| request.uri().path().to_string(), |p| p.to_string());
    // The OAuth pages are for browsers and the token exchange; they ignore `Authorization`.
    let caller = if path.starts_with("/login/oauth/") {
        Caller::Anonymous
    } else {
        resolve(&shared, request.headers())
    };
    let response = match caller {
        Caller::Refused(_) if crate::git_http::is_git_path(request.uri().path()) => {
            crate::git_http::challenge()
        }
        Caller::Refused(refusal) => Error::from(refusal).into_response(),
        _ => {
            request.extensions_mut().insert(caller.clone());
            next.run(request).await
        }
    };
    let record = RequestRecord {
        method,
        path,
        who: caller.who(),
        status: response.status().as_u16(),
    };
    shared.world().requests.push(record);
    response
}
