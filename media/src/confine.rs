//! The encoder child's confinement. It parses what a workspace's X server sends, so it runs as
//! `nobody` with no capabilities, beside the workspace (where the workspace's runtime says:
//! here, its IPC namespace for X shared memory, its network, and a mount namespace whose `/tmp`
//! holds only the display's directory, so nothing is shared with the host's `/tmp` or another
//! encoder: not GStreamer's registry, not a socket directory), and in a PID namespace of its
//! own where it sees and signals no host process and no other encoder.
//!
//! Two stages, as a process only enters a new PID namespace through its children: the outer
//! stage (`tandem desktop-encode`, root, started by the server) goes beside the workspace
//! (`enter`, from the runtime), makes the PID namespace and starts itself again as the inner
//! stage, PID 1 there, which mounts its own `/proc`, drops privileges and encodes. The outer
//! stage drops privileges too and exits with the inner's status; the inner dies with it.

use nix::mount::{MsFlags, mount};
use nix::sched::CloneFlags;

use crate::{Error, Result};

/// Marks the inner stage in its environment (the server starts encoders with an empty one).
const STAGE: &str = "TANDEM_ENCODER_STAGE";

/// GStreamer's plugin registry, in the encoder's private `/tmp`.
pub const REGISTRY: &str = "/tmp/gst-registry.bin";

/// The uid and gid the encoder runs as: `nobody`.
pub const ENCODER_UID: u32 = 65534;

/// True in the inner stage.
pub fn is_inner() -> bool {
    std::env::var_os(STAGE).is_some_and(|v| v == "inner")
}

/// The outer stage: goes beside the workspace (`enter`: its namespaces and the private mounts,
/// with the display's directory at `/tmp/.X11-unix`), runs the inner stage in a new PID
/// namespace with the same arguments and returns its exit code.
pub fn outer(enter: impl FnOnce() -> Result<()>) -> Result<i32> {
    // Die with the server.
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
    // Still one thread: the mount namespace can be ours alone.
    enter()?;
    nix::sched::unshare(CloneFlags::CLONE_NEWPID)
        .map_err(|e| Error::Unavailable(format!("a PID namespace for the encoder: {e}")))?;
    // `/proc/self/exe` is this very binary, wherever its path leads now.
    let mut inner = std::process::Command::new("/proc/self/exe")
        .args(std::env::args_os().skip(1))
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", "/nonexistent")
        .env("GST_REGISTRY", REGISTRY)
        .env(STAGE, "inner")
        .spawn()
        .map_err(|e| Error::Unavailable(format!("starting the encoder's inner stage: {e}")))?;
    drop_privileges()?;
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
    let status = inner.wait()?;
    Ok(status.code().unwrap_or_else(|| {
        128 + std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(0)
    }))
}

/// The inner stage's confinement, before it parses anything: PID 1 of its own PID namespace
/// (or it refuses), its own `/proc`, `nobody` with no capabilities.
pub fn inner() -> Result<()> {
    if std::process::id() != 1 {
        return Err(Error::Unavailable(
            "the encoder runs only as the first process of a PID namespace of its own".into(),
        ));
    }
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
    mount(
        Some("proc"),
        "/proc",
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(|e| Error::Unavailable(format!("the encoder's own /proc: {e}")))?;
    drop_privileges()?;
    // Changing the uid cleared the parent-death signal: set it again.
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
    Ok(())
}

/// Becomes `nobody` with no capabilities and no way back (`no_new_privs`): the encoder reads
/// only what everyone may read, writes nowhere but its pipes and its private `/tmp`.
fn drop_privileges() -> Result<()> {
    use nix::unistd::{Gid, Uid, setgroups, setresgid, setresuid};
    let fail = |what: &str, e: nix::Error| {
        Error::Unavailable(format!(
            "the encoder could not drop privileges ({what}): {e}"
        ))
    };
    setgroups(&[]).map_err(|e| fail("groups", e))?;
    let gid = Gid::from_raw(ENCODER_UID);
    setresgid(gid, gid, gid).map_err(|e| fail("gid", e))?;
    let uid = Uid::from_raw(ENCODER_UID);
    // From root to another uid: every capability goes (no keep-caps).
    setresuid(uid, uid, uid).map_err(|e| fail("uid", e))?;
    nix::sys::prctl::set_no_new_privs().map_err(|e| fail("no_new_privs", e))?;
    if nix::unistd::geteuid().is_root() || nix::unistd::setuid(Uid::from_raw(0)).is_ok() {
        return Err(Error::Unavailable(
            "the encoder still has root after dropping it".into(),
        ));
    }
    Ok(())
}

/// The host PID of the encoding process (the inner stage) of the outer stage `outer`, once it
/// runs: the one child of `outer`.
pub fn inner_pid(outer: u32) -> Option<u32> {
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    // `pid (comm) state ppid …`: the name may hold spaces and parentheses.
                    let rest = s.rsplit_once(") ")?.1;
                    rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(outer)
        })
}
