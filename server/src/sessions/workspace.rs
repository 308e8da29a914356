//! A session's workspace: boot it from the repo's newest good snapshot, run commands in it, diff
//! it, stop it. Every step is an event; every failure says what failed.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tandem_protocol::limits::{MAX_DIFF_BYTES, MAX_EVENT_OUTPUT_BYTES};
use tandem_protocol::*;

use crate::db::{self, Db};
use crate::runtime::{self, Keep, WorkspaceSpec};
use crate::scheduler::pool::WarmPool;
use crate::snapshots::{self, REPO_DIR, Recipe, Workspaces};
use crate::{Error, Result, mirrors, now_ms};

/// How long each boot phase may take before the session fails.
pub const DEADLINE_SNAPSHOT: Duration = Duration::from_secs(30 * 60);
pub const DEADLINE_STARTING: Duration = Duration::from_secs(60);
pub const DEADLINE_SYNCING: Duration = Duration::from_secs(120);
pub const DEADLINE_SERVICES: Duration = Duration::from_secs(300);
/// Pause between two tries of a readiness check.
pub const READY_RETRY: Duration = Duration::from_millis(100);
/// How long the workspace agent may take to answer after the container started.
pub const DEADLINE_AGENT: Duration = Duration::from_secs(10);
/// Default and largest timeout of `exec`.
pub const EXEC_DEFAULT_TIMEOUT_SECS: u64 = 600;
pub const EXEC_MAX_TIMEOUT_SECS: u64 = 3600;

/// The runtime id of a session's workspace.
pub fn workspace_id(session: SessionId) -> String {
    format!("s-{}", &session.0.simple().to_string()[..16])
}

/// Where a stopped session's diff is kept.
fn diff_file(ws: &Workspaces, session: SessionId) -> PathBuf {
    ws.data_dir
        .join("sessions")
        .join(session.to_string())
        .join("diff.json")
}

pub(crate) async fn event(db: &Db, id: SessionId, kind: EventKind) -> Result<Event> {
    let mut tx = db.begin().await?;
    let e = db::events::append(&mut tx, id, now_ms(), kind).await?;
    tx.commit().await?;
    Ok(e)
}

async fn transition(
    db: &Db,
    id: SessionId,
    to: SessionState,
    reason: Option<String>,
) -> Result<Option<SessionState>> {
    let mut tx = db.begin().await?;
    let from = db::sessions::transition(&mut tx, id, to, reason, now_ms()).await?;
    tx.commit().await?;
    Ok(from)
}

async fn phase(
    db: &Db,
    id: SessionId,
    t0: Instant,
    phase: BootPhase,
    detail: Option<String>,
) -> Result<()> {
    event(
        db,
        id,
        EventKind::BootPhase {
            phase,
            elapsed_ms: t0.elapsed().as_millis() as i64,
            detail,
        },
    )
    .await?;
    Ok(())
}

/// The `ready` boot event and the move to `ready`, in one transaction: whoever sees the event
/// sees the state.
async fn became_ready(db: &Db, id: SessionId, t0: Instant) -> Result<()> {
    let now = now_ms();
    let mut tx = db.begin().await?;
    db::events::append(
        &mut tx,
        id,
        now,
        EventKind::BootPhase {
            phase: BootPhase::Ready,
            elapsed_ms: t0.elapsed().as_millis() as i64,
            detail: None,
        },
    )
    .await?;
    db::sessions::transition(&mut tx, id, SessionState::Ready, None, now).await?;
    tx.commit().await?;
    Ok(())
}

