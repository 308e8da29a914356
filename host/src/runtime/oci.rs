//! The OCI driver: a runtime binary (runc, crun or runsc) runs each workspace from a generated
//! bundle whose root is an overlayfs mount of the workspace's layers.
//!
//! Layout under `<data dir>`: `workspaces/<id>/{upper,work,rootfs,config.json,init.log}` and the
//! runtime's own state in `runtime/<name>/`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use futures::future::BoxFuture;

use super::{
    AgentStream, ExecOutput, ExecRequest, GatewayListener, Keep, Limits, Runtime, Workspace,
    WorkspaceSpec, beside::Beside, local_agent, overlay, spec, validate_id,
};
use crate::{Error, Result};

/// The smallest pids limit a gVisor workspace gets (its Sentry's threads count too).
pub const RUNSC_MIN_PIDS: i64 = 32_768;

pub use super::kind::{Confinement, Kind};
pub use super::layout::{Bind, Files};

/// A runtime binary plus the directories it works in.
pub struct OciRuntime {
    pub(super) kind: Kind,
    /// The server's data dir (covered in what runs beside a workspace).
    pub(super) data_dir: PathBuf,
    pub(super) state_dir: PathBuf,
    pub(super) workspaces_dir: PathBuf,
    /// Each workspace in its own user namespace (where the kernel allows it).
    pub(super) userns: bool,
    /// Where disk templates are kept, when workspaces get disks of their own ([`disk`]).
    pub(super) disks: Option<PathBuf>,
    pub(super) seccomp: bool,
    /// `tandem-confine` and the precompiled filter, when every process starts under them
    /// ([`super::confine`]); otherwise the runtime applies the profile itself.
    pub(super) confine: Option<PathBuf>,
    /// `tandem-confine --without-cgroup2`, where crun runs through it (a hybrid cgroup host
    /// without the runtime's own namespace); otherwise `unshare` and a shell do that there.
    pub(super) crun_launcher: Option<PathBuf>,
    /// The mount namespace the runtime runs in, without the workspaces' mounts
    /// ([`super::runtime_ns`]), where `tandem-confine` can make it.
    pub(super) runtime_ns: Option<super::runtime_ns::RuntimeNs>,
}

impl OciRuntime {
    /// A driver for `kind` keeping its state under `data_dir`.
    pub fn new(kind: Kind, data_dir: &Path) -> Result<Self> {
        Self::with_confinement(kind, data_dir, Confinement::default())
    }

    /// A driver whose workspaces get only the confinement `c` turns on (and the host allows).
    pub fn with_confinement(kind: Kind, data_dir: &Path, c: Confinement) -> Result<Self> {
        std::fs::create_dir_all(data_dir)?;
        // Mount points are compared with the kernel's absolute, resolved paths.
        let data_dir = &std::fs::canonicalize(data_dir)?;
        let state_dir = data_dir.join("runtime").join(kind.binary());
        let workspaces_dir = data_dir.join("workspaces");
        std::fs::create_dir_all(&state_dir)?;
        std::fs::create_dir_all(&workspaces_dir)?;
        // Reachable by a known path, not listable: a workspace's directory is not a catalogue
        // of the others'.
        std::fs::set_permissions(
            &workspaces_dir,
            std::os::unix::fs::PermissionsExt::from_mode(0o711),
        )?;
        let userns = c.user_namespaces
            && super::userns::kernel_allows()
            && match super::userns::reachable(&workspaces_dir) {
                Ok(()) => true,
                Err(why) => {
                    tracing::warn!("workspaces run without user namespaces: {why}");
                    false
                }
            };
        let disks = (c.disks && super::disk::unavailable().is_none())
            .then(|| data_dir.join("runtime").join("disks"));
        if let Some(templates) = &disks {
            super::disk::hold(templates);
        }
        Ok(Self {
            kind,
            data_dir: data_dir.clone(),
            state_dir,
            workspaces_dir,
            userns,
            disks,
            seccomp: c.seccomp && kind != Kind::Runsc,
            confine: None,
            crun_launcher: None,
            runtime_ns: None,
        })
    }

    /// True when workspace processes start under `tandem-confine`'s precompiled filter.
    pub fn precompiled_seccomp(&self) -> bool {
        self.confine.is_some()
    }

    /// True when each workspace has a disk of its own (a size limit on what it writes).
    pub fn disk_limits(&self) -> bool {
        self.disks.is_some()
    }

