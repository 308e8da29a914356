//! The rate limits of `crate::rate_limit` as an extractor a handler names first
//! (`_: Limited<Pairings>`), keyed by the client's address: the connection's peer, or — when
//! the peer is this host itself (a reverse proxy beside the server) — the last address its
//! `X-Forwarded-For` names. Over the limit the request is answered 429 with how long to wait
//! (JSON for the API, a page for a sign-in a browser lands on) and goes no further.

use std::marker::PhantomData;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::header::{CONTENT_TYPE, RETRY_AFTER};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::Error;
use crate::rate_limit::{Limiter, Limits};
use crate::state::AppState;

/// Which limiter, and how its refusal is shown.
pub trait Kind {
    fn limiter(l: &Limits) -> &Limiter;
    /// A browser lands on the route: refuse with a page, not JSON.
    const PAGE: bool;
}

/// `POST /api/extension/pairings`.
pub struct Pairings;
impl Kind for Pairings {
    fn limiter(l: &Limits) -> &Limiter {
        &l.pairings
    }
    const PAGE: bool = false;
}

/// `GET /api/auth/oidc/{id}` and `GET /api/auth/github`: one bucket per address for both.
pub struct SignInStarts;
impl Kind for SignInStarts {
    fn limiter(l: &Limits) -> &Limiter {
        &l.sign_in_starts
    }
    const PAGE: bool = true;
}

/// Proof the request was within its limit, with the client's address it counted under.
pub struct Limited<K> {
    pub addr: IpAddr,
    kind: PhantomData<K>,
}

impl<K: Kind + Send + Sync> FromRequestParts<AppState> for Limited<K> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip());
        let addr = client_addr(peer, &parts.headers);
        let limiter = K::limiter(&state.rate_limits);
        match limiter.take(addr, std::time::Instant::now()) {
            Ok(()) => Ok(Self {
                addr,
                kind: PhantomData,
            }),
            Err(wait) => {
                let secs = wait.as_secs() + 1;
                tracing::info!(%addr, what = limiter.what, "rate limited");
                let message = format!(
                    "too many {} from your address ({addr}): try again in {secs} seconds",
                    limiter.what
                );
                let mut res = if K::PAGE {
                    page(&message)
                } else {
                    Error::TooMany(message).into_response()
                };
                if let Ok(v) = secs.to_string().parse() {
                    res.headers_mut().insert(RETRY_AFTER, v);
                }
                Err(res)
            }
        }
    }
}

/// The client's address: the peer's, unless the peer is this host (a local reverse proxy),
/// whose `X-Forwarded-For` then names the client last. A server driven in-process (tests) has
/// no peer and counts as this host.
pub fn client_addr(peer: Option<IpAddr>, headers: &HeaderMap) -> IpAddr {
    let peer = peer.unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
    if !peer.is_loopback() {
        return peer;
    }
    headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|a| a.trim().parse::<IpAddr>().ok())
        .next_back()
        .unwrap_or(peer)
}

fn page(message: &str) -> Response {
    let escaped = message
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    (
        StatusCode::TOO_MANY_REQUESTS,
        [(CONTENT_TYPE, "text/html; charset=utf-8")],
        format!(
            "<!doctype html><html><head><meta charset=\"utf-8\"><title>Slow down — Tandem</title></head>\
             <body><h1>Too many sign-in attempts</h1><p id=\"reason\">{escaped}</p>\
             <p><a href=\"/login\">Back to sign in</a></p></body></html>"
        ),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_local_proxy_names_the_client() {
        let mut h = HeaderMap::new();
        h.insert(
            "x-forwarded-for",
            "198.51.100.9, 203.0.113.5".parse().unwrap(),
        );
        let remote: IpAddr = "192.0.2.1".parse().unwrap();
        assert_eq!(
            client_addr(Some(remote), &h),
            remote,
            "a remote peer is the client"
        );
        assert_eq!(
            client_addr(Some(IpAddr::V4(Ipv4Addr::LOCALHOST)), &h),
            "203.0.113.5".parse::<IpAddr>().unwrap(),
            "the proxy's own entry, the last"
        );
        assert_eq!(
            client_addr(None, &HeaderMap::new()),
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        );
    }
}
