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
        let (stdout, stderr) = tokio::join!(
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
        );
        let status = child.wait().await.ok();
        (status.and_then(|s| s.code()), stdout, stderr)
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