/// Cuts `s` to at most `max` bytes on a character boundary; true if it cut.
pub(crate) fn truncate(s: &mut String, max: usize) -> bool {
    if s.len() <= max {
        return false;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
    true
}

/// Records what `author` did to session `id` in the audit log.
pub(crate) async fn audit(
    db: &Db,
    author: &Author,
    action: &str,
    id: SessionId,
    detail: serde_json::Value,
) -> Result<()> {
    db::audit::record(
        db.pool(),
        now_ms(),
        db::audit::Entry {
            actor_user_id: author.user_id,
            actor_name: &author.name,
            action,
            target: &id.to_string(),
            detail,
        },
    )
    .await
}

async fn within<T>(what: &str, limit: Duration, f: impl Future<Output = Result<T>>) -> Result<T> {
    tokio::time::timeout(limit, f).await.map_err(|_| {
        Error::Internal(format!(
            "{what} did not finish within {} s",
            limit.as_secs()
        ))
    })?
}

/// Boots a queued session. Failures end the session `failed` with the reason as an event; the
/// returned error is only about recording that.
pub async fn boot(db: &Db, ws: &Workspaces, pool: &WarmPool, id: SessionId) -> Result<()> {
    let t0 = Instant::now();
    // Only a queued session boots; the transition is the claim (another process loses the race).
    let Some(session) = db::sessions::get(db.pool(), id).await? else {
        return Ok(());
    };
    if session.state != SessionState::Queued {
        return Ok(());
    }
    let claimed = {
        let mut tx = db.begin().await?;
        let from = db::sessions::transition_from(
            &mut tx,
            id,
            &[SessionState::Queued],
            SessionState::Starting,
            None,
            now_ms(),
        )
        .await?;
        tx.commit().await?;
        from
    };
    if claimed != Some(SessionState::Queued) {
        return Ok(());
    }
    // Claimed: this server's host starts it (another server's restart leaves it alone).
    db::sessions::set_host(db.pool(), id, &ws.host_id).await?;
    match boot_inner(db, ws, pool, &session, t0).await {
        Ok(()) => {
            became_ready(db, id, t0).await?;
            tracing::info!(session = %id, ms = t0.elapsed().as_millis() as u64, "session ready");
        }
        Err(e) => {
            tracing::warn!(session = %id, error = %e, "session boot failed");
            let message = format!("the workspace could not start: {e}");
            event(
                db,
                id,
                EventKind::Error {
                    message: message.clone(),
                },
            )
            .await?;
            let recorded = db::sessions::workspace(db.pool(), id)
                .await?
                .and_then(|r| r.workspace_id);
            let _ = ws
                .runtime
                .stop(&recorded.unwrap_or_else(|| workspace_id(id)), Keep::Upper)
                .await;
            transition(db, id, SessionState::Failed, Some(message)).await?;
        }
    }
    Ok(())
}

async fn boot_inner(
    db: &Db,
    ws: &Workspaces,
    pool: &WarmPool,
    session: &Session,
    t0: Instant,
) -> Result<()> {
    let id = session.id;
    let repo = db::repos::get(db.pool(), session.repo_id)
        .await?
        .ok_or_else(|| Error::NotFound("the repo is gone".into()))?;
    let snap = match db::snapshots::latest_ready(db.pool(), repo.id).await? {
        Some(s) => s,
        None => {
            phase(
                db,
                id,
                t0,
                BootPhase::Snapshot,
                Some("no snapshot of this repo yet: building one".into()),
            )
            .await?;
            let pending = snapshots::start_build_inline(db, ws, &repo).await?;
            let built = within(
                "the snapshot build",
                DEADLINE_SNAPSHOT,
                snapshots::build(db, ws, &repo, pending),
            )
            .await?;
            if built.state != SnapshotState::Ready {
                return Err(Error::Invalid(format!(
                    "the snapshot build failed: {}",
                    built.error.unwrap_or_default()
                )));
            }
            built
        }
    };
    let warm = pool.take(repo.id, snap.id);
    let detail = match &warm {
        Some(_) => format!(
            "snapshot {}, from the warm pool",
            short(snap.commit.as_deref())
        ),
        None => format!("snapshot {}", short(snap.commit.as_deref())),
    };
    phase(db, id, t0, BootPhase::Starting, Some(detail)).await?;
    let start = async {
        if let Some(w) = &warm {
            return Ok((w.workspace_id.clone(), w.pid));
        }
        let wid = workspace_id(id);
        let pid = start_on(ws, &repo, snap.id, snap.commit.as_deref(), &wid, None).await?;
        Ok::<_, Error>((wid, pid))
    };
    // The mirror fetches the remote's delta while the container starts.
    let (started, head) = tokio::join!(start, async {
        let t = Instant::now();
        let r = within("fetching the branch", DEADLINE_SYNCING, async {
            mirrors::update(
                &ws.data_dir,
                &repo,
                &session.branch,
                ws.remote_auth(&repo).await?.as_deref(),
            )
            .await
        })
        .await;
        r.map(|(m, head)| (m, head, t.elapsed().as_millis()))
    },);
    let (wid, pid) = started?;
    db::sessions::set_workspace(
        db.pool(),
        id,
        &ws.host_id,
        Some(&wid),
        Some(snap.id),
        snap.commit.as_deref(),
        Some(pid.into()),
    )
    .await?;
    let (_, head, fetch_ms) = head?;

    // Already at the head (the usual case for a fresh snapshot): nothing to move.
    let current = snap.commit.as_deref() == Some(head.as_str()) && snap.branch == session.branch;
    phase(
        db,
        id,
        t0,
        BootPhase::Syncing,
        Some(if current {
            format!("at {}, fetched in {fetch_ms} ms", short(Some(&head)))
        } else {
            format!(
                "{} → {}, fetched in {fetch_ms} ms",
                short(snap.commit.as_deref()),
                short(Some(&head))
            )
        }),
    )
    .await?;
    if !current {
        within(
            "syncing the repo",
            DEADLINE_SYNCING,
            sync(ws, &wid, &session.branch, &head),
        )
        .await?;
    }
    db::sessions::set_workspace(
        db.pool(),
        id,
        &ws.host_id,
        Some(&wid),
        Some(snap.id),
        Some(&head),
        Some(pid.into()),
    )
    .await?;

    // The recipe at the head, read from the server's own mirror.
    if let Err(e) = run_start_commands(db, ws, &repo, &wid, Some(&head), id, t0).await {
        return Err(snapshot_fault(db, &snap, e).await);
    }
    db::snapshots::boot_succeeded(db.pool(), snap.id).await?;
    Ok(())
}

/// A session start from `snap` failed with `e` where the snapshot is the likely cause (the
/// recipe's `start` commands failed on what its `setup` left; a container that does not come
/// up is more likely the host's trouble, and is not counted): counted, and after
/// [`limits::SNAPSHOT_BREAKER_FAILURES`] in a row the snapshot is set aside if an older good one
/// is there (a circuit breaker; [`db::snapshots::boot_failed`]).
async fn snapshot_fault(db: &Db, snap: &Snapshot, e: Error) -> Error {
    let limit = tandem_protocol::limits::SNAPSHOT_BREAKER_FAILURES;
    match db::snapshots::boot_failed(db, snap.id, limit, now_ms()).await {
        Ok(true) => {
            tracing::warn!(snapshot = %snap.id, "snapshot set aside after {limit} failed starts in a row");
            Error::Invalid(format!(
                "{e} (snapshot {} has failed {limit} starts in a row and is set aside: new sessions start from the good one before it)",
                short(snap.commit.as_deref())
            ))
        }
        Ok(false) => e,
        Err(db_error) => {
            tracing::warn!(snapshot = %snap.id, error = %db_error, "counting a failed start failed");
            e
        }
    }
}

/// Brings the checkout to `head`: the workspace fetches the delta from the read-only mirror
/// (which the server has just updated from the remote) and checks it out. The mirror is the
/// host's (under a user namespace owned by an id the workspace does not have), read-only and
/// Tandem's own: its upload-pack trusts it by name, which git's local transport only takes on
/// that process's own command line.
async fn sync(ws: &Workspaces, wid: &str, branch: &str, head: &str) -> Result<()> {
    let script = r#"set -e
git fetch --quiet --no-tags --upload-pack="git -c safe.directory=$TANDEM_MIRROR upload-pack" "$TANDEM_MIRROR" "+refs/heads/$TANDEM_BRANCH:refs/remotes/origin/$TANDEM_BRANCH"
git checkout --quiet -B "$TANDEM_BRANCH" "$TANDEM_COMMIT"
git branch --quiet --set-upstream-to="origin/$TANDEM_BRANCH" "$TANDEM_BRANCH" || true"#;
    let env = [
        (
            "TANDEM_MIRROR".to_string(),
            mirrors::MOUNT_POINT.to_string(),
        ),
        ("TANDEM_BRANCH".to_string(), branch.to_string()),
        ("TANDEM_COMMIT".to_string(), head.to_string()),
    ];
    let out = run(ws, wid, script, &env, DEADLINE_SYNCING.as_secs()).await?;
    if out.code != Some(0) {
        return Err(Error::Invalid(format!(
            "syncing {branch} to {} failed: {}",
            short(Some(head)),
            out.stderr.trim()
        )));
    }
    Ok(())
}

pub(crate) async fn run(
    ws: &Workspaces,
    wid: &str,
    script: &str,
    env: &[(String, String)],
    timeout: u64,
) -> Result<runtime::ExecOutput> {
    ws.runtime
        .exec(
            wid,
            runtime::ExecRequest {
                argv: vec!["sh".into(), "-c".into(), script.into()],
                cwd: Some(REPO_DIR.into()),
                env: env.to_vec(),
                timeout_secs: Some(timeout),
            },
        )
        .await
}

fn short(commit: Option<&str>) -> String {
    commit
        .map(|c| c.chars().take(12).collect())
        .unwrap_or_else(|| "?".into())
}

pub(crate) async fn live_workspace(
    db: &Db,
    id: SessionId,
) -> Result<(Session, String, Option<String>)> {
    let session = db::sessions::get(db.pool(), id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("no session {id}")))?;
    let row = db::sessions::workspace(db.pool(), id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("no session {id}")))?;
    match (session.state.is_live(), row.workspace_id) {
        (true, Some(w)) => Ok((session, w, row.base_commit)),
        _ => Err(Error::Conflict(format!(
            "session {id} has no running workspace (it is {})",
            session.state.as_str()
        ))),
    }
}

