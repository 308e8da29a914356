//! A session's progress in its Slack thread: one status message edited in place (state,
//! current step, elapsed, "View session" and "Stop"), the agent's replies, the pull request and
//! failures as their own messages, and reactions on the message that asked (eyes while working,
//! a check when done).

use std::time::Duration;

use slack_morphism::prelude::*;
use tandem_protocol::{Session, SessionId, SessionState};

use super::conversation::{APPROVE, APPROVE_SESSION, DENY, STOP};
use super::text::{MAX_POST_CHARS, escape, escape_cut};
use crate::progress::{Again, News, View, due};
use crate::state::AppState;
use crate::{Error, Result, db, now_ms};

/// At most one status edit this often.
const EDIT_EVERY_MS: i64 = 2_000;

fn state_line(state: SessionState) -> &'static str {
    match state {
        SessionState::Queued => ":hourglass_flowing_sand: Queued",
        SessionState::Starting => ":hourglass_flowing_sand: Starting",
        SessionState::Ready => ":large_green_circle: Ready",
        SessionState::Running => ":gear: Working",
        SessionState::Idle => ":large_green_circle: Waiting for you",
        SessionState::Suspended => ":zzz: Suspended",
        SessionState::Stopped => ":white_circle: Stopped",
        SessionState::Failed => ":x: Failed",
    }
}

fn session_url(app: &AppState, id: SessionId) -> String {
    format!("{}/sessions/{id}", app.public_url())
}

/// Whether the session's thread gets its state and a link only, never the agent's words: a
/// private session, or one of a repo not open to everyone. A Slack channel is not Tandem's
/// access list (anyone in it, a guest or another company's member of a shared channel, reads
/// what is posted), so what Tandem would show only to some people stays in Tandem. Read again
/// before each batch of news: a session made private later goes quiet from then on.
async fn quiet(app: &AppState, session: SessionId) -> Result<bool> {
    let Some(s) = db::sessions::get(&app.db, session).await? else {
        return Ok(true);
    };
    if s.private {
        return Ok(true);
    }
    let open = db::repos::get(&app.db, s.repo_id)
        .await?
        .is_some_and(|r| r.access == tandem_protocol::people::RepoAccess::Everyone);
    Ok(!open)
}

/// The status message's content for `view`; `quiet`: without the agent's current step.
fn render(app: &AppState, view: &View, quiet: bool) -> SlackMessageContent {
    let mut lines = vec![
        format!("*{}*", escape_cut(&view.title, 150)),
        format!(
            "{} · `{}` · {}",
            state_line(view.state),
            escape(&view.repo),
            view.elapsed()
        ),
    ];
    if let Some(w) = &view.waiting {
        lines.push(format!(":warning: {}", escape_cut(w, 300)));
    } else if let Some(step) = view.step.as_ref().filter(|_| !quiet) {
        lines.push(format!("_{}_", escape_cut(step, 150)));
    }
    if let Some((n, url)) = &view.pr {
        lines.push(format!("Pull request: <{}|#{n}>", escape(url)));
    }
    let mut buttons = vec![SlackActionBlockElement::Button(
        SlackBlockButtonElement::new(pt!("View session"))
            .with_action_id("tandem_view".into())
            .with_url(
                session_url(app, view.session)
                    .parse()
                    .unwrap_or_else(|_| "https://invalid.example/".parse().expect("a valid URL")),
            ),
    )];
    if !view.ended() {
        buttons.push(SlackActionBlockElement::Button(
            SlackBlockButtonElement::new(pt!("Stop"))
                .with_action_id(STOP.into())
                .with_value(view.session.to_string())
                .with_style(SlackBlockButtonStyle::Danger),
        ));
    }
    let blocks = slack_blocks![
        some_into(SlackSectionBlock::new().with_text(md!(lines.join("\n")))),
        some_into(SlackActionsBlock::new(buttons))
    ];
    SlackMessageContent::new()
        .with_text(format!(
            "{}: {}",
            state_line(view.state),
            escape_cut(&view.title, 150)
        ))
        .with_blocks(blocks)
}

