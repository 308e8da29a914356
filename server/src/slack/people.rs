//! Who a Slack user is in Tandem: their link, else the person with their Slack email (a full
//! member's, never an admin's), else a one-time link they open signed in to Tandem. Whoever they
//! are, they act from Slack without admin rights.

use tandem_protocol::*;

use super::Slack;
use super::conversation::tell;
use crate::state::AppState;
use crate::{Error, Result, db, now_ms};

/// How long a one-time link to tie a Slack user to a person works.
const LINK_TTL_MS: i64 = 30 * 60 * 1000;

/// The Tandem person of Slack user `slack_user`: their link, else the person with their Slack
/// email (linked from then on). None when neither: they were sent a one-time link. The person
/// comes back as they act from Slack: never an admin ([`from_slack`]).
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

/// A person as they act from Slack: without admin rights, whatever their role in Tandem (now or
/// later). A Slack account is only as safe as its link and its owner's Slack session; what
/// admins do is done in the web app.
fn from_slack(mut user: User) -> User {
    user.is_admin = false;
    user
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
        return match crate::commands::active_person(&app.db, id).await? {
            Some(u) => Ok(Some(from_slack(u))),
            None => Err(Error::Forbidden(
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
        return Ok(Some(from_slack(u)));
    }
    if !answer {
        return Ok(None);
    }
    let url = link_url(app, slack, team, slack_user).await?;
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

/// A one-time link that ties `slack_user` to whoever opens it signed in and confirms; it keeps
/// what Slack's API vouches for about them (handle, email, workspace) to show on the page.
pub(super) async fn link_url(
    app: &AppState,
    slack: &Slack,
    team: &str,
    slack_user: &str,
) -> Result<String> {
    let who = slack.user(app, team, slack_user).await?;
    let code = crate::identity::auth::new_secret("tsl_");
    db::slack::insert_link_code(
        &app.db,
        &crate::identity::auth::hash_secret(&code),
        &db::slack::LinkFor {
            team_id: team.to_string(),
            slack_user_id: slack_user.to_string(),
            slack_name: who.handle,
            slack_email: who.email,
            team_label: slack.team_label(app, team).await,
        },
        now_ms() + LINK_TTL_MS,
    )
    .await?;
    Ok(format!("{}/api/slack/link?code={code}", app.public_url()))
}

/// Which Slack user a one-time link code is for, while it works.
pub async fn link_for(app: &AppState, code: &str) -> Result<Option<db::slack::LinkFor>> {
    Ok(db::slack::link_code(&app.db, &crate::identity::auth::hash_secret(code), now_ms()).await?)
}

/// Uses up the one-time link code hashing to `code_hash` for `user`: the Slack user it was for
/// is now theirs (unless linked already: a link is never replaced).
pub async fn redeem_link(app: &AppState, user: &User, code_hash: &str) -> Result<()> {
    let (team, slack_user) = db::slack::take_link_code(&app.db, code_hash, now_ms())
        .await?
        .ok_or_else(|| {
            Error::NotFound(
                "this link was used already or has expired: mention the app in Slack again for a new one".into(),
            )
        })?;
    if !db::slack::link(&app.db, &team, &slack_user, user.id, now_ms()).await? {
        return Err(Error::Conflict(
            "this Slack account is linked to a Tandem account already; a link is never replaced (ask an admin)".into(),
        ));
    }
    Ok(())
}
