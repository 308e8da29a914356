//! The supervisor: boots queued sessions (a bounded number at a time), recovers after a restart,
//! and supervises live workspaces so a session whose workspace dies is marked `failed`.

use std::sync::Arc;
use std::time::Duration;

use tandem_protocol::{EventKind, SessionId, SessionState};
use tokio::sync::Semaphore;

use crate::Engine;
use crate::Host;
use crate::db::{self, Db};
use crate::sessions::workspace;
use crate::{Result, now_ms};

use crate::sessions::boots::tell_waiting;

pub mod orphans;

/// Most workspaces booting at once.
pub const MAX_CONCURRENT_BOOTS: usize = 8;
/// How often live workspaces are checked.
pub const SUPERVISE_INTERVAL: Duration = Duration::from_secs(1);

/// Boot slots, shared by every caller.
pub fn boot_slots() -> Arc<Semaphore> {
    Arc::new(Semaphore::new(MAX_CONCURRENT_BOOTS))
}

/// How often sessions waiting for a cause to go away (no runtime, no image, no agent binary,
/// no model) are tried again, and a host without workspaces is probed again.
pub const RETRY_INTERVAL: Duration = Duration::from_secs(2);

/// Boots `id` in the background when this server can start workspaces; otherwise the session
/// stays queued with a `waiting` event saying why, and [`retry_waiting`] boots it once the
/// cause is gone.
pub fn start_boot(state: &Engine, id: SessionId) {
    if !state.boots.begin(id) {
        return;
    }
    let state = state.clone();
    // Sessions asked for together share one look at their branch's remote (a fetch that began
    // after this): fifty started at once fetch once or twice, whatever their turn for a slot.
    let asked = std::time::Instant::now();
    tokio::spawn(async move {
        let result = async {
            if let Some(p) = crate::availability::start_problem(&state.workspaces) {
                // Another server sharing the database runs workspaces and boots it: this one's
                // trouble is not the session's.
                let others =
                    !state.workspaces.is_ok() && state.hooks.others_run_workspaces(&state).await?;
                if others {
                    return Ok(());
                }
                return tell_waiting(&state, id, &p).await;
            }
            let host = state.workspaces()?;
            let Ok(permit) = state.boot_slots.clone().acquire_owned().await else {
                return Ok(());
            };
            state.boots.forget(id);
            workspace::boot(&state.db, &host, &state.pool, id, asked).await?;
            drop(permit);
            open_egress_gateway(&state, id).await;
            Ok(())
        }
        .await;
        state.boots.end(id);
        match result {
            // Ready (or not ours): the agent starts on the queue.
            Ok(()) => crate::turns::kick(&state, id),
            Err(e) => tracing::error!(session = %id, error = %e, "booting a session failed"),
        }
    });
}

/// Opens the gateway of session `id`'s workspace now, where its egress goes through it (a pod
/// with an allow-list: [`crate::runtime::egress_proxy`]): the workspace's own connections out
/// need no turn to be running. Elsewhere the gateway opens with the first turn.
pub async fn open_egress_gateway(state: &Engine, id: SessionId) {
    let Ok(Some(row)) = db::sessions::workspace(&state.db, id).await else {
        return;
    };
    let live = SessionState::parse(&row.state).is_some_and(SessionState::is_live);
    if let (true, Some(wid), Some(pid)) = (live, row.workspace_id, row.workspace_pid)
        && crate::runtime::egress_proxy::rules(&wid).is_some()
        && let Err(e) = state.hooks.ensure_gateway(state, &wid, pid as i32).await
    {
        tracing::warn!(session = %id, error = %e, "opening the workspace's gateway for its egress failed");
    }
}

