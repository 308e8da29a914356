//! The slash command, `/tandem`.

use slack_morphism::prelude::*;

use super::conversation::{HELP, Incoming, content, start, tell};
use super::people::{link_url, person};
use super::repos::{choose_repo, set_channel};
use super::text::{escape, plain, repo_word};
use crate::state::AppState;
use crate::{Error, Result};

/// `/tandem …`: `help` is answered at once; `link`, `repo <name>` and a task (started in the
/// channel) are worked on after Slack has its answer, and their outcome comes as a message
/// only the person sees.
pub async fn command(app: &AppState, cmd: &SlackCommandEvent) -> String {
    let text = plain(cmd.text.as_deref().unwrap_or_default(), None);
    if text.is_empty() || text.eq_ignore_ascii_case("help") {
        return HELP.into();
    }
    let (app, cmd) = (app.clone(), cmd.clone());
    tokio::spawn(async move {
        let (channel, user) = (cmd.channel_id.0.clone(), cmd.user_id.0.clone());
        let said = match command_inner(&app, &cmd, &text).await {
            Ok(said) => said,
            Err(e) => format!(":warning: {e}"),
        };
        tell(&app, &channel, &user, None, &said).await;
    });
    "On it…".into()
}

async fn command_inner(app: &AppState, cmd: &SlackCommandEvent, text: &str) -> Result<String> {
    let slack = super::slack(app)?;
    let (team, channel, slack_user) = (&cmd.team_id.0, &cmd.channel_id.0, &cmd.user_id.0);
    let lower = text.to_lowercase();
    if lower == "link" {
        let url = link_url(app, slack, team, slack_user).await?;
        return Ok(format!(
            "Open <{url}|this one-time link> (30 minutes) while signed in to Tandem to link your Slack account."
        ));
    }
    let Some(user) = person(app, slack, team, slack_user, channel, None).await? else {
        return Ok("First link your account: open the link above.".into());
    };
    let m = Incoming {
        team: team.clone(),
        channel: channel.clone(),
        user: slack_user.clone(),
        text: text.to_string(),
        ts: String::new(),
        thread_ts: None,
        files: Vec::new(),
        mention: true,
        direct: false,
        bot: None,
    };
    if lower == "repo" || lower.starts_with("repo ") {
        let name = lower["repo".len()..].trim();
        return set_channel(app, &m, (!name.is_empty()).then_some(name)).await;
    }
    let (named, task) = repo_word(text);
    let Some(repo) = choose_repo(app, &user, team, channel, named.as_deref(), &task).await? else {
        return Err(Error::Invalid(
            "which repo? add `repo=<name>`, or ask an admin to set the channel's in Tandem's Settings page".into(),
        ));
    };
    // The thread starts at a message that says who asked for what.
    let root = slack
        .post(
            app,
            channel,
            None,
            content(format!("<@{slack_user}> asked: {}", escape(&task))),
        )
        .await?;
    let m = Incoming {
        text: task.clone(),
        ts: root,
        ..m
    };
    start(app, slack, &user, &m, repo, &task).await?;
    Ok("Started: follow it in the thread.".into())
}
