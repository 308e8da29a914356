//! The mount namespace this machine's container runtime runs in: made once per runtime by
//! `tandem-confine --hold-mount-ns` — a private copy of the host's mount table without any
//! workspace's mounts (their roots, disks and network namespaces, this server's and any
//! other's) and, on a hybrid cgroup host, without the cgroup2 mount crun refuses — and held by
//! an open file. Every runtime call runs through `tandem-confine --in-mount-ns`, which works in
//! a throwaway copy of it; a start carries in only its own workspace's root, disk and network
//! namespace. So what the runtime does at every call (copying its namespace, reading the mount
//! table, detaching the old root after `pivot_root`) costs the same with 1,000 workspaces
//! running as with none; on the host's own table each workspace still adds its disk.
//!
//! How the runtime binary is run lives here too ([`OciRuntime::command`]): in that namespace,
//! else through the older launcher or directly.
//!
//! Host mounts made after the namespace (a new filesystem under the data directory) are not in
//! it: the runtime's namespace is the host's as it was when the server started. And since it is
//! a private copy, a host filesystem unmounted while the server runs stays referenced there
//! (its device busy) until the server stops.

use std::io::{BufRead, BufReader, Read};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::process::Command;

use super::oci::{Kind, OciRuntime};
use crate::{Error, Result};

/// The namespace, and the launcher that enters it.
pub(crate) struct RuntimeNs {
    launcher: PathBuf,
    /// Keeps the namespace: no process lives in it between calls.
    file: std::fs::File,
}

impl RuntimeNs {
    /// Makes the namespace with `launcher` (`tandem-confine`): without the cgroup2 mount when
    /// `without_cgroup2`, without every mount under `workspaces`; then checks that a call works
    /// in it (`binary` runs, `state` is there, a mount is carried in).
    pub fn make(
        launcher: &Path,
        without_cgroup2: bool,
        workspaces: &Path,
        binary: &str,
        state: &Path,
    ) -> Result<Self> {
        let ns = Self::hold(launcher, without_cgroup2, workspaces)?;
        for (carry, command) in [
            (vec![workspaces], vec![binary.into(), "--version".into()]),
            (
                vec![],
                vec!["test".into(), "-d".into(), state.as_os_str().to_owned()],
            ),
        ] {
            let out = std::process::Command::new(&ns.launcher)
                .args(ns.args(&carry))
                .args(&command)
                .stdin(Stdio::null())
                .output()?;
            if !out.status.success() {
                return Err(Error::Internal(format!(
                    "the runtime's mount namespace cannot be used ({} in it: {}): {}",
                    command.join(std::ffi::OsStr::new(" ")).to_string_lossy(),
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                )));
            }
        }
        Ok(ns)
    }

    fn hold(launcher: &Path, without_cgroup2: bool, workspaces: &Path) -> Result<Self> {
        let mut c = std::process::Command::new(launcher);
        c.arg("--hold-mount-ns");
        if without_cgroup2 {
            c.arg("--without-cgroup2");
        }
        let mut child = c
            .arg("--drop-under")
            .arg(workspaces)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let mut line = String::new();
        if let Some(out) = child.stdout.take() {
            // A failed read is an unready holder, reported below with its stderr.
            let _ = BufReader::new(out).read_line(&mut line);
        }
        // Opened while the holder waits on its stdin: the namespace is the one it made.
        let file = (line == "ready\n")
            .then(|| std::fs::File::open(format!("/proc/{}/ns/mnt", child.id())))
            .transpose();
        drop(child.stdin.take());
        let mut why = String::new();
        if let Some(mut err) = child.stderr.take() {
            let _ = err.read_to_string(&mut why);
        }
        let status = child.wait()?;
        match file.map_err(|e| Error::Internal(format!("the runtime's mount namespace: {e}")))? {
            Some(file) if status.success() => {
                if !why.trim().is_empty() {
                    tracing::warn!("the runtime's mount namespace: {}", why.trim());
                }
                Ok(Self {
                    launcher: launcher.to_path_buf(),
                    file,
                })
            }
            _ => Err(Error::Internal(format!(
                "the runtime's mount namespace: {} ({status})",
                why.trim()
            ))),
        }
    }

    /// `binary` in a copy of the namespace, with the mount trees at `carry` (this process's)
    /// attached at the same paths.
    pub fn command(&self, binary: &str, carry: &[&Path]) -> Command {
        let mut c = Command::new(&self.launcher);
        c.args(self.args(carry)).arg(binary);
        c
    }

