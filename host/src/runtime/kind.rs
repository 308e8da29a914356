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
