//! The Slack app over HTTP: its three request URLs (`/api/slack/events`,
//! `/api/slack/interactivity`, `/api/slack/commands`, each signed by Slack and checked before
//! anything is read), the one-time account link (`/api/slack/link`), and the channel defaults
//! and keyword rules (`/api/slack/settings`).

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, REFERRER_POLICY, SET_COOKIE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tandem_protocol::slack::{
    SetSlackChannel, SetSlackRule, SlackChannel, SlackRule, SlackSettings,
};
use tandem_protocol::{RepoId, User};
use utoipa_axum::routes;

use super::ApiRouter;
use super::oidc::html_escape;
use crate::identity::auth::{CurrentUser, flow};
use crate::openapi::{
    BadRequest, Forbidden, Invalid, JsonBody, NotFound, Unauthorized, Unavailable,
};
use crate::slack::{deliveries, people};
use crate::state::AppState;
use crate::{Error, Result, db};

pub fn router() -> ApiRouter {
    ApiRouter::new()
        .routes(routes!(events))
        .routes(routes!(interactivity))
        .routes(routes!(commands))
        .routes(routes!(link_page, link))
        .routes(routes!(link_script))
        .routes(routes!(settings, put_rules))
        .routes(routes!(put_channel, delete_channel))
}

/// Slack's Events API request URL. Like the other two, its body is read raw: the signature
/// (`X-Slack-Signature` over the bytes sent) is checked before anything is parsed.
#[utoipa::path(
    post,
    path = "/slack/events",
    tag = "slack",
    operation_id = "slack_events",
    security(()),
    params(
        ("x-slack-request-timestamp" = Option<String>, Header),
        ("x-slack-signature" = Option<String>, Header),
    ),
    request_body(content = Value, description = "An Events API payload"),
    responses(
        (status = 200, description = "What Slack expects back (the URL challenge, or `{}`)", body = Value),
        BadRequest,
        Unauthorized,
        NotFound,
        Unavailable,
    ),
)]
async fn events(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<serde_json::Value>> {
    deliveries::verify(&state, &headers, &body).await?;
    Ok(Json(deliveries::event(&state, &body).await?))
}

/// Slack's interactivity request URL (a button pressed in a message).
#[utoipa::path(
    post,
    path = "/slack/interactivity",
    tag = "slack",
    operation_id = "slack_interactivity",
    security(()),
    params(
        ("x-slack-request-timestamp" = Option<String>, Header),
        ("x-slack-signature" = Option<String>, Header),
    ),
    request_body(content = Object, content_type = "application/x-www-form-urlencoded",
        description = "`payload`: the interaction as JSON"),
    responses(
        (status = 200, description = "Handled"),
        BadRequest,
        Unauthorized,
        NotFound,
        Unavailable,
    ),
)]
async fn interactivity(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<StatusCode> {
    deliveries::verify(&state, &headers, &body).await?;
    deliveries::interaction(&state, &body).await?;
    Ok(StatusCode::OK)
}

/// Slack's slash-command request URL.
#[utoipa::path(
    post,
    path = "/slack/commands",
    tag = "slack",
    operation_id = "slack_commands",
    security(()),
    params(
        ("x-slack-request-timestamp" = Option<String>, Header),
        ("x-slack-signature" = Option<String>, Header),
    ),
    request_body(content = Object, content_type = "application/x-www-form-urlencoded",
        description = "The command's fields, as Slack sends them"),
    responses(
        (status = 200, description = "The reply Slack shows", body = Value),
        BadRequest,
        Unauthorized,
        NotFound,
        Unavailable,
    ),
)]
async fn commands(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<serde_json::Value>> {
    deliveries::verify(&state, &headers, &body).await?;
    Ok(Json(deliveries::command(&state, &body).await?))
}

/// A page of the one-time link: never cached, never named in a referrer (its URL holds the
/// link's code), framed only by Tandem (the CSP's `frame-ancestors`). `head` goes in `<head>`.
fn page_with(status: StatusCode, title: &str, head: &str, body: &str) -> Response {
    let html = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{t} · Tandem</title>{head}\
         <link rel=\"stylesheet\" href=\"/style.css\"></head>\
         <body><main class=\"narrow\"><h1>{t}</h1>{body}</main></body></html>",
        t = html_escape(title)
    );
    (
        status,
        [
            (CONTENT_TYPE, "text/html; charset=utf-8"),
            (CACHE_CONTROL, "no-store"),
            (REFERRER_POLICY, "no-referrer"),
        ],
        html,
    )
        .into_response()
}

fn page(status: StatusCode, title: &str, body: &str) -> Response {
    page_with(status, title, "", body)
}

