//! GitHub over HTTP: "Sign in with GitHub" (`/api/auth/github`, its callback; a person's own
//! link, `/api/me/github`, shown and unlinked there), the App's
//! repositories and importing one (`/api/github/repos`), a session's pull request
//! (`/api/sessions/{id}/pr`), the webhook (`/api/github/webhook`) and signed artifact links
//! (`/api/artifacts/{id}/{signature}`, what a pull request's screenshots point at).

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, LOCATION, REFERRER_POLICY, SET_COOKIE};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tandem_protocol::github::{
    CreatePr, GithubAccount, GithubRepo, ImportRepo, PullRequest, WebhookOutcome,
};
use tandem_protocol::live::Role;
use tandem_protocol::people::SignInProviders;
use tandem_protocol::{ArtifactId, ArtifactInfo, Repo, SessionId};
use utoipa_axum::routes;

use super::ApiRouter;
use crate::github::{self, pr, webhook};
use crate::identity::auth::{CurrentUser, cookies, flow};
use crate::identity::github as signin;
use crate::openapi::{
    BadGateway, BadRequest, Conflict, Forbidden, Invalid, JsonBody, NotFound, RefusalPage,
    Unauthorized, Unavailable,
};
use crate::state::AppState;
use crate::{Error, Result, db};

pub fn router() -> ApiRouter {
    ApiRouter::new()
        .routes(routes!(providers))
        .routes(routes!(sign_in))
        .routes(routes!(callback))
        .routes(routes!(linked, unlink))
        .routes(routes!(installable, import))
        .routes(routes!(hook))
        .routes(routes!(signed_artifact))
}

/// A session's pull request: answered by the server hosting its workspace (`cluster::forward`).
pub fn hosted_router() -> ApiRouter {
    ApiRouter::new().routes(routes!(show_pr, open_pr))
}

/// Which sign-in methods this server offers (the sign-in page asks).
#[utoipa::path(
    get,
    path = "/auth/providers",
    tag = "auth",
    operation_id = "sign_in_providers",
    security(()),
    responses((status = 200, description = "The sign-in methods", body = SignInProviders)),
)]
async fn providers(State(state): State<AppState>) -> Json<SignInProviders> {
    let github = state
        .github
        .as_ref()
        .is_some_and(|g| g.config.client_id.is_some());
    let oidc: Vec<tandem_protocol::people::SignInProvider> = state
        .config
        .oidc
        .iter()
        .map(|p| tandem_protocol::people::SignInProvider {
            id: p.id.clone(),
            label: p.label.clone(),
            url: format!("/api/auth/oidc/{}", p.id),
        })
        .collect();
    Json(SignInProviders { github, oidc })
}

/// The kind of a GitHub sign-in or link flow ([`crate::identity::auth::flow`]).
const FLOW_KIND: &str = "github";

/// Starts "Sign in with GitHub": a flow bound to this browser; signed in (fully checked), it
/// links GitHub to this person, else it only signs in. Limited per address with OpenID's starts;
/// a refusal is a page (a browser lands here).
#[utoipa::path(
    get,
    path = "/auth/github",
    tag = "auth",
    operation_id = "github_sign_in",
    security(()),
    responses(
        (status = 302, description = "To GitHub; the flow's cookie is set",
            headers(("location" = String), ("set-cookie" = String))),
        RefusalPage,
    ),
)]
async fn sign_in(
    _limit: super::rate::Limited<super::rate::SignInStarts>,
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Response {
    let started = async {
        let gh = pr::github(&state)?;
        if let Some(e) = flow::same_site_refusal(&state, &headers, Some(&gh.config.web_url)) {
            return Err(e);
        }
        let started_by = match flow::signed_in(&state, &headers).await {
            Some(Ok(u)) => Some(u.id),
            _ => None,
        };
        let started = flow::start(
            &state,
            &headers,
            FLOW_KIND,
            started_by,
            serde_json::json!({}),
        )
        .await?;
        let url = signin::authorize_url(&state, gh, &started.state)?;
        Ok((url, started.cookie))
    };
    match started.await {
        Ok((url, cookie)) => {
            (StatusCode::FOUND, [(LOCATION, url), (SET_COOKIE, cookie)]).into_response()
        }
        Err(e) => super::oidc::page(&e),
    }
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct Callback {
    code: Option<String>,
    state: Option<String>,
    error_description: Option<String>,
    /// Set on the page's own second load (a link flow's first arrival has no sign-in cookie).
    again: Option<String>,
}

/// GitHub sends the browser back here. The flow must be this browser's own and is taken once;
/// one started signed in links only to that same person, whose sign-in cookie (fully checked)
/// must come along; one started signed out only signs in. A refusal is a page.
#[utoipa::path(
    get,
    path = "/auth/github/callback",
    tag = "auth",
    operation_id = "github_callback",
    security(()),
    params(Callback),
    responses(
        (status = 302, description = "Signed in (or linked): to the web app, with the session cookie",
            headers(("location" = String), ("set-cookie" = String))),
        (status = 200, description = "A page that loads this URL once more from Tandem's own origin, so the sign-in cookie comes along",
            content_type = "text/html", body = String),
        RefusalPage,
    ),
)]
async fn callback(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<Callback>,
) -> Response {
    completed(&state, &headers, q)
        .await
        .unwrap_or_else(|e| super::oidc::page(&e))
}

