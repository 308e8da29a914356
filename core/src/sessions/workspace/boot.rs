//! Booting a queued session: take a warm workspace or start one on the repo's newest good
//! snapshot, sync it to the branch, run the recipe's start commands, and mark it ready. Every
//! failure ends the session `failed` with what failed.

use super::*;
use std::sync::Arc;

/// Boots a queued session. Failures end the session `failed` with the reason as an event; the
/// returned error is only about recording that.
/// Boots queued session `id`. `asked`: when this server was asked to boot it (before it waited
/// for a boot slot); the branch's head is of a fetch that began after that.
pub async fn boot(
    db: &Db,
    host: &Arc<Host>,
    pool: &WarmPool,
    id: SessionId,
    asked: Instant,
) -> Result<()> {
    let t0 = Instant::now();
    // Only a queued session boots; the transition is the claim (another process loses the race).
    let Some(session) = db::sessions::get(db, id).await? else {
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
    db::sessions::set_host(db, id, &host.host_id).await?;
    match boot_inner(db, host, pool, &session, t0, asked).await {
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
            let recorded = db::sessions::workspace(db, id)
                .await?
                .and_then(|r| r.workspace_id);
            let _ = host
                .runtime
                .stop(&recorded.unwrap_or_else(|| workspace_id(id)), Keep::Upper)
                .await;
            transition(db, id, SessionState::Failed, Some(message)).await?;
        }
    }
    Ok(())
}

/// The branch's head on the remote, the mirror brought up to it, and how long that took: in
/// its own task, so it runs while the caller goes on.
fn fetch_branch(
    host: Arc<Host>,
    repo: Repo,
    branch: String,
    requested: Instant,
) -> tokio::task::JoinHandle<Result<(String, u128)>> {
    tokio::spawn(async move {
        let t = Instant::now();
        let head = within("fetching the branch", DEADLINE_SYNCING, async {
            Ok::<_, Error>(host.fetch_mirror(&repo, &branch, requested).await?)
        })
        .await?;
        Ok((head, t.elapsed().as_millis()))
    })
}

pub(super) async fn boot_inner(
    db: &Db,
    host: &Arc<Host>,
    pool: &WarmPool,
    session: &Session,
    t0: Instant,
    asked: Instant,
) -> Result<()> {
    let id = session.id;
    let repo = &db::repos::get(db, session.repo_id)
        .await?
        .ok_or_else(|| Error::NotFound("the repo is gone".into()))?;
    let snap = match db::snapshots::latest_ready(db, repo.id).await? {
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
            let pending = snapshots::start_build_inline(db, host, repo).await?;
            let built = within(
                "the snapshot build",
                DEADLINE_SNAPSHOT,
                snapshots::build(db, host, repo, pending),
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
    // The remote is asked for the branch's head now (after any build: what the build took may
    // be newer than an earlier answer), while the workspace starts: a warm start waits for
    // nothing else.
    let head = fetch_branch(host.clone(), repo.clone(), session.branch.clone(), asked);
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
            return Ok((w.workspace_id.clone(), w.init_pid, None));
        }
        let wid = workspace_id(id);
        let (init_pid, took) = start_timed(
            host,
            repo,
            snap.id,
            snap.commit.as_deref(),
            &wid,
            Keep::Nothing,
        )
        .await?;
        Ok::<_, Error>((wid, init_pid, Some(took)))
    };
    // The mirror fetches the remote's delta while the container starts.
    let (started, head) = tokio::join!(start, async {
        head.await
            .map_err(|e| Error::Internal(format!("fetching the branch: {e}")))?
    });
    let (wid, init_pid, took) = started?;
    db::sessions::set_workspace(
        db,
        id,
        &host.host_id,
        Some(&wid),
        Some(snap.id),
        snap.commit.as_deref(),
        Some(init_pid.into()),
    )
    .await?;
    let (head, fetch_ms) = head?;

    // Already at the head (the usual case for a fresh snapshot): nothing to move.
    let current = snap.commit.as_deref() == Some(head.as_str()) && snap.branch == session.branch;
    phase(
        db,
        id,
        t0,
        BootPhase::Syncing,
        Some(format!(
            "{}, fetched in {fetch_ms} ms{}",
            if current {
                format!("at {}", short(Some(&head)))
            } else {
                format!("{} → {}", short(snap.commit.as_deref()), short(Some(&head)))
            },
            took.map(|t| format!("; the workspace: {}", runtime::describe_steps(&t)))
                .unwrap_or_default()
        )),
    )
    .await?;
    if !current {
        within(
            "syncing the repo",
            DEADLINE_SYNCING,
            sync(
                host,
                (&wid, init_pid),
                repo,
                snap.commit.as_deref(),
                &session.branch,
                &head,
            ),
        )
        .await?;
    }
    db::sessions::set_workspace(
        db,
        id,
        &host.host_id,
        Some(&wid),
        Some(snap.id),
        Some(&head),
        Some(init_pid.into()),
    )
    .await?;

    // The recipe at the head, read from the server's own mirror.
    if let Err(e) = run_start_commands(db, host, repo, &wid, Some(&head), id, t0).await {
        return Err(snapshot_fault(db, &snap, e).await);
    }
    db::snapshots::boot_succeeded(db, snap.id).await?;
    Ok(())
}

