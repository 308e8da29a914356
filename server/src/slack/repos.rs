//! Which repo a Slack task is for: `repo=` in it, the channel's default, an admin's keyword
//! rule, or a menu only its writer sees.

use slack_morphism::prelude::*;
use tandem_protocol::people::RepoRole;
use tandem_protocol::*;

use super::Slack;
use super::conversation::{CHOOSE_REPO, Incoming};
use super::text::escape;
use crate::state::AppState;
use crate::{Error, Result, db, now_ms};

/// Says the channel's repo; setting one from Slack is refused (from Slack nobody acts as an
/// admin: an admin sets it in the web app's Settings page).
pub(super) async fn set_channel(
    app: &AppState,
    m: &Incoming,
    name: Option<&str>,
) -> Result<String> {
    let (team, channel) = (m.team.as_str(), m.channel.as_str());
    if name.is_none() {
        return Ok(
            match db::slack::channel_repo(&app.db, team, channel).await? {
                Some(id) => format!(
                    "This channel's repo is `{}`. A Tandem admin changes it in Tandem's Settings page.",
                    escape(&crate::repos::get(&app.db, id).await?.name)
                ),
                None => format!(
                    "This channel has no repo yet: a Tandem admin sets one in Tandem's Settings page (channel `{channel}`)."
                ),
            },
        );
    }
    Err(Error::Forbidden(format!(
        "{FROM_SLACK_NO_ADMIN}: a Tandem admin sets a channel's repo in Tandem's web app (Settings → Slack, channel `{channel}`); ask {}",
        crate::permissions::whom_to_ask(app).await?
    )))
}

/// Why nothing an admin does is done from Slack.
pub(super) const FROM_SLACK_NO_ADMIN: &str =
    "from Slack nobody acts as a Tandem admin (a Slack account is only as safe as its link)";

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
        return Ok(Some(
            crate::permissions::repo_for_work(app, user, id).await?,
        ));
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
                .with_text(md!("Which repo is this for? (`repo=<name>` in a message skips this; an admin can give the channel a repo in Tandem's Settings page.)"))
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
