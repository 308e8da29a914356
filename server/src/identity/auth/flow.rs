//! Flows that end in a sign-in or a link (GitHub, OpenID Connect, the Slack link), kept on the
//! server: a flow is a row under its random `state`'s hash, bound to the browser that started it
//! by the hash of that browser's binding secret (a random value that lives only in an HttpOnly
//! [`cookies::FLOW`] cookie, `__Host-` on https), with its kind, the person who started it when
//! signed in (fully checked: revocation, deactivation), and what the kind needs. Its callback
//! finds it only with the same state, binding and kind, and takes it once. A state a client makes
//! up, a state cookie it sets, or another browser's state finds nothing. A browser that sends
//! the binding cookie twice (a second one can only be another origin's of the same site) starts
//! and finishes nothing. A browser keeps at most a few flows, a person too, and signed-out
//! flows in flight are capped all together (`store/src/flows.rs`).

use axum::http::HeaderMap;
use tandem_protocol::{User, UserId};

use super::cookies;
use crate::state::AppState;
use crate::{Error, Result, db, now_ms};

/// How long a flow may take from its start to its callback.
pub const FLOW_TTL_SECS: i64 = 10 * 60;

/// The binding cookie lasts this long, renewed at each start (longer than a flow, so a second
/// tab's flow does not cut off the first's).
const BINDING_TTL_SECS: i64 = 24 * 3600;

/// A binding secret's prefix (a cookie value without it is not one of ours).
const BINDING_PREFIX: &str = "tfb_";

/// What starting a flow hands back.
pub struct Started {
    /// The state to send through the provider (its hash is all the server keeps).
    pub state: String,
    /// The `Set-Cookie` line binding this browser (a fresh secret, or the one it had, renewed).
    pub cookie: String,
}

/// A flow taken at its callback.
pub struct Flow {
    /// The person signed in (fully checked) when it started.
    pub started_by: Option<UserId>,
    pub data: serde_json::Value,
}

/// Refused when the browser sends Tandem's cookie `name` more than once.
fn duplicated(what: &str) -> Error {
    Error::Unauthorized(format!(
        "this browser sent Tandem's {what} cookie twice (another site of the same domain, such as a workspace's page, may have set one), so nothing is signed in or linked; clear this site's cookies in the browser and start again"
    ))
}

fn binding(app: &AppState, headers: &HeaderMap) -> Option<String> {
    cookies::FLOW.read(app, headers).filter(|b| {
        b.len() > BINDING_PREFIX.len() + 20
            && b.starts_with(BINDING_PREFIX)
            && b.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
    })
}

/// Starts a flow of `kind` for the browser of `headers`: `started_by` is who is signed in (the
/// caller resolved them with [`signed_in`]), `data` what the callback needs.
pub async fn start(
    app: &AppState,
    headers: &HeaderMap,
    kind: &str,
    started_by: Option<UserId>,
    data: serde_json::Value,
) -> Result<Started> {
    if cookies::FLOW.duplicated(app, headers) {
        return Err(duplicated("sign-in binding"));
    }
    let binding = binding(app, headers).unwrap_or_else(|| super::new_secret(BINDING_PREFIX));
    let state = super::new_secret("");
    let now = now_ms();
    let stored = db::flows::insert(
        &app.db,
        &db::flows::Key {
            state_hash: &super::hash_secret(&state),
            binding_hash: &super::hash_secret(&binding),
            kind,
        },
        started_by,
        &data.to_string(),
        now,
        now + FLOW_TTL_SECS * 1000,
    )
    .await?;
    if stored == db::flows::Inserted::Full {
        tracing::warn!(
            max = db::flows::MAX_SIGNED_OUT,
            "sign-in starts refused: too many signed-out flows in flight"
        );
        return Err(Error::Unavailable(
            "too many sign-ins in flight; try again in a minute".into(),
        ));
    }
    Ok(Started {
        state,
        cookie: cookies::FLOW.set(app, &binding, BINDING_TTL_SECS),
    })
}

/// The refusal when no flow answers: the same whatever the reason, so it tells an attacker
/// nothing.
fn unknown() -> Error {
    Error::Unauthorized(
        "this sign-in was not started from this browser, was already used or has expired; start again"
            .into(),
    )
}