/// Runs a command in the session's workspace as `author`; recorded as an event and in the audit log.
pub async fn exec(
    db: &Db,
    ws: &Workspaces,
    id: SessionId,
    author: &Author,
    req: ExecRequest,
) -> Result<ExecResult> {
    if req.command.trim().is_empty() {
        return Err(Error::Invalid("command is empty".into()));
    }
    let timeout = req.timeout_secs.unwrap_or(EXEC_DEFAULT_TIMEOUT_SECS);
    if !(1..=EXEC_MAX_TIMEOUT_SECS).contains(&timeout) {
        return Err(Error::Invalid(format!(
            "timeout_secs must be 1–{EXEC_MAX_TIMEOUT_SECS}"
        )));
    }
    // The runtime takes the directory as a flag: only a plain absolute path.
    if let Some(cwd) = &req.cwd {
        let plain = cwd.starts_with('/')
            && cwd.len() <= 4096
            && !cwd.chars().any(char::is_control)
            && std::path::Path::new(cwd)
                .components()
                .all(|c| !matches!(c, std::path::Component::ParentDir));
        if !plain {
            return Err(Error::Invalid(
                "cwd must be an absolute path without `..`".into(),
            ));
        }
    }
    let (_, wid, _) = live_workspace(db, id).await?;
    let t = Instant::now();
    let out = ws
        .runtime
        .exec(
            &wid,
            runtime::ExecRequest {
                argv: vec!["sh".into(), "-c".into(), req.command.clone()],
                cwd: Some(req.cwd.clone().unwrap_or_else(|| REPO_DIR.into())),
                env: vec![],
                timeout_secs: Some(timeout),
            },
        )
        .await?;
    let duration_ms = t.elapsed().as_millis() as i64;
    let mut output = format!("{}{}", out.stdout, out.stderr);
    // A command that printed the session's GitHub token does not get it recorded.
    if let Some(clean) = ws.github.as_ref().and_then(|gh| gh.redact(id, &output)) {
        output = clean;
    }
    let cut = truncate(&mut output, MAX_EVENT_OUTPUT_BYTES);
    event(
        db,
        id,
        EventKind::CommandRun {
            author: author.clone(),
            command: req.command.clone(),
            exit_code: out.code,
            output,
            truncated: cut || out.truncated,
            duration_ms,
        },
    )
    .await?;
    audit(
        db,
        author,
        "session.exec",
        id,
        serde_json::json!({ "command": req.command, "exit_code": out.code }),
    )
    .await?;
    Ok(ExecResult {
        exit_code: out.code,
        stdout: out.stdout,
        stderr: out.stderr,
        truncated: out.truncated,
        duration_ms,
    })
}

