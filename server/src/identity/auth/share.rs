//! The share-link credential of a request that may come from a guest: `?share=<token>&name=<guest
//! name>`, as the live channel, VS Code and the desktop take it (a WebSocket cannot carry a
//! header from a browser). What it grants is decided by `permissions::resolve`.

use axum::extract::{FromRequestParts, Query};
use axum::http::request::Parts;
use serde::Deserialize;

use crate::Error;

/// A request's share-link token and guest name, each optional.
#[derive(Debug, Default, Deserialize)]
pub struct ShareCredential {
    /// A share-link token.
    #[serde(default)]
    pub share: Option<String>,
    /// A guest's display name.
    #[serde(default)]
    pub name: Option<String>,
}

impl<S: Send + Sync> FromRequestParts<S> for ShareCredential {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Query::<ShareCredential>::from_request_parts(parts, state)
            .await
            .map(|Query(q)| q)
            .map_err(|e| Error::BadRequest(format!("a malformed share credential: {e}")))
    }
}
