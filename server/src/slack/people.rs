//! Who a Slack user is in Tandem: their link, else the person with their Slack email (a full
//! member's, never an admin's), else a one-time link they open signed in to Tandem.

use tandem_protocol::*;

use super::Slack;
use super::conversation::tell;
use crate::state::AppState;
use crate::{Error, Result, db, now_ms};

/// How long a one-time link to tie a Slack user to a person works.
const LINK_TTL_MS: i64 = 30 * 60 * 1000;

/// The Tandem person of Slack user `slack_user`: their link, else the person with their Slack
/// email (linked from then on). None when neither: they were sent a one-time link.
pub(super) async fn person(
    app: &AppState,
    slack: &Slack,
    team: &str,
    slack_user: &str,
    channel: &str,
    thread: Option<&str>,
) -> Result<Option<User>> {
    person_or(app, slack, team, slack_user, channel, thread, true).await
}

/// [`person`]; `answer` false sends no link (a thread message not meant for the app).
pub(super) async fn person_or(
    app: &AppState,
    slack: &Slack,
    team: &str,
    slack_user: &str,
    channel: &str,
    thread: Option<&str>,
    answer: bool,
) -> Result<Option<User>> {
    if let Some(id) = db::slack::person(&app.db, team, slack_user).await? {
        return match db::users::get(&app.db, id).await? {
            Some(u) if u.deactivated_at.is_none() => Ok(Some(u)),
            _ => Err(Error::Forbidden(
                "your Tandem account is deactivated; ask an admin".into(),
            )),
        };
    }
    let who = slack.user(app, team, slack_user).await?;
    // An admin is never taken on an email alone: they link with a one-time link.
    if let Some(email) = &who.email
        && let Some(u) = db::users::by_email(&app.db, email).await?
        && u.deactivated_at.is_none()
        && !u.is_admin
    {
        db::slack::link(&app.db, team, slack_user, u.id, now_ms()).await?;
        return Ok(Some(u));
    }
    if !answer {
        return Ok(None);
    }
    let url = link_url(app, team, slack_user, &who.name).await?;
    tell(
        app,
        channel,
        slack_user,
        thread,
        &format!(
            "I don't know who you are in Tandem yet. Open <{url}|this one-time link> (it works for 30 minutes) while signed in to Tandem to link your Slack account, then mention me again."
        ),
    )
    .await;
    Ok(None)
}

/// A one-time link that ties `slack_user` to whoever opens it signed in.
pub(super) async fn link_url(
    app: &AppState,
    team: &str,
    slack_user: &str,
    name: &str,
) -> Result<String> {
    let code = crate::auth::new_secret("tsl_");
    db::slack::insert_link_code(
        &app.db,
        &crate::auth::hash_secret(&code),
        team,
        slack_user,
        name,
        now_ms() + LINK_TTL_MS,
    )
    .await?;
    Ok(format!("{}/api/slack/link?code={code}", app.public_url()))
}

/// Which Slack user a one-time link code is for: (workspace, user id, name), while it works.
pub async fn link_for(app: &AppState, code: &str) -> Result<Option<(String, String, String)>> {
    Ok(db::slack::link_code(&app.db, &crate::auth::hash_secret(code), now_ms()).await?)
}

/// Uses up a one-time link code for `user`: the Slack user it was for is now theirs.
pub async fn redeem_link(app: &AppState, user: &User, code: &str) -> Result<()> {
    let (team, slack_user) = db::slack::take_link_code(&app.db, &crate::auth::hash_secret(code), now_ms())
        .await?
        .ok_or_else(|| {
            Error::NotFound(
                "this link was used already or has expired: mention the app in Slack again for a new one".into(),
            )
        })?;
    Ok(db::slack::link(&app.db, &team, &slack_user, user.id, now_ms()).await?)
}
