//! Reporting a session's progress where it was asked for: a Slack thread, a GitHub issue. A
//! follower reads the session's events as they are committed, folds them into a [`View`] (state,
//! current step, elapsed) and [`News`] (a reply, the pull request, a failure), and hands both
//! to its sink, which keeps one status message or comment up to date and posts the news.
//!
//! Followers are rows (`progress_followers`): one server process holds each, renewing its
//! claim as it works; when that process stops, another takes the follower over from the last
//! event reported, so a restart loses nothing (an event may be reported twice across one, never
//! skipped).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tandem_protocol::{Event, EventKind, SessionId, SessionState, TurnOutcome};

use crate::state::AppState;
use crate::{Result, db, now_ms};

/// How long a claim holds without being renewed.
const CLAIM_MS: i64 = 120_000;

/// How often each process looks for followers no process holds.
const SWEEP: Duration = Duration::from_secs(5);

/// The most events read at once.
const BATCH: i64 = 200;

/// Where a follower reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Slack,
    GithubIssue,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Slack => "slack",
            Self::GithubIssue => "github_issue",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "slack" => Some(Self::Slack),
            "github_issue" => Some(Self::GithubIssue),
            _ => None,
        }
    }
}

/// The session as the follower sees it now.
#[derive(Clone, Debug)]
pub struct View {
    pub session: SessionId,
    pub title: String,
    pub repo: String,
    pub state: SessionState,
    /// What the agent (or the boot) is doing now.
    pub step: Option<String>,
    /// When the session was created (ms).
    pub created_at: i64,
    /// Why it is waiting, when it is.
    pub waiting: Option<String>,
    /// The pull request, once opened: (number, url).
    pub pr: Option<(i64, String)>,
    /// The agent's last reply.
    pub last_reply: Option<String>,
}

impl View {
    /// Whether nothing more will happen (the session ended).
    pub fn ended(&self) -> bool {
        matches!(self.state, SessionState::Stopped | SessionState::Failed)
    }

    /// "3m 05s" since the session was created.
    pub fn elapsed(&self) -> String {
        let secs = ((now_ms() - self.created_at) / 1000).max(0);
        if secs < 60 {
            format!("{secs}s")
        } else if secs < 3600 {
            format!("{}m {:02}s", secs / 60, secs % 60)
        } else {
            format!("{}h {:02}m", secs / 3600, (secs / 60) % 60)
        }
    }
}

/// Something worth its own message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum News {
    /// A turn started (on the prompt with this text).
    TurnStarted,
    /// A turn ended; its reply, when it had one.
    TurnEnded {
        ok: bool,
        reply: Option<String>,
        error: Option<String>,
    },
    PrOpened {
        number: i64,
        url: String,
    },
    /// The session failed: what failed and what to do.
    Failed(String),
    /// The agent asks a driver about a call (a card with buttons).
    ApprovalAsked(Box<tandem_protocol::approval::Approval>),
    /// An approval was answered or timed out: who, in words.
    ApprovalAnswered {
        approval: tandem_protocol::ApprovalId,
        outcome: String,
    },
    /// A turn stopped at a budget: which, whose, and the use against it.
    LimitReached(tandem_protocol::spend::LimitUse),
}

/// Folds `event` into `view`, adding what is news to `news`.
pub fn fold(view: &mut View, news: &mut Vec<News>, event: &Event) {
    match &event.kind {
        EventKind::StateChanged { to, reason, .. } => {
            view.state = *to;
            if *to != SessionState::Queued {
                view.waiting = None;
            }
            if *to == SessionState::Failed {
                news.push(News::Failed(reason.clone().unwrap_or_else(|| {
                    "the session failed; its timeline says why".into()
                })));
            }
            if matches!(to, SessionState::Idle | SessionState::Ready) {
                view.step = None;
            }
        }
        EventKind::BootPhase { phase, .. } => {
            view.step = Some(format!("starting the workspace: {}", phase.as_str()));
        }
        EventKind::Waiting { problem } => view.waiting = Some(problem.message.clone()),
        EventKind::TurnStarted { .. } => {
            view.step = Some("thinking".into());
            news.push(News::TurnStarted);
        }
        EventKind::ToolCall {
            name, arguments, ..
        } => {
            view.step = Some(step_of(name, arguments));
        }
        EventKind::AgentMessage { text, .. } => view.last_reply = Some(text.clone()),
        EventKind::TurnEnded { outcome, error, .. } => {
            view.step = None;
            news.push(News::TurnEnded {
                ok: *outcome == TurnOutcome::Completed,
                reply: view.last_reply.take(),
                error: error.clone(),
            });
        }
        EventKind::PrOpened { number, url, .. } => {
            view.pr = Some((*number, url.clone()));
            news.push(News::PrOpened {
                number: *number,
                url: url.clone(),
            });
        }
        EventKind::ApprovalAsked { approval } => {
            news.push(News::ApprovalAsked(Box::new(approval.clone())));
        }
        EventKind::ApprovalAnswered { approval_id, .. } => news.push(News::ApprovalAnswered {
            approval: *approval_id,
            outcome: event.kind.summary(),
        }),
        EventKind::LimitReached { limit } => news.push(News::LimitReached(limit.clone())),
        _ => {}
    }
}