/// An approval card: what the agent wants to do (and, unless the session is quiet, with what
/// arguments), with buttons for drivers.
fn approval_card(
    app: &AppState,
    a: &tandem_protocol::approval::Approval,
    quiet: bool,
) -> SlackMessageContent {
    let who = a
        .asked_for
        .as_ref()
        .map(|p| format!(" (during {}'s turn)", escape_cut(&p.name, 80)))
        .unwrap_or_default();
    let mut text = format!(
        ":raised_hand: *The agent asks to {}*{who}",
        escape_cut(&a.subject.describe(), 200)
    );
    if quiet {
        text.push_str(&format!(
            "\n<{}|See its arguments in the session.>",
            session_url(app, a.session_id)
        ));
    } else {
        let args = serde_json::to_string_pretty(&a.arguments).unwrap_or_default();
        // Inside a code block Slack formats nothing; a run of backticks would end it early.
        let args = args.replace('`', "'");
        text.push_str(&format!("\n```{}```", escape_cut(&args, 1500)));
    }
    let value = format!("{}/{}", a.session_id, a.id);
    let button = |label: &str, action: &str| {
        SlackBlockButtonElement::new(pt!(label.to_string()))
            .with_action_id(action.into())
            .with_value(value.clone())
    };
    let blocks = slack_blocks![
        some_into(SlackSectionBlock::new().with_text(md!(text))),
        some_into(SlackActionsBlock::new(vec![
            SlackActionBlockElement::Button(
                button("Approve", APPROVE).with_style(SlackBlockButtonStyle::Primary)
            ),
            SlackActionBlockElement::Button(button("Approve for this session", APPROVE_SESSION)),
            SlackActionBlockElement::Button(
                button("Deny", DENY).with_style(SlackBlockButtonStyle::Danger)
            ),
        ]))
    ];
    SlackMessageContent::new()
        .with_text(format!(
            ":raised_hand: The agent asks to {}",
            escape_cut(&a.subject.describe(), 200)
        ))
        .with_blocks(blocks)
}

/// The first status message of a session just started.
pub fn first(app: &AppState, s: &Session, repo: &str) -> SlackMessageContent {
    render(
        app,
        &View {
            session: s.id,
            title: s.title.clone(),
            repo: repo.to_string(),
            state: s.state,
            step: None,
            created_at: s.created_at.0,
            waiting: None,
            pr: None,
            last_reply: None,
        },
        true,
    )
}

/// Adds or takes away a reaction; one Slack refuses is only logged (it is decoration, and the
/// news around it must not be posted twice for it).
async fn react(app: &AppState, channel: &str, ts: &str, name: &str, on: bool) {
    if let Ok(slack) = super::slack(app)
        && let Err(e) = slack.react(app, channel, ts, name, on).await
    {
        tracing::info!(error = %e, "a Slack reaction was refused");
    }
}

/// A session's thread, as its progress follower writes to it.
pub struct Status {
    thread: db::slack::Thread,
    /// The approval cards this follower posted (approval → message), edited when answered.
    cards: std::collections::HashMap<tandem_protocol::ApprovalId, String>,
    /// What the status message shows (without the elapsed time), and when it was edited.
    shown: String,
    edited_at: i64,
}

impl Status {
    pub async fn open(app: &AppState, session: SessionId) -> Result<Self> {
        let thread = db::slack::thread_of(&app.db, session)
            .await?
            .ok_or_else(|| Error::NotFound(format!("session {session} has no Slack thread")))?;
        Ok(Self {
            thread,
            cards: Default::default(),
            shown: String::new(),
            edited_at: 0,
        })
    }