async fn lookup(
    app: &AppState,
    headers: &HeaderMap,
    kind: &str,
    state: &str,
    take: bool,
) -> Result<Option<Flow>> {
    if cookies::FLOW.duplicated(app, headers) {
        return Err(duplicated("sign-in binding"));
    }
    let Some(binding) = binding(app, headers) else {
        return Ok(None);
    };
    let (state_hash, binding_hash) = (super::hash_secret(state), super::hash_secret(&binding));
    let key = db::flows::Key {
        state_hash: &state_hash,
        binding_hash: &binding_hash,
        kind,
    };
    let row = if take {
        db::flows::take(&app.db, &key, now_ms()).await?
    } else {
        db::flows::find(&app.db, &key, now_ms()).await?
    };
    row.map(|f| {
        Ok(Flow {
            started_by: f.started_by,
            data: serde_json::from_str(&f.data)
                .map_err(|e| Error::Internal(format!("a stored flow's data: {e}")))?,
        })
    })
    .transpose()
}

/// The flow of `kind` under `state` this browser started, left in place (to decide before
/// taking it, e.g. that the page must load once more to carry the sign-in cookie).
pub async fn peek(
    app: &AppState,
    headers: &HeaderMap,
    kind: &str,
    state: &str,
) -> Result<Option<Flow>> {
    lookup(app, headers, kind, state, false).await
}

/// Takes the flow of `kind` under `state` this browser started, once; refused otherwise.
pub async fn take(app: &AppState, headers: &HeaderMap, kind: &str, state: &str) -> Result<Flow> {
    lookup(app, headers, kind, state, true)
        .await?
        .ok_or_else(unknown)
}

/// Who the browser's sign-in cookie names, fully checked (signature, expiry, sign-out,
/// deactivation): None without the cookie, an error for one that no longer holds.
pub async fn signed_in(app: &AppState, headers: &HeaderMap) -> Option<Result<User>> {
    if cookies::SESSION.duplicated(app, headers) {
        return Some(Err(duplicated("sign-in")));
    }
    let jwt = cookies::SESSION.read(app, headers)?;
    Some(super::extract::user_for_jwt(app, &jwt).await)
}

/// The person a flow `started_by` someone links to: that same person, whose browser's sign-in
/// (`current`, [`signed_in`] at the callback) must still hold and name them. A flow started
/// signed out links to nobody (None), whoever's cookie came along.
pub fn same_person(
    started_by: Option<UserId>,
    current: Option<Result<User>>,
) -> Result<Option<User>> {
    let Some(starter) = started_by else {
        return Ok(None);
    };
    match current {
        Some(Ok(u)) if u.id == starter => Ok(Some(u)),
        Some(Err(e)) => Err(Error::Unauthorized(format!(
            "{e}: this browser's sign-in no longer holds, so nothing is linked; sign in and start again"
        ))),
        _ => Err(Error::Forbidden(
            "this was started by another sign-in than this browser's, so nothing is linked; sign in as yourself and start again"
                .into(),
        )),
    }
}

/// Why a flow's start or callback that `Sec-Fetch-Site` says another site of Tandem's own
/// domain sent is refused, if it is one. Tandem's own pages are same-origin and Slack and public
/// providers are other sites (cross-site), so such a request comes from a page on a sibling
/// origin — a workspace's, when `code_url` shares Tandem's site — unless the flow's `provider`
/// (its issuer or web URL) lives on Tandem's own site too (a company's own identity provider
/// or GitHub Enterprise beside Tandem): the header cannot tell that one from a sibling page, so
/// it is let through, and the flow's binding cookie is all that holds.
pub fn same_site_refusal(
    app: &AppState,
    headers: &HeaderMap,
    provider: Option<&str>,
) -> Option<Error> {
    let site = headers.get("sec-fetch-site")?.to_str().ok()?;
    if !site.eq_ignore_ascii_case("same-site") || provider.is_some_and(|p| same_site(app, p)) {
        return None;
    }
    Some(Error::Forbidden(
        "this sign-in or link was opened from another site of Tandem's own domain (a page a workspace serves, say), not from Tandem or your sign-in provider, so it was refused; open Tandem's address yourself and start again"
            .into(),
    ))
}

/// Whether `url` is on the same site (registrable domain) as Tandem's public URL.
fn same_site(app: &AppState, url: &str) -> bool {
    let site = |u: &str| {
        url::Url::parse(u)
            .ok()
            .and_then(|u| u.host_str().map(|h| h.trim_matches(['[', ']']).to_string()))
            .map(|h| crate::config::code_origin::site(&h))
    };
    site(url).is_some_and(|s| Some(s) == site(&app.public_url()))
}
