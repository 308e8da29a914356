//! Snapshot builds: clone the repo at its default branch into a fresh layer, run the recipe's
//! `setup` in a workspace whose writable layer *is* that layer, and keep it as an immutable
//! snapshot. A failed build is recorded with its log and never replaces the last good snapshot.

use std::sync::Arc;
use std::time::Instant;

use tandem_protocol::{Repo, Snapshot, SnapshotId, SnapshotState, Timestamp};

use crate::Host;
use crate::db::{self, Db};
use crate::runtime::{ExecRequest, Keep};
use crate::{Error, Result, now_ms};

pub mod recipe;

pub use recipe::Recipe;

/// Longest build log kept, in bytes (the tail is kept).
pub const MAX_LOG_BYTES: usize = 256 * 1024;
/// How long one setup command may run.
pub const SETUP_COMMAND_TIMEOUT_SECS: u64 = 30 * 60;
/// Where the repo lives inside a workspace.
pub use crate::layers::REPO_DIR;

/// Starts a build: records it as `building` and returns it; the build runs in the background.
pub async fn start_build(db: &Db, host: &Arc<Host>, repo: &Repo) -> Result<Snapshot> {
    let snap = start_build_inline(db, host, repo).await?;
    let (db, host, repo, s) = (db.clone(), host.clone(), repo.clone(), snap.clone());
    tokio::spawn(async move {
        if let Err(e) = build(&db, &host, &repo, s).await {
            tracing::error!(error = %e, "recording a snapshot build failed");
        }
    });
    Ok(snap)
}

/// Records a build as `building`; the caller runs [`build`] with it.
pub async fn start_build_inline(db: &Db, host: &Host, repo: &Repo) -> Result<Snapshot> {
    let snap = Snapshot {
        id: SnapshotId(uuid::Uuid::new_v4()),
        repo_id: repo.id,
        state: SnapshotState::Building,
        branch: repo.default_branch.clone(),
        commit: None,
        image_digest: Some(host.image()?.digest.clone()),
        recipe_hash: None,
        agent_version: Some(crate::VERSION.into()),
        size_bytes: None,
        build_ms: None,
        error: None,
        log: String::new(),
        created_at: Timestamp(now_ms()),
        finished_at: None,
        boot_failures: 0,
        quarantined_at: None,
    };
    db::snapshots::insert(db, &snap).await?;
    Ok(snap)
}

/// Runs a build to the end and records its outcome (also on failure).
pub async fn build(db: &Db, host: &Host, repo: &Repo, mut snap: Snapshot) -> Result<Snapshot> {
    let start = Instant::now();
    let mut log = String::new();
    let outcome = run_build(db, host, repo, &snap, &mut log).await;
    snap.build_ms = Some(start.elapsed().as_millis() as i64);
    snap.finished_at = Some(Timestamp(now_ms()));
    match outcome {
        Ok((commit, recipe_hash)) => {
            snap.state = SnapshotState::Ready;
            snap.commit = Some(commit);
            snap.recipe_hash = Some(recipe_hash);
            snap.size_bytes = Some(host.snapshot_size(snap.id) as i64);
        }
        Err(e) => {
            log.push_str(&format!("\nbuild failed: {e}\n"));
            snap.state = SnapshotState::Failed;
            snap.error = Some(e.to_string());
            host.remove_snapshot(snap.id).await;
        }
    }
    snap.log = tail(&log, MAX_LOG_BYTES);
    db::snapshots::finish(db, &snap).await?;
    db.observed(db::bus::Observation::SnapshotBuilt {
        ok: snap.state == SnapshotState::Ready,
    });
    Ok(snap)
}

async fn run_build(
    db: &Db,
    host: &Host,
    repo: &Repo,
    snap: &Snapshot,
    log: &mut String,
) -> Result<(String, String)> {
    log.push_str(&format!(
        "$ git fetch {} ({})\n",
        repo.url, repo.default_branch
    ));
    let commit = host
        .fetch_mirror(repo, &repo.default_branch, std::time::Instant::now())
        .await?;
    let recipe_text = host.read_mirror(repo, &commit, recipe::FILE).await?;
    let recipe = Recipe::parse(recipe_text.as_deref())?;
    if recipe.setup.is_empty() {
        host.checkout_snapshot(snap.id, repo, &repo.default_branch)
            .await?;
        log.push_str(&format!("at {commit}\n"));
        return Ok((commit, recipe.hash()));
    }
    // `setup` runs in a workspace like a session's, on a disk of its own (limited like one);
    // its layer is then copied to the snapshot's place.
    let id = format!("snap-{}", &snap.id.0.simple().to_string()[..16]);
    let limits = host.limits(&recipe.limits)?;
    let built = async {
        host.checkout_into_workspace(&id, limits, repo, &repo.default_branch)
            .await?;
        log.push_str(&format!("at {commit}\n"));
        db::snapshots::set_log(db, snap.id, &tail(log, MAX_LOG_BYTES)).await?;
        let env: Vec<(String, String)> = recipe
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let spec = host.build_spec(&id, env.clone(), limits, host.egress(&recipe.egress, false))?;
        host.runtime.start(spec).await?;
        let result = run_setup(db, host, snap.id, &id, &recipe, &env, log).await;
        host.runtime.stop(&id, Keep::Upper).await?;
        result?;
        host.capture_snapshot(&id, limits, snap.id).await?;
        Ok::<_, Error>(())
    }
    .await;
    // The build's own workspace and disk go either way; a failure removes the layer in `build`.
    host.runtime.stop(&id, Keep::Nothing).await?;
    built?;
    Ok((commit, recipe.hash()))
}

