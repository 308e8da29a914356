//! VS Code on an origin of its own per session, so what it serves — workspace extensions
//! included — runs where no Tandem credential is: `http://<session>.localhost:<port>` when
//! Tandem is reached on loopback (browsers resolve `*.localhost` to loopback themselves), else
//! the `code_url` template of the config (`https://{session}.code.example.com`: a wildcard DNS
//! name and certificate for the server). Tandem's cookie is host-only and `SameSite`, so it is
//! never sent to, or from, that origin.
//!
//! The web app asks `POST /api/sessions/{id}/code` for a URL `<origin>/_t/<ticket>/…`. The
//! ticket (HS256, kind `code`, one person, one session, [`TICKET_TTL_SECS`]) rides in the path,
//! which code-server's relative URLs keep, so the code origin needs no cookie of its own. Every
//! request checks the ticket, the host's session against it, and that the person may still
//! drive the session: a revoked link or a demoted driver is cut off at the next request.
//! Without an origin (Tandem reached by a non-loopback address and no `code_url`), VS Code is
//! refused ([`NO_ORIGIN`]) unless `unsafe_code_on_tandem_origin` lets it run under Tandem's own
//! origin at `/sessions/{id}/code/` (the book's VS Code chapter says what that costs).

use std::borrow::Cow;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tandem_protocol::SessionId;

pub use crate::config::code_origin::CodeOrigin;
use crate::state::AppState;
use crate::{Error, Result, db};

/// How long a VS Code URL works; the person's role is checked on every request besides.
pub const TICKET_TTL_SECS: i64 = 12 * 3600;
/// The path prefix that carries the ticket on the code origin.
const TICKET_PREFIX: &str = "/_t/";
/// Who a ticket is for.
pub enum Holder {
    /// A signed-in person (their role is checked on every request).
    User(tandem_protocol::UserId),
    /// Someone who came through share link `jti` (the link is checked on every request), and
    /// the signed-in person holding it, if any (checked to be active on every request too).
    Link(String, Option<tandem_protocol::UserId>),
}

const LINK_SUBJECT: &str = "link:";

/// Why VS Code is refused where it has no origin of its own.
pub const NO_ORIGIN: &str = "VS Code needs an origin of its own on this server, or the pages a workspace serves would run on Tandem's: set `code_url` in tandem.toml (a wildcard name for this server, see the VS Code chapter of the book, docs/book/src/vs-code.md)";

/// The URL of session `id`'s VS Code for `holder`, and whether it has an origin of its own.
pub fn link(app: &AppState, id: SessionId, holder: &Holder) -> Result<(String, bool)> {
    let folder = "?folder=/workspace";
    Ok(match app.config.code_url.as_ref() {
        Some(origin) => {
            let subject = match holder {
                Holder::User(u) => u.to_string(),
                Holder::Link(jti, None) => format!("{LINK_SUBJECT}{jti}"),
                Holder::Link(jti, Some(u)) => format!("{LINK_SUBJECT}{jti}:{u}"),
            };
            let ticket = app
                .jwt
                .issue_code_for(&subject, &id.to_string(), TICKET_TTL_SECS)?;
            (
                format!("{}{TICKET_PREFIX}{ticket}/{folder}", origin.base(id)),
                true,
            )
        }
        // Tandem's own origin authenticates with Tandem's own credential: signed-in people
        // only (those who came through a link need the membership it gave them).
        None if !app.config.unsafe_code_on_tandem_origin => {
            return Err(Error::Unavailable(NO_ORIGIN.into()));
        }
        None if matches!(holder, Holder::Link(..)) => {
            return Err(Error::Forbidden(
                "VS Code needs a signed-in person on this server (it has no origin of its own for VS Code)".into(),
            ));
        }
        None => (format!("/sessions/{id}/code/{folder}"), false),
    })
}

/// Middleware: a request whose `Host` is a session's code origin is VS Code's, whatever its
/// path; everything else goes on to Tandem's routes.
pub async fn dispatch(State(app): State<AppState>, req: Request, next: Next) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| req.uri().authority().map(|a| a.as_str()))
        .map(str::to_string);
    if let Some(host) = host
        && let Some(origin) = app.config.code_url.as_ref()
        && let Some(id) = origin.session_for_host(&host)
    {
        // Answered by the server hosting the session's workspace.
        let req = match crate::cluster::elsewhere(&app, id, req).await {
            Ok(res) => return res,
            Err(req) => req,
        };
        return serve(app, id, req)
            .await
            .unwrap_or_else(IntoResponse::into_response);
    }
    next.run(req).await
}