    pub(super) async fn prepare_inner(&self, id: &str, limits: super::Limits) -> Result<PathBuf> {
        validate_id(id)?;
        let dir = self.dir(id);
        std::fs::create_dir_all(&dir)?;
        if let Some(templates) = &self.disks {
            super::disk::ensure(&dir, templates, limits.disk_bytes).await?;
        }
        let upper = self.upper_dir(id);
        let legacy = dir.join("upper");
        if self.disks.is_some() && legacy.is_dir() && !upper.exists() {
            // A layer kept before workspaces had disks: moved onto its disk.
            super::disk::copy_tree(&legacy, &upper).await?;
            remove_dir_all_writable(&legacy)?;
        }
        std::fs::create_dir_all(&upper)?;
        Ok(upper)
    }

    /// True when its workspaces run in user namespaces (their root is not the host's).
    pub fn user_namespaces(&self) -> bool {
        self.userns
    }

    /// Runs the runtime binary with `args`; returns stdout, or an error with its stderr.
    async fn run(&self, args: &[&str]) -> Result<String> {
        let out = self
            .command()
            .args(args)
            .stdin(Stdio::null())
            .output()
            .await
            .map_err(|e| Error::Config(format!("cannot run {}: {e}", self.kind.binary())))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).to_string())
        } else if out.status.code() == Some(tandem_confine::LAUNCHER_BROKEN) {
            Err(launcher_broken(&String::from_utf8_lossy(&out.stderr)))
        } else {
            Err(Error::Internal(format!(
                "{} {}: {}",
                self.kind.binary(),
                args.first().unwrap_or(&""),
                String::from_utf8_lossy(&out.stderr).trim()
            )))
        }
    }

    async fn start_inner(&self, want: &WorkspaceSpec, dir: &Path) -> Result<Workspace> {
        if let Some(image) = &want.files.image {
            return Err(Error::Invalid(format!(
                "the {} runtime starts workspaces from layers on this machine, not from the image {image}",
                self.kind.binary()
            )));
        }
        // gVisor's own threads count against the pids limit: give it room.
        let mut want = want.clone();
        if self.kind == Kind::Runsc {
            want.limits.pids = want.limits.pids.max(RUNSC_MIN_PIDS);
        }
        let want = &want;
        let mut phases = super::start_phases::Phases::default();
        // The workspace's own layer sits on its own disk, with the overlay's work directory
        // beside it (they must share a filesystem).
        let upper = self.prepare_inner(&want.id, want.limits).await?;
        phases.end("disk");
        let work = upper.with_file_name("work");
        let rootfs = dir.join("rootfs");
        for d in [&upper, &work, &rootfs] {
            std::fs::create_dir_all(d)?;
        }
        let mut want = want.clone();
        let netns = match &want.egress {
            Some(_) if self.kind == Kind::Runsc => {
                return Err(Error::Invalid(
                    "egress allow-lists need runc or crun (gVisor runs here without a network)"
                        .into(),
                ));
            }
            Some(egress) => {
                let net = super::network::setup(&want.id, dir, egress).await?;
                want.files.binds.push(Bind {
                    host: dir.join("hosts"),
                    container: "/etc/hosts".into(),
                    readonly: true,
                });
                want.files.binds.push(Bind {
                    host: dir.join("resolv.conf"),
                    container: "/etc/resolv.conf".into(),
                    readonly: true,
                });
                Some(PathBuf::from("/var/run/netns").join(&net.netns))
            }
            None => None,
        };
        phases.end("network");
        if let Some(dir) = &self.confine {
            want.files.binds.push(Bind {
                host: dir.clone(),
                container: super::confine::MOUNT.into(),
                readonly: true,
            });
        }
        let want = &want;
        let owner = self.userns.then_some(super::userns::HOST_BASE);
        if self.userns {
            // What the workspace sees is stored with its own ids (a no-op for marked trees).
            let trees: Vec<PathBuf> = want.files.layers.iter().chain([&upper]).cloned().collect();
            tokio::task::spawn_blocking(move || {
                trees.iter().try_for_each(|t| super::userns::shift_tree(t))
            })
            .await
            .map_err(|e| Error::Internal(format!("shifting layer ownership: {e}")))??;
            for b in want
                .files
                .binds
                .iter()
                .filter(|b| !b.readonly && b.host.is_dir())
            {
                super::userns::own(&b.host)?;
            }
        }
        phases.end("user namespace");
        overlay::mount_overlay(&want.files.layers, &upper, &work, &rootfs)?;
        if self.kind != Kind::Runsc {
            // Private: the runtime's copy of it is then no slave of this one, so unmounting this
            // one after the run (below) never reaches the workspace's root, even while the
            // workspace is still setting itself up.
            overlay::make_private(&rootfs)?;
        }
        if self.confine.is_some() {
            super::confine::clear_mount_point(&rootfs)?;
        }
        // Bind targets must exist in the root; creating them lands in the writable layer, which
        // workspace code may have written (resumed and forked layers, a snapshot's setup): every
        // step is resolved inside the root, never through a link it planted.
        for b in &want.files.binds {
            super::inroot::ensure(&rootfs, Path::new(&b.container), b.host.is_dir(), owner)?;
        }
        phases.end("mount");
        let confine = self.confine.is_some();
        spec::build(
            want,
            &rootfs,
            netns.as_deref(),
            self.seccomp && !confine,
            confine,
            self.userns,
        )?
        .save(dir.join("config.json"))
        .map_err(|e| Error::Internal(format!("writing config.json: {e}")))?;
        // The container inherits these descriptors, so they must be files, not pipes a wait
        // would block on.
        // On the workspace's disk when it has one: what its init prints is its to fill.
        phases.end("spec");
        let log_path = work.with_file_name("init.log");
        let log = std::fs::File::create(&log_path)?;
        let pid_file = dir.join("init.pid");
        // What the runtime's own namespace lacks: this workspace's root, disk and network.
        let disk = dir.join(super::disk::MOUNT);
        let mut carry = vec![rootfs.as_path()];
        if self.disks.is_some() {
            carry.push(&disk);
        }
        carry.extend(netns.as_deref());
        let status = self
            .command_carrying(&carry)
            .args(["run", "--detach", "--bundle"])
            .arg(dir)
            .arg("--pid-file")
            .arg(&pid_file)
            .arg(&want.id)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .status()
            .await
            .map_err(|e| Error::Config(format!("cannot run {}: {e}", self.kind.binary())))?;
        if !status.success() {
            let init_log = std::fs::read_to_string(&log_path).unwrap_or_default();
            if status.code() == Some(tandem_confine::LAUNCHER_BROKEN) {
                return Err(launcher_broken(&init_log));
            }
            return Err(Error::Internal(format!(
                "{} could not start workspace {}: {}",
                self.kind.binary(),
                want.id,
                init_log.trim()
            )));
        }
        phases.end("runtime run");
        // The workspace's root lives on in its own mount namespace (pivoted into, so no host
        // unmount reaches it); the host's copy goes now. Every host mount costs each later
        // start where the runtime works in the host's namespace (it copies and walks the whole
        // mount table), and an overlay's is the longest line in it. Nothing on the host reads the root afterwards
        // (exec joins the workspace's namespaces; the writable layer stays on the mounted
        // disk). gVisor's gofer serves the root from the host's side, so it keeps its mount.
        // The workspace runs either way: a root that will not unmount only costs density (the
        // stop unmounts it as before).
        if self.kind != Kind::Runsc
            && let Err(e) = overlay::unmount(&rootfs)
        {
            tracing::warn!(workspace = %want.id, error = %e, "the workspace's root stays in the host's mount table");
        }
        let pid = std::fs::read_to_string(&pid_file)?
            .trim()
            .parse()
            .map_err(|e| Error::Internal(format!("{}: {e}", pid_file.display())))?;
        self.kind.until_started(pid).await;
        Ok(Workspace {
            id: want.id.clone(),
            instance: pid,
            took: phases.done,
        })
    }

    pub(super) async fn is_running_inner(&self, id: &str) -> Result<bool> {
        match self.run(&["state", id]).await {
            Ok(json) => {
                let v: serde_json::Value = serde_json::from_str(&json).unwrap_or_default();
                Ok(v["status"] == "running")
            }
            // Not the runtime's answer: the runtime never ran.
            Err(e @ Error::Unavailable(_)) => Err(e),
            Err(_) => Ok(false),
        }
    }

    async fn stop_inner(&self, id: &str, keep: Keep) -> Result<()> {
        validate_id(id)?;
        // Both fail harmlessly when the container is already gone.
        let _ = self.run(&["kill", id, "KILL"]).await;
        if let Err(e) = self.run(&["delete", "--force", id]).await {
            let msg = e.to_string();
            if !(msg.contains("does not exist")
                || msg.contains("not exist")
                || msg.contains("no such"))
            {
                return Err(e);
            }
        }
        let dir = self.dir(id);
        overlay::unmount(&dir.join("rootfs"))?;
        super::network::teardown(&dir).await?;
        let disk = dir.join(super::disk::MOUNT);
        if keep != Keep::Nothing && super::disk::is_mounted(&disk) {
            // The kept layer stays on its mounted disk; what was beside it there goes.
            for entry in std::fs::read_dir(&disk).into_iter().flatten().flatten() {
                if entry.file_name() != "upper" && entry.file_name() != "lost+found" {
                    let _ = remove_dir_all_writable(&entry.path());
                }
            }
        }
        // A kept disk is mounted again by the next `prepare` or `start`: a stopped workspace
        // holds no loop device.
        super::disk::unmount(&dir)?;
        // Everything but a kept writable layer goes (bundle, mount point, work dir, sockets).
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = entry.file_name();
            if keep != Keep::Nothing
                && (name == "upper" || name == super::disk::MOUNT || name == super::disk::IMAGE)
            {
                continue;
            }
            let p = entry.path();
            let _ = if p.is_dir() {
                remove_dir_all_writable(&p)
            } else {
                std::fs::remove_file(&p)
            };
        }
        // Gone unless it still holds a kept layer.
        let _ = std::fs::remove_dir(&dir);
        Ok(())
    }
}

