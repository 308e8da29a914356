//! Starting the server: data dir, database and migrations, keys, first-start admin, listener.

mod accept;
mod hooks;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;

use crate::Engine;
use crate::Host;
use crate::config::Config;
use crate::db::Db;
use crate::identity::auth::{self, JwtKeys};
use crate::images;
use crate::runtime::{
    self,
    oci::{Kind, OciRuntime},
};
use crate::state::{App, AppState};
use crate::{Error, Result};

/// A server that is bound and migrated, ready to run.
pub struct Server {
    listener: TcpListener,
    state: AppState,
    /// The address actually bound (port 0 resolved).
    pub addr: SocketAddr,
    /// On the very first start: the one-time login link for the new `admin` user.
    pub first_login_url: Option<String>,
}

impl Server {
    /// Prepares the data dir and database, then binds the listener.
    pub async fn bind(mut config: Config) -> Result<Self> {
        // Workspace content on Tandem's own site only where the admin insists, on https (the
        // origin `*.localhost` beside a loopback URL, set below, is never Tandem's site).
        if let Some(why) = crate::availability::code_url_refusal(&config) {
            return Err(Error::Config(why));
        }
        std::fs::create_dir_all(&config.data_dir).map_err(|e| {
            Error::Config(format!(
                "cannot create data dir {}: {e}",
                config.data_dir.display()
            ))
        })?;
        let db = Db::connect(&config.database_url).await?;
        db.migrate().await?;
        // Sessions an older server made during a rolling upgrade join their tree's budget.
        let repaired = crate::db::trees::repair_roots(&db).await?;
        if repaired > 0 {
            tracing::info!(repaired, "sessions without their tree's root got it");
        }
        // Diffs an older server kept in its data dir move into the store.
        let adopted = crate::sessions::workspace::adopt_kept_diffs(&db, &config.data_dir).await?;
        if adopted > 0 {
            tracing::info!(adopted, "kept diffs moved from the data dir into the store");
        }
        let jwt = JwtKeys::load_or_create(&config.data_dir)?;
        let listener = TcpListener::bind(config.listen)
            .await
            .map_err(|e| Error::Config(format!("cannot listen on {}: {e}", config.listen)))?;
        let addr = listener.local_addr()?;
        config.listen = addr;
        // VS Code's origin, now that the public URL is known: the configured one, else
        // `*.localhost` beside a loopback URL.
        let public_url = config
            .public_url
            .clone()
            .unwrap_or_else(|| format!("http://{addr}"));
        config.code_url = config
            .code_url
            .take()
            .or_else(|| crate::config::code_origin::CodeOrigin::beside(&public_url));
        let secrets = Arc::new(crate::secrets::Secrets::load_or_create(&config.data_dir)?);
        let settings = Arc::new(crate::settings::Settings::load(&db, &config).await?);
        // The file's `[github]`, else the App set on the settings page.
        config.github = settings.github_config();
        let github = config
            .github
            .clone()
            .map(|g| Arc::new(crate::github::GitHub::new(g, db.clone(), secrets.clone())));
        let workspaces = workspaces(&config, github.clone()).await;
        if let Err(p) = &workspaces {
            tracing::warn!(
                "workspaces unavailable: {}",
                crate::availability::sentence(p)
            );
        }
        let turns = Arc::new(crate::turns::Turns::load(&config.data_dir)?);
        let slack = config
            .slack
            .clone()
            .map(crate::slack::Slack::new)
            .transpose()?;
        let hooks = Arc::new(hooks::ServerHooks::default());
        let traces = Arc::new(tandem_core::traces::Traces::new(
            config.telemetry.otlp_endpoint.as_deref(),
        )?);
        // Counted only where something reads them.
        let metrics = Arc::new(if config.telemetry.metrics_token.is_some() {
            crate::metrics::Metrics::default()
        } else {
            crate::metrics::Metrics::off()
        });
        let engine = Engine {
            db,
            jwt: Arc::new(jwt),
            config: Arc::new(config),
            workspaces: Arc::new(crate::availability::Slot::new(workspaces)),
            settings,
            boots: Default::default(),
            boot_slots: crate::supervisor::boot_slots(),
            pool: Default::default(),
            secrets,
            turns,
            permissions: Default::default(),
            hooks: hooks.clone(),
            metrics,
            traces,
        };
        let (metrics, traces) = (engine.metrics.clone(), engine.traces.clone());
        engine.db.observe(Box::new(move |o| {
            if let tandem_core::db::bus::Observation::Event(session, kind) = &o {
                traces.event(*session, kind);
            }
            metrics.observe(o)
        }));
        let state = AppState::new(App {
            engine,
            gateways: Default::default(),
            hubs: Default::default(),
            desktops: Default::default(),
            vscode: Default::default(),
            github,
            oidc: Default::default(),
            reporters: Default::default(),
            slack: slack.map(Arc::new),
            rate_limits: Default::default(),
            extension_crx: Default::default(),
        });
        hooks.bind(&state);
        let first_login_url = auth::bootstrap_admin(&state.db)
            .await?
            .map(|code| auth::login_url(&state.public_url(), &code));
        Ok(Self {
            listener,
            state,
            addr,
            first_login_url,
        })
    }