    /// Posts the news and edits the status message (at most every [`EDIT_EVERY_MS`]).
    pub async fn show(
        &mut self,
        app: &AppState,
        view: &View,
        news: &mut std::collections::VecDeque<News>,
    ) -> Result<Again> {
        let slack = super::slack(app)?;
        let t = &self.thread;
        let (channel, thread) = (t.channel_id.as_str(), t.thread_ts.as_str());
        // Reactions go on the newest message that asked (a follow-up moves them there).
        let asked = db::slack::thread_of(&app.db, view.session)
            .await?
            .map(|t| t.trigger_ts)
            .unwrap_or_else(|| t.trigger_ts.clone());
        let quiet = quiet(app, view.session).await?;
        while let Some(n) = news.front().cloned() {
            match &n {
                News::TurnStarted => {
                    react(app, channel, &asked, "white_check_mark", false).await;
                    react(app, channel, &asked, "eyes", true).await;
                }
                News::TurnEnded { ok, reply, error } => {
                    if let Some(reply) = reply {
                        // Slack's mrkdwn has no image syntax and unfurls are off: a remote
                        // image's URL stays text Slack fetches nothing for, once escaped.
                        let mut text = escape_cut(reply, MAX_POST_CHARS);
                        if quiet {
                            text = format!(
                                ":speech_balloon: The agent replied. <{}|Read it in the session.>",
                                session_url(app, view.session)
                            );
                        } else if reply.chars().count() > MAX_POST_CHARS {
                            text.push_str(&format!(
                                "\n<{}|The whole reply is in the session.>",
                                session_url(app, view.session)
                            ));
                        }
                        slack
                            .post(
                                app,
                                channel,
                                Some(thread),
                                SlackMessageContent::new().with_text(text),
                            )
                            .await?;
                        // Posted: a failure below must not post it again.
                        if let Some(News::TurnEnded { reply, .. }) = news.front_mut() {
                            *reply = None;
                        }
                    }
                    if !ok && let Some(e) = error {
                        slack
                            .post(
                                app,
                                channel,
                                Some(thread),
                                SlackMessageContent::new().with_text(if quiet {
                                    format!(
                                        ":warning: The turn did not finish. <{}|Open the session> to see why; reply here to try again.",
                                        session_url(app, view.session)
                                    )
                                } else {
                                    format!(
                                        ":warning: The turn did not finish: {}. Reply here to try again, or open the session.",
                                        escape_cut(e, 500)
                                    )
                                }),
                            )
                            .await?;
                    }
                    react(app, channel, &asked, "eyes", false).await;
                    if *ok {
                        react(app, channel, &asked, "white_check_mark", true).await;
                    }
                }
                News::PrOpened { number, url } => {
                    slack
                        .post(
                            app,
                            channel,
                            Some(thread),
                            SlackMessageContent::new().with_text(format!(
                                ":rocket: Pull request <{}|#{number}> is open for review.",
                                escape(url)
                            )),
                        )
                        .await?;
                }
                News::Failed(why) => {
                    slack
                        .post(
                            app,
                            channel,
                            Some(thread),
                            SlackMessageContent::new().with_text(format!(
                                ":x: The session failed: {}",
                                escape_cut(why, 1000)
                            )),
                        )
                        .await?;
                    react(app, channel, &asked, "eyes", false).await;
                }
                News::LimitReached(limit) => {
                    slack
                        .post(
                            app,
                            channel,
                            Some(thread),
                            SlackMessageContent::new().with_text(format!(
                                ":money_with_wings: The turn stopped at {}: {} used. An admin raises budgets on Tandem's settings page; daily budgets start again at midnight UTC.",
                                escape_cut(&limit.which(), 200),
                                escape_cut(&limit.amount(), 100)
                            )),
                        )
                        .await?;
                }
                News::ApprovalAsked(approval) => {
                    let card = approval_card(app, approval, quiet);
                    let ts = slack.post(app, channel, Some(thread), card).await?;
                    self.cards.insert(approval.id, ts);
                }
                News::ApprovalAnswered { approval, outcome } => {
                    let text = format!(
                        ":ballot_box_with_check: Approval: {}",
                        escape_cut(outcome, 300)
                    );
                    // Blocks given: an update without them would keep the card's buttons.
                    let content = SlackMessageContent::new()
                        .with_text(text.clone())
                        .with_blocks(slack_blocks![some_into(
                            SlackSectionBlock::new().with_text(md!(text))
                        )]);
                    match self.cards.get(approval) {
                        // The card itself says who answered; its buttons go.
                        Some(ts) => slack.update(app, channel, ts, content).await?,
                        None => {
                            slack.post(app, channel, Some(thread), content).await?;
                        }
                    }
                }
            }
            news.pop_front();
        }
        let Some(status_ts) = t.status_ts.clone() else {
            return Ok(None);
        };
        let content = render(app, view, quiet);
        let key = format!(
            "{:?}|{:?}|{:?}|{:?}",
            view.state, view.step, view.waiting, view.pr
        );
        if key == self.shown {
            return Ok(None);
        }
        // The last state is always shown; before it, edits are spaced out.
        if !view.ended()
            && let Some(wait) = due(self.edited_at, EDIT_EVERY_MS)
        {
            return Ok(Some(wait.max(Duration::from_millis(50))));
        }
        match slack
            .update(app, channel, &status_ts, content.clone())
            .await
        {
            Err(e) if e.to_string().contains("message_not_found") => {
                // Someone deleted it: a new one takes its place.
                let ts = slack.post(app, channel, Some(thread), content).await?;
                self.thread.status_ts = Some(ts.clone());
                db::slack::set_status_ts(&app.db, view.session, &ts).await?;
            }
            other => other?,
        }
        self.shown = key;
        self.edited_at = now_ms();
        Ok(None)
    }
}
