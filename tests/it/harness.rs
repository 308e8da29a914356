//! Test harness: a Tandem server per test on a fresh database, reached in-process or over a
//! loopback socket through one `Transport` interface.

use std::path::Path;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::BodyExt;
use tandem_server::config::{Config, sqlite_url};
use tandem_server::identity::auth;
use tandem_server::serve::Server;
use tandem_server::state::AppState;
use tower::ServiceExt;

/// Which database a test runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// How a test reaches the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// `tandem_server::app(state)` driven with `tower::ServiceExt::oneshot`.
    Oneshot,
    /// A real server on 127.0.0.1, driven with reqwest.
    Socket,
}

/// Runs an async test body once per backend × transport.
#[macro_export]
macro_rules! matrix {
    ($name:ident) => {
        mod $name {
            use $crate::harness::{Backend, Transport};
            #[tokio::test]
            async fn sqlite_oneshot() {
                $crate::harness::run(Backend::Sqlite, Transport::Oneshot, super::$name).await
            }
            #[tokio::test]
            async fn sqlite_socket() {
                $crate::harness::run(Backend::Sqlite, Transport::Socket, super::$name).await
            }
            #[tokio::test]
            async fn postgres_oneshot() {
                $crate::harness::run(Backend::Postgres, Transport::Oneshot, super::$name).await
            }
            #[tokio::test]
            async fn postgres_socket() {
                $crate::harness::run(Backend::Postgres, Transport::Socket, super::$name).await
            }
        }
    };
}

/// Runs `body` against a fresh server, or prints why it cannot.
pub async fn run<F, Fut>(backend: Backend, transport: Transport, body: F)
where
    F: FnOnce(TestServer) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let Some(server) = TestServer::start(backend, transport).await else {
        return;
    };
    body(server).await;
}

/// A fresh database URL for `backend`, or `None` (with the reason printed) when PostgreSQL is
/// not configured and not required.
pub async fn fresh_database(backend: Backend, dir: &std::path::Path) -> Option<String> {
    match backend {
        Backend::Sqlite => Some(sqlite_url(&dir.join("tandem.db"))),
        Backend::Postgres => {
            let Ok(admin) = std::env::var("TANDEM_TEST_POSTGRES_URL") else {
                if std::env::var("TANDEM_TEST_REQUIRE_POSTGRES").is_ok_and(|v| v == "1") {
                    panic!(
                        "TANDEM_TEST_REQUIRE_POSTGRES=1 but TANDEM_TEST_POSTGRES_URL is not set"
                    );
                }
                eprintln!(
                    "SKIP (PostgreSQL): TANDEM_TEST_POSTGRES_URL is not set; `cargo xtask test` sets it"
                );
                return None;
            };
            let name = format!("tandem_test_{}", uuid::Uuid::new_v4().simple());
            sqlx::any::install_default_drivers();
            let mut conn = <sqlx::AnyConnection as sqlx::Connection>::connect(&admin)
                .await
                .expect("connect to the test PostgreSQL server");
            sqlx::query(&format!("CREATE DATABASE {name}"))
                .execute(&mut conn)
                .await
                .expect("create test database");
            let (base, query) = admin
                .split_once('?')
                .map_or((admin.as_str(), None), |(b, q)| (b, Some(q)));
            let base = base.rsplit_once('/').map_or(base, |(b, _)| b);
            Some(match query {
                Some(q) => format!("{base}/{name}?{q}"),
                None => format!("{base}/{name}"),
            })
        }
    }
}

/// A server on a fresh database and data dir; stops when dropped.
pub struct TestServer {
    pub backend: Backend,
    pub transport: Transport,
    pub state: AppState,
    /// `http://127.0.0.1:PORT`, where it listens.
    pub url: String,
    /// The one-time login code printed on first start.
    pub first_login_code: String,
    /// An API token of the admin.
    pub admin_token: String,
    pub dir: Arc<tempfile::TempDir>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        // Workspaces outlive a server on purpose (sessions survive restarts); a test's must not
        // outlive the test.
        remove_workspaces(&self.dir.path().join("data"));
    }
}

