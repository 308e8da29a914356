//! Starting a workspace: its spec (the snapshot over the image, the mirror, the agent), the
//! recipe at the commit it runs, its start commands and readiness checks.

use super::*;

pub async fn run(
    host: &Host,
    wid: &str,
    script: &str,
    env: &[(String, String)],
    timeout: u64,
) -> Result<runtime::ExecOutput> {
    Ok(host
        .runtime
        .exec(
            wid,
            runtime::ExecRequest {
                argv: vec!["sh".into(), "-c".into(), script.into()],
                cwd: Some(REPO_DIR.into()),
                env: env.to_vec(),
                timeout_secs: Some(timeout),
            },
        )
        .await?)
}

/// `cp -a` keeps what overlayfs needs in a layer: whiteouts (0/0 device nodes), opaque-dir
/// xattrs, owners and modes; `--reflink=auto` makes it copy-on-write where the filesystem can.
/// The repo's recipe at `commit` (the empty one without a commit or file).
pub(super) async fn recipe_at(host: &Host, repo: &Repo, commit: Option<&str>) -> Result<Recipe> {
    let text = match commit {
        Some(c) => host.read_mirror(repo, c, snapshots::recipe::FILE).await?,
        None => None,
    };
    Recipe::parse(text.as_deref())
}

/// The spec of a session workspace: the snapshot over the image, with the network and limits
/// the recipe (at the commit the workspace runs) asks for.
pub async fn spec_for(
    host: &Host,
    repo: &Repo,
    snapshot: SnapshotId,
    commit: Option<&str>,
    wid: &str,
) -> Result<WorkspaceSpec> {
    let recipe = recipe_at(host, repo, commit).await?;
    let egress = host.egress(&recipe.egress, recipe.egress_ask);
    let limits = host.limits(&recipe.limits)?;
    Ok(host
        .session_spec(wid, repo, snapshot, limits, egress)
        .await?)
}

/// Starts workspace `wid` on `snapshot` and waits for its agent; returns its init's host PID.
/// `on_failure` says what a failed start does with its writable layer: [`Keep::Nothing`] (a
/// fresh layer) stops the workspace and drops it; [`Keep::Upper`] (a person's work: a resumed
/// session's own layer, a fork's copy) leaves both to the caller, which may still read the
/// diff of a workspace that came up half-way before it stops it keeping the layer
/// ([`start_failed_keeping`]).
pub async fn start_on(
    host: &Host,
    repo: &Repo,
    snapshot: SnapshotId,
    commit: Option<&str>,
    wid: &str,
    on_failure: Keep,
) -> Result<i32> {
    Ok(start_timed(host, repo, snapshot, commit, wid, on_failure)
        .await?
        .0)
}

/// [`start_on`], also saying where the start spent its time: the spec (recipe, the
/// workspace's disk), the runtime's own steps, the agent's first answer.
pub async fn start_timed(
    host: &Host,
    repo: &Repo,
    snapshot: SnapshotId,
    commit: Option<&str>,
    wid: &str,
    on_failure: Keep,
) -> Result<(i32, Vec<(&'static str, f64)>)> {
    let started = async {
        let t = Instant::now();
        let ms = |t: Instant| t.elapsed().as_secs_f64() * 1000.0;
        let spec = spec_for(host, repo, snapshot, commit, wid).await?;
        let mut took = vec![("spec and disk", ms(t))];
        let t = Instant::now();
        let started = within(
            "starting the workspace",
            host.runtime
                .start_limit()
                .map_or(DEADLINE_STARTING, |l| l.max(DEADLINE_STARTING)),
            host.runtime.start(spec),
        )
        .await?;
        let runtime_ms = ms(t);
        took.extend(started.took.iter().copied());
        let listed: f64 = started.took.iter().map(|(_, ms)| ms).sum();
        if runtime_ms - listed >= 0.05 {
            took.push(("runtime, other", runtime_ms - listed));
        }
        let t = Instant::now();
        WorkspaceAgent::new(host, wid, started.instance)
            .wait_ready(DEADLINE_AGENT)
            .await?;
        took.push(("agent first answer", ms(t)));
        Ok::<_, Error>((started.instance, took))
    }
    .await;
    if started.is_err() && on_failure == Keep::Nothing {
        let _ = host.runtime.stop(wid, Keep::Nothing).await;
    }
    started
}

/// Runs the recipe's `start` commands (as of `commit`) with a `services` boot phase.
pub(super) async fn run_start_commands(
    db: &Db,
    host: &Host,
    repo: &Repo,
    wid: &str,
    commit: Option<&str>,
    id: SessionId,
    t0: Instant,
) -> Result<()> {
    let recipe = recipe_at(host, repo, commit).await?;
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
            let out = run(host, wid, cmd, &env, DEADLINE_SERVICES.as_secs()).await?;
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
                let out = run(host, wid, check, &env, 30).await?;
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

/// A resumed or forked session whose workspace did not start. Its writable layer is the
/// person's work, so nothing of it goes: the diff is taken again if the workspace came up (its
/// start commands failed; otherwise the one kept at suspend stays), the workspace is stopped
/// keeping its layer, the timeline says what failed and what to do, and the session is
/// `suspended` again, which a resume takes. Returns the error for whoever asked: 503, the host
/// cannot start it now.
pub(super) async fn start_failed_keeping(
    db: &Db,
    host: &Host,
    id: SessionId,
    (wid, snapshot, base): (&str, SnapshotId, Option<&str>),
    e: Error,
) -> Result<Error> {
    tracing::warn!(session = %id, error = %e, "a kept workspace did not start; its layer stays");
    if host.runtime.is_running(wid).await.unwrap_or(false)
        && let Ok(diff) = compute_diff(host, wid, base).await
    {
        write_diff(db, id, &diff).await?;
    }
    let _ = host.runtime.stop(wid, Keep::Upper).await;
    let message = format!(
        "the workspace could not start: {e}. Nothing is lost: its files are kept and the session is suspended again; resume it once the cause is fixed, or take its diff"
    );
    event(
        db,
        id,
        EventKind::Error {
            message: message.clone(),
        },
    )
    .await?;
    db::sessions::set_workspace(db, id, &host.host_id, Some(wid), Some(snapshot), base, None)
        .await?;
    transition(
        db,
        id,
        SessionState::Suspended,
        Some("the workspace could not start; files kept".into()),
    )
    .await?;
    Ok(Error::Unavailable(message))
}
