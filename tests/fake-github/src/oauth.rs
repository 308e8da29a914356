//! The OAuth web flow: `/login/oauth/authorize` signs the browser's user straight in (no
//! consent page) and redirects back with a code; `/login/oauth/access_token` trades the code for
//! a user access token, answering errors with 200 and an `error` field, as GitHub does.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;

use crate::shapes::now;
use crate::state::{OAuthCode, Shared, random_text};

/// How long an authorization code stays good, as on GitHub.
const CODE_LIFETIME: u64 = 600;
const TROUBLESHOOTING: &str =
    "/apps/managing-oauth-apps/troubleshooting-oauth-app-access-token-request-errors";

pub(crate) fn router() -> Router<Arc<Shared>> {
    Router::new()
        .route("/login/oauth/authorize", get(authorize))
        .route("/login/oauth/access_token", post(access_token))
}

fn page(status: StatusCode, title: &str) -> Response {
    (status, Html(format!("<!DOCTYPE html><html><head><title>{title}</title></head><body><h1>{title}</h1></body></html>"))).into_response()
}

async fn authorize(
    State(s): State<Arc<Shared>>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let mut world = s.world();
    let known = world
        .oauth_client
        .as_ref()
        .is_some_and(|(id, _)| q.get("client_id") == Some(id));
    if !known {
        return page(StatusCode::NOT_FOUND, "Page not found · GitHub");
    }
    let Some(login) = world.browser_user.clone() else {
        return page(StatusCode::OK, "Sign in to GitHub");
    };
    // The fake registers no callback URL, so the request must name one.
    let Some(redirect_uri) = q.get("redirect_uri").cloned() else {
        return page(StatusCode::BAD_REQUEST, "The redirect_uri is missing");
    };
    let code = random_text(20);
    world.oauth_codes.insert(
        code.clone(),
        OAuthCode {
            login,
            redirect_uri: redirect_uri.clone(),
            expires: now() + CODE_LIFETIME,
        },
    );
    let mut params = vec![("code", code.as_str())];
    if let Some(state) = q.get("state") {
        params.push(("state", state));
    }
    let separator = if redirect_uri.contains('?') { '&' } else { '?' };
    let location = format!("{redirect_uri}{separator}{}", encode_form(&params));
    (StatusCode::FOUND, [("location", location)]).into_response()
}

async fn access_token(
    State(s): State<Arc<Shared>>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    // GitHub takes the parameters in the query string, a form body or a JSON body.
    let mut params = query;
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if content_type.starts_with("application/json") {
        if let Ok(map) = serde_json::from_slice::<HashMap<String, serde_json::Value>>(&body) {
            params.extend(
                map.into_iter()
                    .filter_map(|(k, v)| v.as_str().map(|v| (k, v.to_string()))),
            );
        }
    } else {
        params.extend(decode_form(&String::from_utf8_lossy(&body)));
    }
    let json = headers
        .get("accept")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("json"));
    let param = |k: &str| params.get(k).map(String::as_str).unwrap_or("");

    let answer: Vec<(&str, String)> = {
        let mut world = s.world();
        let client_ok = world.oauth_client.as_ref().is_some_and(|(id, secret)| {
            param("client_id") == id && param("client_secret") == secret
        });
        let code = world
            .oauth_codes
            .get(param("code"))
            .filter(|c| c.expires > now());
        let refresh = param("grant_type") == "refresh_token";
        if client_ok && refresh {
            match world.refresh_tokens.remove(param("refresh_token")) {
                Some(login) => {
                    world.refreshes += 1;
                    user_tokens(&mut world, login)
                }
                None => error(
                    "bad_refresh_token",
                    "The refresh token passed is incorrect or expired.",
                    "#bad-refresh-token",
                ),
            }
        } else if !client_ok {
            error(
                "incorrect_client_credentials",
                "The client_id and/or client_secret passed are incorrect.",
                "#incorrect-client-credentials",
            )
        } else if code.is_none() {
            error(
                "bad_verification_code",
                "The code passed is incorrect or expired.",
                "#bad-verification-code",
            )
        } else if !param("redirect_uri").is_empty()
            && code.is_some_and(|c| c.redirect_uri != param("redirect_uri"))
        {
            error(
                "redirect_uri_mismatch",
                "The redirect_uri MUST match the registered callback URL for this application.",
                "#redirect-uri-mismatch2",
            )
        } else {
            // A code is good once.
            let code = world
                .oauth_codes
                .remove(param("code"))
                .expect("checked above");
            user_tokens(&mut world, code.login)
        }
    };
    if json {
        // Lifetimes are numbers in GitHub's JSON answer.
        let map: serde_json::Map<String, serde_json::Value> = answer
            .into_iter()
            .map(|(k, v)| {
                let value = match v.parse::<u64>() {
                    Ok(n) if k.ends_with("expires_in") => n.into(),
                    _ => v.into(),
                };
                (k.to_string(), value)
            })
            .collect();
        axum::Json(map).into_response()
    } else {
        let pairs: Vec<(&str, &str)> = answer.iter().map(|(k, v)| (*k, v.as_str())).collect();
        (
            [(
                "content-type",
                "application/x-www-form-urlencoded; charset=utf-8",
            )],
            encode_form(&pairs),
        )
            .into_response()
    }
}