impl Drop for OciRuntime {
    fn drop(&mut self) {
        if let Some(templates) = &self.disks {
            super::disk::let_go(templates);
        }
    }
}

/// The work dir of an overlay holds a root-only `work/` subdirectory; removal must not trip over
/// permissions or a half-deleted tree.
fn remove_dir_all_writable(p: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(p) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}

impl Runtime for OciRuntime {
    fn name(&self) -> &str {
        self.kind.binary()
    }

    fn start(&self, want: WorkspaceSpec) -> BoxFuture<'_, Result<Workspace>> {
        Box::pin(async move {
            validate_id(&want.id)?;
            let dir = self.dir(&want.id);
            if dir.join("rootfs").exists() {
                return Err(Error::Conflict(format!(
                    "workspace {} already exists",
                    want.id
                )));
            }
            std::fs::create_dir_all(&dir)?;
            match tokio::time::timeout(Duration::from_secs(60), self.start_inner(&want, &dir)).await
            {
                Ok(Ok(w)) => Ok(w),
                // Everything the start made goes but the writable layer: it may be a resumed
                // session's work, which only the caller knows (it drops a fresh one).
                Ok(Err(e)) => {
                    let _ = self.stop_inner(&want.id, Keep::Upper).await;
                    Err(e)
                }
                Err(_) => {
                    let _ = self.stop_inner(&want.id, Keep::Upper).await;
                    Err(Error::Internal(format!(
                        "workspace {} did not start within 60 s",
                        want.id
                    )))
                }
            }
        })
    }

    fn exec<'a>(&'a self, id: &'a str, req: ExecRequest) -> BoxFuture<'a, Result<ExecOutput>> {
        Box::pin(self.exec_inner(id, req))
    }

    fn is_running<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.is_running_inner(id))
    }

    fn pause<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            validate_id(id)?;
            self.run(&["pause", id]).await.map(|_| ())
        })
    }

    fn resume<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            validate_id(id)?;
            self.run(&["resume", id]).await.map(|_| ())
        })
    }

    fn prepare<'a>(&'a self, id: &'a str, limits: Limits) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move { self.prepare_inner(id, limits).await.map(|_| ()) })
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<String>>> {
        Box::pin(async move {
            let out = self.run(&["list", "--quiet"]).await?;
            Ok(out
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(str::to_string)
                .collect())
        })
    }

    fn stop<'a>(&'a self, id: &'a str, keep: Keep) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.stop_inner(id, keep))
    }

    fn reattach<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            validate_id(id)?;
            super::network::reattach(&self.dir(id)).await
        })
    }

    /// The agent's unix socket, whose peer must be inside the workspace.
    fn connect_agent<'a>(
        &'a self,
        id: &'a str,
        instance: i32,
    ) -> BoxFuture<'a, Result<AgentStream>> {
        Box::pin(async move { local_agent::connect(id, &self.upper_dir(id), instance).await })
    }

    /// A unix socket only the workspace's root may open, in a directory bound read-only into
    /// the workspace.
    fn listen_gateway<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Box<dyn GatewayListener>>> {
        Box::pin(
            async move { local_agent::listen_gateway(&self.dirs(id).gateway, self.root_uid()) },
        )
    }

    fn gateway_listening(&self, id: &str) -> bool {
        local_agent::gateway_socket(&self.dirs(id).gateway).exists()
    }

    fn alive<'a>(&'a self, _id: &'a str, instance: i32) -> BoxFuture<'a, bool> {
        Box::pin(async move { local_agent::alive(instance) })
    }

    /// A confined child of the server in the workspace's IPC and network namespaces.
    fn beside<'a>(
        &'a self,
        id: &'a str,
        instance: i32,
        display: u32,
    ) -> BoxFuture<'a, Result<Beside>> {
        Box::pin(async move {
            validate_id(id)?;
            if !local_agent::alive(instance) {
                return Err(Error::Conflict(format!("workspace {id} is not running")));
            }
            Beside::new(
                self.dirs(id).x11,
                &format!("X{display}"),
                self.data_dir.clone(),
                instance,
            )
        })
    }

    fn local(&self) -> Option<&OciRuntime> {
        Some(self)
    }
}

/// The runtime never ran: the namespace it works in cannot be used.
fn launcher_broken(stderr: &str) -> Error {
    Error::Unavailable(format!(
        "{}; restart the server (`tandem serve`) to make the runtime's mount namespace again",
        stderr.trim()
    ))
}