/// A session start from `snap` failed with `e` where the snapshot is the likely cause (the
/// recipe's `start` commands failed on what its `setup` left; a container that does not come
/// up is more likely the host's trouble, and is not counted): counted, and after
/// [`limits::SNAPSHOT_BREAKER_FAILURES`] in a row the snapshot is set aside if an older good one
/// is there (a circuit breaker; [`db::snapshots::boot_failed`]).
pub(super) async fn snapshot_fault(db: &Db, snap: &Snapshot, e: Error) -> Error {
    let limit = tandem_protocol::limits::SNAPSHOT_BREAKER_FAILURES;
    match db::snapshots::boot_failed(db, snap.id, limit, now_ms()).await {
        Ok(true) => {
            db.observed(db::bus::Observation::BreakerTripped);
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
///
/// A workspace that cannot see the mirror (a pod) gets the commits past its snapshot's `base`
/// as a bundle written through its agent instead, and fetches from that.
pub(super) async fn sync(
    host: &Host,
    (wid, instance): (&str, i32),
    repo: &Repo,
    base: Option<&str>,
    branch: &str,
    head: &str,
) -> Result<()> {
    if !host.mirror_mounted() {
        return sync_from_bundle(host, (wid, instance), repo, base, branch, head).await;
    }
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
    let out = run(host, wid, script, &env, DEADLINE_SYNCING.as_secs()).await?;
    if out.code != Some(0) {
        return Err(Error::Invalid(format!(
            "syncing {branch} to {} failed: {}",
            short(Some(head)),
            out.stderr.trim()
        )));
    }
    Ok(())
}

/// Where a pod's catch-up bundle is written (base64: the agent writes text), inside `.git`
/// where no status or diff sees it.
const SYNC_BUNDLE: &str = ".git/tandem-sync.bundle.b64";

async fn sync_from_bundle(
    host: &Host,
    (wid, instance): (&str, i32),
    repo: &Repo,
    base: Option<&str>,
    branch: &str,
    head: &str,
) -> Result<()> {
    use base64::Engine as _;
    let Some(bundle) = host.mirror_delta(repo, base, branch).await? else {
        return Err(Error::Invalid(format!(
            "syncing {branch} to {}: the mirror has nothing past the snapshot's commit",
            short(Some(head))
        )));
    };
    let text = base64::engine::general_purpose::STANDARD.encode(&bundle);
    if text.len() > tandem_protocol::agent::MAX_FILE_BYTES {
        return Err(Error::Invalid(format!(
            "syncing {branch} to {}: {} KiB of new commits since the snapshot is more than a workspace on this runtime takes at its start; the next snapshot build (or `tandem snapshot build`) brings them",
            short(Some(head)),
            bundle.len() / 1024
        )));
    }
    tandem_host::workspace_agent::WorkspaceAgent::new(host, wid, instance)
        .write_file(SYNC_BUNDLE, text)
        .await?;
    let script = r#"set -e
trap 'rm -f "$TANDEM_BUNDLE" "$TANDEM_BUNDLE.raw"' EXIT
base64 -d "$TANDEM_BUNDLE" > "$TANDEM_BUNDLE.raw"
git fetch --quiet --no-tags "$TANDEM_BUNDLE.raw" "+refs/heads/$TANDEM_BRANCH:refs/remotes/origin/$TANDEM_BRANCH"
git checkout --quiet -B "$TANDEM_BRANCH" "$TANDEM_COMMIT"
git branch --quiet --set-upstream-to="origin/$TANDEM_BRANCH" "$TANDEM_BRANCH" || true"#;
    let env = [
        ("TANDEM_BUNDLE".to_string(), SYNC_BUNDLE.to_string()),
        ("TANDEM_BRANCH".to_string(), branch.to_string()),
        ("TANDEM_COMMIT".to_string(), head.to_string()),
    ];
    let out = run(host, wid, script, &env, DEADLINE_SYNCING.as_secs()).await?;
    if out.code != Some(0) {
        return Err(Error::Invalid(format!(
            "syncing {branch} to {} failed: {}",
            short(Some(head)),
            out.stderr.trim()
        )));
    }
    Ok(())
}

pub(super) fn short(commit: Option<&str>) -> String {
    commit
        .map(|c| c.chars().take(12).collect())
        .unwrap_or_else(|| "?".into())
}