/// A request on session `id`'s code origin: `/_t/<ticket>/<rest>` goes to its code-server.
async fn serve(app: AppState, id: SessionId, req: Request) -> Result<Response> {
    let path = req.uri().path().to_string();
    let Some((ticket, rest)) = path
        .strip_prefix(TICKET_PREFIX)
        .map(|p| p.split_once('/').unwrap_or((p, "")))
    else {
        return Err(Error::NotFound(
            "this is a session's VS Code: open it from the session page".into(),
        ));
    };
    let claims = app.jwt.verify_code(ticket, &id.to_string())?;
    allowed(&app, id, &claims.sub).await?;
    // A WebSocket (code-server's terminals and files) lasts only while that holds.
    let (check, sub) = (app.clone(), claims.sub.clone());
    let until = while_allowed(move || {
        let (app, sub) = (check.clone(), sub.clone());
        async move { allowed(&app, id, &sub).await.is_ok() }
    });
    let mut res = super::forward(app, id, rest.to_string(), req, until).await?;
    // The ticket is in every URL here: no page of this origin names it to another.
    res.headers_mut().insert(
        header::REFERRER_POLICY,
        header::HeaderValue::from_static("same-origin"),
    );
    Ok(res)
}

/// Whether the ticket's subject may still use session `id`'s VS Code: a guest's driver link
/// still holds, or a person may still drive.
async fn allowed(app: &AppState, id: SessionId, subject: &str) -> Result<()> {
    if let Some(rest) = subject.strip_prefix(LINK_SUBJECT) {
        let (jti, holder) = rest.split_once(':').unwrap_or((rest, ""));
        if !holder.is_empty() {
            // A signed-in holder who has been deactivated since loses it too.
            let person = holder
                .parse()
                .map_err(|_| Error::Unauthorized("this VS Code link is not valid".into()))?;
            db::users::get(&app.db, person)
                .await?
                .ok_or_else(|| Error::Unauthorized("this VS Code link's person is gone".into()))
                .and_then(crate::identity::auth::active)?;
        }
        let link = crate::sessions::access::link_by_id(&app.db, id, jti).await?;
        if link.role < tandem_protocol::live::Role::Driver {
            return Err(super::not_for_viewers());
        }
        return Ok(());
    }
    let user_id = subject
        .parse()
        .map_err(|_| Error::Unauthorized("this VS Code link is not valid".into()))?;
    let user = db::users::get(&app.db, user_id)
        .await?
        .ok_or_else(|| Error::Unauthorized("this VS Code link's person is gone".into()))?;
    super::require_driver(app, id, &user).await
}

/// How often an open VS Code connection checks that its holder may still use it.
pub const RECHECK: std::time::Duration = std::time::Duration::from_secs(2);

/// Completes once `check` says no (looked at every [`RECHECK`]).
pub async fn while_allowed<F, Fut>(check: F)
where
    F: Fn() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    loop {
        tokio::time::sleep(RECHECK).await;
        if !check().await {
            return;
        }
    }
}

/// `path` as it may be logged: a VS Code ticket or a webhook secret in it is cut out.
pub fn loggable_path(path: &str) -> Cow<'_, str> {
    // An automation's webhook URL is its secret.
    const HOOK_PREFIX: &str = "/api/automations/hooks/";
    if path.starts_with(HOOK_PREFIX) {
        return Cow::Owned(format!("{HOOK_PREFIX}…"));
    }
    match path.strip_prefix(TICKET_PREFIX) {
        Some(rest) => Cow::Owned(format!(
            "{TICKET_PREFIX}…/{}",
            rest.split_once('/').map_or("", |(_, r)| r)
        )),
        None => Cow::Borrowed(path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tickets_stay_out_of_logged_paths() {
        assert_eq!(
            loggable_path("/_t/eyJsecret/static/x.js"),
            "/_t/…/static/x.js"
        );
        assert_eq!(loggable_path("/_t/eyJsecret"), "/_t/…/");
        assert_eq!(
            loggable_path("/api/automations/hooks/tah_secret"),
            "/api/automations/hooks/…"
        );
        assert_eq!(loggable_path("/api/health"), "/api/health");
    }
}