/// The refusal of a link page or form that another site of Tandem's own domain sent (Slack is
/// always another site).
fn same_site(app: &AppState, headers: &HeaderMap) -> Option<Response> {
    flow::same_site_refusal(app, headers, None).map(|e| {
        page(
            StatusCode::FORBIDDEN,
            "Not linked",
            &format!("<p id=\"why\">{}</p>", html_escape(&e.to_string())),
        )
    })
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct LinkQuery {
    /// The one-time link's code (from the app's message in Slack).
    code: String,
    /// Set on the page's own second load (after one without the sign-in cookie).
    #[serde(default)]
    again: Option<String>,
}

/// The kind of a Slack link flow ([`crate::identity::auth::flow`]).
const FLOW_KIND: &str = "slack-link";

/// The link page's script (`/api/slack/link.js`; the CSP allows Tandem's own scripts, no inline
/// one): the button stays disabled until the page has been shown, and the window focused, for
/// [`ARM_MS`] — so a click meant for another window (a double-click whose second half lands on
/// this page as it appears: double-clickjacking) cannot press it.
const LINK_SCRIPT: &str = include_str!("slack_link.js");

/// How long the link button waits after the page is shown or focused (the script's constant).
pub const ARM_MS: u32 = 1000;

#[utoipa::path(
    get,
    path = "/slack/link.js",
    tag = "slack",
    operation_id = "slack_link_script",
    security(()),
    responses((status = 200, description = "The link page's script", content_type = "text/javascript", body = String)),
)]
async fn link_script() -> Response {
    (
        [
            (CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (CACHE_CONTROL, "no-cache"),
        ],
        LINK_SCRIPT,
    )
        .into_response()
}

/// The page a one-time link opens: it says which Slack account it is for, as Slack's API vouches
/// (handle, email, workspace; never the display name anyone may set), and asks before linking
/// (a link someone else sent must not tie their Slack account to yours unseen). Its form
/// carries a flow bound to this browser and this person, not the code itself.
#[utoipa::path(
    get,
    path = "/slack/link",
    tag = "slack",
    operation_id = "slack_link_page",
    security((), ("bearer_token" = []), ("session_cookie" = [])),
    params(LinkQuery),
    responses(
        (status = 200, description = "The page that asks before linking (or loads itself once more, to carry the sign-in cookie)",
            content_type = "text/html", body = String),
        (status = 400, description = "A malformed query (`bad_request`)", body = tandem_protocol::ApiError),
        (status = 401, description = "Not signed in: a page that says so", content_type = "text/html", body = String),
        (status = 403, description = "Another site sent the browser here: a page", content_type = "text/html", body = String),
        (status = 404, description = "The link was used or expired: a page", content_type = "text/html", body = String),
        (status = 409, description = "Refused (a cookie sent twice): a page", content_type = "text/html", body = String),
    ),
)]
async fn link_page(
    State(state): State<AppState>,
    headers: HeaderMap,
    user: Result<CurrentUser>,
    Query(q): Query<LinkQuery>,
) -> Response {
    if let Some(refused) = same_site(&state, &headers) {
        return refused;
    }
    let Ok(user) = user else {
        // A click from Slack is a cross-site navigation, which leaves the (SameSite=Strict)
        // sign-in cookie behind: the page loads itself once from here (a same-origin
        // navigation, which carries it). The second load never reloads again.
        if q.again.is_none() {
            let url = html_escape(&format!(
                "/api/slack/link?{}",
                url::form_urlencoded::Serializer::new(String::new())
                    .append_pair("code", &q.code)
                    .append_pair("again", "1")
                    .finish()
            ));
            return page_with(
                StatusCode::OK,
                "Linking your Slack account",
                &format!("<meta http-equiv=\"refresh\" content=\"0;url={url}\">"),
                &format!("<p><a id=\"continue\" href=\"{url}\">Continue</a></p>"),
            );
        }
        return page(
            StatusCode::UNAUTHORIZED,
            "Sign in first",
            "<p id=\"why\">Sign in to Tandem in this browser, then open the link from Slack again.</p><p><a href=\"/login\">Sign in</a></p>",
        );
    };
    let Ok(Some(who)) = people::link_for(&state, &q.code).await else {
        return page(
            StatusCode::NOT_FOUND,
            "Not linked",
            "<p id=\"why\">This link was used already or has expired: mention the app in Slack again for a new one.</p>",
        );
    };
    let started = match flow::start(
        &state,
        &headers,
        FLOW_KIND,
        Some(user.0.id),
        serde_json::json!({ "code_hash": crate::identity::auth::hash_secret(&q.code) }),
    )
    .await
    {
        Ok(s) => s,
        Err(e) => {
            let (status, _) = e.status_and_code();
            return page(
                status,
                "Not linked",
                &format!("<p id=\"why\">{}</p>", html_escape(&e.to_string())),
            );
        }
    };
    let email = match &who.slack_email {
        Some(e) => format!("<code id=\"slack-email\">{}</code>", html_escape(e)),
        None => "<i id=\"slack-email\">no email Slack vouches for</i>".into(),
    };
    let mut res = page_with(
        StatusCode::OK,
        "Link your Slack account",
        "<script src=\"/api/slack/link.js\" defer></script>",
        &format!(
            "<p>This links the Slack account <b id=\"slack-handle\">@{}</b> (email {email}, user <code>{}</code> in the Slack workspace <b id=\"slack-team\">{}</b>) to your Tandem account <b>{}</b>: its messages to the app will act as you (never with admin rights).</p>\
             <p>Only continue if that Slack account is yours and you asked for this link.</p>\
             <form method=\"post\" action=\"/api/slack/link\"><input type=\"hidden\" name=\"state\" value=\"{}\">\
             <button id=\"link\" type=\"submit\" disabled data-arm-ms=\"{ARM_MS}\">Link this Slack account</button></form>\
             <noscript><p id=\"noscript\">This page needs JavaScript to link (its button waits a moment after the page is shown, so a click meant for another window cannot press it).</p></noscript>",
            html_escape(&who.slack_name),
            html_escape(&who.slack_user_id),
            html_escape(&who.team_label),
            html_escape(&user.0.name),
            html_escape(&started.state)
        ),
    );
    if let Ok(v) = started.cookie.parse() {
        res.headers_mut().append(SET_COOKIE, v);
    }
    // Its form's POST must carry its origin (under `no-referrer` Chromium sends `Origin: null`,
    // which the CSRF check rightly refuses); the referrer goes to Tandem only, and the page
    // loads nothing from elsewhere (the CSP), so the code still never leaves.
    res.headers_mut()
        .insert(REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    res
}

/// The link page's form: the flow must be this browser's, started by this same person (fully
/// signed in), and is taken once; then the code it was for.
#[utoipa::path(
    post,
    path = "/slack/link",
    tag = "slack",
    operation_id = "slack_link",
    request_body(content = Object, content_type = "application/x-www-form-urlencoded",
        description = "`state`: the flow the link page's form carries"),
    responses(
        (status = 200, description = "Linked: a page that says so", content_type = "text/html", body = String),
        (status = 400, description = "Not linked: a page that says why", content_type = "text/html", body = String),
        (status = 403, description = "Another site sent the form: a page", content_type = "text/html", body = String),
        Unauthorized,
    ),
)]
async fn link(
    State(state): State<AppState>,
    headers: HeaderMap,
    user: CurrentUser,
    body: Bytes,
) -> Response {
    if let Some(refused) = same_site(&state, &headers) {
        return refused;
    }
    let st = url::form_urlencoded::parse(&body)
        .find(|(k, _)| k == "state")
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default();
    let linked = async {
        let taken = flow::take(&state, &headers, FLOW_KIND, &st).await?;
        if taken.started_by != Some(user.0.id) {
            return Err(Error::Forbidden(
                "this link was opened by another sign-in than this one, so nothing is linked; open the link from Slack again".into(),
            ));
        }
        let code_hash = taken.data["code_hash"]
            .as_str()
            .ok_or_else(|| Error::Internal("a stored Slack link lacks its code".into()))?;
        people::redeem_link(&state, &user.0, code_hash).await
    };
    match linked.await {
        Ok(()) => page(
            StatusCode::OK,
            "Slack account linked",
            "<p id=\"done\">Done. Go back to Slack and mention the app again.</p>",
        ),
        Err(e) => page(
            StatusCode::BAD_REQUEST,
            "Not linked",
            &format!("<p id=\"why\">{}</p>", html_escape(&e.to_string())),
        ),
    }
}

