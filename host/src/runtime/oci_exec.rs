//! Running a command in a workspace of the OCI runtime: the runtime's `exec`, with the init's
//! confinement (no new privileges; the seccomp filter, from the runtime's config or through
//! `tandem-confine`, whichever the workspace started with), its environment, a timeout enforced
//! inside, and output capped.

use std::path::Path;
use std::process::Stdio;

use tokio::io::{AsyncRead, AsyncReadExt};

use super::oci::{Kind, OciRuntime};
use super::{ExecOutput, ExecRequest, MAX_EXEC_OUTPUT, validate_id};
use crate::{Error, Result};

impl OciRuntime {
    pub(super) async fn exec_inner(&self, id: &str, req: ExecRequest) -> Result<ExecOutput> {
        validate_id(id)?;
        if req.argv.is_empty() {
            return Err(Error::Invalid("exec needs a command".into()));
        }
        let mut c = self.command();
        c.arg("exec");
        // The init's confinement for every exec'd process: crun does not take the config's
        // `noNewPrivileges` for `exec`; the seccomp filter comes from the config on both.
        if self.kind != Kind::Runsc {
            c.arg("--no-new-privs");
        }
        if let Some(cwd) = &req.cwd {
            c.args(["--cwd", cwd]);
        }
        // The workspace's own environment first (crun does not give `exec` the init's), then the
        // request's.
        // What the workspace was started with; a command never runs without knowing it.
        let path = self.dir(id).join("config.json");
        if !path.exists() {
            return Err(Error::Conflict(format!(
                "workspace {id} is not running on this server"
            )));
        }
        let config = oci_spec::runtime::Spec::load(path)
            .map_err(|e| Error::Internal(format!("workspace {id}'s runtime config: {e}")))?;
        let base = config
            .process()
            .as_ref()
            .and_then(|p| p.env().clone())
            .unwrap_or_default();
        // Under the filter its init started with: a workspace started under `tandem-confine`
        // runs every command under it too (decided by how it was started, not by this server);
        // one that has neither it nor the runtime's profile while this runtime filters is
        // refused rather than run unfiltered.
        let confined = config.mounts().as_ref().is_some_and(|m| {
            m.iter()
                .any(|m| m.destination() == Path::new(super::confine::MOUNT))
        });
        let profiled = config
            .linux()
            .as_ref()
            .is_some_and(|l| l.seccomp().is_some());
        if self.seccomp && !confined && !profiled {
            return Err(Error::Internal(format!(
                "workspace {id} was started without its seccomp filter; stop and start it again"
            )));
        }
        for kv in base {
            c.arg("--env").arg(kv);
        }
        for (k, v) in &req.env {
            c.arg("--env").arg(format!("{k}={v}"));
        }
        c.arg(id);
        if confined {
            c.args(super::confine::prefix());
        }
        // The timeout is enforced inside the workspace, so the command dies with it, not only
        // the runtime's client process.
        if let Some(t) = req.timeout_secs {
            c.args(["timeout", "-s", "KILL", &t.to_string()]);
        }
        c.args(&req.argv);
        let mut child = c
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| Error::Config(format!("cannot run {}: {e}", self.kind.binary())))?;
        let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
        let ((out, t1), (err, t2)) = tokio::join!(read_capped(stdout), read_capped(stderr));
        let status = child.wait().await?;
        // The runtime's own refusal (no such container here) is not the command's output.
        if !status.success() && !self.is_running_inner(id).await? {
            return Err(Error::Conflict(format!(
                "workspace {id} is not running on this server"
            )));
        }
        let code = status
            .code()
            .or_else(|| std::os::unix::process::ExitStatusExt::signal(&status).map(|s| 128 + s));
        Ok(ExecOutput {
            code,
            stdout: out,
            stderr: err,
            truncated: t1 || t2,
        })
    }
}

/// Reads a pipe to the end, keeping the first [`MAX_EXEC_OUTPUT`] bytes.
async fn read_capped(pipe: Option<impl AsyncRead + Unpin>) -> (String, bool) {
    let Some(mut pipe) = pipe else {
        return (String::new(), false);
    };
    let mut kept = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut truncated = false;
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = MAX_EXEC_OUTPUT.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
                truncated |= n > room;
            }
        }
    }
    (String::from_utf8_lossy(&kept).to_string(), truncated)
}