/// Marker between the file list and the patch in the diff command's output.
const PATCH_MARKER: &str = "\n--- tandem: patch follows ---\n";

/// Computes the diff inside the workspace (its git, its isolation), against the commit it started
/// from, with new files, without touching the workspace's own index.
async fn compute_diff(ws: &Workspaces, wid: &str, base: Option<&str>) -> Result<Diff> {
    let script = r#"set -e
export GIT_INDEX_FILE=/tmp/.tandem-diff-index
rm -f "$GIT_INDEX_FILE"; cp .git/index "$GIT_INDEX_FILE" 2>/dev/null || true
git add -A >/dev/null 2>&1
git diff --cached --name-only "$TANDEM_BASE"
printf '\n--- tandem: patch follows ---\n'
git diff --cached "$TANDEM_BASE"
rm -f "$GIT_INDEX_FILE""#;
    let env = [(
        "TANDEM_BASE".to_string(),
        base.unwrap_or("HEAD").to_string(),
    )];
    let out = run(ws, wid, script, &env, 120).await?;
    if out.code != Some(0) {
        return Err(Error::Internal(format!(
            "computing the diff failed: {}",
            out.stderr.trim()
        )));
    }
    let (names, patch) = out
        .stdout
        .split_once(PATCH_MARKER)
        .unwrap_or((&out.stdout, ""));
    let mut patch = patch.to_string();
    let truncated = truncate(&mut patch, MAX_DIFF_BYTES) || out.truncated;
    Ok(Diff {
        base: base.map(str::to_string),
        patch,
        files: names
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect(),
        truncated,
    })
}

/// The session's changes: live from the workspace, or as kept when it stopped.
pub async fn diff(db: &Db, ws: &Workspaces, id: SessionId) -> Result<Diff> {
    let session = db::sessions::get(db.pool(), id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("no session {id}")))?;
    if session.state.is_live() {
        let (_, wid, base) = live_workspace(db, id).await?;
        return compute_diff(ws, &wid, base.as_deref()).await;
    }
    match std::fs::read(diff_file(ws, id)) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map_err(|e| Error::Internal(format!("stored diff unreadable: {e}"))),
        Err(_) => Ok(Diff {
            base: None,
            patch: String::new(),
            files: vec![],
            truncated: false,
        }),
    }
}