async fn completed(state: &AppState, headers: &HeaderMap, q: Callback) -> Result<Response> {
    let gh = pr::github(state)?;
    if let Some(e) = flow::same_site_refusal(state, headers, Some(&gh.config.web_url)) {
        return Err(e);
    }
    if let Some(why) = q.error_description {
        return Err(Error::Unauthorized(format!(
            "GitHub sign-in was not completed: {why}"
        )));
    }
    let (Some(code), Some(st)) = (q.code, q.state) else {
        return Err(Error::BadRequest(
            "GitHub's answer lacks code or state".into(),
        ));
    };
    // GitHub's redirect is another site's navigation: the (SameSite=Strict) sign-in cookie stays
    // behind. A link flow loads this page once more from here, which carries it.
    if q.again.is_none()
        && !cookies::SESSION.present(state, headers)
        && flow::peek(state, headers, FLOW_KIND, &st)
            .await?
            .is_some_and(|f| f.started_by.is_some())
    {
        return Ok(reload(&code, &st));
    }
    let taken = flow::take(state, headers, FLOW_KIND, &st).await?;
    // Started signed out: whoever's cookie came along is not who GitHub gets linked to.
    let current = match taken.started_by {
        Some(_) => flow::signed_in(state, headers).await,
        None => None,
    };
    let link_to = flow::same_person(taken.started_by, current)?;
    let user = signin::complete(state, gh, &code, link_to).await?;
    let mut res = (StatusCode::FOUND, [(LOCATION, "/".to_string())]).into_response();
    res.headers_mut().append(
        SET_COOKIE,
        super::auth::session_cookie(state, &user)?
            .parse()
            .map_err(|_| Error::Internal("cookie".into()))?,
    );
    Ok(res)
}

/// A page that loads the callback once more from Tandem's own origin: neither kept by a cache
/// nor named in a referrer (its URL holds GitHub's code and the flow's state).
fn reload(code: &str, state: &str) -> Response {
    let url = format!(
        "{}?{}",
        signin::CALLBACK_PATH,
        url::form_urlencoded::Serializer::new(String::new())
            .append_pair("code", code)
            .append_pair("state", state)
            .append_pair("again", "1")
            .finish()
    );
    let url = super::oidc::html_escape(&url);
    (
        StatusCode::OK,
        [
            (CONTENT_TYPE, "text/html; charset=utf-8"),
            (REFERRER_POLICY, "no-referrer"),
            (CACHE_CONTROL, "no-store"),
        ],
        format!(
            "<!doctype html><html><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"0;url={url}\"><title>Linking GitHub · Tandem</title></head>\
             <body><p><a href=\"{url}\">Continue</a></p></body></html>"
        ),
    )
        .into_response()
}