/// Where test data dirs are made: `<temp dir>/tandem-test-…`, the prefix `cargo xtask leaks`
/// looks for (so a developer's own server is never taken for a test's leftover).
pub const TEST_DIR_PREFIX: &str = "tandem-test-";

/// A fresh temp dir for a test's data dir, named with [`TEST_DIR_PREFIX`].
pub fn test_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(TEST_DIR_PREFIX)
        .tempdir()
        .expect("temp dir")
}

/// Removes, when dropped, every workspace a data dir's server left (for tests that run
/// `tandem serve` as a process of its own); hold it next to the dir, declared after it.
pub struct RemoveWorkspaces(pub std::path::PathBuf);

impl Drop for RemoveWorkspaces {
    fn drop(&mut self) {
        remove_workspaces(&self.0);
    }
}

/// Stops every workspace of data dir `data`: its containers, mounts, disks and networks.
pub fn remove_workspaces(data: &std::path::Path) {
    let state_root = data.join("runtime");
    // A start still in flight (a boot, a warm pool's refill) would add a container or attach
    // a disk after the sweep below: its tools finish first (no task of the test runs meanwhile,
    // and none goes on once they have: the test's runtime drops its tasks).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !makers_of(data).is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    for kind in ["runc", "crun"] {
        let state = state_root.join(kind);
        if !state.is_dir() {
            continue;
        }
        // The same private-mount-namespace wrapper the driver uses for crun on hybrid cgroups.
        let runtime = |args: &[&str]| {
            let mut c = std::process::Command::new("unshare");
            c.args([
                "--mount",
                "sh",
                "-c",
                "umount /sys/fs/cgroup/unified 2>/dev/null; exec \"$0\" \"$@\"",
                kind,
            ]);
            c.arg("--root").arg(&state).args(args);
            c
        };
        let list = runtime(&["list", "-q"]).output();
        for id in list
            .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
            .unwrap_or_default()
            .lines()
        {
            let _ = runtime(&["delete", "--force", id.trim()]).status();
        }
    }
    // Whatever of them the runtime no longer knows still goes.
    for pid in workspace_processes_of(data) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let dirs: Vec<_> = std::fs::read_dir(data.join("workspaces"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect();
    for dir in &dirs {
        let _ = nix::mount::umount2(&dir.join("rootfs"), nix::mount::MntFlags::MNT_DETACH);
        // Its own disk next: the loop device (set to clear itself) goes with the last
        // unmount, not with the image file, which the test's temp dir takes away.
        let _ = nix::mount::umount2(&dir.join("disk"), nix::mount::MntFlags::MNT_DETACH);
    }
    // A disk attached by a start that never got to mount it is not set to clear itself.
    for d in std::fs::read_dir("/sys/block")
        .into_iter()
        .flatten()
        .flatten()
    {
        let file = std::fs::read_to_string(d.path().join("loop/backing_file")).unwrap_or_default();
        if std::path::Path::new(file.trim().trim_end_matches(" (deleted)")).starts_with(data) {
            let _ = std::process::Command::new("losetup")
                .arg("-d")
                .arg(std::path::Path::new("/dev").join(d.file_name()))
                .status();
        }
    }
    // Egress networks (namespaces, veths, firewall rules) go too; on a thread of its own,
    // since this may run inside the test's runtime.
    let _ = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        for dir in dirs {
            let _ = rt.block_on(tandem_host::runtime::network::teardown(&dir));
        }
    })
    .join();
}