/// Stops the session: keeps its diff (and its writable layer on disk), removes the workspace.
pub async fn stop(db: &Db, ws: &Workspaces, id: SessionId, reason: Option<String>) -> Result<()> {
    let session = db::sessions::get(db.pool(), id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("no session {id}")))?;
    match session.state {
        SessionState::Stopped | SessionState::Failed => {
            return Err(Error::Conflict(format!(
                "session {id} is already {}",
                session.state.as_str()
            )));
        }
        SessionState::Starting => {
            return Err(Error::Conflict(format!(
                "session {id} is starting; stop it once it is ready"
            )));
        }
        _ => {}
    }
    let row = db::sessions::workspace(db.pool(), id).await?;
    if let Some(wid) = row.as_ref().and_then(|r| r.workspace_id.clone()) {
        let base = row.and_then(|r| r.base_commit);
        let diff = compute_diff(ws, &wid, base.as_deref())
            .await
            .unwrap_or_else(|e| Diff {
                base: base.clone(),
                patch: format!("(the diff could not be computed: {e})"),
                files: vec![],
                truncated: false,
            });
        let file = diff_file(ws, id);
        std::fs::create_dir_all(file.parent().unwrap_or(&ws.data_dir))?;
        std::fs::write(
            &file,
            serde_json::to_vec(&diff).map_err(|e| Error::Internal(e.to_string()))?,
        )?;
        ws.runtime.stop(&wid, Keep::Upper).await?;
        event(
            db,
            id,
            EventKind::WorkspaceStopped {
                diff_bytes: diff.patch.len() as i64,
            },
        )
        .await?;
    }
    transition(db, id, SessionState::Stopped, reason).await?;
    revoke_credential(ws, id).await;
    Ok(())
}

/// Revokes an ended session's GitHub token; a failure is retried by the supervisor's sweep.
async fn revoke_credential(ws: &Workspaces, id: SessionId) {
    if let Some(gh) = &ws.github
        && let Err(e) = crate::github::credentials::revoke(gh, id).await
    {
        tracing::warn!(session = %id, error = %e, "revoking the session's GitHub token failed; retried later");
    }
}

/// Marks a session whose workspace died `failed`, and cleans up what is left of it.
pub async fn workspace_died(db: &Db, ws: &Workspaces, id: SessionId, wid: &str) -> Result<()> {
    let message =
        "the workspace stopped unexpectedly (its init process exited); start a new session"
            .to_string();
    event(
        db,
        id,
        EventKind::Error {
            message: message.clone(),
        },
    )
    .await?;
    let _ = ws.runtime.stop(wid, Keep::Upper).await;
    transition(db, id, SessionState::Failed, Some(message)).await?;
    revoke_credential(ws, id).await;
    Ok(())
}

/// Suspends a live session: its processes end, its writable layer stays for [`resume`].
pub async fn suspend(db: &Db, ws: &Workspaces, id: SessionId) -> Result<()> {
    let (_, wid, _) = live_workspace(db, id).await?;
    ws.runtime.stop(&wid, Keep::Upper).await?;
    let row = db::sessions::workspace(db.pool(), id).await?;
    let snapshot = row
        .as_ref()
        .and_then(|r| r.snapshot_id.as_deref())
        .and_then(|s| s.parse().ok());
    let base = row.and_then(|r| r.base_commit);
    db::sessions::set_workspace(
        db.pool(),
        id,
        &ws.host_id,
        Some(&wid),
        snapshot,
        base.as_deref(),
        None,
    )
    .await?;
    transition(
        db,
        id,
        SessionState::Suspended,
        Some("suspended: processes stopped, files kept".into()),
    )
    .await?;
    Ok(())
}

/// Resumes a suspended session: the same writable layer on the same snapshot, a new process
/// tree, the recipe's `start` commands again.
pub async fn resume(db: &Db, ws: &Workspaces, id: SessionId) -> Result<()> {
    let t0 = Instant::now();
    let session = db::sessions::get(db.pool(), id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("no session {id}")))?;
    if session.state != SessionState::Suspended {
        return Err(Error::Conflict(format!(
            "session {id} is {}, not suspended",
            session.state.as_str()
        )));
    }
    let row = db::sessions::workspace(db.pool(), id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("no session {id}")))?;
    let (Some(wid), Some(snapshot)) = (
        row.workspace_id.clone(),
        row.snapshot_id.as_deref().and_then(|s| s.parse().ok()),
    ) else {
        return Err(Error::Conflict(format!(
            "session {id} has no kept workspace to resume"
        )));
    };
    transition(db, id, SessionState::Starting, Some("resuming".into())).await?;
    let result = async {
        let repo = db::repos::get(db.pool(), session.repo_id)
            .await?
            .ok_or_else(|| Error::NotFound("the repo is gone".into()))?;
        phase(
            db,
            id,
            t0,
            BootPhase::Starting,
            Some("resuming the kept workspace".into()),
        )
        .await?;
        let pid = start_on(ws, &repo, snapshot, row.base_commit.as_deref(), &wid, None).await?;
        db::sessions::set_workspace(
            db.pool(),
            id,
            &ws.host_id,
            Some(&wid),
            Some(snapshot),
            row.base_commit.as_deref(),
            Some(pid.into()),
        )
        .await?;
        run_start_commands(db, ws, &repo, &wid, row.base_commit.as_deref(), id, t0).await
    }
    .await;
    finish_start(db, ws, id, &wid, t0, result).await
}