/// Every [`RETRY_INTERVAL`]: probes the host again while it cannot run workspaces (and starts
/// the host's side of the supervisor once it can), boots queued sessions whose cause went away,
/// and restarts turns that waited for a model once one is configured.
async fn retry_waiting(state: Engine) {
    let mut tick = tokio::time::interval(RETRY_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        // Settings another server sharing the database changed apply here too.
        if let Err(e) = state.settings.reload(&state.db).await {
            tracing::warn!(error = %e, "re-reading the settings failed");
        }
        if !state.workspaces.is_ok() {
            match state.hooks.probe_host(&state).await {
                None => {}
                Some(Ok(host)) => {
                    if let Some(host) = state.workspaces.fill(host) {
                        tracing::info!("workspaces are available now");
                        if let Err(e) = start_host(&state, host).await {
                            tracing::error!(error = %e, "starting the workspace supervisor failed");
                        }
                    }
                }
                Some(Err(p)) => state.workspaces.still_missing(p),
            }
        }
        match db::sessions::in_states(&state.db, &[SessionState::Queued]).await {
            Ok(rows) => {
                for row in rows {
                    if let Ok(id) = row.id.parse() {
                        start_boot(&state, id);
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "listing queued sessions failed"),
        }
        wake_model_waiters(&state);
    }
}

/// Kicks the turns that waited for a model, if one is configured now.
pub fn wake_model_waiters(state: &Engine) {
    if state.settings.model().base_url.is_none() {
        return;
    }
    for id in state.boots.take_model_waiters() {
        crate::turns::kick(state, id);
    }
}

/// After a start: sessions caught mid-boot fail (their boot cannot resume), live sessions whose
/// workspace survived keep running, queued sessions boot (or say why they wait). Then
/// supervision starts.
pub async fn start(state: &Engine) -> Result<()> {
    // Other processes' stop and steer requests for the turns that run here.
    crate::turns::listen_control(state);
    // The host's recovery (sessions caught mid-boot fail) runs before anything boots here.
    let started = match state.workspaces.get() {
        Ok(host) => start_host(state, host).await,
        Err(_) => {
            for row in db::sessions::in_states(&state.db, &[SessionState::Queued]).await? {
                if let Ok(id) = row.id.parse() {
                    start_boot(state, id);
                }
            }
            Ok(())
        }
    };
    tokio::spawn(retry_waiting(state.clone()));
    started
}

/// The part of [`start`] that needs workspaces: at start-up, or when a later probe finds the
/// host able.
async fn start_host(state: &Engine, host: Arc<Host>) -> Result<()> {
    let db = state.db.clone();
    record_blocked_egress(state);
    // Where the other servers forward requests about this host's sessions.
    state.hooks.host_ready(state, &host);
    orphans::at_start(&db, &host).await?;
    for row in db::sessions::in_states(&db, &[SessionState::Starting]).await? {
        // Another server's host is starting that one.
        if !row.hosted_by(&host.host_id) {
            continue;
        }
        let id: SessionId = row
            .id
            .parse()
            .map_err(|_| crate::Error::Internal("bad session id".into()))?;
        // This process boots it (the host became able after start-up): not a leftover.
        if state.boots.is_booting(id) {
            continue;
        }
        crate::sessions::workspace::start_interrupted(&db, &host, id, row.workspace_id.as_deref())
            .await?;
    }
    for row in db::sessions::in_states(&db, &[SessionState::Queued]).await? {
        if let Ok(id) = row.id.parse() {
            start_boot(state, id);
        }
    }
    // Live workspaces this host runs get their egress name servers back.
    for row in db::sessions::in_states(&db, &SessionState::LIVE).await? {
        if row.hosted_by(&host.host_id)
            && let Some(wid) = &row.workspace_id
        {
            if let Err(e) = host.runtime.reattach(wid).await {
                tracing::warn!(workspace = %wid, error = %e, "taking a workspace's network back failed");
            }
            if let Ok(id) = row.id.parse() {
                open_egress_gateway(state, id).await;
            }
        }
    }
    db::snapshots::fail_interrupted(&db, now_ms()).await?;
    crate::turns::recover(state).await?;
    if state.config.orphan_sweep_secs > 0 {
        tokio::spawn(orphans::sweep_forever(
            db.clone(),
            host.clone(),
            state.pool.clone(),
            Duration::from_secs(state.config.orphan_sweep_secs),
        ));
    }
    tokio::spawn(supervise(
        state.clone(),
        db.clone(),
        host.clone(),
        state.pool.clone(),
    ));
    if state.config.snapshot_interval_secs > 0 {
        let every = Duration::from_secs(state.config.snapshot_interval_secs);
        tokio::spawn(refresh_snapshots(
            db,
            host,
            state.pool.clone(),
            every,
            state.config.snapshot_keep,
        ));
    }
    Ok(())
}

/// Records the refused lookups a workspace's egress name server reports (summed up, at most one
/// report a period per workspace) as events of its session, within what the session may store.
fn record_blocked_egress(state: &Engine) {
    let mut rx = crate::runtime::dns::blocked();
    let db = state.db.clone();
    let timeout = Duration::from_secs(state.config.agents.approval_timeout_secs);
    tokio::spawn(async move {
        loop {
            let b = match rx.recv().await {
                Ok(b) => b,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(_) => return,
            };
            if let Err(e) = record_blocked(&db, b, timeout).await {
                tracing::warn!(error = %e, "recording refused lookups failed");
            }
        }
    });
}

async fn record_blocked(db: &Db, b: crate::runtime::dns::Blocked, timeout: Duration) -> Result<()> {
    use crate::sessions::bounds::{self, Bound};
    let Some(session) = db::sessions::by_workspace(db, &b.workspace).await? else {
        return Ok(());
    };
    if b.ask {
        // Each name is asked about once a session: a denial (or no answer) is not asked again.
        for name in &b.names {
            let subject = tandem_protocol::approval::ApprovalSubject::Egress { host: name.clone() };
            if db::approvals::granted(db, session, &subject.grant_key()).await? {
                // Approved before this workspace started (a resume): let it through again.
                crate::runtime::dns::grant(&b.workspace, name);
                continue;
            }
            if !db::approvals::asked_before(db, session, &subject.grant_key()).await? {
                let args = serde_json::json!({ "host": name });
                crate::approvals::ask_later(db, session, subject, &args, timeout).await?;
            }
        }
    }
    let mut names = b.names.into_iter();
    let Some(name) = names.next() else {
        return Ok(());
    };
    let kind = EventKind::EgressBlocked {
        name,
        lookups: b.lookups,
        others: names.collect(),
    };
    let room = bounds::room(db, session).await?;
    if !room.fits_events(1, 8 * 1024) {
        return bounds::note(db, session, Bound::Events, &room.events_refusal()).await;
    }
    workspace::event(db, session, kind).await?;
    Ok(())
}

async fn supervise(
    state: Engine,
    db: Db,
    host: Arc<Host>,
    pool: Arc<crate::sessions::pool::WarmPool>,
) {
    let mut tick = tokio::time::interval(SUPERVISE_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        keep_pools_full(&db, &host, &pool).await;
        if let Err(e) = crate::turns::sweep(&state, None).await {
            tracing::warn!(error = %e, "checking for abandoned turns failed");
        }
        // Approvals whose waiter went with a stopped server are denials once their time is up.
        if let Err(e) = crate::approvals::sweep(&db).await {
            tracing::warn!(error = %e, "timing out unanswered approvals failed");
        }
        look_for_deaths(&state, &db, &host).await;
    }
}

/// One look at every live workspace this host runs: a session whose workspace's init is gone,
/// while no verb of its own is taking it down, failed (or, a pod taken away, boots again).
pub async fn look_for_deaths(state: &Engine, db: &Db, host: &Arc<Host>) {
    let rows = match db::sessions::in_states(db, &SessionState::LIVE).await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, "supervisor could not list sessions");
            return;
        }
    };
    let live: std::collections::HashSet<String> =
        rows.iter().filter_map(|r| r.workspace_id.clone()).collect();
    state.hooks.supervised(state, &live).await;
    for row in rows {
        // Another server's host runs that workspace; its instance means nothing here.
        if !row.hosted_by(&host.host_id) {
            continue;
        }
        let (Some(instance), Some(wid), Ok(id)) = (
            row.workspace_pid,
            row.workspace_id.clone(),
            row.id.parse::<SessionId>(),
        ) else {
            continue;
        };
        if workspace::taking_down(id) {
            continue;
        }
        if !host.runtime.alive(&wid, instance as i32).await {
            // It says so itself once it has made sure (a verb may have ended it since).
            if let Err(e) = workspace::workspace_died(db, host, id, &wid).await {
                tracing::error!(session = %id, error = %e, "recording a dead workspace failed");
            }
            // A lost pod's session is queued again: it boots at once.
            start_boot(state, id);
        }
    }
}