/// Processes making something of data dir `data`: a container (`runc … run`), a disk
/// (`mount -o loop`, `mkfs.ext4`), a layer copy (`cp`).
fn makers_of(data: &std::path::Path) -> Vec<i32> {
    let dir = data.as_os_str().as_encoded_bytes();
    all_pids()
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            let names = args.iter().any(|a| a.starts_with(dir));
            let tool = args.first().is_some_and(|a| {
                [&b"losetup"[..], b"mount", b"mkfs.ext4", b"cp"]
                    .iter()
                    .any(|t| a.ends_with(t))
            });
            names && (tool || args.contains(&&b"run"[..]))
        })
        .collect()
}

fn all_pids() -> impl Iterator<Item = i32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
}

/// Processes in Tandem's workspace cgroups whose root is an overlay with its writable layer
/// under `data`: that data dir's workspaces, known to its runtime or not. (A process that is
/// joining a workspace, still in a copy of the host's mounts, is not one.)
pub fn workspace_processes_of(data: &std::path::Path) -> Vec<i32> {
    let upper = format!("upperdir={}/", data.display());
    let mut found = Vec::new();
    for root in [
        "/sys/fs/cgroup",
        "/sys/fs/cgroup/pids",
        "/sys/fs/cgroup/unified",
    ] {
        let groups = std::fs::read_dir(std::path::Path::new(root).join("tandem"));
        for group in groups.into_iter().flatten().flatten() {
            let procs = std::fs::read_to_string(group.path().join("cgroup.procs"));
            for pid in procs
                .unwrap_or_default()
                .lines()
                .filter_map(|l| l.parse().ok())
            {
                let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo"));
                let ours = mounts.unwrap_or_default().lines().any(|l| {
                    l.split(' ').nth(4) == Some("/")
                        && l.split_once(" - ")
                            .is_some_and(|(_, t)| t.starts_with("overlay ") && t.contains(&upper))
                });
                if ours && !found.contains(&pid) {
                    found.push(pid);
                }
            }
        }
    }
    found
}

impl TestServer {
    /// Starts a server (always listening, so both transports see the same state).
    pub async fn start(backend: Backend, transport: Transport) -> Option<Self> {
        Self::start_with_web(backend, transport, None).await
    }

    /// Starts a server that also serves the built web app from `web_dir`.
    pub async fn start_with_web(
        backend: Backend,
        transport: Transport,
        web_dir: Option<std::path::PathBuf>,
    ) -> Option<Self> {
        Self::start_with(backend, transport, move |c| c.web_dir = web_dir).await
    }

    /// Starts a server with its configuration adjusted by `tweak`.
    pub async fn start_with(
        backend: Backend,
        transport: Transport,
        tweak: impl FnOnce(&mut Config),
    ) -> Option<Self> {
        let dir = test_dir();
        let database_url = fresh_database(backend, dir.path()).await?;
        let mut config = Config {
            listen: "127.0.0.1:0".parse().unwrap(),
            data_dir: dir.path().join("data"),
            database_url,
            public_url: None,
            web_dir: None,
            images_dir: dir.path().join("data/images"),
            image_recipe: None,
            runtime: None,
            // Built next to `tandem` by `cargo xtask test`.
            agent_bin: Some(
                std::path::Path::new(env!("CARGO_BIN_EXE_tandem"))
                    .with_file_name("tandem-workspace-agent"),
            ),
            egress_hosts: Default::default(),
            runtime_layer: Default::default(),
            snapshot_interval_secs: 0,
            agents: Default::default(),
            snapshot_keep: 3,
            orphan_sweep_secs: 30,
            code_url: None,
            advertise_url: None,
            github: None,
            oidc: Vec::new(),
            desktop: Default::default(),
            file_sets: Default::default(),
            local_repo_dirs: vec![std::env::temp_dir()],
            unsafe_code_on_tandem_origin: false,
            unsafe_same_site_code_url: false,
            extension: Default::default(),
            automations: Default::default(),
            slack: None,
            kubernetes: None,
            telemetry: Default::default(),
            workspaces: Default::default(),
        };
        tweak(&mut config);
        let server = Server::bind(config).await.expect("server starts");
        // Where it listens (its public URL may name another address).
        let url = format!("http://{}", server.state().config.listen);
        let state = server.state().clone();
        let login = server
            .first_login_url
            .clone()
            .expect("first start prints a login link");
        let first_login_code = login
            .split_once("#code=")
            .expect("link carries the code")
            .1
            .to_string();
        let admin = auth::local_admin(&state.db).await.expect("admin exists");
        let admin_token = auth::create_api_token(&state.db, &admin, "tests", None)
            .await
            .expect("token")
            .token;
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(server.run(async move {
            let _ = rx.await;
        }));
        Some(Self {
            backend,
            transport,
            state,
            url,
            first_login_code,
            admin_token,
            dir: Arc::new(dir),
            shutdown: Some(tx),
        })
    }