/// Forks a live session into `count` new sessions, each on its own copy of the parent's writable
/// layer (taken while the parent is frozen, so all copies are identical), owned by `author`.
/// N new sessions from copies of session `id`'s workspace as it is now, each with `prompt` queued
/// (if any) for the parent's agent.
pub async fn fork(
    db: &Db,
    ws: &Workspaces,
    id: SessionId,
    author: &Author,
    count: i64,
    prompt: Option<String>,
) -> Result<Vec<Session>> {
    if !(1..=tandem_protocol::limits::MAX_FORKS).contains(&count) {
        return Err(Error::Invalid(format!(
            "count must be 1–{}",
            tandem_protocol::limits::MAX_FORKS
        )));
    }
    let (parent, pwid, base) = live_workspace(db, id).await?;
    let row = db::sessions::workspace(db.pool(), id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("no session {id}")))?;
    let snapshot: SnapshotId = row
        .snapshot_id
        .as_deref()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| Error::Conflict("the session has no snapshot".into()))?;
    let repo = db::repos::get(db.pool(), parent.repo_id)
        .await?
        .ok_or_else(|| Error::NotFound("the repo is gone".into()))?;
    let mut children = Vec::new();
    for i in 1..=count {
        let req = CreateSession {
            repo_id: parent.repo_id,
            prompt: prompt.clone().unwrap_or_default(),
            branch: Some(parent.branch.clone()),
            agent: Some(parent.agent.clone()),
        };
        let title = prompt
            .is_none()
            .then(|| format!("Fork {i}/{count} of “{}”", parent.title));
        children.push(
            super::create_with_parent(db, author.clone(), req, &parent.agent, Some(id), title)
                .await?
                .session,
        );
    }
    let limits = ws.limits(&recipe_at(ws, &repo, base.as_deref()).await?)?;
    // Freeze the parent so every copy sees the same instant.
    ws.runtime.pause(&pwid).await?;
    let copies: Result<Vec<()>> = async {
        let mut done = Vec::new();
        for child in &children {
            let dest = ws.runtime.prepare(&workspace_id(child.id), limits).await?;
            crate::runtime::disk::copy_tree(&ws.runtime.upper_dir(&pwid), &dest).await?;
            done.push(());
        }
        Ok(done)
    }
    .await;
    ws.runtime.resume(&pwid).await?;
    copies?;
    for child in &children {
        let t0 = Instant::now();
        let cid = child.id;
        transition(
            db,
            cid,
            SessionState::Starting,
            Some(format!("forked from {id}")),
        )
        .await?;
        let wid = workspace_id(cid);
        let result = async {
            phase(
                db,
                cid,
                t0,
                BootPhase::Starting,
                Some(format!("copy of session {id}")),
            )
            .await?;
            let pid = start_on(ws, &repo, snapshot, base.as_deref(), &wid, None).await?;
            db::sessions::set_workspace(
                db.pool(),
                cid,
                &ws.host_id,
                Some(&wid),
                Some(snapshot),
                base.as_deref(),
                Some(pid.into()),
            )
            .await?;
            run_start_commands(db, ws, &repo, &wid, base.as_deref(), cid, t0).await
        }
        .await;
        finish_start(db, ws, cid, &wid, t0, result).await?;
    }
    let mut out = Vec::new();
    for child in children {
        out.push(
            db::sessions::get(db.pool(), child.id)
                .await?
                .ok_or_else(|| Error::Internal("fork vanished".into()))?,
        );
    }
    Ok(out)
}

/// `cp -a` keeps what overlayfs needs in a layer: whiteouts (0/0 device nodes), opaque-dir
/// xattrs, owners and modes; `--reflink=auto` makes it copy-on-write where the filesystem can.
/// The repo's recipe at `commit` (the empty one without a commit or file).
async fn recipe_at(ws: &Workspaces, repo: &Repo, commit: Option<&str>) -> Result<Recipe> {
    let text = match commit {
        Some(c) => {
            mirrors::read_file(
                &mirrors::path(&ws.data_dir, repo),
                c,
                snapshots::recipe::FILE,
            )
            .await?
        }
        None => None,
    };
    Recipe::parse(text.as_deref())
}

