//! `/api/extension/pairings`: the Chrome extension pairs device style. It starts a pairing
//! (no credential: it has none yet; limited per address) and shows the code; a signed-in person
//! opens the pairing's page, sees what asks (label, when, from which address) and types the code
//! the extension shows — the link never carries it;
//! the extension polls with its device secret and takes its token once — scoped to starting
//! sessions, prompting, answering approvals and reading (`auth::scope_allows`), expiring,
//! listed and revocable with the person's tokens.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use tandem_protocol::extension::{
    ApprovePairing, ApprovedPairing, Hello, PRODUCT, PageRule, Pairing, PairingPoll,
    PairingRequest, PollPairing, SetPageRule, StartPairing,
};
use tandem_protocol::limits::{
    EXTENSION_TOKEN_TTL_SECS, MAX_NAME_BYTES, MAX_PAGE_RULES, MAX_PAGE_URL_BYTES, PAIRING_TTL_SECS,
};

use utoipa_axum::routes;

use super::ApiRouter;
use crate::identity::auth::{CurrentUser, EXTENSION_SCOPE, hash_secret, new_secret};
use crate::openapi::{Forbidden, Invalid, JsonBody, NotFound, TooMany, Unauthorized};
use crate::state::AppState;
use crate::{Error, Result, db, now_ms};

/// Seconds between the extension's polls.
const POLL_INTERVAL_SECS: i64 = 2;

pub fn router() -> ApiRouter {
    ApiRouter::new()
        .routes(routes!(hello))
        .routes(routes!(rules, set_rules))
        .routes(routes!(start))
        .routes(routes!(approve))
        .routes(routes!(poll))
        .routes(routes!(show))
}

/// `ABCD-EFGH` from 8 letters of an alphabet without look-alikes (no 0/O, 1/I/L).
fn user_code() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHJKMNPQRSTUVWXYZ23456789";
    let bytes: [u8; 8] = rand::random();
    let chars: String = bytes
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect();
    format!("{}-{}", &chars[..4], &chars[4..])
}

/// The code as typed: case, spaces and dashes do not matter.
fn normalized(code: &str) -> String {
    code.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_uppercase())
        .collect()
}

/// The extension starts a pairing (no credential; limited per address).
#[utoipa::path(
    post,
    path = "/extension/pairings",
    tag = "extension",
    operation_id = "start_pairing",
    security(()),
    request_body = StartPairing,
    responses(
        (status = 201, description = "The pairing: the extension shows its code and polls", body = Pairing),
        JsonBody,
        Invalid,
        TooMany,
    ),
)]
async fn start(
    limited: super::rate::Limited<super::rate::Pairings>,
    State(state): State<AppState>,
    Json(req): Json<StartPairing>,
) -> Result<(StatusCode, Json<Pairing>)> {
    let label = req
        .label
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .unwrap_or_else(|| "Chrome extension".into());
    if label.len() > MAX_NAME_BYTES || label.chars().any(char::is_control) {
        return Err(Error::Invalid(format!(
            "a label is 1 to {MAX_NAME_BYTES} bytes of printable text"
        )));
    }
    let device = new_secret("tpd_");
    let code = user_code();
    let now = now_ms();
    let id = uuid::Uuid::new_v4().to_string();
    db::pairings::insert(
        &state.db,
        db::pairings::New {
            id: &id,
            device_hash: &hash_secret(&device),
            user_code_hash: &hash_secret(&normalized(&code)),
            label: &label,
            address: &limited.addr.to_string(),
        },
        now,
        now + PAIRING_TTL_SECS * 1000,
    )
    .await?;
    Ok((
        StatusCode::CREATED,
        Json(Pairing {
            device_code: device,
            approve_url: format!("{}/pair#id={id}", state.public_url()),
            user_code: code,
            expires_in_secs: PAIRING_TTL_SECS,
            interval_secs: POLL_INTERVAL_SECS,
        }),
    ))
}

/// What asks to be paired, for the page a signed-in person approves it on (the pairing's id is
/// random and unguessable; the code is not shown: the person types what the extension shows).
#[utoipa::path(
    get,
    path = "/extension/pairings/{id}",
    tag = "extension",
    operation_id = "get_pairing",
    params(("id" = String, Path, description = "The pairing's id, from its approve URL")),
    responses(
        (status = 200, description = "What asks to be paired", body = PairingRequest),
        Unauthorized,
        NotFound,
    ),
)]
async fn show(
    State(state): State<AppState>,
    _user: CurrentUser,
    Path(id): Path<String>,
) -> Result<Json<PairingRequest>> {
    let p = db::pairings::get(&state.db, &id, now_ms())
        .await?
        .ok_or_else(|| {
            Error::NotFound(
                "this pairing is unknown or expired: pair again from the extension".into(),
            )
        })?;
    Ok(Json(PairingRequest {
        id,
        label: p.label,
        created_at: tandem_protocol::Timestamp(p.created_at),
        expires_at: tandem_protocol::Timestamp(p.expires_at),
        address: p.address,
        approved: p.approved,
    }))
}