    /// The URL people open.
    pub fn url(&self) -> String {
        self.state.public_url()
    }

    /// The shared state (for tests and local commands).
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serves until `shutdown` completes, then finishes in-flight requests and closes the database.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<()> {
        let db = self.state.db.clone();
        let me = crate::data_dir::server_id(&self.state.config.data_dir).ok();
        crate::supervisor::start(&self.state).await?;
        tokio::spawn(crate::automations::run(self.state.clone()));
        tokio::spawn(crate::progress::sweep(self.state.clone()));
        accept::serve(self.listener, crate::app(self.state), shutdown).await;
        // Progress reports this process held are taken over at once by whichever runs next.
        if let Some(me) = me
            && let Err(e) = crate::db::followers::release(&db, &me).await
        {
            tracing::warn!(error = %e, "cannot let go of this process's progress reports");
        }
        db.close().await;
        Ok(())
    }
}

/// The runtime this server runs workspaces with, or what keeps it from having one. What only
/// starting needs (the image, the agent binary) is checked at each start instead
/// ([`Host::start_problem`]), so a server missing them still manages running workspaces.
pub async fn workspaces(
    config: &Config,
    github: Option<Arc<crate::github::GitHub>>,
) -> std::result::Result<Host, tandem_protocol::Problem> {
    use crate::availability::problem;
    use tandem_protocol::ProblemKind;
    let on_cluster = config.runtime.as_deref() == Some("kubernetes");
    // Building the workspace image from its recipe needs root on this machine either way.
    if !nix::unistd::geteuid().is_root() {
        return Err(problem(
            ProblemKind::Root,
            "this server does not run as root, and workspaces need it (mounts, cgroups, namespaces)",
            "start `tandem serve` as root (`sudo`); `tandem doctor` lists what else the host needs",
        ));
    }
    // Images and snapshot layers hold files a workspace's uid owns (set-uid ones too, from a
    // snapshot's `setup`): no other host user may reach them. Overlayfs reads lower layers with
    // the mounter's (root's) credentials, so workspaces need no way in.
    for dir in [config.data_dir.join("snapshots"), config.images_dir.clone()] {
        let closed = std::fs::create_dir_all(&dir).and_then(|()| {
            std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
        });
        if let Err(e) = closed {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot close the layer directory to other users");
        }
    }
    let kind = match &config.runtime {
        Some(_) if on_cluster => None,
        Some(name) => Kind::parse(name).map(Some).ok_or_else(|| {
            problem(
                ProblemKind::Runtime,
                format!("the configured runtime {name:?} is not one Tandem knows"),
                "set `runtime` to runc, crun or runsc in tandem.toml (or leave it out)",
            )
        })?,
        None => Some(runtime::doctor::default_runtime().ok_or_else(|| {
            problem(
                ProblemKind::Runtime,
                "no OCI runtime is installed",
                "install one: `apt-get install runc` (Tandem picks it up within seconds)",
            )
        })?),
    };
    let internal = |what: &str, e: String| {
        problem(
            ProblemKind::Runtime,
            format!("{what}: {e}"),
            "check the data dir's permissions and free space, then see `tandem doctor`",
        )
    };
    let recipe = match &config.image_recipe {
        Some(p) => std::fs::read_to_string(p).map_err(|e| {
            problem(
                ProblemKind::Image,
                format!("the image recipe {} cannot be read: {e}", p.display()),
                "fix `image_recipe` in tandem.toml",
            )
        })?,
        None => images::BASE_RECIPE.to_string(),
    };
    let agent_bin = match &config.agent_bin {
        Some(p) => p.clone(),
        None => std::env::current_exe()
            .map_err(|e| internal("cannot find this binary", e.to_string()))?
            .with_file_name("tandem-workspace-agent"),
    };
    let agent_key = crate::data_dir::agent_key(&config.data_dir)
        .map_err(|e| internal("the agent key", e.to_string()))?;
    let host_id = crate::data_dir::server_id(&config.data_dir)
        .map_err(|e| internal("the server id", e.to_string()))?;
    let (rt, cluster) = match kind {
        Some(kind) => {
            // Every workspace process starts under `tandem-confine` (built beside the agent)
            // with the seccomp filter compiled once, where that holds; else the runtime applies it.
            let rt = OciRuntime::new(kind, &config.data_dir)
                .map_err(|e| internal("the runtime", e.to_string()))?
                .with_init(&agent_bin.with_file_name("tandem-confine"));
            (Arc::new(rt) as Arc<dyn runtime::Runtime>, None)
        }
        None => on_kubernetes(config, &agent_key).await?,
    };
    // This binary when it is `tandem`, else (tests, examples) the one beside the agent.
    let tandem_bin = std::env::current_exe()
        .ok()
        .filter(|p| p.file_name().is_some_and(|n| n == "tandem"))
        .unwrap_or_else(|| agent_bin.with_file_name("tandem"));
    Ok(Host {
        runtime: config.runtime_layer.wrap(rt),
        images_dir: config.images_dir.clone(),
        image_recipe: recipe,
        data_dir: config.data_dir.clone(),
        host_id,
        agent_bin,
        agent_key,
        egress_hosts: config.egress_hosts.clone(),
        opencode_bin: config.agents.opencode_bin.clone().filter(|p| p.is_file()),
        code_server: code_server(config),
        tandem_bin,
        credentials: match github {
            Some(gh) => gh,
            None => Arc::new(tandem_host::NoCredentials),
        },
        limits: config.workspaces.clone(),
        cluster,
    })
}