/// One line for a tool call: its name and the start of its command or path.
fn step_of(name: &str, arguments: &serde_json::Value) -> String {
    let detail = ["command", "cmd", "path", "file", "url"]
        .iter()
        .find_map(|k| arguments.get(k).and_then(|v| v.as_str()));
    let one_line = |s: &str| -> String {
        let s: String = s
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        let mut s: String = s.trim().chars().take(80).collect();
        if s.chars().count() == 80 {
            s.push('…');
        }
        s
    };
    match detail {
        Some(d) => format!("{}: {}", one_line(name), one_line(d)),
        None => one_line(name),
    }
}

/// A sink's answer to one batch: when to be called again even without news (a held-back
/// status update).
pub type Again = Option<Duration>;

/// Starts reporting `session`'s progress to `kind` (its sink's own row must be stored first).
pub async fn follow(app: &AppState, session: SessionId, kind: Kind) -> Result<()> {
    db::followers::insert(&app.db, session, kind.as_str()).await?;
    spawn(app, session, kind);
    Ok(())
}

/// The progress reports (followers) this process runs.
#[derive(Default)]
pub struct Reporters(Mutex<HashSet<(SessionId, Kind)>>);

fn running(app: &AppState) -> Arc<Reporters> {
    app.reporters.clone()
}

fn spawn(app: &AppState, session: SessionId, kind: Kind) {
    let set = running(app);
    if !set
        .0
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert((session, kind))
    {
        return;
    }
    let app = app.clone();
    tokio::spawn(async move {
        if let Err(e) = run(&app, session, kind).await {
            tracing::warn!(%session, kind = kind.as_str(), error = %e, "a progress report stopped");
        }
        set.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(session, kind));
    });
}

