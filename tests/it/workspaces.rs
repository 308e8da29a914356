//! Workspaces on the real OCI runtime: overlay roots, isolation, limits, exec, clean stops.
//!
//! They need root, runc and mmdebstrap (the test image is built once and cached in
//! `TANDEM_TEST_IMAGES_DIR`). Without them they print SKIP, unless
//! `TANDEM_TEST_REQUIRE_WORKSPACES=1` (set by `cargo xtask test`), when they fail.

use std::path::PathBuf;
use std::time::Instant;

use tandem_host::images;
use tandem_host::runtime::oci::{Bind, Files, Kind, OciRuntime};
use tandem_host::runtime::{ExecRequest, Keep, Limits, MAX_EXEC_OUTPUT, Runtime, WorkspaceSpec};
use tokio::sync::OnceCell;

pub const TEST_RECIPE: &str = include_str!("../../images/test/image.toml");

static IMAGE: OnceCell<Option<PathBuf>> = OnceCell::const_new();

/// The test image's root filesystem, built on first use; `None` (with SKIP printed) when this
/// host cannot run workspaces and they are not required.
pub async fn image() -> Option<PathBuf> {
    IMAGE
        .get_or_init(|| async {
            let required = std::env::var("TANDEM_TEST_REQUIRE_WORKSPACES").is_ok_and(|v| v == "1");
            let missing: Vec<String> = tandem_host::runtime::doctor::checks()
                .into_iter()
                .filter(|c| {
                    !c.ok && ["root", "overlayfs", "runc", "mmdebstrap"].contains(&c.name.as_str())
                })
                .map(|c| c.name)
                .collect();
            if !missing.is_empty() {
                assert!(
                    !required,
                    "workspaces required but this host lacks {missing:?}"
                );
                eprintln!("SKIP (workspaces): this host lacks {missing:?}");
                return None;
            }
            let dir = std::env::var_os("TANDEM_TEST_IMAGES_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("images"));
            let img = images::build(&dir, TEST_RECIPE, |_| {})
                .await
                .expect("test image builds");
            Some(img.rootfs)
        })
        .await
        .clone()
}

/// A server that runs workspaces on the test image (its config adjusted by `tweak`), or `None`
/// where this host cannot.
pub async fn server(
    tweak: impl FnOnce(&mut tandem_server::config::Config),
) -> Option<crate::harness::TestServer> {
    server_on(crate::harness::Backend::Sqlite, tweak).await
}

/// [`server`] on `backend`.
pub async fn server_on(
    backend: crate::harness::Backend,
    tweak: impl FnOnce(&mut tandem_server::config::Config),
) -> Option<crate::harness::TestServer> {
    let image = image().await?;
    let images_dir = image.parent()?.parent()?.to_path_buf();
    let recipe = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../images/test/image.toml");
    crate::harness::TestServer::start_with(backend, crate::harness::Transport::Socket, move |c| {
        c.images_dir = images_dir;
        c.image_recipe = Some(recipe);
        tweak(c);
    })
    .await
}

struct Env {
    kind: Kind,
    rt: OciRuntime,
    image: PathBuf,
    dir: tempfile::TempDir,
}

/// A test's workspaces go with it, even when it fails half-way.
impl Drop for Env {
    fn drop(&mut self) {
        crate::harness::remove_workspaces(&self.dir.path().join("data"));
    }
}

async fn env(kind: Kind) -> Option<Env> {
    let image = image().await?;
    if kind == Kind::Crun && !tandem_host::runtime::doctor::crun_works() {
        let required = std::env::var("TANDEM_TEST_REQUIRE_WORKSPACES").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "crun required but it does not work on this host (`tandem doctor`)"
        );
        eprintln!("SKIP (crun): crun is missing or does not work on this host");
        return None;
    }
    if kind == Kind::Runsc && !tandem_host::runtime::doctor::runsc_works() {
        // gVisor is optional: not every host can run it.
        eprintln!("SKIP (runsc): gVisor's runsc is not installed on this host");
        return None;
    }
    let dir = crate::harness::test_dir();
    // As the server runs them: every process under `tandem-confine` where that applies.
    let rt = OciRuntime::new(kind, &dir.path().join("data"))
        .unwrap()
        .with_init(&confine_bin());
    Some(Env {
        kind,
        rt,
        image,
        dir,
    })
}

/// `tandem-confine`, built next to `tandem` by `cargo xtask test`.
pub fn confine_bin() -> PathBuf {
    std::path::Path::new(env!("CARGO_BIN_EXE_tandem")).with_file_name("tandem-confine")
}

/// Runs a test body once per OCI runtime.
macro_rules! runtimes {
    ($name:ident) => {
        mod $name {
            use tandem_host::runtime::oci::Kind;
            #[tokio::test]
            async fn runc() {
                if let Some(env) = super::env(Kind::Runc).await {
                    super::$name(env).await
                }
            }
            #[tokio::test]
            async fn crun() {
                if let Some(env) = super::env(Kind::Crun).await {
                    super::$name(env).await
                }
            }
            #[tokio::test]
            async fn runsc() {
                if let Some(env) = super::env(Kind::Runsc).await {
                    super::$name(env).await
                }
            }
        }
    };
}

fn new_id() -> String {
    format!("t-{}", &uuid::Uuid::new_v4().simple().to_string()[..16])
}

impl Env {
    fn spec(&self, layers: Vec<PathBuf>) -> WorkspaceSpec {
        self.spec_with(layers, vec![])
    }