/// The Kubernetes runtime `[kubernetes]` describes, and the registry its snapshots go to.
async fn on_kubernetes(
    config: &Config,
    agent_key: &[u8],
) -> std::result::Result<
    (
        Arc<dyn runtime::Runtime>,
        Option<Arc<tandem_host::cluster_layers::ClusterLayers>>,
    ),
    tandem_protocol::Problem,
> {
    use crate::availability::problem;
    use tandem_host::runtime::kubernetes::{KubernetesRuntime, Settings};
    use tandem_protocol::ProblemKind;
    let k = config.kubernetes.as_ref().ok_or_else(|| {
        problem(
            ProblemKind::Runtime,
            "`runtime = \"kubernetes\"` but tandem.toml has no [kubernetes] table",
            "add [kubernetes] with at least `registry = \"host:port\"` (see the book's Kubernetes page)",
        )
    })?;
    let unreachable = |e: tandem_host::Error| {
        problem(
            ProblemKind::Runtime,
            format!("the Kubernetes cluster: {e}"),
            "check [kubernetes] in tandem.toml (kubeconfig, namespace) and that the API server answers; Tandem tries again within seconds",
        )
    };
    let client = KubernetesRuntime::client(k.kubeconfig.as_deref())
        .await
        .map_err(unreachable)?;
    let settings = Settings {
        namespace: k.namespace.clone(),
        installation: k.installation.clone(),
        runtime_class: k.runtime_class.clone(),
        user_namespaces: k.user_namespaces,
        start_timeout: std::time::Duration::from_secs(k.start_timeout_secs),
        isolate_links: k.isolate_links,
        root_on_node: k.root_on_node,
        ..Settings::default()
    };
    let registry = || tandem_host::registry::Registry::new(&k.registry, k.registry_insecure, None);
    let scratch = config.data_dir.join("cluster-layers");
    let rt = KubernetesRuntime::new(client, settings)
        .await
        .map_err(unreachable)?
        .keeping(tandem_host::runtime::kubernetes::keep::Keeper {
            registry: registry(),
            agent_key: agent_key.to_vec(),
            scratch: scratch.join("kept"),
        });
    let layers = tandem_host::cluster_layers::ClusterLayers::new(registry(), scratch);
    Ok((Arc::new(rt), Some(Arc::new(layers))))
}

/// The host's `node` and the configured code-server, when both are there.
fn code_server(config: &Config) -> Option<(std::path::PathBuf, std::path::PathBuf)> {
    let dir = config
        .agents
        .code_server_dir
        .clone()
        .filter(|d| d.join("out/node/entry.js").is_file())?;
    let node = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("node"))
        .find(|n| n.is_file())?;
    Some((std::fs::canonicalize(&node).unwrap_or(node), dir))
}

/// Completes on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}