    /// A second server process on this one's database (its own data dir, so its own runner
    /// id), as a second node would be; the same admin token works on it.
    pub async fn beside(&self) -> Self {
        self.beside_from(|_| {}).await
    }

    /// [`Self::beside`] with its data dir made by `prepare` first (what an older version left).
    pub async fn beside_from(&self, prepare: impl FnOnce(&Path)) -> Self {
        let dir = test_dir();
        let mut config = (*self.state.config).clone();
        config.listen = "127.0.0.1:0".parse().unwrap();
        config.data_dir = dir.path().join("data");
        std::fs::create_dir_all(&config.data_dir).unwrap();
        prepare(&config.data_dir);
        let server = Server::bind(config).await.expect("second server starts");
        let url = format!("http://{}", server.state().config.listen);
        let state = server.state().clone();
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(server.run(async move {
            let _ = rx.await;
        }));
        Self {
            backend: self.backend,
            transport: self.transport,
            state,
            url,
            first_login_code: String::new(),
            admin_token: self.admin_token.clone(),
            dir: Arc::new(dir),
            shutdown: Some(tx),
        }
    }

    /// A request builder bound to this server and transport.
    pub fn req(&self, method: Method, path: &str) -> Req<'_> {
        Req {
            server: self,
            method,
            path: path.to_string(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// `GET path` as the admin.
    pub fn get(&self, path: &str) -> Req<'_> {
        self.req(Method::GET, path).bearer(&self.admin_token)
    }

    /// `POST path` with a JSON body as the admin.
    pub fn post(&self, path: &str, body: serde_json::Value) -> Req<'_> {
        self.req(Method::POST, path)
            .bearer(&self.admin_token)
            .json(&body)
    }

    /// Fails unless `/api/openapi.json` lists `status` among the answers of `method path`
    /// (`path` as documented, e.g. `/api/sessions/{id}`): a status a handler returns must be
    /// one its clients were told about.
    pub async fn assert_documented(&self, method: Method, path: &str, status: StatusCode) {
        let doc = self
            .req(Method::GET, "/api/openapi.json")
            .send()
            .await
            .json();
        let op = &doc["paths"][path][method.as_str().to_lowercase()];
        assert!(op.is_object(), "{method} {path} is not in the document");
        assert!(
            op["responses"].get(status.as_str()).is_some(),
            "{method} {path} answers {status} but documents only {:?}",
            op["responses"]
                .as_object()
                .map(|r| r.keys().collect::<Vec<_>>())
        );
    }
}

/// One request about to be sent.
pub struct Req<'a> {
    server: &'a TestServer,
    method: Method,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// What came back.