/// Every few seconds, takes over followers no process holds (this one restarted, or another
/// stopped).
pub async fn sweep(app: AppState) {
    loop {
        match db::followers::unclaimed(&app.db, now_ms()).await {
            Ok(list) => {
                for (session, kind) in list {
                    if let Some(kind) = Kind::parse(&kind) {
                        spawn(&app, session, kind);
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot look for progress reports"),
        }
        tokio::time::sleep(SWEEP).await;
    }
}

/// This process's name in claims.
fn me(app: &AppState) -> String {
    crate::data_dir::server_id(&app.config.data_dir).unwrap_or_else(|_| "unknown".into())
}

/// Errors after which a report can never be shown (the bot left the channel, the issue is
/// gone): the follower stops instead of trying forever. (A revoked token or a missing scope is
/// an admin's to fix: those are retried, backing off.)
fn is_final(e: &crate::Error) -> bool {
    let s = e.to_string();
    [
        "channel_not_found",
        "not_in_channel",
        "is_archived",
        "HTTP 404",
        "HTTP 410",
        "Not Found",
    ]
    .iter()
    .any(|m| s.contains(m))
}

/// The wait after `failures` failed reports in a row: 5 s doubling to a minute (within the
/// claim, so no other process takes the follower over while this one waits).
fn backoff(failures: u32) -> Duration {
    Duration::from_secs((5u64 << failures.saturating_sub(1).min(4)).min(60))
}

/// Tries at one piece of news before it is dropped (Slack refusing that message for good).
const TRIES_PER_NEWS: u32 = 5;

/// Failed reports in a row, once the session ended, before the follower gives up.
const TRIES_AFTER_END: u32 = 30;

async fn run(app: &AppState, session: SessionId, kind: Kind) -> Result<()> {
    let me = me(app);
    let claim = async || {
        let now = now_ms();
        db::followers::claim(&app.db, session, kind.as_str(), &me, now, now + CLAIM_MS).await
    };
    let Some(mut seq) = claim().await? else {
        return Ok(());
    };
    let detail = match crate::sessions::get(&app.db, session)
        .await
        .map_err(crate::Error::from)
    {
        Ok(d) => d,
        Err(crate::Error::NotFound(_)) => {
            // The session is gone: nothing will ever be reported.
            db::followers::reported(&app.db, session, kind.as_str(), &me, seq, true).await?;
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let repo = crate::repos::get(&app.db, detail.session.repo_id)
        .await
        .map(|r| r.name)
        .unwrap_or_default();
    let mut view = View {
        session,
        title: detail.session.title.clone(),
        repo,
        state: SessionState::Queued,
        step: None,
        created_at: detail.session.created_at.0,
        waiting: None,
        pr: None,
        last_reply: None,
    };
    // Taken over part way: what was reported already is read again for the view (the pull
    // request, the state), not reported again.
    let mut read = 0;
    while read < seq {
        let events = db::events::list_after(&app.db, session, read, BATCH).await?;
        let Some(last) = events.last() else { break };
        read = last.seq;
        for e in events.iter().filter(|e| e.seq <= seq) {
            fold(&mut view, &mut Vec::new(), e);
        }
    }
    let opened = match kind {
        Kind::Slack => crate::slack::status::Status::open(app, session)
            .await
            .map(Sink::Slack),
        Kind::GithubIssue => crate::github::issues::Progress::open(app, session)
            .await
            .map(Sink::Issue),
    };
    let mut sink = match opened {
        Ok(s) => s,
        // Its thread or issue is gone, or Slack or GitHub is no longer configured: nothing
        // can be reported, now or later.
        Err(
            e
            @ (crate::Error::NotFound(_) | crate::Error::Config(_) | crate::Error::Refused { .. }),
        ) => {
            tracing::warn!(%session, kind = kind.as_str(), error = %e, "a progress report has nowhere to go; it stops");
            db::followers::reported(&app.db, session, kind.as_str(), &me, seq, true).await?;
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let mut changed = app.db.subscribe(session);
    // News is taken off the front as each piece is shown, so a failure part way shows only
    // the rest again; the follower reports itself only as far as everything was shown.
    let mut pending: std::collections::VecDeque<News> = Default::default();
    let mut shown_seq = seq;
    let mut failures = 0u32;
    let mut first = true;
    loop {
        // Held still? (Checked before anything is shown, so two processes never both post.)
        if !std::mem::take(&mut first) && claim().await?.is_none() {
            return Ok(());
        }
        let events = db::events::list_after(&app.db, session, seq, BATCH).await?;
        let mut news = Vec::new();
        for e in &events {
            seq = e.seq;
            fold(&mut view, &mut news, e);
        }
        pending.extend(news);
        // Past a bound the oldest news goes: the newest (the pull request, the end) matters most.
        while pending.len() > 100 {
            pending.pop_front();
        }
        let shown = match &mut sink {
            Sink::Slack(s) => s.show(app, &view, &mut pending).await,
            Sink::Issue(s) => s.show(app, &view, &mut pending).await,
        };
        let (again, given_up) = match shown {
            Ok(a) => {
                failures = 0;
                shown_seq = seq;
                (a, false)
            }
            Err(e) if is_final(&e) => {
                tracing::warn!(%session, kind = kind.as_str(), error = %e, "a progress report cannot be shown any more; it stops");
                (None, true)
            }
            Err(e) => {
                // Slack or GitHub refused or is away: shown again later, backing off.
                tracing::warn!(%session, kind = kind.as_str(), error = %e, "a progress report failed");
                failures += 1;
                if failures.is_multiple_of(TRIES_PER_NEWS) && pending.pop_front().is_some() {
                    tracing::warn!(%session, kind = kind.as_str(), "a piece of news was refused {TRIES_PER_NEWS} times; it is dropped");
                }
                let give_up = view.ended() && failures >= TRIES_AFTER_END;
                (Some(backoff(failures)), give_up)
            }
        };
        let done = given_up || (view.ended() && again.is_none() && pending.is_empty());
        db::followers::reported(&app.db, session, kind.as_str(), &me, shown_seq, done).await?;
        if done {
            return Ok(());
        }
        if events.len() as i64 == BATCH && failures == 0 {
            continue;
        }
        let wait = again.unwrap_or(Duration::from_secs(10));
        if failures > 0 {
            // Backing off: new events wait too.
            tokio::time::sleep(wait).await;
            continue;
        }
        tokio::select! {
            r = changed.changed() => if r.is_err() { return Ok(()) },
            () = tokio::time::sleep(wait) => {}
        }
    }
}

enum Sink {
    Slack(crate::slack::status::Status),
    Issue(crate::github::issues::Progress),
}

/// Whether a status last shown at `last_ms` may be shown again now (at most one update per
/// `every_ms`, so a busy turn edits the message a few times, not on every tool call).
pub fn due(last_ms: i64, every_ms: i64) -> Option<Duration> {
    let wait = last_ms + every_ms - now_ms();
    (wait > 0).then(|| Duration::from_millis(wait as u64))
}
