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
    /// program, not the runtime's. `run --detach` returns once it told that process to go on,
    /// which may be before its `execve`; crun before 1.8.7 (Debian 12 has 1.8.1) refuses an
    /// exec that comes in between (`setns(…): Operation not permitted`, joining the user
    /// namespace first). gVisor's first process is its sandbox: nothing to wait for.
    pub async fn until_started(self, pid: i32) {
        if self == Self::Runsc {
            return;
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while std::time::Instant::now() < deadline {
            // Gone, or not ours to read: nothing to wait for.
            let Ok(exe) = std::fs::read_link(format!("/proc/{pid}/exe")) else {
                return;
            };
            let exe = exe.to_string_lossy();
            if !(exe.ends_with("/crun") || exe.contains("runc")) {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
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
