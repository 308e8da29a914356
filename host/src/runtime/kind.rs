//! Which OCI runtime runs workspaces ([`Kind`]) and what confines them beyond their namespaces
//! ([`Confinement`]).

/// The OCI runtime binaries Tandem can drive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Runc,
    Crun,
    /// gVisor; only `--platform=ptrace --network=none` works on hosts without KVM for it.
    Runsc,
}

impl Kind {
    pub fn binary(self) -> &'static str {
        match self {
            Self::Runc => "runc",
            Self::Crun => "crun",
            Self::Runsc => "runsc",
        }
    }

    /// Waits (at most 2 s) until the workspace's first process `pid` runs the workspace's own
    /// program, not the runtime's nor `tandem-confine`. `run --detach` returns once it told
    /// that process to go on, which may be before its `execve`; crun before 1.8.7 (Debian 12
    /// has 1.8.1) refuses an exec that comes in between (`setns(…): Operation not permitted`,
    /// joining the user namespace first). `tandem-confine` is execute-only to the workspace,
    /// so the kernel makes it non-dumpable until it runs the init, and an exec joining it then
    /// is refused the same way. gVisor's first process is its sandbox: nothing to wait for.
    pub async fn until_started(self, pid: i32) {
        if self == Self::Runsc {
            return;
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while std::time::Instant::now() < deadline {
            let exe = match std::fs::read_link(format!("/proc/{pid}/exe")) {
                // A binary replaced on the host while it runs reads " (deleted)".
                Ok(exe) => exe
                    .to_string_lossy()
                    .trim_end_matches(" (deleted)")
                    .to_string(),
                // Gone: nothing to wait for.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
                // Not ours to read (a server without the ptrace capability over the
                // workspace's user namespace): its name says as much.
                Err(_) => match std::fs::read_to_string(format!("/proc/{pid}/comm")) {
                    Ok(comm) => format!("/{}", comm.trim()),
                    Err(_) => return,
                },
            };
            if !not_yet_started(&exe) {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        tracing::warn!(
            pid,
            "the workspace's first process did not reach its own program within 2 s: an exec right now may be refused"
        );
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "runc" => Self::Runc,
            "crun" => Self::Crun,
            "runsc" => Self::Runsc,
            _ => return None,
        })
    }
}

/// True while a workspace's first process, running `exe`, is still the runtime's or
/// `tandem-confine` (both refuse an exec joining them: the first not yet set up, the second
/// non-dumpable).
fn not_yet_started(exe: &str) -> bool {
    exe.ends_with("/crun") || exe.contains("runc") || exe.ends_with("/tandem-confine")
}

/// What confines a workspace beyond its namespaces; each applies where the host allows it.
/// All on is what a server runs with; the start benchmark turns each off to measure its cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Confinement {
    /// Docker's default seccomp profile (runc and crun; gVisor filters itself).
    pub seccomp: bool,
    /// A user namespace whose root is not the host's.
    pub user_namespaces: bool,
    /// A disk of its own for what it writes.
    pub disks: bool,
}

impl Default for Confinement {
    fn default() -> Self {
        Self {
            seccomp: true,
            user_namespaces: true,
            disks: true,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_runtime_and_tandem_confine_are_not_yet_the_workspace() {
        for exe in [
            "/usr/bin/crun",
            "/memfd:runc_cloned:/proc/self/exe (deleted)",
            "/.tandem/tandem-confine",
        ] {
            assert!(super::not_yet_started(exe), "{exe}");
        }
        for exe in [
            "/usr/bin/dumb-init",
            "/usr/bin/sleep",
            "/workspace/tandem-confine-notes",
        ] {
            assert!(!super::not_yet_started(exe), "{exe}");
        }
    }
}
