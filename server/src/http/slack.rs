//! The Slack app over HTTP: its three request URLs (`/api/slack/events`,
//! `/api/slack/interactivity`, `/api/slack/commands`, each signed by Slack and checked before
//! anything is read), the one-time account link (`/api/slack/link`), and the channel defaults
//! and keyword rules (`/api/slack/settings`).

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use tandem_protocol::RepoId;

use super::oidc::html_escape;
use crate::auth::CurrentUser;
use crate::slack::{conversation, deliveries};
use crate::state::AppState;
use crate::{Error, Result, db};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/slack/events", post(events))
        .route("/slack/interactivity", post(interactivity))
        .route("/slack/commands", post(commands))
        .route("/slack/link", get(link_page).post(link))
        .route("/slack/settings", get(settings).put(put_rules))
}

async fn events(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<serde_json::Value>> {
    deliveries::verify(&state, &headers, &body).await?;
    Ok(Json(deliveries::event(&state, &body).await?))
}

async fn interactivity(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<StatusCode> {
    deliveries::verify(&state, &headers, &body).await?;
    deliveries::interaction(&state, &body).await?;
    Ok(StatusCode::OK)
}

async fn commands(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<serde_json::Value>> {
    deliveries::verify(&state, &headers, &body).await?;
    Ok(Json(deliveries::command(&state, &body).await?))
}

#[derive(Deserialize)]
struct Code {
    code: String,
}

fn page(status: StatusCode, title: &str, body: &str) -> Response {
    let html = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{t} · Tandem</title>\
         <link rel=\"stylesheet\" href=\"/style.css\"></head>\
         <body><main class=\"narrow\"><h1>{t}</h1>{body}</main></body></html>",
        t = html_escape(title)
    );
    (status, [(CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response()
}

/// The page a one-time link opens: it asks before linking (a link someone else sent must not
/// tie their Slack account to yours unseen).
async fn link_page(user: Result<CurrentUser>, Query(q): Query<Code>) -> Response {
    let Ok(user) = user else {
        return page(
            StatusCode::UNAUTHORIZED,
            "Sign in first",
            "<p id=\"why\">Sign in to Tandem in this browser, then open the link from Slack again.</p><p><a href=\"/login\">Sign in</a></p>",
        );
    };
    page(
        StatusCode::OK,
        "Link your Slack account",
        &format!(
            "<p>Messages you write to the Tandem app in Slack will act as <b>{}</b> here. Only continue if you asked for this link in Slack yourself.</p>\
             <form method=\"post\" action=\"/api/slack/link\"><input type=\"hidden\" name=\"code\" value=\"{}\">\
             <button id=\"link\" type=\"submit\">Link my Slack account</button></form>",
            html_escape(&user.0.name),
            html_escape(&q.code)
        ),
    )
}

async fn link(State(state): State<AppState>, user: CurrentUser, body: Bytes) -> Response {
    let code = url::form_urlencoded::parse(&body)
        .find(|(k, _)| k == "code")
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default();
    match conversation::redeem_link(&state, &user.0, &code).await {
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

/// A channel's default repo, for the settings page.
#[derive(Serialize)]
struct Channel {
    team_id: String,
    channel_id: String,
    repo_id: String,
}

/// A keyword rule: a message holding `keyword` is about `repo_id`.
#[derive(Serialize, Deserialize)]
struct Rule {
    keyword: String,
    repo_id: RepoId,
}

#[derive(Serialize)]
struct Settings {
    configured: bool,
    channels: Vec<Channel>,
    rules: Vec<Rule>,
}

async fn settings(State(state): State<AppState>, _user: CurrentUser) -> Result<Json<Settings>> {
    Ok(Json(Settings {
        configured: state.slack.is_some(),
        channels: db::slack::channels(&state.db)
            .await?
            .into_iter()
            .map(|c| Channel {
                team_id: c.team_id,
                channel_id: c.channel_id,
                repo_id: c.repo_id,
            })
            .collect(),
        rules: db::slack::rules(&state.db)
            .await?
            .into_iter()
            .map(|(keyword, repo_id)| Rule { keyword, repo_id })
            .collect(),
    }))
}

/// Replaces the keyword rules (admins).
async fn put_rules(
    State(state): State<AppState>,
    user: CurrentUser,
    Json(rules): Json<Vec<Rule>>,
) -> Result<StatusCode> {
    if !user.0.is_admin {
        return Err(Error::Forbidden(
            "only admins set Slack's keyword rules".into(),
        ));
    }
    let mut list = Vec::new();
    for r in rules.into_iter().take(200) {
        let keyword = r.keyword.trim().to_lowercase();
        if keyword.len() < 2 || keyword.len() > 200 {
            return Err(Error::Invalid(format!(
                "keyword {keyword:?}: 2 to 200 characters"
            )));
        }
        crate::repos::get(&state.db, r.repo_id).await?;
        list.push((keyword, r.repo_id));
    }
    let mut tx = state.db.begin().await?;
    db::slack::set_rules(&mut tx, &list).await?;
    tx.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}
