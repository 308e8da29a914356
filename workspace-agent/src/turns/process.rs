//! Running a shell command for an agent: its own process group (so stopping kills everything it
//! started), output captured up to a cap, optional streaming of stdout, timeout and cancellation.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio_util::sync::CancellationToken;

/// What a command did.
pub struct Finished {
    /// `None` when killed (stopped, timed out).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub timed_out: bool,
    pub cancelled: bool,
}

/// Reads a pipe to the end, keeping at most `max` bytes; each chunk also goes to `each`.
/// How long output is still read after the shell exits, from what it left running in the
/// background (which is then ended: nothing a command starts outlives it).
const BACKGROUND_GRACE: Duration = Duration::from_millis(500);

async fn drain(mut pipe: impl AsyncRead + Unpin, max: usize, mut each: impl FnMut(&str)) -> String {
    let mut kept = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                each(&String::from_utf8_lossy(&buf[..n]));
                let room = max.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
    super::cap(String::from_utf8_lossy(&kept).into_owned(), max)
}

/// Runs `sh -c script` in `cwd` with `env`; `on_stdout` sees stdout as it comes.
pub async fn run(
    cwd: &Path,
    script: &str,
    env: &[(String, String)],
    timeout: Option<Duration>,
    max_output: usize,
    cancel: &CancellationToken,
    on_stdout: impl FnMut(&str),
) -> Result<Finished, String> {
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c")
        .arg(script)
        .current_dir(cwd)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|e| format!("cannot start sh: {e}"))?;
    let pgid = child.id().map(|p| Pid::from_raw(p as i32));
    let (out, err) = (child.stdout.take(), child.stderr.take());
    let work = async {
        let readers = async {
            tokio::join!(
                async {
                    match out {
                        Some(o) => drain(o, max_output, on_stdout).await,
                        None => String::new(),
                    }
                },
                async {
                    match err {
                        Some(e) => drain(e, max_output, |_| {}).await,
                        None => String::new(),
                    }
                }
            )
        };
        tokio::pin!(readers);
        let mut outputs = None;
        let mut status = None;
        let mut grace: Option<tokio::time::Instant> = None;
        while outputs.is_none() || status.is_none() {
            let until_grace = async {
                match grace {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                r = &mut readers, if outputs.is_none() => outputs = Some(r),
                s = child.wait(), if status.is_none() => {
                    status = Some(s.ok().and_then(|s| s.code()));
                    // The shell is done; what it left running in the background may still
                    // hold its output open: a moment to finish writing, then it ends.
                    grace = Some(tokio::time::Instant::now() + BACKGROUND_GRACE);
                }
                () = until_grace => {
                    if let Some(pg) = pgid {
                        let _ = killpg(pg, Signal::SIGKILL);
                    }
                    grace = None;
                }
            }
        }
        let (stdout, stderr) = outputs.unwrap_or_default();
        (status.flatten(), stdout, stderr)
    };
    let limit = timeout.unwrap_or(Duration::from_secs(24 * 3600));
    let mut timed_out = false;
    let mut cancelled = false;
    let result = tokio::select! {
        r = tokio::time::timeout(limit, work) => match r {
            Ok(r) => Some(r),
            Err(_) => { timed_out = true; None }
        },
        () = cancel.cancelled() => { cancelled = true; None }
    };
    // Whatever happened, nothing the command started outlives it.
    if let Some(pg) = pgid {
        let _ = killpg(pg, Signal::SIGKILL);
    }
    let (code, stdout, stderr) = result.unwrap_or((None, String::new(), String::new()));
    Ok(Finished {
        code,
        stdout,
        stderr,
        timed_out,
        cancelled,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_command_that_leaves_something_in_the_background_returns_when_the_shell_does() {
        let dir = tempfile::tempdir().unwrap();
        let t = std::time::Instant::now();
        let f = run(
            dir.path(),
            "sleep 30 & echo done",
            &[],
            Some(Duration::from_secs(60)),
            1 << 20,
            &CancellationToken::new(),
            |_| {},
        )
        .await
        .unwrap();
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "it waited {:?} for the background sleep",
            t.elapsed()
        );
        assert_eq!(
            (f.code, f.stdout.as_str(), f.timed_out),
            (Some(0), "done\n", false)
        );
    }

    #[tokio::test]
    async fn output_written_after_the_shell_by_a_background_job_within_the_grace_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let f = run(
            dir.path(),
            "(sleep 0.1; echo late) & echo early",
            &[],
            Some(Duration::from_secs(60)),
            1 << 20,
            &CancellationToken::new(),
            |_| {},
        )
        .await
        .unwrap();
        assert_eq!(f.stdout, "early\nlate\n");
    }
}