#[derive(Debug)]
pub struct Res {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Res {
    /// The body as JSON (panics with the body text when it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// The body as a typed value.
    pub fn parse<T: serde::de::DeserializeOwned>(&self) -> T {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body does not parse ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// Asserts the status and that the body is an `ApiError` with `code`; returns its message.
    #[track_caller]
    pub fn assert_error(&self, status: StatusCode, code: &str) -> String {
        assert_eq!(
            self.status,
            status,
            "body: {}",
            String::from_utf8_lossy(&self.body)
        );
        let ct = self
            .headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        assert!(
            ct.starts_with("application/json"),
            "error content-type is {ct:?}"
        );
        let err: tandem_protocol::ApiError = self.parse();
        assert_eq!(err.code, code, "message: {}", err.message);
        assert!(!err.message.is_empty());
        err.message
    }
}

impl Req<'_> {
    pub fn header(mut self, k: &str, v: &str) -> Self {
        self.headers.push((k.to_string(), v.to_string()));
        self
    }

    /// Sends `token` (instead of any token set before).
    pub fn bearer(mut self, token: &str) -> Self {
        self.headers.retain(|(k, _)| k != "authorization");
        self.header("authorization", &format!("Bearer {token}"))
    }

    pub fn json(self, v: &serde_json::Value) -> Self {
        self.raw_body("application/json", v.to_string().into_bytes())
    }

    pub fn raw_body(mut self, content_type: &str, body: Vec<u8>) -> Self {
        self.headers.retain(|(k, _)| k != "content-type");
        self.headers
            .push(("content-type".into(), content_type.into()));
        self.body = body;
        self
    }

    /// A body without a content type.
    pub fn untyped_body(mut self, body: Vec<u8>) -> Self {
        self.headers.retain(|(k, _)| k != "content-type");
        self.body = body;
        self
    }

    pub async fn send(self) -> Res {
        match self.server.transport {
            Transport::Oneshot => {
                let mut b = Request::builder().method(self.method).uri(&self.path);
                for (k, v) in &self.headers {
                    b = b.header(k, v);
                }
                let res = tandem_server::app(self.server.state.clone())
                    .oneshot(b.body(Body::from(self.body)).unwrap())
                    .await
                    .unwrap();
                let (parts, body) = res.into_parts();
                let body = body.collect().await.unwrap().to_bytes().to_vec();
                Res {
                    status: parts.status,
                    headers: parts.headers,
                    body,
                }
            }
            Transport::Socket => {
                let client = reqwest::Client::new();
                let method = reqwest::Method::from_bytes(self.method.as_str().as_bytes()).unwrap();
                let mut b = client.request(method, format!("{}{}", self.server.url, self.path));
                for (k, v) in &self.headers {
                    b = b.header(k, v);
                }
                let res = b
                    .body(self.body)
                    .send()
                    .await
                    .expect("request reaches the server");
                let status = StatusCode::from_u16(res.status().as_u16()).unwrap();
                let mut headers = HeaderMap::new();
                for (k, v) in res.headers() {
                    headers.append(
                        axum::http::HeaderName::from_bytes(k.as_str().as_bytes()).unwrap(),
                        axum::http::HeaderValue::from_bytes(v.as_bytes()).unwrap(),
                    );
                }
                let body = res.bytes().await.unwrap().to_vec();
                Res {
                    status,
                    headers,
                    body,
                }
            }
        }
    }
}

/// Creates a repo as the admin and returns its id.
pub async fn make_repo(s: &TestServer, name: &str) -> String {
    let res = s
        .post(
            "/api/repos",
            serde_json::json!({ "name": name, "url": "https://example.invalid/r.git" }),
        )
        .send()
        .await;
    assert_eq!(
        res.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&res.body)
    );
    res.json()["id"].as_str().unwrap().to_string()
}

/// Lets the server in `data` take local repos from the temp dir (where tests make them), keeping
/// whatever else its `tandem.toml` says.
pub fn allow_local_repos(data: &std::path::Path) {
    std::fs::create_dir_all(data).unwrap();
    let file = data.join("tandem.toml");
    let old = std::fs::read_to_string(&file).unwrap_or_default();
    if !old.contains("local_repo_dirs") {
        let dir = std::env::temp_dir().display().to_string();
        std::fs::write(&file, format!("local_repo_dirs = [{dir:?}]\n{old}")).unwrap();
    }
}
