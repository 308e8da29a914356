//! Which repo a Slack task is for: `repo=` in it, the channel's default, an admin's keyword
//! rule, or a menu only its writer sees.

use slack_morphism::prelude::*;
use tandem_protocol::people::RepoRole;
use tandem_protocol::*;

use super::Slack;
use super::conversation::{CHOOSE_REPO, Incoming, content};
use super::text::escape;
use crate::state::AppState;
use crate::{Error, Result, db, now_ms};

/// Sets the channel's repo to `name` (admins; the channel is told who changed it); what to
/// tell the person.
pub(super) async fn set_channel(
    app: &AppState,
    slack: &Slack,
    user: &User,
    m: &Incoming,
    name: Option<&str>,
) -> Result<String> {
    let (team, channel) = (m.team.as_str(), m.channel.as_str());
    let Some(name) = name else {
        return Ok(
            match db::slack::channel_repo(&app.db, team, channel).await? {
                Some(id) => format!(
                    "This channel's repo is `{}`. `@tandem settings repo=<name>` changes it.",
                    escape(&crate::repos::get(&app.db, id).await?.name)
                ),
                None => {
                    "This channel has no repo yet: `@tandem settings repo=<name>` sets one.".into()
                }
            },
        );
    };
    if !user.is_admin {
        return Err(Error::Forbidden(format!(
            "only Tandem admins set a channel's repo; ask {}",
            crate::permissions::whom_to_ask(app).await?
        )));
    }
    let repo = repo_named(app, user, name).await?;
    db::slack::set_channel_repo(&app.db, team, channel, repo.id, user.id, now_ms()).await?;
    slack
        .post(
            app,
            channel,
            None,
            content(format!(
                "<@{}> made `{}` this channel's repo for sessions started here.",
                m.user,
                escape(&repo.name)
            )),
        )
        .await?;
    Ok(format!(
        "Sessions started in this channel now use `{}` unless a message says `repo=…`.",
        escape(&repo.name)
    ))
}

/// The repo called `name` that `user` may start sessions on.
pub(super) async fn repo_named(app: &AppState, user: &User, name: &str) -> Result<Repo> {
    let usable = usable_repos(app, user).await?;
    // The whole name, else the part after the owner when only one repo has it.
    let short = |r: &&Repo| {
        r.name
            .rsplit('/')
            .next()
            .is_some_and(|n| n.eq_ignore_ascii_case(name))
    };
    let by_short: Vec<&Repo> = usable.iter().filter(short).collect();
    usable
        .iter()
        .find(|r| r.name.eq_ignore_ascii_case(name))
        .or(match by_short.as_slice() {
            [one] => Some(*one),
            _ => None,
        })
        .cloned()
        .ok_or_else(|| {
            Error::NotFound(format!(
                "you have no repo called `{}` to start sessions on; yours: {}",
                escape(name),
                names(&usable)
            ))
        })
}

fn names(repos: &[Repo]) -> String {
    if repos.is_empty() {
        return "none".into();
    }
    repos
        .iter()
        .map(|r| format!("`{}`", escape(&r.name)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The repos `user` may start sessions on, by name.
async fn usable_repos(app: &AppState, user: &User) -> Result<Vec<Repo>> {
    Ok(crate::permissions::visible_repos(app, user)
        .await?
        .into_iter()
        .filter(|(_, role)| *role >= RepoRole::Write)
        .map(|(r, _)| r)
        .collect())
}

/// The repo a task is for: `repo=` in it, else the channel's, else the first keyword rule it
/// matches; none means ask.
pub(super) async fn choose_repo(
    app: &AppState,
    user: &User,
    team: &str,
    channel: &str,
    named: Option<&str>,
    task: &str,
) -> Result<Option<Repo>> {
    if let Some(name) = named {
        return repo_named(app, user, name).await.map(Some);
    }
    if let Some(id) = db::slack::channel_repo(&app.db, team, channel).await? {
        return crate::permissions::repo_for_work(app, user, id)
            .await
            .map(Some);
    }
    let lower = task.to_lowercase();
    for (keyword, id) in db::slack::rules(&app.db).await? {
        if lower.contains(&keyword.to_lowercase())
            && let Ok(repo) = crate::permissions::repo_for_work(app, user, id).await
        {
            return Ok(Some(repo));
        }
    }
    Ok(None)
}

/// Asks (only the writer sees it) which repo the task is for.
pub(super) async fn ask_repo(
    app: &AppState,
    slack: &Slack,
    user: &User,
    m: &Incoming,
    task: &str,
) -> Result<()> {
    let repos = usable_repos(app, user).await?;
    if repos.is_empty() {
        return Err(Error::Forbidden(format!(
            "you may not start sessions on any repo here: ask {} for write access",
            crate::permissions::whom_to_ask(app).await?
        )));
    }
    let id = uuid::Uuid::new_v4().to_string();
    db::slack::insert_pending(
        &app.db,
        &db::slack::Pending {
            id: id.clone(),
            team_id: m.team.clone(),
            channel_id: m.channel.clone(),
            thread_ts: m.thread().to_string(),
            trigger_ts: m.ts.clone(),
            slack_user_id: m.user.clone(),
            text: task.to_string(),
        },
        now_ms(),
    )
    .await?;
    let options: Vec<SlackBlockChoiceItem<SlackBlockPlainTextOnly>> = repos
        .iter()
        .take(100)
        .map(|r| {
            SlackBlockChoiceItem::new(
                pt!(r.name.chars().take(75).collect::<String>()),
                r.id.to_string(),
            )
        })
        .collect();
    let menu = SlackBlockStaticSelectElement::new()
        .with_action_id(CHOOSE_REPO.into())
        .with_placeholder(pt!("Choose a repo"))
        .with_options(options);
    let blocks = slack_blocks![
        some_into(
            SlackSectionBlock::new()
                .with_block_id(SlackBlockId(id))
                .with_text(md!("Which repo is this for? (`repo=<name>` in a message, or `@tandem settings repo=<name>` for the channel, skips this.)"))
                .with_accessory(menu.into())
        )
    ];
    slack
        .ephemeral(
            app,
            &m.channel,
            &m.user,
            m.thread_ts.as_deref(),
            SlackMessageContent::new()
                .with_text("Which repo is this for?".into())
                .with_blocks(blocks),
        )
        .await
}