/// Starts a refill for every repo whose pool is not at its size (refills run in the background;
/// one per repo at a time).
async fn keep_pools_full(db: &Db, host: &Arc<Host>, pool: &Arc<crate::sessions::pool::WarmPool>) {
    let Ok(repos) = db::repos::list(db, tandem_protocol::limits::MAX_LIST).await else {
        return;
    };
    for repo in repos {
        if pool.ready(repo.id) == repo.warm_pool.max(0) as usize {
            continue;
        }
        let (db, host, pool) = (db.clone(), host.clone(), pool.clone());
        tokio::spawn(async move {
            if let Err(e) = pool.refill(&db, &host, &repo).await {
                tracing::warn!(repo = %repo.name, error = %e, "warm pool refill failed");
            }
        });
    }
}

/// Every `every`: rebuild stale snapshots (only when the branch moved or the image or recipe
/// changed), then collect old ones.
async fn refresh_snapshots(
    db: Db,
    host: Arc<Host>,
    pool: Arc<crate::sessions::pool::WarmPool>,
    every: Duration,
    keep: usize,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Ok(repos) = db::repos::list(&db, tandem_protocol::limits::MAX_LIST).await else {
            continue;
        };
        for repo in repos {
            if let Err(e) = host.pack_mirror(&repo).await {
                tracing::warn!(repo = %repo.name, error = %e, "packing the mirror failed");
            }
            if let Err(e) = crate::snapshots::rebuild_if_stale(&db, &host, &repo).await {
                tracing::warn!(repo = %repo.name, error = %e, "checking the snapshot failed");
            }
            let pooled = pool.snapshots(repo.id);
            if let Err(e) =
                crate::snapshots::collect_garbage(&db, &host, &repo, keep, &pooled).await
            {
                tracing::warn!(repo = %repo.name, error = %e, "collecting old snapshots failed");
            }
        }
    }
}