/// `DELETE /api/me/github`: the person unlinks their own GitHub account (its tokens go with it).
#[utoipa::path(
    delete,
    path = "/me/github",
    tag = "github",
    operation_id = "unlink_github",
    responses((status = 204, description = "Unlinked"), Unauthorized, NotFound),
)]
async fn unlink(State(state): State<AppState>, user: CurrentUser) -> Result<StatusCode> {
    let login = db::github::unlink(&state.db, user.0.id)
        .await?
        .ok_or_else(|| Error::NotFound("no GitHub account is linked to you".into()))?;
    db::audit::record(
        &state.db,
        crate::now_ms(),
        db::audit::Entry {
            actor_user_id: Some(user.0.id),
            actor_name: &user.0.name,
            action: "github.unlink",
            target: &user.0.id.to_string(),
            detail: serde_json::json!({ "login": login }),
        },
    )
    .await?;
    state.permissions.forget(user.0.id);
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /api/me/github`: the GitHub login linked to the person, if any (nothing secret).
#[utoipa::path(
    get,
    path = "/me/github",
    tag = "github",
    operation_id = "linked_github",
    responses((status = 200, description = "The linked account", body = GithubAccount), Unauthorized),
)]
async fn linked(State(state): State<AppState>, user: CurrentUser) -> Result<Json<GithubAccount>> {
    let account = db::github::account_of(&state.db, user.0.id).await?;
    Ok(Json(GithubAccount {
        login: account.as_ref().map(|a| a.login.clone()),
        github_id: account.map(|a| a.github_id),
    }))
}

/// The repositories the GitHub App is installed on, and what they were imported as (admins).
#[utoipa::path(
    get,
    path = "/github/repos",
    tag = "github",
    operation_id = "installable_github_repos",
    responses(
        (status = 200, description = "The repositories", body = Vec<GithubRepo>),
        Unauthorized,
        Conflict,
        Forbidden,
        BadGateway,
    ),
)]
async fn installable(
    State(state): State<AppState>,
    user: CurrentUser,
) -> Result<Json<Vec<GithubRepo>>> {
    // What the App's installations cover, and the Tandem ids they were imported as: admins'.
    super::admin::require_admin(&user)?;
    Ok(Json(
        signin::installable(&state, pr::github(&state)?).await?,
    ))
}

/// Imports an installed repository as a Tandem repo (admins).
#[utoipa::path(
    post,
    path = "/github/repos",
    tag = "github",
    operation_id = "import_github_repo",
    request_body = ImportRepo,
    responses(
        (status = 201, description = "The repo", body = Repo),
        JsonBody,
        Unauthorized,
        Forbidden,
        NotFound,
        Conflict,
        Invalid,
        BadGateway,
    ),
)]
async fn import(
    State(state): State<AppState>,
    user: CurrentUser,
    Json(req): Json<ImportRepo>,
) -> Result<(StatusCode, Json<Repo>)> {
    super::admin::require_admin(&user)?;
    let repo = signin::import(&state, pr::github(&state)?, &user, &req.full_name).await?;
    Ok((StatusCode::CREATED, Json(repo)))
}

/// GitHub's webhook deliveries, signed with the App's webhook secret (`X-Hub-Signature-256`).
/// Its body is read raw, to check the signature over the bytes sent.
#[utoipa::path(
    post,
    path = "/github/webhook",
    tag = "github",
    operation_id = "github_webhook",
    security(()),
    params(
        ("x-github-event" = Option<String>, Header),
        ("x-github-delivery" = Option<String>, Header),
        ("x-hub-signature-256" = Option<String>, Header),
    ),
    request_body(content = Value, description = "GitHub's event payload"),
    responses(
        (status = 200, description = "Recorded, or a duplicate delivery", body = WebhookOutcome),
        (status = 202, description = "Ignored, and why", body = WebhookOutcome),
        BadRequest,
        Unauthorized,
        Conflict,
    ),
)]
async fn hook(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<(StatusCode, Json<WebhookOutcome>)> {
    let gh = pr::github(&state)?;
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let outcome = webhook::receive(
        &state,
        gh,
        header("x-github-event").unwrap_or_default(),
        header("x-github-delivery").unwrap_or_default(),
        header("x-hub-signature-256"),
        &body,
    )
    .await?;
    let (status, said) = match outcome {
        webhook::Outcome::Recorded => (StatusCode::OK, "recorded".to_string()),
        webhook::Outcome::Duplicate => (StatusCode::OK, "duplicate delivery".to_string()),
        webhook::Outcome::Ignored(why) => (StatusCode::ACCEPTED, format!("ignored: {why}")),
    };
    Ok((status, Json(WebhookOutcome { result: said })))
}

/// The session's pull request.
#[utoipa::path(
    get,
    path = "/sessions/{id}/pr",
    tag = "github",
    operation_id = "get_pull_request",
    params(("id" = SessionId, Path)),
    responses(
        (status = 200, description = "The pull request", body = PullRequest),
        BadRequest,
        Unauthorized,
        NotFound,
        Conflict,
    ),
)]
async fn show_pr(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<SessionId>,
) -> Result<Json<PullRequest>> {
    crate::permissions::require(&state, id, &user.0, Role::Viewer).await?;
    // Repos not on GitHub say so (the web app then shows no pull request controls).
    github::credentials::linked(pr::github(&state)?, id).await?;
    db::github::pull_request(&state.db, id)
        .await?
        .map(Json)
        .ok_or_else(|| Error::NotFound("this session has no pull request".into()))
}

/// Opens the session's pull request, or pushes its new commits to the open one (drivers).
#[utoipa::path(
    post,
    path = "/sessions/{id}/pr",
    tag = "github",
    operation_id = "open_pull_request",
    params(("id" = SessionId, Path)),
    request_body(content = Option<CreatePr>, description = "Optional; defaults to the session's title, not a draft"),
    responses(
        (status = 201, description = "Opened", body = PullRequest),
        (status = 200, description = "It was open already: updated", body = PullRequest),
        BadRequest,
        JsonBody,
        Unauthorized,
        Forbidden,
        NotFound,
        Conflict,
        BadGateway,
        Unavailable,
    ),
)]
async fn open_pr(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<SessionId>,
    body: Option<Json<CreatePr>>,
) -> Result<(StatusCode, Json<PullRequest>)> {
    crate::permissions::require(&state, id, &user.0, Role::Driver).await?;
    if db::prompts::running(&state.db, id).await?.is_some() {
        return Err(Error::Conflict(
            "a turn is running; open the pull request when it ends (or ask the agent to open it)"
                .into(),
        ));
    }
    let had = db::github::pull_request(&state.db, id).await?.is_some();
    let pr = pr::open(
        &state,
        id,
        &user.author(),
        body.map(|Json(b)| b).unwrap_or_default(),
    )
    .await?;
    Ok((
        if had {
            StatusCode::OK
        } else {
            StatusCode::CREATED
        },
        Json(pr),
    ))
}

/// An artifact through a signed link, no sign-in needed.
#[utoipa::path(
    get,
    path = "/artifacts/{id}/{sig}",
    tag = "sessions",
    operation_id = "get_signed_artifact",
    security(()),
    params(("id" = ArtifactId, Path), ("sig" = String, Path, description = "The link's signature")),
    responses(
        (status = 200, description = "The artifact's bytes, with its own content type",
            content_type = "*/*", body = Vec<u8>),
        BadRequest,
        NotFound,
    ),
)]
async fn signed_artifact(
    State(state): State<AppState>,
    Path((id, sig)): Path<(ArtifactId, String)>,
) -> Result<Response> {
    if !github::artifact_sig_holds(&state.jwt, id, &sig, crate::now_ms() / 1000) {
        return Err(Error::NotFound("no such artifact link".into()));
    }
    let (info, body) = db::artifacts::by_id(&state.db, id)
        .await?
        .ok_or_else(|| Error::NotFound("no such artifact".into()))?;
    Ok(artifact_response(info, body))
}

/// An artifact is data, never a page: nothing in it runs, even opened on its own.
const ARTIFACT_CSP: &str = "default-src 'none'; img-src 'self'; style-src 'unsafe-inline'; sandbox";

/// An artifact's bytes with its content type (binary artifacts are stored base64).
pub fn artifact_response(info: ArtifactInfo, body: String) -> Response {
    use base64::Engine;
    let disposition = format!(
        "inline; filename=\"{}\"",
        info.name.replace(['"', '\\', '\r', '\n'], "_")
    );
    if tandem_protocol::is_binary_artifact(&info.content_type)
        && let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(body.as_bytes())
    {
        return (
            [
                ("content-type", info.content_type),
                ("content-disposition", disposition),
                ("content-security-policy", ARTIFACT_CSP.into()),
                ("x-content-type-options", "nosniff".into()),
            ],
            bytes,
        )
            .into_response();
    }
    (
        [
            ("content-type", info.content_type),
            ("content-disposition", disposition),
            ("content-security-policy", ARTIFACT_CSP.into()),
            ("x-content-type-options", "nosniff".into()),
        ],
        body,
    )
        .into_response()
}