    /// The launcher's arguments up to the command.
    fn args(&self, carry: &[&Path]) -> Vec<std::ffi::OsString> {
        // The launcher opens the server's own descriptor: nothing is inherited.
        let mut a: Vec<std::ffi::OsString> = vec![
            "--in-mount-ns".into(),
            format!("/proc/{}/fd/{}", std::process::id(), self.file.as_raw_fd()).into(),
        ];
        for p in carry {
            a.push("--carry".into());
            a.push(p.into());
        }
        a.push("--".into());
        a
    }
}

impl OciRuntime {
    /// Starts every workspace process under `bin` (`tandem-confine`) with the seccomp filter
    /// compiled once, where that holds against the workspace ([`super::confine`]: seccomp on,
    /// in a user namespace); else, or when `bin` is missing, the runtime applies the profile.
    /// And runs runc and crun in a mount namespace of their own through it ([`RuntimeNs`]),
    /// seccomp or not.
    pub fn with_init(mut self, bin: &Path) -> Self {
        let dir = match super::confine::prepare(&self.data_dir.join("runtime"), bin) {
            Ok(dir) => dir,
            Err(e) => {
                tracing::warn!(
                    "{} cannot be used: the runtime compiles the seccomp profile at every start and works in the host's mount namespace: {e}",
                    bin.display()
                );
                return self;
            }
        };
        let launcher = dir.join("tandem-confine");
        if self.seccomp && self.userns {
            self.confine = Some(dir);
        }
        let hybrid =
            self.kind == Kind::Crun && super::doctor::cgroups() == super::doctor::Cgroups::Hybrid;
        // gVisor's gofer serves each root from the host's side: it keeps the host's.
        if self.kind != Kind::Runsc {
            let ns = RuntimeNs::make(
                &launcher,
                hybrid,
                &self.workspaces_dir,
                self.kind.binary(),
                &self.state_dir,
            );
            match ns {
                Ok(ns) => self.runtime_ns = Some(ns),
                Err(e) => tracing::warn!(
                    "the runtime works in the host's mount namespace, every workspace's mounts in it: {e}"
                ),
            }
        }
        // Tried once: a launcher that cannot (an older build) leaves crun to `unshare`.
        let works = || {
            std::process::Command::new(&launcher)
                .args(["--without-cgroup2", "--", "crun", "--version"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        if self.runtime_ns.is_none() && hybrid && works() {
            self.crun_launcher = Some(launcher);
        }
        self
    }

    /// The launcher crun runs through on a hybrid cgroup host, where it does.
    pub fn crun_launcher(&self) -> Option<&Path> {
        self.crun_launcher.as_deref()
    }

    pub(super) fn command(&self) -> Command {
        self.command_carrying(&[])
    }

    /// The runtime binary's command, in the runtime's own mount namespace where there is one
    /// (with the mounts at `carry` brought in).
    pub(super) fn command_carrying(&self, carry: &[&Path]) -> Command {
        let hybrid =
            self.kind == Kind::Crun && super::doctor::cgroups() == super::doctor::Cgroups::Hybrid;
        // crun refuses hybrid cgroup hierarchies; in a private mount namespace without the v2
        // mount it sees plain v1 and works. Only crun's own view changes. The runtime's own
        // namespace is made that way; without it Tandem's launcher does that in one small
        // process at every call where the runtime has it.
        let mut c = match (&self.runtime_ns, &self.crun_launcher) {
            (Some(ns), _) => ns.command(self.kind.binary(), carry),
            (None, Some(launcher)) => {
                let mut c = Command::new(launcher);
                c.args(["--without-cgroup2", "--", "crun"]);
                c
            }
            (None, None) if hybrid => {
                let mut c = Command::new("unshare");
                c.args([
                    "--mount",
                    "sh",
                    "-c",
                    "umount /sys/fs/cgroup/unified 2>/dev/null; exec crun \"$@\"",
                    "crun",
                ]);
                c
            }
            _ => Command::new(self.kind.binary()),
        };
        c.arg("--root").arg(&self.state_dir);
        if self.kind == Kind::Runsc {
            c.args(["--platform=ptrace", "--network=none"]);
        }
        c.kill_on_drop(true);
        c
    }

    /// The mount table the runtime works in, when it has a namespace of its own.
    pub fn runtime_mount_table(&self) -> Option<String> {
        let ns = self.runtime_ns.as_ref()?;
        let out = std::process::Command::new(&ns.launcher)
            .args(ns.args(&[]))
            .args(["cat", "/proc/self/mountinfo"])
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }
}