/// The channels' defaults and the keyword rules, for the repos `user` may see.
async fn current(state: &AppState, user: &User) -> Result<SlackSettings> {
    let visible: std::collections::HashMap<RepoId, String> =
        crate::permissions::visible_repos(state, user)
            .await?
            .into_iter()
            .map(|(r, _)| (r.id, r.name))
            .collect();
    Ok(SlackSettings {
        configured: state.slack.is_some(),
        channels: db::slack::channels(&state.db)
            .await?
            .into_iter()
            .filter_map(|(team_id, channel_id, repo_id)| {
                Some(SlackChannel {
                    team_id,
                    channel_id,
                    repo_name: visible.get(&repo_id)?.clone(),
                    repo_id,
                })
            })
            .collect(),
        rules: db::slack::rules(&state.db)
            .await?
            .into_iter()
            .filter_map(|(keyword, repo_id)| {
                Some(SlackRule {
                    keyword,
                    repo_name: visible.get(&repo_id)?.clone(),
                    repo_id,
                })
            })
            .collect(),
    })
}

/// The channels' default repos and the keyword rules, for the repos the person sees.
#[utoipa::path(
    get,
    path = "/slack/settings",
    tag = "slack",
    operation_id = "get_slack_settings",
    responses((status = 200, description = "The settings", body = SlackSettings), Unauthorized),
)]
async fn settings(State(state): State<AppState>, user: CurrentUser) -> Result<Json<SlackSettings>> {
    Ok(Json(current(&state, &user.0).await?))
}

