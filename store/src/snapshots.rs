//! Snapshots.

use sqlx::FromRow;
use tandem_protocol::{RepoId, Snapshot, SnapshotId, SnapshotState, Timestamp};

use crate::Conn;
use crate::{Error, Result};

#[derive(FromRow)]
struct Row {
    id: String,
    repo_id: String,
    state: String,
    branch: String,
    commit_sha: Option<String>,
    image_digest: Option<String>,
    recipe_hash: Option<String>,
    agent_version: Option<String>,
    size_bytes: Option<i64>,
    build_ms: Option<i64>,
    error: Option<String>,
    log: String,
    created_at: i64,
    finished_at: Option<i64>,
    boot_failures: i64,
    quarantined_at: Option<i64>,
}

const COLUMNS: &str =
    "id, repo_id, state, branch, commit_sha, image_digest, recipe_hash, agent_version, size_bytes,
    build_ms, error, log, created_at, finished_at, boot_failures, quarantined_at";

fn state_str(s: SnapshotState) -> &'static str {
    match s {
        SnapshotState::Building => "building",
        SnapshotState::Ready => "ready",
        SnapshotState::Failed => "failed",
        SnapshotState::Collected => "collected",
    }
}

impl Row {
    fn into_snapshot(self) -> Result<Snapshot> {
        Ok(Snapshot {
            id: SnapshotId(super::uuid(&self.id)?),
            repo_id: RepoId(super::uuid(&self.repo_id)?),
            state: match self.state.as_str() {
                "building" => SnapshotState::Building,
                "ready" => SnapshotState::Ready,
                "failed" => SnapshotState::Failed,
                "collected" => SnapshotState::Collected,
                s => {
                    return Err(Error::Internal(format!(
                        "stored snapshot state {s:?} unknown"
                    )));
                }
            },
            branch: self.branch,
            commit: self.commit_sha,
            image_digest: self.image_digest,
            recipe_hash: self.recipe_hash,
            agent_version: self.agent_version,
            size_bytes: self.size_bytes,
            build_ms: self.build_ms,
            error: self.error,
            log: self.log,
            created_at: Timestamp(self.created_at),
            finished_at: self.finished_at.map(Timestamp),
            boot_failures: self.boot_failures,
            quarantined_at: self.quarantined_at.map(Timestamp),
        })
    }
}

/// Inserts a snapshot (usually `building`).
pub async fn insert(mut ex: impl Conn, s: &Snapshot) -> Result<()> {
    sqlx::query(
        "INSERT INTO snapshots (id, repo_id, state, branch, image_digest, agent_version, log, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(s.id.to_string())
    .bind(s.repo_id.to_string())
    .bind(state_str(s.state))
    .bind(&s.branch)
    .bind(&s.image_digest)
    .bind(&s.agent_version)
    .bind(&s.log)
    .bind(s.created_at.0)
    .execute(ex.ex())
    .await?;
    Ok(())
}

/// Writes a finished build's outcome.
pub async fn finish(mut ex: impl Conn, s: &Snapshot) -> Result<()> {
    sqlx::query(
        "UPDATE snapshots SET state = $1, commit_sha = $2, recipe_hash = $3, size_bytes = $4, build_ms = $5,
         error = $6, log = $7, finished_at = $8 WHERE id = $9",
    )
    .bind(state_str(s.state))
    .bind(&s.commit)
    .bind(&s.recipe_hash)
    .bind(s.size_bytes)
    .bind(s.build_ms)
    .bind(&s.error)
    .bind(&s.log)
    .bind(s.finished_at.map(|t| t.0))
    .bind(s.id.to_string())
    .execute(ex.ex())
    .await?;
    Ok(())
}

/// One snapshot.
pub async fn get(mut ex: impl Conn, id: SnapshotId) -> Result<Option<Snapshot>> {
    let row: Option<Row> =
        sqlx::query_as(&format!("SELECT {COLUMNS} FROM snapshots WHERE id = $1"))
            .bind(id.to_string())
            .fetch_optional(ex.ex())
            .await?;
    row.map(Row::into_snapshot).transpose()
}

/// A repo's snapshots, newest first.
pub async fn list(mut ex: impl Conn, repo: RepoId) -> Result<Vec<Snapshot>> {
    let rows: Vec<Row> = sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM snapshots WHERE repo_id = $1 ORDER BY created_at DESC, id LIMIT 100"
    ))
    .bind(repo.to_string())
    .fetch_all(ex.ex())
    .await?;
    rows.into_iter().map(Row::into_snapshot).collect()
}