    fn spec_with(&self, layers: Vec<PathBuf>, binds: Vec<Bind>) -> WorkspaceSpec {
        let mut all = layers;
        all.push(self.image.clone());
        WorkspaceSpec {
            id: new_id(),
            files: Files::local(all, binds),
            hostname: "workspace".into(),
            env: vec![("TANDEM_TEST".into(), "1".into())],
            init: vec!["sleep".into(), "infinity".into()],
            limits: Limits {
                memory_bytes: 256 << 20,
                pids: 512,
                cpus: 1.0,
                disk_bytes: 128 << 20,
            },
            egress: None,
        }
    }

    async fn sh(&self, id: &str, script: &str) -> tandem_host::runtime::ExecOutput {
        self.rt
            .exec(
                id,
                ExecRequest {
                    argv: vec!["sh".into(), "-c".into(), script.into()],
                    ..Default::default()
                },
            )
            .await
            .unwrap()
    }
}

async fn a_workspace_runs_on_its_layers_and_writes_only_to_its_own_layer(env: Env) {
    let layer = env.dir.path().join("snapshot");
    std::fs::create_dir_all(layer.join("workspace")).unwrap();
    std::fs::write(layer.join("workspace/README.md"), "from the snapshot\n").unwrap();
    let ws = env.rt.start(env.spec(vec![layer.clone()])).await.unwrap();
    let out = env.sh(&ws.id, "cat /workspace/README.md && hostname && echo $TANDEM_TEST && echo new > /workspace/new.txt && rm /workspace/README.md").await;
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.stdout, "from the snapshot\nworkspace\n1\n");
    assert_eq!(
        std::fs::read_to_string(env.rt.upper_dir(&ws.id).join("workspace/new.txt")).unwrap(),
        "new\n",
        "writes land in the workspace's layer"
    );
    assert!(
        layer.join("workspace/README.md").exists(),
        "the snapshot layer is never modified"
    );
    assert!(
        !env.image.join("workspace").exists(),
        "the image is never modified"
    );
    assert!(env.rt.is_running(&ws.id).await.unwrap());
    env.rt.stop(&ws.id, Keep::Upper).await.unwrap();
    assert!(!env.rt.is_running(&ws.id).await.unwrap());
    assert!(
        env.rt
            .leftovers(&ws.id)
            .iter()
            .all(|l| l.starts_with("dir ")),
        "a stopped workspace holds no mount, not even of its kept disk: {:?}",
        env.rt.leftovers(&ws.id)
    );
    // Its disk comes back with the layer on it.
    env.rt
        .prepare(&ws.id, env.spec(vec![]).limits)
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(env.rt.upper_dir(&ws.id).join("workspace/new.txt")).unwrap(),
        "new\n",
        "stop can keep the diff"
    );
    env.rt.stop(&ws.id, Keep::Nothing).await.unwrap();
    assert_eq!(env.rt.leftovers(&ws.id), Vec::<String>::new());
}
runtimes!(a_workspace_runs_on_its_layers_and_writes_only_to_its_own_layer);

async fn workspaces_cannot_see_each_others_files_or_processes(env: Env) {
    let a = env.rt.start(env.spec(vec![])).await.unwrap();
    let b = env.rt.start(env.spec(vec![])).await.unwrap();
    let out = env.sh(&a.id, "echo secret > /root/a.txt; setsid sleep 600 > /dev/null 2>&1 < /dev/null & echo started").await;
    assert_eq!(out.code, Some(0), "{out:?}");
    let out = env
        .sh(
            &b.id,
            "cat /root/a.txt; cat /proc/[0-9]*/comm | sort -u | tr '\\n' ' '",
        )
        .await;
    assert!(
        out.stderr.contains("No such file"),
        "b cannot read a's file: {out:?}"
    );
    assert!(
        out.stdout.contains("dumb-init"),
        "b lists its own processes: {out:?}"
    );
    // a's sleep is visible in a only; b's own init `sleep infinity` is its only sleep.
    let a_procs = env
        .sh(&a.id, "grep -l '^sleep$' /proc/[0-9]*/comm | wc -l")
        .await;
    let b_procs = env
        .sh(&b.id, "grep -l '^sleep$' /proc/[0-9]*/comm | wc -l")
        .await;
    assert_eq!(
        a_procs.stdout.trim(),
        "2",
        "a: its init sleep + the background sleep"
    );
    assert_eq!(b_procs.stdout.trim(), "1", "b sees only its own init sleep");
    // PID 1 is the workspace's init, not the host's.
    let pid1 = env.sh(&b.id, "cat /proc/1/comm").await;
    assert_eq!(pid1.stdout.trim(), "dumb-init");
    env.rt.stop(&a.id, Keep::Nothing).await.unwrap();
    env.rt.stop(&b.id, Keep::Nothing).await.unwrap();
}
runtimes!(workspaces_cannot_see_each_others_files_or_processes);