/// The spec of a session workspace: the snapshot over the image, the repo's mirror read-only,
/// the workspace agent as its first process.
pub async fn spec_for(
    ws: &Workspaces,
    repo: &Repo,
    snapshot: SnapshotId,
    commit: Option<&str>,
    wid: &str,
    upper: Option<PathBuf>,
) -> Result<WorkspaceSpec> {
    // The network and limits the recipe (at the commit the workspace runs) asks for.
    let recipe = recipe_at(ws, repo, commit).await?;
    let egress = ws.egress(&recipe);
    let limits = ws.limits(&recipe)?;
    // Its disk first: the agent's directories made next live on it.
    ws.runtime.prepare(wid, limits).await?;
    let (init, env, mut binds) = crate::agent::spec_parts(ws, wid)?;
    binds.push(runtime::Bind {
        host: mirrors::path(&ws.data_dir, repo),
        container: mirrors::MOUNT_POINT.into(),
        readonly: true,
    });
    Ok(WorkspaceSpec {
        id: wid.to_string(),
        layers: vec![ws.layer(snapshot), ws.image()?.rootfs.clone()],
        upper,
        hostname: "tandem".into(),
        env,
        init,
        binds,
        limits,
        egress,
    })
}

/// Starts workspace `wid` on `snapshot` and waits for its agent; returns its init's host PID.
pub async fn start_on(
    ws: &Workspaces,
    repo: &Repo,
    snapshot: SnapshotId,
    commit: Option<&str>,
    wid: &str,
    upper: Option<PathBuf>,
) -> Result<i32> {
    let spec = spec_for(ws, repo, snapshot, commit, wid, upper).await?;
    let started = within(
        "starting the workspace",
        DEADLINE_STARTING,
        ws.runtime.start(spec),
    )
    .await?;
    if let Err(e) = crate::agent::wait_ready(ws, wid, started.pid, DEADLINE_AGENT).await {
        let _ = ws.runtime.stop(wid, Keep::Nothing).await;
        return Err(e);
    }
    Ok(started.pid)
}

/// Runs the recipe's `start` commands (as of `commit`) with a `services` boot phase.
async fn run_start_commands(
    db: &Db,
    ws: &Workspaces,
    repo: &Repo,
    wid: &str,
    commit: Option<&str>,
    id: SessionId,
    t0: Instant,
) -> Result<()> {
    let mirror = mirrors::path(&ws.data_dir, repo);
    let text = match commit {
        Some(c) => mirrors::read_file(&mirror, c, snapshots::recipe::FILE).await?,
        None => None,
    };
    let recipe = Recipe::parse(text.as_deref())?;
    if recipe.start.is_empty() && recipe.ready.is_empty() {
        return Ok(());
    }
    phase(
        db,
        id,
        t0,
        BootPhase::Services,
        Some(
            recipe
                .start
                .iter()
                .chain(&recipe.ready)
                .cloned()
                .collect::<Vec<_>>()
                .join("; "),
        ),
    )
    .await?;
    let env: Vec<(String, String)> = recipe.env.clone().into_iter().collect();
    within("the start commands", DEADLINE_SERVICES, async {
        for cmd in &recipe.start {
            let out = run(ws, wid, cmd, &env, DEADLINE_SERVICES.as_secs()).await?;
            if out.code != Some(0) {
                return Err(Error::Invalid(format!(
                    "start command `{cmd}` exited with {}: {}",
                    out.code.map_or("a signal".into(), |c| c.to_string()),
                    out.stderr.trim()
                )));
            }
        }
        // Services come up in the background; each check is retried until it passes.
        for check in &recipe.ready {
            loop {
                let out = run(ws, wid, check, &env, 30).await?;
                if out.code == Some(0) {
                    break;
                }
                tokio::time::sleep(READY_RETRY).await;
            }
        }
        Ok(())
    })
    .await
}

/// Ends a start: `ready` with its event, or `failed` with the reason and the workspace cleaned up.
async fn finish_start(
    db: &Db,
    ws: &Workspaces,
    id: SessionId,
    wid: &str,
    t0: Instant,
    result: Result<()>,
) -> Result<()> {
    match result {
        Ok(()) => became_ready(db, id, t0).await,
        Err(e) => {
            let message = format!("the workspace could not start: {e}");
            event(
                db,
                id,
                EventKind::Error {
                    message: message.clone(),
                },
            )
            .await?;
            let _ = ws.runtime.stop(wid, Keep::Upper).await;
            transition(db, id, SessionState::Failed, Some(message)).await?;
            Err(e)
        }
    }
}