/// How long a user token lasts (GitHub Apps' expire after 8 hours) and its refresh token.
const USER_TOKEN_SECS: u64 = 8 * 3600;
const REFRESH_TOKEN_SECS: u64 = 184 * 24 * 3600;

/// A new user access token and refresh token for `login`, as GitHub answers them.
fn user_tokens(world: &mut crate::state::World, login: String) -> Vec<(&'static str, String)> {
    let token = format!("gho_{}", random_text(36));
    let refresh = format!("ghr_{}", random_text(76));
    world.user_tokens.insert(token.clone(), login.clone());
    world
        .user_token_expiry
        .insert(token.clone(), now() + USER_TOKEN_SECS);
    world.refresh_tokens.insert(refresh.clone(), login);
    vec![
        ("access_token", token),
        ("expires_in", USER_TOKEN_SECS.to_string()),
        ("refresh_token", refresh),
        ("refresh_token_expires_in", REFRESH_TOKEN_SECS.to_string()),
        ("token_type", "bearer".into()),
        ("scope", String::new()),
    ]
}

fn error(code: &str, description: &str, anchor: &str) -> Vec<(&'static str, String)> {
    vec![
        ("error", code.into()),
        ("error_description", description.into()),
        ("error_uri", format!("{TROUBLESHOOTING}/{anchor}")),
    ]
}

/// `application/x-www-form-urlencoded` pairs.
fn encode_form(pairs: &[(&str, &str)]) -> String {
    let escape = |s: &str| {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                    (b as char).to_string()
                }
                b' ' => "+".into(),
                _ => format!("%{b:02X}"),
            })
            .collect::<String>()
    };
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", escape(k), escape(v)))
        .collect::<Vec<_>>()
        .join("&")
}

fn decode_form(body: &str) -> Vec<(String, String)> {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let unescape = |s: &str| {
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            let escaped = (bytes[i] == b'%')
                .then(|| Some(hex(*bytes.get(i + 1)?)? * 16 + hex(*bytes.get(i + 2)?)?))
                .flatten();
            match (bytes[i], escaped) {
                (_, Some(b)) => {
                    out.push(b);
                    i += 2;
                }
                (b'+', None) => out.push(b' '),
                (b, None) => out.push(b),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    };
    body.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (unescape(k), unescape(v))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_round_trip() {
        let encoded = encode_form(&[("state", "a b&c=d/é"), ("code", "X1")]);
        assert_eq!(encoded, "state=a+b%26c%3Dd%2F%C3%A9&code=X1");
        assert_eq!(
            decode_form(&encoded),
            vec![
                ("state".into(), "a b&c=d/é".into()),
                ("code".into(), "X1".into())
            ]
        );
    }
}
