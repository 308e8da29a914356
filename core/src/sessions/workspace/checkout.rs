//! The session's checkout: commands run in it, its diff against the base, and its files and
//! git through the workspace agent.

use super::*;

/// Runs a command in the session's workspace as `author`; recorded as an event and in the audit log.
pub async fn exec(
    db: &Db,
    host: &Host,
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
    let wid = live_workspace(db, id).await?.id;
    let t = Instant::now();
    let out = host
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
    if let Some(clean) = host.credentials.redact(id, &output) {
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
pub(super) const PATCH_MARKER: &str = "\n--- tandem: patch follows ---\n";

/// Computes the diff inside the workspace (its git, its isolation), against the commit it started
/// from, with new files, without touching the workspace's own index.
pub(super) async fn compute_diff(host: &Host, wid: &str, base: Option<&str>) -> Result<Diff> {
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
    let out = run(host, wid, script, &env, 120).await?;
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

/// Computes the diff of running workspace `wid` and keeps it as session `id`'s: what it shows
/// once stopped or suspended. One that cannot be computed is kept as a note saying why.
pub(super) async fn keep_diff(
    db: &Db,
    host: &Host,
    id: SessionId,
    wid: &str,
    base: Option<&str>,
) -> Result<Diff> {
    let diff = compute_diff(host, wid, base)
        .await
        .unwrap_or_else(|e| Diff {
            base: base.map(str::to_string),
            patch: format!("(the diff could not be computed: {e})"),
            files: vec![],
            truncated: false,
        });
    write_diff(db, id, &diff).await?;
    Ok(diff)
}

/// Keeps `diff` as session `id`'s in the store.
pub(super) async fn write_diff(db: &Db, id: SessionId, diff: &Diff) -> Result<()> {
    let json = serde_json::to_string(diff).map_err(|e| Error::Internal(e.to_string()))?;
    db::diffs::keep(db, id, &json, now_ms()).await?;
    Ok(())
}

/// The diff kept when session `id` stopped or was suspended, if there is one.
pub(super) async fn stored_diff(db: &Db, id: SessionId) -> Result<Option<Diff>> {
    let Some(json) = db::diffs::kept(db, id).await? else {
        return Ok(None);
    };
    serde_json::from_str(&json)
        .map(Some)
        .map_err(|e| Error::Internal(format!("session {id}'s kept diff is unreadable: {e}")))
}

/// The session's changes: live from the workspace, or as kept when it stopped or was suspended
/// (computed in its workspace then: host-side git never reads a tree a workspace wrote).
pub async fn diff(db: &Db, host: &Host, id: SessionId) -> Result<Diff> {
    let session = db::sessions::get(db, id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("no session {id}")))?;
    if session.state.is_live() {
        let live = live_workspace(db, id).await?;
        let (wid, base) = (live.id, live.base_commit);
        return compute_diff(host, &wid, base.as_deref()).await;
    }
    if let Some(kept) = stored_diff(db, id).await? {
        return Ok(kept);
    }
    let patch = match session.state {
        SessionState::Suspended => {
            "(no diff was kept when this session was suspended: resume it to see its changes)"
        }
        _ => "",
    };
    Ok(Diff {
        base: None,
        patch: patch.into(),
        files: vec![],
        truncated: false,
    })
}

/// A directory listing or a file of the session's checkout, through its agent (confined to
/// `/workspace`: no absolute paths, no `..`, no escape through symlinks).
pub async fn read_file(
    db: &Db,
    host: &Host,
    id: SessionId,
    path: &str,
) -> Result<tandem_protocol::agent::FileView> {
    Ok(workspace_agent(db, host, id).await?.read_file(path).await?)
}

/// Writes a file of the session's checkout through its agent; audited.
pub async fn write_file(
    db: &Db,
    host: &Host,
    id: SessionId,
    author: &Author,
    path: &str,
    content: String,
) -> Result<()> {
    crate::workspace_agent::check_file_size(&content)?;
    workspace_agent(db, host, id)
        .await?
        .write_file(path, content)
        .await?;
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
    host: &Host,
    id: SessionId,
) -> Result<tandem_protocol::agent::GitStatus> {
    Ok(workspace_agent(db, host, id).await?.git_status().await?)
}

/// Commits every change in the checkout as `author`, under the commit identity
/// `(name, email)`; audited and recorded as an event.
pub async fn git_commit(
    db: &Db,
    host: &Host,
    id: SessionId,
    author: &Author,
    (author_name, author_email): (String, String),
    message: &str,
) -> Result<String> {
    if message.trim().is_empty() {
        return Err(Error::Invalid("the commit message is empty".into()));
    }
    let req = tandem_protocol::agent::GitCommit {
        message: message.to_string(),
        author_name,
        author_email,
    };
    let done = workspace_agent(db, host, id)
        .await?
        .git_commit(&req)
        .await?;
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