fn require_admin(user: &CurrentUser, what: &str) -> Result<()> {
    if user.0.is_admin {
        Ok(())
    } else {
        Err(Error::Forbidden(format!("only admins {what}")))
    }
}

/// Replaces the keyword rules (admins).
#[utoipa::path(
    put,
    path = "/slack/settings",
    tag = "slack",
    operation_id = "set_slack_rules",
    request_body = Vec<SetSlackRule>,
    responses(
        (status = 200, description = "The settings as now", body = SlackSettings),
        JsonBody,
        Unauthorized,
        Forbidden,
        NotFound,
        Invalid,
    ),
)]
async fn put_rules(
    State(state): State<AppState>,
    user: CurrentUser,
    Json(rules): Json<Vec<SetSlackRule>>,
) -> Result<Json<SlackSettings>> {
    require_admin(&user, "set Slack's keyword rules")?;
    if rules.len() > 200 {
        return Err(Error::Invalid("at most 200 keyword rules".into()));
    }
    let mut list = Vec::new();
    for r in rules {
        let keyword = r.keyword.trim().to_lowercase();
        if keyword.chars().count() < 2
            || keyword.len() > 200
            || keyword.chars().any(char::is_control)
        {
            return Err(Error::Invalid(format!(
                "keyword {keyword:?}: 2 to 200 characters of text"
            )));
        }
        if list.iter().any(|(k, _)| *k == keyword) {
            return Err(Error::Invalid(format!(
                "keyword {keyword:?} is there twice"
            )));
        }
        crate::repos::get(&state.db, r.repo_id).await?;
        list.push((keyword, r.repo_id));
    }
    let mut tx = state.db.begin().await?;
    db::slack::set_rules(&mut tx, &list).await?;
    tx.commit().await?;
    Ok(Json(current(&state, &user.0).await?))
}

/// Sets a channel's default repo from the web app, for every Slack workspace (admins).
#[utoipa::path(
    put,
    path = "/slack/channels/{channel}",
    tag = "slack",
    operation_id = "set_slack_channel",
    params(("channel" = String, Path, description = "The channel's id, like `C0123ABCD`")),
    request_body = SetSlackChannel,
    responses(
        (status = 200, description = "The settings as now", body = SlackSettings),
        JsonBody,
        Unauthorized,
        Forbidden,
        NotFound,
        Invalid,
    ),
)]
async fn put_channel(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(channel): Path<String>,
    Json(req): Json<SetSlackChannel>,
) -> Result<Json<SlackSettings>> {
    require_admin(
        &user,
        "set a channel's repo (here only: from Slack nobody acts as an admin)",
    )?;
    let channel = channel.trim().to_uppercase();
    if channel.is_empty()
        || channel.len() > 40
        || !channel.bytes().all(|b| b.is_ascii_alphanumeric())
    {
        return Err(Error::Invalid(
            "a channel id is letters and digits, like C0123ABCD (the channel's details show it)"
                .into(),
        ));
    }
    crate::repos::get(&state.db, req.repo_id).await?;
    db::slack::set_channel_repo(
        &state.db,
        "*",
        &channel,
        req.repo_id,
        user.0.id,
        crate::now_ms(),
    )
    .await?;
    Ok(Json(current(&state, &user.0).await?))
}

/// Clears a channel's default repo (admins).
#[utoipa::path(
    delete,
    path = "/slack/channels/{channel}",
    tag = "slack",
    operation_id = "clear_slack_channel",
    params(("channel" = String, Path, description = "The channel's id")),
    responses((status = 204, description = "Cleared"), Unauthorized, Forbidden),
)]
async fn delete_channel(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(channel): Path<String>,
) -> Result<StatusCode> {
    require_admin(&user, "clear a channel's repo")?;
    db::slack::clear_channel(&state.db, &channel.trim().to_uppercase()).await?;
    Ok(StatusCode::NO_CONTENT)
}
