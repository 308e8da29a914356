//! A program that runs beside a workspace on this machine and reads its X display: the desktop
//! encoder. It captures through X shared memory, so it must share the workspace's IPC
//! namespace; it reaches nothing the workspace cannot (its network namespace), and sees of the
//! host only the display's socket directory (at `/tmp/.X11-unix`, in a private `/tmp`) with the
//! server's data dir covered.
//!
//! [`Beside`] is where that is: opaque to callers, it travels to the encoder process as argument
//! words ([`Beside::args`], read back there by [`Beside::from_args`]), and [`Beside::enter`]
//! takes the calling thread there. Where workspaces run elsewhere, the encoder runs there too.

use std::ffi::OsString;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use nix::mount::{MsFlags, mount};
use nix::sched::CloneFlags;

use crate::{Error, Result};

/// Where a program reading one workspace's display runs (see the module's doc).
#[derive(Clone, Debug)]
pub struct Beside {
    /// The workspace's X11 socket directory.
    x11: PathBuf,
    /// The server's data dir, covered in the program's mount namespace.
    hide: PathBuf,
    /// The workspace's init (this machine's instance of it).
    init_pid: i32,
}

impl Beside {
    /// Beside the workspace whose init is `init_pid`, with its display's socket `socket` in
    /// `x11`: the socket must be a real one its X server made, never a link the workspace
    /// planted.
    pub(crate) fn new(x11: PathBuf, socket: &str, hide: PathBuf, init_pid: i32) -> Result<Self> {
        match std::fs::symlink_metadata(x11.join(socket)) {
            Ok(m) if std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()) => {}
            _ => {
                return Err(Error::Unavailable(
                    "the workspace's display is not up".into(),
                ));
            }
        }
        Ok(Self {
            x11,
            hide,
            init_pid,
        })
    }

    /// As argument words for the program's command line.
    pub fn args(&self) -> Vec<OsString> {
        vec![
            self.x11.clone().into(),
            self.hide.clone().into(),
            self.init_pid.to_string().into(),
        ]
    }

    /// Read back from [`Beside::args`]'s words.
    pub fn from_args(words: &[OsString]) -> Result<Self> {
        let [x11, hide, pid] = words else {
            return Err(Error::Invalid(
                "expected the workspace's display directory, the data dir and its instance".into(),
            ));
        };
        let init_pid = pid
            .to_str()
            .and_then(|p| p.parse().ok())
            .filter(|p| *p > 1)
            .ok_or_else(|| Error::Invalid(format!("{pid:?} is not a workspace's instance")))?;
        Ok(Self {
            x11: x11.into(),
            hide: hide.into(),
            init_pid,
        })
    }

    /// Takes this process there: the workspace's IPC namespace, a mount namespace of its own
    /// (the data dir covered, a private tmpfs on `/tmp` holding only the display directory at
    /// `/tmp/.X11-unix`), then the workspace's network. Call it while the process has one
    /// thread (a mount namespace is per process).
    pub fn enter(&self) -> Result<()> {
        let ipc = std::fs::File::open(format!("/proc/{}/ns/ipc", self.init_pid))?;
        let net = std::fs::File::open(format!("/proc/{}/ns/net", self.init_pid))?;
        nix::sched::setns(ipc, CloneFlags::CLONE_NEWIPC).map_err(|e| {
            Error::Unavailable(format!("joining the workspace's IPC namespace: {e}"))
        })?;
        private_mounts(&self.x11, &self.hide)?;
        nix::sched::setns(net, CloneFlags::CLONE_NEWNET)
            .map_err(|e| Error::Unavailable(format!("joining the workspace's network: {e}")))
    }
}

/// A mount namespace of this process's own: the data dir covered, a private tmpfs on `/tmp`,
/// and `x11_dir` at `/tmp/.X11-unix` (where Xlib looks for the display's socket).
fn private_mounts(x11_dir: &Path, data_dir: &Path) -> Result<()> {
    let fail = |what: &str, e: nix::Error| Error::Unavailable(format!("{what}: {e}"));
    nix::sched::unshare(CloneFlags::CLONE_NEWNS)
        .map_err(|e| fail("a mount namespace for the encoder", e))?;
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| fail("making the encoder's mounts private", e))?;
    // Opened before the data dir and `/tmp` (either may hold it) are covered, and in this
    // namespace (a bind's source must be one of its mounts).
    let display_dir = std::fs::File::open(x11_dir)?;
    // The server's data dir (keys, database, every workspace's layers): an empty read-only
    // tmpfs over it.
    mount(
        Some("tmpfs"),
        data_dir,
        Some("tmpfs"),
        MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some("size=4k,mode=0555"),
    )
    .map_err(|e| fail("hiding the data dir from the encoder", e))?;
    mount(
        Some("tmpfs"),
        "/tmp",
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some("size=16m,mode=1777"),
    )
    .map_err(|e| fail("a private /tmp for the encoder", e))?;
    let target = Path::new("/tmp/.X11-unix");
    std::fs::create_dir(target)?;
    mount(
        Some(Path::new(&format!(
            "/proc/self/fd/{}",
            display_dir.as_raw_fd()
        ))),
        target,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(|e| fail("binding the workspace's display", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn its_words_read_back_and_nothing_else_does() {
        let b = Beside {
            x11: "/d/x11".into(),
            hide: "/d".into(),
            init_pid: 4242,
        };
        let back = Beside::from_args(&b.args()).unwrap();
        assert_eq!(back.x11, b.x11);
        assert_eq!(back.hide, b.hide);
        assert_eq!(back.init_pid, 4242);
        for words in [
            vec![],
            vec!["/d/x11".into(), "/d".into()],
            vec!["/d/x11".into(), "/d".into(), "1".into()],
            vec!["/d/x11".into(), "/d".into(), "-5".into()],
            vec!["/d/x11".into(), "/d".into(), "12x".into()],
        ] {
            assert!(Beside::from_args(&words).is_err(), "{words:?}");
        }
    }

    #[test]
    fn a_display_that_is_not_a_socket_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("X0"), "").unwrap();
        std::os::unix::fs::symlink("/run/dbus/system_bus_socket", dir.path().join("X1")).unwrap();
        for socket in ["X0", "X1", "X2"] {
            assert!(
                Beside::new(dir.path().into(), socket, "/d".into(), 42).is_err(),
                "{socket}"
            );
        }
        let _listener = std::os::unix::net::UnixListener::bind(dir.path().join("X3")).unwrap();
        assert!(Beside::new(dir.path().into(), "X3", "/d".into(), 42).is_ok());
    }
}