/// The newest snapshot that built successfully.
pub async fn latest_ready(mut ex: impl Conn, repo: RepoId) -> Result<Option<Snapshot>> {
    let row: Option<Row> = sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM snapshots WHERE repo_id = $1 AND state = 'ready' AND quarantined_at IS NULL
         ORDER BY created_at DESC, id LIMIT 1"
    ))
    .bind(repo.to_string())
    .fetch_optional(ex.ex())
    .await?;
    row.map(Row::into_snapshot).transpose()
}

/// The newest built snapshot of `repo`, set aside or not (what a rebuild would build again).
pub async fn latest_built(mut ex: impl Conn, repo: RepoId) -> Result<Option<Snapshot>> {
    let row: Option<Row> = sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM snapshots WHERE repo_id = $1 AND state = 'ready'
         ORDER BY created_at DESC, id LIMIT 1"
    ))
    .bind(repo.to_string())
    .fetch_optional(ex.ex())
    .await?;
    row.map(Row::into_snapshot).transpose()
}

/// Counts a failed session start from snapshot `id`; after `limit` in a row it is set aside,
/// if another good snapshot of its repo is there to start from. True when it was set aside now.
pub async fn boot_failed(db: &super::Db, id: SnapshotId, limit: i64, now: i64) -> Result<bool> {
    let mut tx = db.begin().await?;
    sqlx::query("UPDATE snapshots SET boot_failures = boot_failures + 1 WHERE id = $1")
        .bind(id.to_string())
        .execute(&mut *tx.tx)
        .await?;
    let done = sqlx::query(
        "UPDATE snapshots SET quarantined_at = $1
         WHERE id = $2 AND boot_failures >= $3 AND quarantined_at IS NULL AND EXISTS (
             SELECT 1 FROM snapshots o WHERE o.repo_id = snapshots.repo_id AND o.id <> snapshots.id
             AND o.created_at < snapshots.created_at AND o.state = 'ready' AND o.quarantined_at IS NULL)",
    )
    .bind(now)
    .bind(id.to_string())
    .bind(limit)
    .execute(&mut *tx.tx)
    .await?;
    tx.commit().await?;
    Ok(done.rows_affected() == 1)
}

/// A session started well from snapshot `id`: its failures no longer count.
pub async fn boot_succeeded(mut ex: impl Conn, id: SnapshotId) -> Result<()> {
    sqlx::query("UPDATE snapshots SET boot_failures = 0 WHERE id = $1 AND boot_failures <> 0")
        .bind(id.to_string())
        .execute(ex.ex())
        .await?;
    Ok(())
}

/// Marks a snapshot collected (its layer deleted).
pub async fn mark_collected(mut ex: impl Conn, id: SnapshotId) -> Result<()> {
    sqlx::query("UPDATE snapshots SET state = 'collected' WHERE id = $1")
        .bind(id.to_string())
        .execute(ex.ex())
        .await?;
    Ok(())
}

/// True while a build of `repo` is running.
pub async fn building(mut ex: impl Conn, repo: RepoId) -> Result<bool> {
    let (n,): (i64,) =
        sqlx::query_as("SELECT COUNT(*) FROM snapshots WHERE repo_id = $1 AND state = 'building'")
            .bind(repo.to_string())
            .fetch_one(ex.ex())
            .await?;
    Ok(n > 0)
}

/// Marks builds left `building` by a previous process as failed.
pub async fn fail_interrupted(mut ex: impl Conn, now: i64) -> Result<u64> {
    let done = sqlx::query(
        "UPDATE snapshots SET state = 'failed', error = 'the server restarted during the build', finished_at = $1
         WHERE state = 'building'",
    )
    .bind(now)
    .execute(ex.ex())
    .await?;
    Ok(done.rows_affected())
}

/// Replaces a building snapshot's log (progress while it builds).
pub async fn set_log(mut ex: impl Conn, id: SnapshotId, log: &str) -> Result<()> {
    sqlx::query("UPDATE snapshots SET log = $1 WHERE id = $2")
        .bind(log)
        .bind(id.to_string())
        .execute(ex.ex())
        .await?;
    Ok(())
}