/// Context switches of every thread of host process `pid`: each is a wakeup or a preemption.
fn switches(pid: i32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .map(|t| std::fs::read_to_string(t.path().join("status")).unwrap_or_default())
        .flat_map(|status| {
            status
                .lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
}

/// Nothing in an idle workspace polls: its init blocks until a signal comes and its first
/// process (`sleep infinity`) sleeps, so neither wakes over seconds of idleness. (tini, the
/// init before, woke every second to reap: 1.02 wakeups a second per idle workspace in
/// `cargo xtask bench density`.) On gVisor the init runs inside the sandbox's kernel, which
/// the host cannot watch this way: runc and crun only.
async fn an_idle_workspace_never_wakes(env: Env) {
    let ws = env.rt.start(env.spec(vec![])).await.unwrap();
    let init = ws.instance;
    // The runtime returns once the init is exec'd: wait (for events in /proc, not for time) until
    // the init is dumb-init, its one child is `sleep`, and both are asleep.
    let comm = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    let asleep = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('S'))
    };
    let children = |pid: i32| -> Vec<i32> {
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let child = loop {
        let kids = children(init);
        if comm(init) == "dumb-init"
            && let [child] = kids[..]
            && comm(child) == "sleep"
            && asleep(init)
            && asleep(child)
        {
            break child;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the init is {:?} with children {kids:?}",
            comm(init)
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let all = [init, child];
    let before: Vec<u64> = all.iter().map(|&p| switches(p)).collect();
    // An idle stretch, measured: what it proves is that nothing happened in it.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let woke: Vec<u64> = all
        .iter()
        .zip(&before)
        .map(|(&p, b)| switches(p) - b)
        .collect();
    assert_eq!(
        woke,
        [0, 0],
        "wakeups of the init and its process over 3 idle seconds"
    );
    env.rt.stop(&ws.id, Keep::Nothing).await.unwrap();
}

mod an_idle_workspace_never_wakes {
    use tandem_host::runtime::oci::Kind;
    #[tokio::test]
    async fn runc() {
        if let Some(env) = super::env(Kind::Runc).await {
            super::an_idle_workspace_never_wakes(env).await
        }
    }
    #[tokio::test]
    async fn crun() {
        if let Some(env) = super::env(Kind::Crun).await {
            super::an_idle_workspace_never_wakes(env).await
        }
    }
}

async fn a_workspace_has_only_loopback_and_cannot_reach_host_services(env: Env) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let ws = env.rt.start(env.spec(vec![])).await.unwrap();
    // /proc/net/dev lists interfaces on every runtime (gVisor has no /sys/class/net).
    let ifaces = env
        .sh(
            &ws.id,
            "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\\n' ' '",
        )
        .await;
    assert_eq!(
        ifaces.stdout.trim(),
        "lo",
        "no interface but loopback: {ifaces:?}"
    );
    let out = env
        .sh(
            &ws.id,
            &format!(
                "bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}' && echo CONNECTED || echo REFUSED"
            ),
        )
        .await;
    assert!(out.stdout.contains("REFUSED"), "{out:?}");
    let accepted =
        tokio::time::timeout(std::time::Duration::from_millis(200), listener.accept()).await;
    assert!(
        accepted.is_err(),
        "the host's loopback service saw no connection"
    );
    env.rt.stop(&ws.id, Keep::Nothing).await.unwrap();
}
runtimes!(a_workspace_has_only_loopback_and_cannot_reach_host_services);

async fn the_memory_limit_is_enforced(env: Env) {
    let mut spec = env.spec(vec![]);
    spec.limits.memory_bytes = 64 << 20;
    let ws = env.rt.start(spec).await.unwrap();
    // `tail -n 1` must hold the whole newline-free stream in memory.
    let out = env
        .rt
        .exec(
            &ws.id,
            ExecRequest {
                argv: vec![
                    "sh".into(),
                    "-c".into(),
                    "head -c 300m /dev/zero | tail -n 1 > /dev/null; echo exit=$?".into(),
                ],
                ..Default::default()
            },
        )
        .await;
    match out {
        Ok(out) => assert!(
            !out.stdout.contains("exit=0"),
            "300 MiB fit in a 64 MiB workspace: {out:?}"
        ),
        // gVisor's memory limit applies to the whole sandbox: it may end the workspace itself.
        Err(e) => assert!(
            env.kind == Kind::Runsc && e.to_string().contains("not running"),
            "{e}"
        ),
    }
    if env.kind == Kind::Runsc {
        // gVisor's memory limit applies to the whole sandbox: it may end the workspace itself.
        env.rt.stop(&ws.id, Keep::Nothing).await.unwrap();
        return;
    }
    let small = env
        .sh(&ws.id, "head -c 16m /dev/zero | tail -n 1 | wc -c")
        .await;
    assert_eq!(
        small.stdout.trim(),
        "16777216",
        "work within the limit succeeds: {small:?}"
    );
    env.rt.stop(&ws.id, Keep::Nothing).await.unwrap();
}
runtimes!(the_memory_limit_is_enforced);

async fn exec_output_is_capped_and_timeouts_kill(env: Env) {
    let ws = env.rt.start(env.spec(vec![])).await.unwrap();
    let big = env
        .sh(
            &ws.id,
            "head -c 3000000 /dev/zero | tr '\\0' a; echo done >&2",
        )
        .await;
    assert_eq!(big.code, Some(0));
    assert!(big.truncated);
    assert_eq!(big.stdout.len(), MAX_EXEC_OUTPUT);
    assert_eq!(big.stderr, "done\n", "stderr is kept separately");
    let t = Instant::now();
    let slow = env
        .rt
        .exec(
            &ws.id,
            ExecRequest {
                argv: vec!["sleep".into(), "30".into()],
                timeout_secs: Some(1),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(slow.code, Some(137), "{slow:?}");
    assert!(t.elapsed().as_secs() < 20);
    let missing = env
        .rt
        .exec(
            &ws.id,
            ExecRequest {
                argv: vec!["no-such-command".into()],
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_ne!(missing.code, Some(0));
    env.rt.stop(&ws.id, Keep::Nothing).await.unwrap();
    let gone = env
        .rt
        .exec(
            &ws.id,
            ExecRequest {
                argv: vec!["true".into()],
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(
        gone.to_string().contains("not running"),
        "exec in a stopped workspace: {gone}"
    );
    // Stopping twice is fine.
    env.rt.stop(&ws.id, Keep::Nothing).await.unwrap();
}
runtimes!(exec_output_is_capped_and_timeouts_kill);

async fn bad_workspace_ids_are_refused(env: Env) {
    let mut spec = env.spec(vec![]);
    spec.id = "../../etc".into();
    assert!(
        env.rt
            .start(spec)
            .await
            .unwrap_err()
            .to_string()
            .contains("workspace id")
    );
    assert!(env.rt.stop("a/b", Keep::Nothing).await.is_err());
    // A workspace this runtime does not run: an error that says so, not empty output.
    let err = env
        .rt
        .exec(
            "no-such-workspace",
            ExecRequest {
                argv: vec!["true".into()],
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not running"), "{err}");
}
runtimes!(bad_workspace_ids_are_refused);

/// A running workspace adds one mount to the host's table, its disk: its root lives on only in
/// its own mount namespace (gVisor's gofer serves the root from the host, so it keeps it). Each
/// host mount costs every later start (the runtime copies and walks the whole table), and the
/// workspace still works: it writes through its root onto its disk, and stops clean.
async fn a_running_workspace_adds_one_host_mount_its_disk(env: Env) {
    let ws = env.rt.start(env.spec(vec![])).await.unwrap();
    let dir = env.dir.path().join(format!("data/workspaces/{}", ws.id));
    let dir = std::fs::canonicalize(&dir).unwrap();
    let ours: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| {
            l.split(' ')
                .nth(4)
                .is_some_and(|at| std::path::Path::new(at).starts_with(&dir))
        })
        .map(str::to_string)
        .collect();
    let root_mounted = ours
        .iter()
        .any(|l| l.split(' ').nth(4) == dir.join("rootfs").to_str());
    if env.kind == Kind::Runsc {
        assert!(root_mounted, "gVisor keeps the root on the host: {ours:#?}");
    } else {
        // Its disk where this host gives workspaces disks, and nothing else of it.
        assert_eq!(
            ours.len(),
            usize::from(env.rt.disk_limits()),
            "the workspace's mounts on the host: {ours:#?}"
        );
        assert!(!root_mounted, "{ours:#?}");
    }
    let out = env
        .sh(
            &ws.id,
            "mkdir -p /workspace && echo kept > /workspace/after.txt && cat /workspace/after.txt",
        )
        .await;
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (Some(0), "kept\n"),
        "{out:?}"
    );
    assert_eq!(
        std::fs::read_to_string(env.rt.upper_dir(&ws.id).join("workspace/after.txt")).unwrap(),
        "kept\n",
        "writes land on the workspace's disk"
    );
    env.rt.stop(&ws.id, Keep::Nothing).await.unwrap();
    let left = env.rt.leftovers(&ws.id);
    assert!(left.is_empty(), "left {left:?}");
}
runtimes!(a_running_workspace_adds_one_host_mount_its_disk);

async fn fifty_start_stop_cycles_leave_nothing_behind(env: Env) {
    let before = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .count();
    // gVisor starts take ~2 s here: fewer cycles there, the full fifty on runc and crun.
    let cycles = if env.kind == Kind::Runsc { 10 } else { 50 };
    for i in 0..cycles {
        let ws = env.rt.start(env.spec(vec![])).await.unwrap();
        let out = env.sh(&ws.id, "echo $((6*7))").await;
        assert_eq!(
            out.stdout, "42\n",
            "cycle {i}: exit {:?}, stderr {:?}",
            out.code, out.stderr
        );
        env.rt.stop(&ws.id, Keep::Nothing).await.unwrap();
        let left = env.rt.leftovers(&ws.id);
        assert!(left.is_empty(), "cycle {i} left {left:?}");
        // Dead means gone or a zombie waiting for the host's init to reap it.
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", ws.instance)).unwrap_or_default();
        let state = stat.rsplit_once(") ").and_then(|(_, r)| r.chars().next());
        let pid_alive = stat.contains("(dumb-init)") && state != Some('Z');
        assert!(!pid_alive, "cycle {i}: init {} still running", ws.instance);
    }
    let after = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .count();
    // Other tests mount concurrently; ours must not have added one per cycle.
    assert!(after < before + 10, "mounts grew from {before} to {after}");
}
runtimes!(fifty_start_stop_cycles_leave_nothing_behind);

/// Container root is not host root: a set-uid-root shell a workspace drops where the host can
/// see it (a read-write bind, like its agent's socket directory) belongs to an unprivileged host
/// uid, and the workspace's processes run as that uid on the host.
async fn workspace_root_is_an_unprivileged_host_user(env: Env) {
    use std::os::unix::fs::MetadataExt;
    assert!(
        env.rt.user_namespaces(),
        "{:?} workspaces run in user namespaces on this kernel",
        env.kind
    );
    let shared = env.dir.path().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    let spec = env.spec_with(
        vec![],
        vec![Bind {
            host: shared.clone(),
            container: "/run/shared".into(),
            readonly: false,
        }],
    );
    let ws = env.rt.start(spec).await.unwrap();
    let out = env
        .sh(
            &ws.id,
            "id -u && cp /bin/sh /run/shared/rootsh && chmod 4755 /run/shared/rootsh && touch /root/mine && test -O /root/mine && echo 0",
        )
        .await;
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.stdout, "0\n0\n", "root inside, owning its own files");
    let dropped = std::fs::metadata(shared.join("rootsh")).unwrap();
    assert_eq!(
        dropped.uid(),
        tandem_host::runtime::userns::HOST_BASE,
        "the set-uid shell is not host root's"
    );
    assert_ne!(dropped.uid(), 0);
    if env.kind != Kind::Runsc {
        // gVisor's processes are the Sentry's own; runc's and crun's are host processes.
        let status = std::fs::read_to_string(format!("/proc/{}/status", ws.instance)).unwrap();
        let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
        let uids: Vec<u32> = uid_line
            .split_whitespace()
            .skip(1)
            .map(|u| u.parse().unwrap())
            .collect();
        assert!(
            uids.iter()
                .all(|&u| u == tandem_host::runtime::userns::HOST_BASE),
            "the init runs as the workspace's host uid: {uid_line}"
        );
    }
    env.rt.stop(&ws.id, Keep::Nothing).await.unwrap();
}
runtimes!(workspace_root_is_an_unprivileged_host_user);

/// A workspace that writes without end fills its own disk only: the write fails with ENOSPC
/// inside it, `df` there shows its size, and a second workspace and the host still write.
async fn a_workspace_fills_only_its_own_disk(env: Env) {
    assert!(env.rt.disk_limits(), "this host gives workspaces disks");
    let host_free = || {
        nix::sys::statvfs::statvfs(env.dir.path())
            .unwrap()
            .blocks_available()
    };
    let free_before = host_free();
    let a = env.rt.start(env.spec(vec![])).await.unwrap();
    let b = env.rt.start(env.spec(vec![])).await.unwrap();
    let out = env
        .sh(
            &a.id,
            "df -k / | tail -1 | awk '{print $2}'; dd if=/dev/zero of=/root/fill bs=1M count=512 2>&1; echo rc=$?",
        )
        .await;
    let mut lines = out.stdout.lines();
    let size_kib: u64 = lines.next().unwrap().trim().parse().unwrap();
    assert!(
        (100 << 10..=128 << 10).contains(&size_kib),
        "df inside shows the workspace's 128 MiB disk, not the host's: {size_kib} KiB"
    );
    let rest = out.stdout.to_lowercase();
    assert!(
        rest.contains("no space left on device") && !rest.contains("rc=0"),
        "writing past the disk fails with ENOSPC: {out:?}"
    );
    let other = env
        .sh(
            &b.id,
            "dd if=/dev/zero of=/root/ok bs=1M count=32 2>&1 && echo wrote",
        )
        .await;
    assert!(
        other.stdout.contains("wrote"),
        "the other workspace still writes: {other:?}"
    );
    // The host's disk lost at most the full workspace's disk, never the 512 MiB it tried.
    let frsize = nix::sys::statvfs::statvfs(env.dir.path())
        .unwrap()
        .fragment_size() as u64;
    let used = free_before.saturating_sub(host_free()) * frsize;
    assert!(
        used < 400 << 20,
        "the host gave {used} bytes to the workspaces"
    );
    for w in [&a, &b] {
        env.rt.stop(&w.id, Keep::Nothing).await.unwrap();
        assert_eq!(env.rt.leftovers(&w.id), Vec::<String>::new());
    }
}
runtimes!(a_workspace_fills_only_its_own_disk);

/// Every process of a workspace starts under `tandem-confine` with the seccomp filter the host
/// compiled once, for every workspace: the runtime's config carries no profile for it to
/// compile; the init and `exec`'d commands are filtered and refused what the profile refuses;
/// the program is execute-only inside (so not traceable before its filter is in) and its mount
/// cannot be moved or written; a link a layer planted at the mount point is replaced.
async fn the_seccomp_filter_is_compiled_once_and_every_process_starts_under_it(env: Env) {
    if env.kind == Kind::Runsc {
        // gVisor filters syscalls itself.
        assert!(!env.rt.precompiled_seccomp());
        return;
    }
    assert!(
        env.rt.precompiled_seccomp(),
        "{:?} starts workspaces under {} (built by `cargo xtask test`)",
        env.kind,
        confine_bin().display()
    );
    let program =
        std::fs::read(env.dir.path().join("data/runtime/confine/tandem-confine")).unwrap();
    assert!(
        tandem_host::runtime::confine::is_static(&program),
        "no loader or library of the workspace's runs in it before its filter"
    );
    let planted = env.dir.path().join("planted");
    std::fs::create_dir_all(&planted).unwrap();
    std::os::unix::fs::symlink("/tmp", planted.join(".tandem")).unwrap();
    let mut ids = Vec::new();
    for layers in [vec![], vec![], vec![planted.clone()]] {
        ids.push(env.rt.start(env.spec(layers)).await.unwrap().id);
    }
    assert_eq!(
        tandem_host::runtime::seccomp_bpf::compilations(),
        1,
        "one compilation for every workspace this process starts"
    );
    for id in &ids {
        let config: serde_json::Value = serde_json::from_slice(
            &std::fs::read(
                env.dir
                    .path()
                    .join(format!("data/workspaces/{id}/config.json")),
            )
            .unwrap(),
        )
        .unwrap();
        assert!(config["linux"]["seccomp"].is_null(), "{}", config["linux"]);
        assert_eq!(config["process"]["args"][0], "/.tandem/tandem-confine");
        let status = env
            .sh(
                id,
                "grep -hE '^(NoNewPrivs|Seccomp):' /proc/1/status /proc/self/status",
            )
            .await;
        assert_eq!(
            status.stdout, "NoNewPrivs:\t1\nSeccomp:\t2\nNoNewPrivs:\t1\nSeccomp:\t2\n",
            "{status:?}"
        );
        for attack in [
            "unshare --user --map-root-user true",
            "mkdir -p /mnt/x && mount -t tmpfs none /mnt/x",
        ] {
            let r = env.sh(id, attack).await;
            assert_ne!(r.code, Some(0), "{attack:?} worked: {r:?}");
            assert!(
                r.stderr.contains("not permitted") || r.stderr.contains("denied"),
                "{attack:?}: {r:?}"
            );
        }
        let read = env.sh(id, "cat /.tandem/tandem-confine > /dev/null").await;
        assert!(read.stderr.contains("Permission denied"), "{read:?}");
        let moved = env.sh(id, "mv /.tandem /elsewhere").await;
        assert_ne!(moved.code, Some(0), "{moved:?}");
        let written = env.sh(id, "echo x > /.tandem/seccomp.bpf").await;
        assert!(written.stderr.contains("Read-only"), "{written:?}");
        let kind = env.sh(id, "stat -c %F /.tandem").await;
        assert_eq!(kind.stdout, "directory\n", "{kind:?}");
    }
    for id in &ids {
        env.rt.stop(id, Keep::Nothing).await.unwrap();
    }
}
runtimes!(the_seccomp_filter_is_compiled_once_and_every_process_starts_under_it);

/// Disks are made ahead of need: a start takes a spare copy of the formatted template already
/// attached to its loop device and mounted (a rename and a move, not a copy or a mount), and
/// the spares are made again in the background.
async fn a_start_takes_a_disk_made_ahead_and_the_spares_refill(env: Env) {
    use std::os::unix::fs::MetadataExt;
    use tandem_host::runtime::disk;
    assert!(env.rt.disk_limits(), "this host gives workspaces disks");
    let templates = env.dir.path().join("data/runtime/disks");
    let bytes = env.spec(vec![]).limits.disk_bytes.max(disk::MIN_BYTES);
    let refilled = async || {
        let deadline = Instant::now() + std::time::Duration::from_secs(30);
        while disk::spares(&templates, bytes).len() < disk::SPARES {
            assert!(Instant::now() < deadline, "the spare disks were never made");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    };
    let first = env.rt.start(env.spec(vec![])).await.unwrap();
    refilled().await;
    let ready: Vec<u64> = disk::spares(&templates, bytes)
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().ino())
        .collect();
    let loop_of = |image: &std::path::Path| {
        let image = std::fs::canonicalize(image).unwrap();
        std::fs::read_dir("/sys/block")
            .unwrap()
            .flatten()
            .find(|d| {
                std::fs::read_to_string(d.path().join("loop/backing_file"))
                    .is_ok_and(|f| std::path::Path::new(f.trim()) == image)
            })
    };
    let devices: Vec<std::ffi::OsString> = disk::spares(&templates, bytes)
        .iter()
        .map(|p| loop_of(p).expect("a ready spare is attached").file_name())
        .collect();
    let second = env.rt.start(env.spec(vec![])).await.unwrap();
    let image = env
        .dir
        .path()
        .join(format!("data/workspaces/{}/{}", second.id, disk::IMAGE));
    let taken = std::fs::metadata(&image).unwrap().ino();
    assert!(
        ready.contains(&taken),
        "the second start took a spare disk ({taken} not in {ready:?})"
    );
    refilled().await;
    // Its loop device frees itself with the unmount (autoclear): a crash leaves none behind.
    let device = loop_of(&image).expect("a loop device serves the disk");
    // The first start mounted its own disk before any spare was made: staging the spares must
    // not keep a copy of that mount alive once the host unmounts it.
    let first_image = env
        .dir
        .path()
        .join(format!("data/workspaces/{}/{}", first.id, disk::IMAGE));
    let first_device = loop_of(&first_image).expect("a loop device serves the first disk");
    let first_image = std::fs::canonicalize(&first_image).unwrap();
    assert!(
        devices.contains(&device.file_name()),
        "the start attached no device: the spare's ({:?} in {devices:?})",
        device.file_name()
    );
    // What is mounted at the workspace's disk is that very device (not another spare's, not
    // the host's own disk).
    let at = image.with_file_name(disk::MOUNT);
    assert!(disk::is_mounted(&at), "{} is a mount point", at.display());
    let dev = std::fs::read_to_string(device.path().join("dev")).unwrap();
    let (major, minor) = dev.trim().split_once(':').unwrap();
    let st = std::fs::metadata(&at).unwrap().dev();
    assert_eq!(
        (nix::sys::stat::major(st), nix::sys::stat::minor(st)),
        (major.parse().unwrap(), minor.parse().unwrap()),
        "the workspace's disk is mounted from its own loop device"
    );
    let image = std::fs::canonicalize(&image).unwrap();
    assert_eq!(
        std::fs::read_to_string(device.path().join("loop/autoclear"))
            .unwrap()
            .trim(),
        "1"
    );
    // A burst: the pool grows to what it asked for, so the next burst like it finds its disks
    // made — and it grows while starts keep coming, one after another without a pause (a pool
    // that waited for a pause stays at its least, and every start makes its own disk).
    let mut burst: Vec<_> =
        futures::future::join_all((0..4).map(|_| env.rt.start(env.spec(vec![]))))
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
    let wanted = disk::spares_wanted(&templates, bytes);
    assert!(
        wanted >= 4,
        "four disks asked for at once: the pool wants them all ({wanted})"
    );
    let mut most = 0;
    for _ in 0..20 {
        burst.push(env.rt.start(env.spec(vec![])).await.unwrap());
        most = most.max(disk::spares(&templates, bytes).len());
        if most > disk::SPARES {
            break;
        }
    }
    assert!(
        most > disk::SPARES,
        "the pool grew past its least {} while starts kept coming ({most} at most)",
        disk::SPARES
    );
    let wanted = disk::spares_wanted(&templates, bytes);
    let deadline = Instant::now() + std::time::Duration::from_secs(60);
    while disk::spares(&templates, bytes).len() < wanted {
        assert!(
            Instant::now() < deadline,
            "the pool never grew to {wanted} ({} ready)",
            disk::spares(&templates, bytes).len()
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    for w in &burst {
        env.rt.stop(&w.id, Keep::Nothing).await.unwrap();
    }
    for id in [&first.id, &second.id] {
        env.rt.stop(id, Keep::Nothing).await.unwrap();
    }
    let deadline = Instant::now() + std::time::Duration::from_secs(10);
    for (device, image) in [(&device, &image), (&first_device, &first_image)] {
        // Its image is removed with the workspace: the kernel then shows it as "… (deleted)".
        while std::fs::read_to_string(device.path().join("loop/backing_file"))
            .is_ok_and(|f| f.trim().starts_with(image.to_str().unwrap()))
        {
            assert!(
                Instant::now() < deadline,
                "the disk's loop device outlived its workspace: {}",
                image.display()
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
}
runtimes!(a_start_takes_a_disk_made_ahead_and_the_spares_refill);

/// A pool grown for a burst goes back to its least once the burst has left the demand window:
/// the spares beyond it are unmounted, their images removed and their loop devices freed; not
/// before the window has passed, and no timer is left once the pool is at its least (nothing
/// wakes for an idle pool).
#[tokio::test]
async fn a_pool_grown_for_a_burst_shrinks_back_once_the_burst_is_past() {
    use tandem_host::runtime::disk;
    let Some(env) = env(Kind::Runc).await else {
        return;
    };
    assert!(env.rt.disk_limits(), "this host gives workspaces disks");
    let templates = env.dir.path().join("data/runtime/disks");
    let bytes = disk::MIN_BYTES;
    let window = std::time::Duration::from_secs(15);
    disk::keep_grown_pool_for(&templates, window);
    let backed = |image: &std::path::Path| {
        let image = image.to_string_lossy().into_owned();
        std::fs::read_dir("/sys/block").unwrap().flatten().any(|d| {
            std::fs::read_to_string(d.path().join("loop/backing_file"))
                .is_ok_and(|f| f.trim().starts_with(&image))
        })
    };
    // Six disks asked for at once, as six starts ask.
    let dirs: Vec<PathBuf> = (0..6)
        .map(|i| env.dir.path().join(format!("data/workspaces/burst-{i}")))
        .collect();
    let burst = Instant::now();
    for r in
        futures::future::join_all(dirs.iter().map(|d| disk::ensure(d, &templates, bytes))).await
    {
        r.unwrap();
    }
    assert_eq!(
        disk::spares_wanted(&templates, bytes),
        6,
        "the burst's size"
    );
    let deadline = burst + window;
    while disk::spares(&templates, bytes).len() < 6 {
        assert!(
            Instant::now() < deadline,
            "the pool never grew to the burst's six ({} ready)",
            disk::spares(&templates, bytes).len()
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let grown: Vec<PathBuf> = disk::spares(&templates, bytes)
        .into_iter()
        .map(|p| std::fs::canonicalize(p).unwrap())
        .collect();
    assert!(grown.iter().all(|p| backed(p)), "every spare is attached");
    // A grown pool has its trim waiting (set once the refill has made them all).
    while !disk::trim_pending(&templates, bytes) {
        assert!(
            Instant::now() < deadline,
            "a pool above its least has no trim waiting"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let deadline = burst + window + disk::BURST_SPAN + std::time::Duration::from_secs(30);
    while disk::spares(&templates, bytes).len() > disk::SPARES {
        assert!(
            Instant::now() < deadline,
            "the pool grown for a burst was never trimmed ({} ready)",
            disk::spares(&templates, bytes).len()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(
        burst.elapsed() >= window + disk::BURST_SPAN,
        "the pool shrank {:?} after its burst, before its window of {window:?} and a span of {:?} had passed",
        burst.elapsed(),
        disk::BURST_SPAN
    );
    let kept: Vec<PathBuf> = disk::spares(&templates, bytes)
        .into_iter()
        .map(|p| std::fs::canonicalize(p).unwrap())
        .collect();
    assert_eq!(kept.len(), disk::SPARES, "back to its least, not below");
    let gone: Vec<&PathBuf> = grown.iter().filter(|p| !kept.contains(p)).collect();
    assert_eq!(gone.len(), 6 - disk::SPARES);
    let deadline = Instant::now() + std::time::Duration::from_secs(10);
    for image in gone {
        while image.exists() || backed(image) {
            assert!(
                Instant::now() < deadline,
                "{} was given back but its image or loop device is still there",
                image.display()
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
    for image in &kept {
        assert!(
            backed(image),
            "a kept spare {} is no longer attached",
            image.display()
        );
    }
    while disk::trim_pending(&templates, bytes) {
        assert!(
            Instant::now() < deadline,
            "a timer is left for a pool at its least"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    for d in &dirs {
        disk::unmount(d).unwrap();
    }
}

/// The runtime works in a mount namespace of its own, made once, without any workspace's
/// mounts, so what runc and crun do at every call (copy their namespace, read its mount table,
/// detach the old root after `pivot_root`) does not grow with the workspaces running
/// (`cargo xtask bench density`: the runtime's `run` grew 38 → 81 ms from 100 to 1,000 with
/// every disk in its table). Two workspaces run — their disks in the host's table, not in the
/// runtime's — and take commands; an overlay mounted on the host before a runtime is made
/// (another server's workspace root) is not in that runtime's namespace either, nor are the
/// two workspaces' disks (loop devices of another data dir). And the runtime does run there:
/// a tmpfs mounted on the host after the namespace was made is not in what a workspace binds.
async fn the_runtime_sees_none_of_the_workspaces_mounts(env: Env) {
    if env.kind == Kind::Runsc {
        // gVisor's gofer serves each root from the host's side: it keeps the host's namespace.
        return;
    }
    let Some(_) = env.rt.runtime_mount_table() else {
        assert!(
            !env.rt.precompiled_seccomp(),
            "where tandem-confine runs, the runtime has a namespace of its own"
        );
        eprintln!("SKIP: the runtime runs without tandem-confine here");
        return;
    };
    let shown = env.dir.path().join("shown");
    std::fs::create_dir_all(&shown).unwrap();
    std::fs::write(shown.join("under"), "").unwrap();
    nix::mount::mount(
        Some("tmpfs"),
        &shown,
        Some("tmpfs"),
        nix::mount::MsFlags::empty(),
        None::<&str>,
    )
    .unwrap();
    std::fs::write(shown.join("over"), "").unwrap();
    let bind = Bind {
        host: shown.clone(),
        container: "/mnt/shown".into(),
        readonly: true,
    };
    let a = env.rt.start(env.spec_with(vec![], vec![bind])).await;
    nix::mount::umount2(&shown, nix::mount::MntFlags::MNT_DETACH).unwrap();
    let a = a.unwrap();
    let out = env.sh(&a.id, "ls /mnt/shown").await;
    assert_eq!(
        out.stdout, "under\n",
        "the runtime works in the namespace made before the tmpfs: {out:?}"
    );
    let b = env.rt.start(env.spec(vec![])).await.unwrap();
    let host = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let runtime = env.rt.runtime_mount_table().unwrap();
    let workspaces = env.rt.dir(&a.id).parent().unwrap().display().to_string();
    for ws in [&a, &b] {
        let disk = format!(
            " {}/{} ",
            env.rt.dir(&ws.id).display(),
            tandem_host::runtime::disk::MOUNT
        );
        assert!(host.contains(&disk), "the host mounts its disk: {host}");
        let out = env
            .sh(&ws.id, "echo $TANDEM_TEST > /root/f && cat /root/f")
            .await;
        assert_eq!((out.code, out.stdout.as_str()), (Some(0), "1\n"), "{out:?}");
    }
    assert!(
        !runtime.contains(&workspaces),
        "the runtime's namespace holds no workspace's mount: {runtime}"
    );
    assert!(runtime.contains(" / "), "a real mount table: {runtime}");
    // Another server's workspace root, mounted before this runtime is made.
    let other = crate::harness::test_dir();
    let [lower, upper, work, root] = ["l", "u", "w", "data/workspaces/w1/rootfs"]
        .map(|d| other.path().join("elsewhere").join(d));
    for d in [&lower, &upper, &work, &root] {
        std::fs::create_dir_all(d).unwrap();
    }
    let opts = format!(
        "lowerdir={},upperdir={},workdir={}",
        lower.display(),
        upper.display(),
        work.display()
    );
    nix::mount::mount(
        Some("overlay"),
        &root,
        Some("overlay"),
        nix::mount::MsFlags::empty(),
        Some(opts.as_str()),
    )
    .unwrap();
    let later = OciRuntime::new(env.kind, &other.path().join("data"))
        .unwrap()
        .with_init(&confine_bin());
    let table = later.runtime_mount_table();
    nix::mount::umount2(&root, nix::mount::MntFlags::MNT_DETACH).unwrap();
    let table = table.unwrap();
    assert!(
        !table.contains(&format!(" {} ", root.display())),
        "another server's workspace root stays out: {table}"
    );
    assert!(
        !table.contains(&workspaces),
        "another server's workspace disks stay out: {table}"
    );
    env.rt.stop(&a.id, Keep::Nothing).await.unwrap();
    env.rt.stop(&b.id, Keep::Nothing).await.unwrap();
    assert_eq!(env.rt.leftovers(&a.id), Vec::<String>::new());
}
runtimes!(the_runtime_sees_none_of_the_workspaces_mounts);

/// On a hybrid cgroup host crun sees no cgroup2 mount: it runs in the runtime's own namespace,
/// made without it (above), or else through `tandem-confine --without-cgroup2` (one small
/// process, not `unshare`, `sh` and `umount` at every call) — which is checked here too: crun sees no cgroup2 mount, and
/// nothing done under the launcher reaches the namespace it came from, even where that one's
/// mounts propagate — here a namespace of the test's own (private to the host) whose cgroup
/// tree and a tmpfs are made shared: the launcher's unmount of the cgroup2 mount and a mount
/// made under it must both stay in the launcher's namespace.
#[test]
fn crun_sees_no_cgroup2_mount_and_nothing_it_does_reaches_the_host() {
    use tandem_host::runtime::doctor::{Cgroups, cgroups};
    if cgroups() != Cgroups::Hybrid || !nix::unistd::geteuid().is_root() {
        eprintln!("SKIP: not a hybrid cgroup host, or not root");
        return;
    }
    let confine = confine_bin();
    if tandem_host::runtime::doctor::crun_works() {
        // What the server builds: crun goes through the launcher, not `unshare` and a shell.
        let data = crate::harness::test_dir();
        let rt = OciRuntime::new(Kind::Crun, data.path())
            .unwrap()
            .with_init(&confine);
        let own_namespace = rt.runtime_mount_table().is_some_and(|t| {
            t.contains(" /sys/fs/cgroup ") && !t.contains(" /sys/fs/cgroup/unified ")
        });
        assert!(
            !rt.precompiled_seccomp() || own_namespace || rt.crun_launcher().is_some(),
            "crun runs in a namespace without the cgroup2 mount: its own, or through tandem-confine --without-cgroup2"
        );
    }
    let unified = " /sys/fs/cgroup/unified ";
    let inner = std::process::Command::new(&confine)
        .args(["--without-cgroup2", "--", "cat", "/proc/self/mountinfo"])
        .output()
        .unwrap();
    assert!(inner.status.success(), "{inner:?}");
    let inner = String::from_utf8_lossy(&inner.stdout);
    assert!(inner.contains(" /sys/fs/cgroup "), "a real mount table");
    assert!(!inner.contains(unified), "crun's view has no cgroup2 mount");
    let dir = crate::harness::test_dir();
    let shared = dir.path().display();
    let script = format!(
        "set -e
         mount -t tmpfs none '{shared}'
         mount --make-shared '{shared}'
         mkdir '{shared}/m'
         mount --make-shared /sys/fs/cgroup
         '{}' --without-cgroup2 -- mount -t tmpfs none '{shared}/m'
         if mountpoint -q '{shared}/m'; then echo 'a mount made under the launcher came out'; exit 1; fi
         grep -q '{unified}' /proc/self/mountinfo || {{ echo 'the cgroup2 mount was unmounted here too'; exit 1; }}",
        confine.display()
    );
    let out = std::process::Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let host = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(host.contains(unified), "the host keeps its cgroup2 mount");
}