/// A signed-in person (with a full credential: an extension token approves nothing) approves.
#[utoipa::path(
    post,
    path = "/extension/pairings/approve",
    tag = "extension",
    operation_id = "approve_pairing",
    request_body = ApprovePairing,
    responses(
        (status = 200, description = "Approved: the extension's next poll takes its token", body = ApprovedPairing),
        JsonBody,
        Unauthorized,
        Forbidden,
        NotFound,
    ),
)]
async fn approve(
    State(state): State<AppState>,
    user: CurrentUser,
    Json(req): Json<ApprovePairing>,
) -> Result<Json<ApprovedPairing>> {
    let label = db::pairings::approve(
        &state.db,
        &hash_secret(&normalized(&req.user_code)),
        req.pairing_id.as_deref().filter(|i| !i.is_empty()),
        user.0.id,
        now_ms(),
    )
    .await?
    .ok_or_else(|| {
        Error::NotFound(
            "this pairing code is not the one the extension shows, or the pairing is already approved or expired: check the code in the extension's panel, or pair again from it"
                .into(),
        )
    })?;
    db::audit::record(
        &state.db,
        now_ms(),
        db::audit::Entry {
            actor_user_id: Some(user.0.id),
            actor_name: &user.0.name,
            action: "extension.pair",
            target: &user.0.id.to_string(),
            detail: serde_json::json!({ "label": label }),
        },
    )
    .await?;
    Ok(Json(ApprovedPairing { label }))
}

/// The extension polls: pending, or its token (once).
#[utoipa::path(
    post,
    path = "/extension/pairings/poll",
    tag = "extension",
    operation_id = "poll_pairing",
    security(()),
    request_body = PollPairing,
    responses(
        (status = 200, description = "Pending, or approved with the extension's token (this once)", body = PairingPoll),
        JsonBody,
        Unauthorized,
    ),
)]
async fn poll(
    State(state): State<AppState>,
    Json(req): Json<PollPairing>,
) -> Result<Json<PairingPoll>> {
    match db::pairings::take(&state.db, &hash_secret(&req.device_code), now_ms()).await? {
        db::pairings::Poll::Pending => Ok(Json(PairingPoll::Pending)),
        db::pairings::Poll::Gone => Err(Error::Unauthorized(
            "this pairing is unknown, expired or already used: pair again".into(),
        )),
        db::pairings::Poll::Approved(by, label) => {
            let user = db::users::get(&state.db, by)
                .await?
                .ok_or_else(|| Error::Unauthorized("the approving person is gone".into()))
                .and_then(crate::identity::auth::active)?;
            let token = crate::identity::auth::create_token(
                &state.db,
                &user,
                &label,
                Some(EXTENSION_TOKEN_TTL_SECS),
                Some(EXTENSION_SCOPE),
            )
            .await?;
            Ok(Json(PairingPoll::Approved { token }))
        }
    }
}

/// What the extension checks before it pairs: that the address is a Tandem server.
#[utoipa::path(
    get,
    path = "/extension/hello",
    tag = "extension",
    operation_id = "extension_hello",
    security(()),
    responses((status = 200, description = "This server", body = Hello)),
)]
async fn hello(State(state): State<AppState>) -> Json<Hello> {
    Json(Hello {
        product: PRODUCT.into(),
        name: "Tandem".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        // Without its key (an unwritable data dir) the rest still answers.
        extension_id: state
            .extension_crx
            .signer(&key_path(&state))
            .await
            .map(|s| s.extension_id())
            .unwrap_or_default(),
    })
}

/// The URL-pattern → repo rules whose repo the person sees.
#[utoipa::path(
    get,
    path = "/extension/rules",
    tag = "extension",
    operation_id = "list_page_rules",
    responses((status = 200, description = "The rules", body = Vec<PageRule>), Unauthorized),
)]
async fn rules(State(state): State<AppState>, user: CurrentUser) -> Result<Json<Vec<PageRule>>> {
    let visible: std::collections::HashSet<_> = crate::permissions::visible_repos(&state, &user.0)
        .await?
        .into_iter()
        .map(|(r, _)| r.id)
        .collect();
    let all = db::page_rules::list(&state.db).await?;
    Ok(Json(
        all.into_iter()
            .filter(|r| visible.contains(&r.repo_id))
            .collect(),
    ))
}