/// Percent-encodes a query value.
fn query_value(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Maps an agent's error answer to ours, keeping its message.
fn agent_error(status: hyper::StatusCode, body: &[u8]) -> Error {
    let message = serde_json::from_slice::<ApiError>(body)
        .map(|e| e.message)
        .unwrap_or_else(|_| format!("the workspace agent answered {status}"));
    match status.as_u16() {
        400 => Error::BadRequest(message),
        404 => Error::NotFound(message),
        413 => Error::TooLarge(message),
        _ => Error::Internal(format!("workspace agent: {message}")),
    }
}

pub(crate) async fn live_agent(db: &Db, id: SessionId) -> Result<(String, i32)> {
    let (_, wid, _) = live_workspace(db, id).await?;
    let pid = db::sessions::workspace(db.pool(), id)
        .await?
        .and_then(|r| r.workspace_pid)
        .ok_or_else(|| Error::Conflict(format!("session {id} has no running workspace")))?;
    Ok((wid, pid as i32))
}

/// A directory listing or a file of the session's checkout, through its agent (confined to
/// `/workspace`: no absolute paths, no `..`, no escape through symlinks).
pub async fn read_file(
    db: &Db,
    ws: &Workspaces,
    id: SessionId,
    path: &str,
) -> Result<tandem_protocol::agent::FileView> {
    let (wid, pid) = live_agent(db, id).await?;
    let (status, body) = crate::agent::call(
        ws,
        &wid,
        pid,
        hyper::Method::GET,
        &format!("/files?path={}", query_value(path)),
        None,
    )
    .await?;
    if status != hyper::StatusCode::OK {
        return Err(agent_error(status, &body));
    }
    serde_json::from_slice(&body)
        .map_err(|e| Error::Internal(format!("the agent's file answer: {e}")))
}

/// Writes a file of the session's checkout through its agent; audited.
pub async fn write_file(
    db: &Db,
    ws: &Workspaces,
    id: SessionId,
    author: &Author,
    path: &str,
    content: String,
) -> Result<()> {
    if content.len() > tandem_protocol::agent::MAX_FILE_BYTES {
        return Err(Error::TooLarge(format!(
            "files are at most {} bytes",
            tandem_protocol::agent::MAX_FILE_BYTES
        )));
    }
    let (wid, pid) = live_agent(db, id).await?;
    let body = serde_json::to_vec(&tandem_protocol::agent::WriteFile { content })
        .map_err(|e| Error::Internal(e.to_string()))?;
    let (status, answer) = crate::agent::call(
        ws,
        &wid,
        pid,
        hyper::Method::PUT,
        &format!("/files?path={}", query_value(path)),
        Some(body),
    )
    .await?;
    if status != hyper::StatusCode::NO_CONTENT {
        return Err(agent_error(status, &answer));
    }
    audit(
        db,
        author,
        "session.write_file",
        id,
        serde_json::json!({ "path": path }),
    )
    .await
}

/// The checkout's branch, HEAD and changed paths, through its agent.
pub async fn git_status(
    db: &Db,
    ws: &Workspaces,
    id: SessionId,
) -> Result<tandem_protocol::agent::GitStatus> {
    let (wid, pid) = live_agent(db, id).await?;
    let (status, body) =
        crate::agent::call(ws, &wid, pid, hyper::Method::GET, "/git/status", None).await?;
    if status != hyper::StatusCode::OK {
        return Err(agent_error(status, &body));
    }
    serde_json::from_slice(&body)
        .map_err(|e| Error::Internal(format!("the agent's git status: {e}")))
}

/// Commits every change in the checkout as `author`; audited and recorded as an event.
pub async fn git_commit(
    db: &Db,
    ws: &Workspaces,
    id: SessionId,
    author: &Author,
    message: &str,
) -> Result<String> {
    if message.trim().is_empty() {
        return Err(Error::Invalid("the commit message is empty".into()));
    }
    let (wid, pid) = live_agent(db, id).await?;
    let (author_name, author_email) = crate::github::commit_identity(db, author).await?;
    let req = tandem_protocol::agent::GitCommit {
        message: message.to_string(),
        author_name,
        author_email,
    };
    let body = serde_json::to_vec(&req).map_err(|e| Error::Internal(e.to_string()))?;
    let (status, answer) = crate::agent::call(
        ws,
        &wid,
        pid,
        hyper::Method::POST,
        "/git/commit",
        Some(body),
    )
    .await?;
    if status != hyper::StatusCode::CREATED {
        return Err(match status.as_u16() {
            409 => Error::Conflict(
                serde_json::from_slice::<ApiError>(&answer)
                    .map(|e| e.message)
                    .unwrap_or_default(),
            ),
            _ => agent_error(status, &answer),
        });
    }
    let done: tandem_protocol::agent::GitCommitted = serde_json::from_slice(&answer)
        .map_err(|e| Error::Internal(format!("the agent's commit answer: {e}")))?;
    audit(
        db,
        author,
        "session.git_commit",
        id,
        serde_json::json!({ "commit": done.commit, "message": message }),
    )
    .await?;
    Ok(done.commit)
}
