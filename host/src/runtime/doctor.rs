//! What this host supports for workspaces (`tandem doctor`), and which runtime to use.

use std::path::Path;
use std::process::Command;

use serde::Serialize;

use super::oci::Kind;

/// One check and its outcome.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    pub name: String,
    pub ok: bool,
    pub detail: String,
}

/// The cgroup layout of the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cgroups {
    /// cgroup v2 only.
    Unified,
    /// v1 controllers with v2 at /sys/fs/cgroup/unified.
    Hybrid,
    /// v1 only.
    Legacy,
}

/// The host's cgroup layout.
pub fn cgroups() -> Cgroups {
    if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        Cgroups::Unified
    } else if Path::new("/sys/fs/cgroup/unified").exists() {
        Cgroups::Hybrid
    } else {
        Cgroups::Legacy
    }
}

fn version_of(bin: &str) -> Option<String> {
    let out = Command::new(bin).arg("--version").output().ok()?;
    out.status.success().then(|| {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or_default()
            .to_string()
    })
}

/// True when crun can run here: pure cgroup v2, or hybrid where a private mount namespace
/// without the v2 mount works (Debian's crun 1.8 refuses hybrid hierarchies otherwise).
pub fn crun_works() -> bool {
    if version_of("crun").is_none() {
        return false;
    }
    match cgroups() {
        Cgroups::Unified | Cgroups::Legacy => true,
        Cgroups::Hybrid => Command::new("unshare")
            .args([
                "--mount",
                "sh",
                "-c",
                "umount /sys/fs/cgroup/unified && crun --version",
            ])
            .output()
            .is_ok_and(|o| o.status.success()),
    }
}

/// True when gVisor's runsc is installed (used with `--platform=ptrace --network=none`, the
/// combination that works without KVM).
pub fn runsc_works() -> bool {
    version_of("runsc").is_some()
}

/// The runtime to use when none is configured: crun where it works (it starts containers faster
/// than runc), else runc; `None` if neither does.
pub fn default_runtime() -> Option<Kind> {
    if crun_works() {
        return Some(Kind::Crun);
    }
    version_of("runc").map(|_| Kind::Runc)
}

/// Every check, in the order `tandem doctor` prints them.
pub fn checks() -> Vec<Check> {
    let mut out = Vec::new();
    let root = nix::unistd::geteuid().is_root();
    out.push(Check {
        name: "root".into(),
        ok: root,
        detail: if root {
            "running as root".into()
        } else {
            "workspaces need root (mounts, cgroups, namespaces)".into()
        },
    });
    let overlay = std::fs::read_to_string("/proc/filesystems").is_ok_and(|f| f.contains("overlay"));
    out.push(Check {
        name: "overlayfs".into(),
        ok: overlay,
        detail: if overlay {
            "available".into()
        } else {
            "not in /proc/filesystems (modprobe overlay)".into()
        },
    });
    let cg = cgroups();
    out.push(Check {
        name: "cgroups".into(),
        ok: cg != Cgroups::Legacy || root,
        detail: format!("{cg:?}").to_lowercase(),
    });
    for kind in [Kind::Runc, Kind::Crun, Kind::Runsc] {
        let v = version_of(kind.binary());
        let note = match (kind, cg) {
            (Kind::Crun, Cgroups::Hybrid) if crun_works() => {
                " (hybrid cgroups: run in a private mount namespace)"
            }
            (Kind::Crun, Cgroups::Hybrid) => " (refuses hybrid cgroups here)",
            (Kind::Runsc, _) => " (used with --platform=ptrace --network=none)",
            _ => "",
        };
        out.push(Check {
            name: kind.binary().into(),
            ok: v.is_some(),
            detail: v.map(|v| format!("{v}{note}")).unwrap_or_else(|| {
                format!(
                    "not installed (apt-get install {})",
                    match kind {
                        Kind::Runsc => "runsc",
                        k => k.binary(),
                    }
                )
            }),
        });
    }
    let mm = version_of("mmdebstrap");
    out.push(Check {
        name: "mmdebstrap".into(),
        ok: mm.is_some(),
        detail: mm.unwrap_or_else(|| {
            "not installed: needed to build images (apt-get install mmdebstrap)".into()
        }),
    });
    out.push(Check {
        name: "default runtime".into(),
        ok: default_runtime().is_some(),
        detail: default_runtime()
            .map(|k| k.binary().to_string())
            .unwrap_or_else(|| "none: install runc".into()),
    });
    out.extend(confinement());
    out
}

/// What confines a workspace beyond its namespaces: the seccomp filter, user namespaces and
/// disk limits, as this server applies them (the same words as ARCHITECTURE.md's).
pub fn confinement() -> Vec<Check> {
    // The kernel filters with seccomp when it lists the actions it supports.
    let seccomp = Path::new("/proc/sys/kernel/seccomp/actions_avail").exists();
    let userns = super::userns::kernel_allows();
    vec![
        Check {
            name: "seccomp".into(),
            ok: seccomp,
            detail: if seccomp {
                "Docker's default profile on every runc and crun workspace process (exec'd ones too, with no_new_privs); gVisor filters itself".into()
            } else {
                "the kernel has no seccomp: workspaces would run unfiltered".into()
            },
        },
        Check {
            name: "user namespaces".into(),
            ok: userns,
            detail: if userns {
                format!(
                    "every workspace in its own: uid 0 inside is host uid {} (layers stored shifted into that range)",
                    super::userns::HOST_BASE
                )
            } else {
                "not allowed by the kernel (user.max_user_namespaces is 0): container root would be host root; raise it with sysctl".into()
            },
        },
        {
            let why = super::disk::unavailable();
            Check {
                name: "disk limits".into(),
                ok: why.is_none(),
                detail: match why {
                    None => "each workspace on an ext4 disk of its own (recipe limits.disk_gb, default 20 GiB, capped by [workspaces.max]): ENOSPC past it, df shows it".into(),
                    Some(why) => format!("not enforced: {why}; a workspace's writable layer shares the data dir's disk"),
                },
            }
        },
    ]
}