/// Replaces the rules (admins). A pattern is an http(s) URL with `*` for anything.
#[utoipa::path(
    put,
    path = "/extension/rules",
    tag = "extension",
    operation_id = "set_page_rules",
    request_body = Vec<SetPageRule>,
    responses(
        (status = 200, description = "The rules as now", body = Vec<PageRule>),
        JsonBody,
        Unauthorized,
        Forbidden,
        NotFound,
        Invalid,
    ),
)]
async fn set_rules(
    State(state): State<AppState>,
    user: CurrentUser,
    Json(req): Json<Vec<SetPageRule>>,
) -> Result<Json<Vec<PageRule>>> {
    crate::identity::people::require_admin(&user.0)?;
    if req.len() > MAX_PAGE_RULES {
        return Err(Error::Invalid(format!(
            "at most {MAX_PAGE_RULES} page rules"
        )));
    }
    let mut rules = Vec::new();
    for r in req {
        let pattern = r.pattern.trim().to_string();
        let scheme_ok = pattern.starts_with("https://") || pattern.starts_with("http://");
        if !scheme_ok
            || pattern.len() > MAX_PAGE_URL_BYTES
            || pattern.chars().any(char::is_whitespace)
        {
            return Err(Error::Invalid(format!(
                "page rule {pattern:?}: a pattern is an http:// or https:// URL without spaces, `*` for anything"
            )));
        }
        if rules.iter().any(|(p, _)| *p == pattern) {
            return Err(Error::Invalid(format!(
                "page rule {pattern:?} is there twice"
            )));
        }
        crate::repos::get(&state.db, r.repo_id).await?;
        rules.push((pattern, r.repo_id));
    }
    let mut tx = state.db.begin().await?;
    db::page_rules::replace(&mut tx, &rules, user.0.id, now_ms()).await?;
    db::audit::record(
        &mut tx,
        now_ms(),
        db::audit::Entry {
            actor_user_id: Some(user.0.id),
            actor_name: &user.0.name,
            action: "extension.rules",
            target: "page_rules",
            detail: serde_json::json!({ "rules": rules.len() }),
        },
    )
    .await?;
    tx.commit().await?;
    Ok(Json(db::page_rules::list(&state.db).await?))
}

/// `/extension/tandem.zip` (signed in: it names the pages of the rules whose repos the person
/// sees), and for policy installs `/extension/tandem.crx` and `/extension/updates.xml` (no
/// sign-in, since Chrome's updater has none: they name this server only, so nothing about
/// internal hosts reaches whoever asks).
pub fn download_router() -> Router<AppState> {
    Router::new()
        .route("/extension/tandem.zip", get(package_zip))
        .route("/extension/tandem.crx", get(package_crx))
        .route("/extension/updates.xml", get(update_manifest))
}

/// The package for this server, with the pages of the rules `who` sees.
async fn package(state: &AppState, who: Option<&tandem_protocol::User>) -> Result<Vec<u8>> {
    let page_patterns = match who {
        Some(user) => {
            let visible: std::collections::HashSet<_> =
                crate::permissions::visible_repos(state, user)
                    .await?
                    .into_iter()
                    .map(|(r, _)| r.id)
                    .collect();
            db::page_rules::list(&state.db)
                .await?
                .into_iter()
                .filter(|r| visible.contains(&r.repo_id))
                .map(|r| r.pattern)
                .collect()
        }
        None => Vec::new(),
    };
    let target = crate::extension_package::Target {
        server_url: state.public_url(),
        page_patterns,
        all_sites: state.config.extension.all_sites,
        version: env!("CARGO_PKG_VERSION").into(),
    };
    crate::extension_package::zip(&target)
}

fn key_path(state: &AppState) -> std::path::PathBuf {
    state.config.data_dir.join("extension-key.pk8")
}

async fn package_zip(
    State(state): State<AppState>,
    user: CurrentUser,
) -> Result<axum::response::Response> {
    use axum::response::IntoResponse;
    let zip = package(&state, Some(&user.0)).await?;
    Ok((
        [
            ("content-type", "application/zip"),
            (
                "content-disposition",
                "attachment; filename=\"tandem-extension.zip\"",
            ),
            ("cache-control", "no-store"),
        ],
        zip,
    )
        .into_response())
}

/// The package signed with this server's key, for policy installs: signed once per version
/// (what anyone may ask for costs no signature per request), then served from memory.
async fn package_crx(State(state): State<AppState>) -> Result<axum::response::Response> {
    use axum::response::IntoResponse;
    let crx = state
        .extension_crx
        .crx(&key_path(&state), env!("CARGO_PKG_VERSION"), || {
            package(&state, None)
        })
        .await?;
    Ok((
        [
            ("content-type", "application/x-chrome-extension"),
            ("cache-control", "no-store"),
        ],
        crx,
    )
        .into_response())
}

/// The update manifest `ExtensionInstallForcelist` names (`<id>;<server>/extension/updates.xml`).
async fn update_manifest(State(state): State<AppState>) -> Result<axum::response::Response> {
    use axum::response::IntoResponse;
    let id = state
        .extension_crx
        .signer(&key_path(&state))
        .await?
        .extension_id();
    let crx = format!(
        "{}/extension/tandem.crx",
        state.public_url().trim_end_matches('/')
    );
    Ok((
        [
            ("content-type", "application/xml"),
            ("cache-control", "no-store"),
        ],
        crate::extension_crx::update_manifest(&id, &crx, env!("CARGO_PKG_VERSION")),
    )
        .into_response())
}