async fn run_setup(
    db: &Db,
    host: &Host,
    snap: SnapshotId,
    id: &str,
    recipe: &Recipe,
    env: &[(String, String)],
    log: &mut String,
) -> Result<()> {
    for cmd in &recipe.setup {
        log.push_str(&format!("$ {cmd}\n"));
        let out = host
            .runtime
            .exec(
                id,
                ExecRequest {
                    argv: vec!["sh".into(), "-c".into(), cmd.clone()],
                    cwd: Some(REPO_DIR.into()),
                    env: env.to_vec(),
                    timeout_secs: Some(SETUP_COMMAND_TIMEOUT_SECS),
                },
            )
            .await?;
        log.push_str(&out.stdout);
        log.push_str(&out.stderr);
        // Readers of the snapshot see the build's progress as it goes.
        db::snapshots::set_log(db, snap, &tail(log, MAX_LOG_BYTES)).await?;
        if out.code != Some(0) {
            return Err(Error::Invalid(format!(
                "setup command `{cmd}` exited with {}",
                out.code.map_or("a signal".to_string(), |c| c.to_string())
            )));
        }
    }
    Ok(())
}

/// The last `max` bytes of `s`, on a character boundary.
fn tail(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    format!("[… earlier output dropped …]\n{}", &s[start..])
}

/// Why `repo`'s newest good snapshot is out of date (its branch moved, the image or the recipe
/// changed, or there is none), or `None` when it is current. Fetches the remote's delta.
pub async fn staleness(db: &Db, host: &Host, repo: &Repo) -> Result<Option<String>> {
    // Against the newest built one, set aside or not: a snapshot sessions could not start
    // from is not built again from the same commit, recipe and image.
    let Some(latest) = db::snapshots::latest_built(db, repo.id).await? else {
        return Ok(Some("there is no snapshot yet".into()));
    };
    let head = host
        .fetch_mirror(repo, &repo.default_branch, std::time::Instant::now())
        .await?;
    if latest.commit.as_deref() != Some(head.as_str()) {
        return Ok(Some(format!(
            "{} moved to {}",
            repo.default_branch,
            &head[..head.len().min(12)]
        )));
    }
    if latest.image_digest.as_deref() != Some(host.image()?.digest.as_str()) {
        return Ok(Some("the workspace image changed".into()));
    }
    let recipe = Recipe::parse(
        host.read_mirror(repo, &head, recipe::FILE)
            .await?
            .as_deref(),
    )?;
    if latest.recipe_hash.as_deref() != Some(recipe.hash().as_str()) {
        return Ok(Some("the recipe changed".into()));
    }
    Ok(None)
}

/// Starts a build when the newest snapshot is stale and none is running; returns it.
pub async fn rebuild_if_stale(db: &Db, host: &Arc<Host>, repo: &Repo) -> Result<Option<Snapshot>> {
    if db::snapshots::building(db, repo.id).await? {
        return Ok(None);
    }
    match staleness(db, host, repo).await? {
        Some(reason) => {
            tracing::info!(repo = %repo.name, %reason, "rebuilding the snapshot");
            Ok(Some(start_build(db, host, repo).await?))
        }
        None => Ok(None),
    }
}

/// Deletes the layers of `repo`'s good snapshots beyond the newest `keep`, except those a session
/// still uses (or `also_in_use`); returns the ones collected. Snapshots set aside do not count
/// towards `keep`; one newer than every good snapshot stays (it stops the same build from being
/// made again), older ones go.
pub async fn collect_garbage(
    db: &Db,
    host: &Host,
    repo: &Repo,
    keep: usize,
    also_in_use: &[SnapshotId],
) -> Result<Vec<SnapshotId>> {
    use tandem_protocol::SessionState::*;
    let in_use: std::collections::HashSet<String> =
        db::sessions::in_states(db, &[Queued, Starting, Ready, Running, Idle, Suspended])
            .await?
            .into_iter()
            .filter_map(|r| r.snapshot_id)
            .chain(also_in_use.iter().map(|s| s.to_string()))
            .collect();
    let mut collected = Vec::new();
    let ready = db::snapshots::list(db, repo.id)
        .await?
        .into_iter()
        .filter(|s| s.state == SnapshotState::Ready);
    let mut good = 0;
    for snap in ready {
        let keep_it = if snap.quarantined_at.is_some() {
            good == 0
        } else {
            good += 1;
            good <= keep.max(1)
        };
        if keep_it || in_use.contains(&snap.id.to_string()) {
            continue;
        }
        db::snapshots::mark_collected(db, snap.id).await?;
        host.remove_snapshot(snap.id).await;
        collected.push(snap.id);
    }
    Ok(collected)
}
