//! The OCI runtime spec (`config.json`) of a workspace, generated with `oci-spec` from the
//! runc-like defaults: new PID, mount, UTS, IPC, network and cgroup namespaces; the default
//! capability set, masked and read-only paths; `no_new_privileges`; cgroup limits.

use std::path::Path;

use oci_spec::runtime::{
    LinuxCpu, LinuxIdMappingBuilder, LinuxMemory, LinuxNamespaceBuilder, LinuxNamespaceType,
    LinuxPids, LinuxResources, Mount, MountBuilder, PosixRlimitBuilder, PosixRlimitType, Process,
    Root, Spec,
};

use super::WorkspaceSpec;
use crate::{Error, Result};

/// Where the init binary (dumb-init, from the image) lives. It blocks in `sigwait` until a
/// signal comes (a child's exit among them): an idle workspace's init never wakes. (tini, before
/// it, woke once a second to reap.)
pub const INIT: &str = "/usr/bin/dumb-init";

/// The init's arguments before the workspace's first process: signals go to that process alone
/// (not to a process group; the agent puts what it runs in groups of its own).
pub const INIT_ARGS: [&str; 2] = ["--single-child", "--"];

/// The names the kernel gives the init process (`/proc/PID/comm`): dumb-init, or tini in a
/// workspace an earlier version started (workspaces outlive the server).
pub const INIT_COMMS: [&str; 2] = ["dumb-init", "tini"];

/// The CPU period the quota is measured against (100 ms).
const CPU_PERIOD_US: u64 = 100_000;

fn oci(e: oci_spec::OciSpecError) -> Error {
    Error::Internal(format!("building the OCI spec: {e}"))
}

/// The spec for `want`, with its root at `rootfs`.
/// `seccomp`: the runtime applies the default profile (runc and crun; gVisor filters syscalls
/// itself). `confine`: the init starts under `tandem-confine` instead ([`super::confine`]).
/// `userns`: a user namespace whose root is host uid [`super::userns::HOST_BASE`].
pub fn build(
    want: &WorkspaceSpec,
    rootfs: &Path,
    netns: Option<&Path>,
    seccomp: bool,
    confine: bool,
    userns: bool,
) -> Result<Spec> {
    let mut spec = Spec::default();
    spec.set_hostname(Some(want.hostname.clone()));

    let mut root = Root::default();
    root.set_path(rootfs.to_path_buf());
    root.set_readonly(Some(false));
    spec.set_root(Some(root));

    let mut process = Process::default();
    let mut args = match confine {
        true => super::confine::prefix(),
        false => Vec::new(),
    };
    args.push(INIT.to_string());
    args.extend(INIT_ARGS.map(String::from));
    args.extend(want.init.iter().cloned());
    process.set_args(Some(args));
    let mut env = vec![
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string(),
        "TERM=xterm-256color".into(),
        "HOME=/root".into(),
        "LANG=C.UTF-8".into(),
    ];
    env.extend(want.env.iter().map(|(k, v)| format!("{k}={v}")));
    process.set_env(Some(env));
    process.set_cwd("/".into());
    // Stated, not left to the default: every process of the workspace, `exec`'d ones too,
    // can never gain privileges.
    process.set_no_new_privileges(Some(true));
    process.set_terminal(Some(false));
    // Builds and language servers open many files; a workspace may not exceed the host's hard limit.
    let host_hard = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_or(1024, |(_, h)| h);
    let nofile = host_hard.min(65_536);
    process.set_rlimits(Some(vec![
        PosixRlimitBuilder::default()
            .typ(PosixRlimitType::RlimitNofile)
            .hard(nofile)
            .soft(nofile)
            .build()
            .map_err(oci)?,
    ]));
    spec.set_process(Some(process));

    let mut mounts: Vec<Mount> = spec.mounts().clone().unwrap_or_default();
    // A private /tmp that does not live in the writable layer (before the binds: one may lie
    // under it, the desktop's X socket directory).
    mounts.push(
        MountBuilder::default()
            .destination("/tmp")
            .typ("tmpfs")
            .source("tmpfs")
            .options(vec![
                "nosuid".to_string(),
                "nodev".into(),
                "mode=1777".into(),
                "size=1g".into(),
            ])
            .build()
            .map_err(oci)?,
    );
    for b in &want.files.binds {
        let mut options = vec!["rbind".to_string(), "nosuid".into(), "nodev".into()];
        options.push(if b.readonly { "ro".into() } else { "rw".into() });
        mounts.push(
            MountBuilder::default()
                .destination(b.container.clone())
                .typ("bind")
                .source(b.host.clone())
                .options(options)
                .build()
                .map_err(oci)?,
        );
    }
    spec.set_mounts(Some(mounts));

    let linux = spec
        .linux_mut()
        .as_mut()
        .ok_or_else(|| Error::Internal("default spec has no linux section".into()))?;
    linux.set_cgroups_path(Some(format!("/tandem/{}", want.id).into()));
    if seccomp {
        linux.set_seccomp(Some(super::seccomp::default_profile()));
    }
    // With egress, the workspace joins the network namespace made for it instead of a new one.
    if let Some(path) = netns
        && let Some(namespaces) = linux.namespaces_mut()
    {
        for ns in namespaces.iter_mut() {
            if ns.typ() == LinuxNamespaceType::Network {
                ns.set_path(Some(path.to_path_buf()));
            }
        }
    }
    if userns {
        if let Some(namespaces) = linux.namespaces_mut() {
            namespaces.push(
                LinuxNamespaceBuilder::default()
                    .typ(LinuxNamespaceType::User)
                    .build()
                    .map_err(oci)?,
            );
        }
        let map = LinuxIdMappingBuilder::default()
            .container_id(0u32)
            .host_id(super::userns::HOST_BASE)
            .size(super::userns::COUNT)
            .build()
            .map_err(oci)?;
        linux.set_uid_mappings(Some(vec![map]));
        linux.set_gid_mappings(Some(vec![map]));
    }
    let mut resources = LinuxResources::default();
    let mut memory = LinuxMemory::default();
    memory.set_limit(Some(want.limits.memory_bytes));
    memory.set_swap(Some(want.limits.memory_bytes));
    resources.set_memory(Some(memory));
    let mut pids = LinuxPids::default();
    pids.set_limit(want.limits.pids);
    resources.set_pids(Some(pids));
    let mut cpu = LinuxCpu::default();
    cpu.set_period(Some(CPU_PERIOD_US));
    cpu.set_quota(Some(
        (want.limits.cpus * CPU_PERIOD_US as f64).round() as i64
    ));
    resources.set_cpu(Some(cpu));
    linux.set_resources(Some(resources));
    Ok(spec)
}
