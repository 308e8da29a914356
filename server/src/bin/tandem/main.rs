//! `tandem`: the server (`tandem serve`) and the command-line client for a running server.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use tandem_server::config::{Config, Overrides};

mod attach;
mod commands;
mod host;
mod local;
mod output;
mod remote;

use commands::*;

/// Background coding agents that people can watch and co-drive.
#[derive(Parser)]
#[command(name = "tandem", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server.
    Serve(ServeArgs),
    /// Repos: git remotes with their workspace recipe.
    #[command(subcommand)]
    Repo(RepoCommand),
    /// Sessions: one agent, one workspace, a queue of prompts.
    #[command(subcommand)]
    Session(SessionCommand),
    /// API tokens.
    #[command(subcommand)]
    Token(TokenCommand),
    /// People (admins): invite, list, change roles, deactivate.
    #[command(subcommand)]
    User(UserCommand),
    /// Snapshots: a repo at a commit with its setup done.
    #[command(subcommand)]
    Snapshot(SnapshotCommand),
    /// Write the Chrome extension's package for a server: the unpacked folder and its zip.
    Extension {
        /// The server's public URL the extension talks to.
        #[arg(long, default_value = "http://127.0.0.1:8080")]
        server: String,
        /// Where to write `tandem/` (the unpacked extension) and `tandem.zip`.
        #[arg(long, default_value = "target/extension")]
        out: std::path::PathBuf,
        /// Page patterns the extension may read without a click (repeatable).
        #[arg(long = "page")]
        pages: Vec<String>,
        /// Ask for every site up front (`<all_urls>`).
        #[arg(long)]
        all_sites: bool,
    },
    /// Run a shell command in a session's workspace (owner only); exits with its exit code.
    Exec {
        /// The session.
        session: String,
        /// Working directory (default /workspace).
        #[arg(long)]
        cwd: Option<String>,
        /// The command, run with `sh -c`.
        #[arg(trailing_var_arg = true, required = true)]
        command: Vec<String>,
        #[command(flatten)]
        remote: Remote,
    },
    /// Put a session's terminal in this terminal (drivers type, viewers watch; Ctrl-] detaches).
    Attach {
        session: String,
        /// Which terminal (default: the first).
        #[arg(long)]
        terminal: Option<u32>,
        /// Join with a share link's token instead of your own access.
        #[arg(long)]
        share: Option<String>,
        /// Your display name, as a guest of a share link.
        #[arg(long)]
        name: Option<String>,
        #[command(flatten)]
        remote: Remote,
    },
    /// Print a session's event log; --follow keeps printing new events as they happen.
    Events {
        session: String,
        /// Start after this sequence number.
        #[arg(long, default_value_t = 0)]
        after: i64,
        #[arg(long, short)]
        follow: bool,
        #[command(flatten)]
        remote: Remote,
    },
    /// Secrets (admins): values are read from standard input and never shown again.
    #[command(subcommand)]
    Secret(SecretCommand),
    /// Print a new one-time browser login link for the admin (run next to the data dir).
    LoginLink(LocalArgs),
    /// Workspace images.
    #[command(subcommand)]
    Image(ImageCommand),
    /// Check what this host supports for workspaces (runtimes, cgroups, overlayfs).
    Doctor {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        local: LocalArgs,
    },
}

/// Where the server's data lives (for `serve` and local admin commands).
#[derive(Args, Clone)]
struct LocalArgs {
    /// Data directory: database file, keys, workspaces. Default: /var/lib/tandem as root, else $XDG_DATA_HOME/tandem or ~/.local/share/tandem.
    #[arg(long, env = "TANDEM_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Database URL: sqlite://… (default: <data dir>/tandem.db) or postgres://…
    #[arg(long, env = "TANDEM_DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// The URL people open, used in links. Default: http://<listen address>.
    #[arg(long, env = "TANDEM_PUBLIC_URL")]
    public_url: Option<String>,
    /// Where built workspace images live. Default: <data dir>/images.
    #[arg(long, env = "TANDEM_IMAGES_DIR")]
    images_dir: Option<PathBuf>,
    /// The workspace image recipe (image.toml). Default: the built-in base image.
    #[arg(long, env = "TANDEM_IMAGE_RECIPE")]
    image_recipe: Option<PathBuf>,
    /// OCI runtime: runc, crun or runsc. Default: chosen by `tandem doctor`'s rules.
    #[arg(long, env = "TANDEM_RUNTIME")]
    runtime: Option<String>,
}

#[derive(Args)]
struct ServeArgs {
    /// Address to listen on. Default: 127.0.0.1:7878.
    #[arg(long, env = "TANDEM_LISTEN")]
    listen: Option<SocketAddr>,
    /// The built web app (index.html + pkg/). Default: the `site` folder next to the binary.
    #[arg(long, env = "TANDEM_WEB_DIR")]
    web_dir: Option<PathBuf>,
    /// An `opencode` binary to bind into workspaces for the opencode agent.
    #[arg(long, env = "TANDEM_OPENCODE_BIN")]
    opencode_bin: Option<PathBuf>,
    /// A code-server npm package directory to bind into workspaces (VS Code in the browser).
    #[arg(long, env = "TANDEM_CODE_SERVER_DIR")]
    code_server_dir: Option<PathBuf>,
    /// Print a fresh one-time login link for the admin at every start (not only the first).
    #[arg(long)]
    print_login_link: bool,
    #[command(flatten)]
    local: LocalArgs,
}

/// How to reach a running server.
#[derive(Args, Clone)]
struct Remote {
    /// The server's URL.
    #[arg(long, env = "TANDEM_URL", default_value = "http://127.0.0.1:7878")]
    url: String,
    /// An API token (tdm_…); `tandem token create` makes one.
    #[arg(long, env = "TANDEM_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

fn main() -> Result<()> {
    // The desktop encoder the server starts for a session (internal; before any thread exists,
    // as it takes a mount namespace of its own).
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("desktop-encode") {
        let usage =
            "usage: tandem desktop-encode DISPLAY FPS KBPS KEYFRAME_SECS SPEED CODEC -- BESIDE…";
        let words: Vec<std::ffi::OsString> = std::env::args_os().skip(2).collect();
        let split = words.iter().position(|w| w == "--").context(usage)?;
        let (display, quality) = args[2..2 + split].split_first().context(usage)?;
        let quality = tandem_server::desktop::encode::Quality::parse(quality)
            .map_err(|e| anyhow::anyhow!("{usage}: {e}"))?;
        let beside = tandem_server::runtime::beside::Beside::from_args(&words[split + 1..])
            .map_err(|e| anyhow::anyhow!("{usage}: {e}"))?;
        return tandem_server::desktop::encode::child_main(display, quality, || {
            beside
                .enter()
                .map_err(|e| tandem_media::Error::Unavailable(e.to_string()))
        })
        .map_err(|e| anyhow::anyhow!("{e}"));
    }
    let cli = Cli::parse();
    log_init();
    let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    rt.block_on(run(cli))
}

/// What `serve` fills in once it knows the OpenTelemetry collector: the process's own spans
/// (each HTTP request's) go there beside the sessions' traces.
type OtelLayer = tracing_opentelemetry::OpenTelemetryLayer<
    tracing_subscriber::Registry,
    opentelemetry_sdk::trace::SdkTracer,
>;
static OTEL: std::sync::OnceLock<
    tracing_subscriber::reload::Handle<Option<OtelLayer>, tracing_subscriber::Registry>,
> = std::sync::OnceLock::new();
static OTEL_ON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The log on stderr (`TANDEM_LOG`), and a place for the OpenTelemetry layer: Tandem's own
/// spans, and its info events and worse as their events.
fn log_init() {
    use tracing_subscriber::filter::FilterExt;
    use tracing_subscriber::prelude::*;
    let (otel, handle) = tracing_subscriber::reload::Layer::new(None::<OtelLayer>);
    let _ = OTEL.set(handle);
    // Tandem's own spans and its info events and worse, and nothing at all until a collector
    // is configured (the flag), so a server without one pays nothing for it.
    let ours = tracing_subscriber::filter::Targets::new()
        .with_target("tandem_server", tracing::Level::DEBUG)
        .with_target("tandem_core", tracing::Level::DEBUG)
        .with_target("tandem_host", tracing::Level::DEBUG)
        .with_target("tandem_store", tracing::Level::DEBUG)
        .and(tracing_subscriber::filter::filter_fn(|m| {
            OTEL_ON.load(std::sync::atomic::Ordering::Relaxed)
                && (m.is_span() || *m.level() <= tracing::Level::INFO)
        }));
    tracing_subscriber::registry()
        .with(otel.with_filter(ours))
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(
                    tracing_subscriber::EnvFilter::try_from_env("TANDEM_LOG").unwrap_or_else(
                        |_| tracing_subscriber::EnvFilter::new("info,sqlx=warn,tower_http=info"),
                    ),
                ),
        )
        .init();
}

async fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Serve(args) => serve(args).await,
        Command::LoginLink(local) => local::login_link(&local.config()?).await,
        Command::Image(ImageCommand::Build { local }) => host::image_build(&local.config()?).await,
        Command::Doctor { json, local } => host::doctor(&local.config()?, json).await,
        Command::Extension {
            server,
            out,
            pages,
            all_sites,
        } => {
            use tandem_server::extension_package as pkg;
            let target = pkg::Target {
                server_url: server,
                page_patterns: pages,
                all_sites,
                version: env!("CARGO_PKG_VERSION").into(),
            };
            pkg::write_dir(&target, &out.join("tandem"))?;
            std::fs::write(out.join("tandem.zip"), pkg::zip(&target)?)?;
            println!(
                "wrote {0}/tandem (load it unpacked at chrome://extensions) and {0}/tandem.zip",
                out.display()
            );
            Ok(())
        }
        Command::Repo(RepoCommand::Add {
            name,
            git_url,
            branch,
            warm_pool,
            remote,
        }) => remote::repo_add(&remote, name, git_url, branch, warm_pool).await,
        Command::Repo(RepoCommand::Ls { remote }) => remote::repo_ls(&remote).await,
        Command::User(UserCommand::Invite {
            name,
            email,
            admin,
            expires_in,
            remote,
        }) => remote::user_invite(&remote, name, email, admin, expires_in).await,
        Command::User(UserCommand::Ls { remote }) => remote::user_ls(&remote).await,
        Command::User(UserCommand::SetRole { name, role, remote }) => {
            remote::user_update(&remote, &name, Some(role == "admin"), None).await
        }
        Command::User(UserCommand::Deactivate { name, undo, remote }) => {
            remote::user_update(&remote, &name, None, Some(!undo)).await
        }
        Command::Repo(RepoCommand::Import { full_name, remote }) => {
            remote::repo_import(&remote, &full_name).await
        }
        Command::Repo(RepoCommand::Github { remote }) => remote::github_repos(&remote).await,
        Command::Session(SessionCommand::Pr {
            id,
            title,
            draft,
            rebase,
            no_rebase,
            remote,
        }) => {
            let rebase = if rebase {
                Some(true)
            } else if no_rebase {
                Some(false)
            } else {
                None
            };
            remote::open_pr(
                &remote,
                &id,
                tandem_protocol::github::CreatePr {
                    title,
                    draft,
                    rebase,
                },
            )
            .await
        }
        Command::Session(SessionCommand::New {
            repo,
            branch,
            agent,
            command,
            prompt,
            remote,
        }) => {
            remote::session_new(
                &remote,
                &repo,
                branch,
                remote::agent_spec(agent, command)?,
                prompt.unwrap_or_default(),
            )
            .await
        }
        Command::Session(SessionCommand::Prompt {
            id,
            text,
            steer,
            remote,
        }) => remote::prompt(&remote, &id, text, steer).await,
        Command::Session(SessionCommand::StopTurn { id, remote }) => {
            remote::stop_turn(&remote, &id).await
        }
        Command::Session(SessionCommand::Children { id, remote }) => {
            remote::children(&remote, &id).await
        }
        Command::Secret(SecretCommand::Set { name, remote }) => {
            remote::secret_set(&remote, &name).await
        }
        Command::Attach {
            session,
            terminal,
            share,
            name,
            remote,
        } => {
            attach::attach(
                &remote,
                remote::session_id(&session)?,
                terminal,
                share,
                name,
            )
            .await
        }
        Command::Events {
            session,
            after,
            follow,
            remote,
        } => attach::events(&remote, remote::session_id(&session)?, after, follow).await,
        Command::Session(SessionCommand::Ls { repo, remote }) => {
            remote::session_ls(&remote, repo.as_deref()).await
        }
        Command::Session(SessionCommand::Show { id, remote }) => {
            remote::session_show(&remote, &id).await
        }
        Command::Session(SessionCommand::Stop { id, remote }) => {
            remote::session_action(&remote, &id, "stop").await
        }
        Command::Session(SessionCommand::Suspend { id, remote }) => {
            remote::session_action(&remote, &id, "suspend").await
        }
        Command::Session(SessionCommand::Resume { id, remote }) => {
            remote::session_action(&remote, &id, "resume").await
        }
        Command::Session(SessionCommand::Fork { id, count, remote }) => {
            remote::session_fork(&remote, &id, count).await
        }
        Command::Session(SessionCommand::Diff { id, remote }) => {
            remote::session_diff(&remote, &id).await
        }
        Command::Exec {
            session,
            cwd,
            command,
            remote,
        } => remote::exec(&remote, &session, cwd, command.join(" ")).await,
        Command::Snapshot(SnapshotCommand::Build {
            repo,
            no_wait,
            remote,
        }) => remote::snapshot_build(&remote, &repo, !no_wait).await,
        Command::Snapshot(SnapshotCommand::Ls { repo, remote }) => {
            remote::snapshot_ls(&remote, &repo).await
        }
        Command::Token(TokenCommand::Create {
            name,
            expires_in,
            remote,
            local,
        }) => match &remote.token {
            Some(_) => remote::token_create(&remote, name, expires_in).await,
            None => local::token_create(&local.config()?, &name, expires_in, remote.json).await,
        },
    }
}

impl LocalArgs {
    fn overrides(&self) -> Overrides {
        Overrides {
            data_dir: self.data_dir.clone(),
            database_url: self.database_url.clone(),
            public_url: self.public_url.clone(),
            images_dir: self.images_dir.clone(),
            image_recipe: self.image_recipe.clone(),
            runtime: self.runtime.clone(),
            ..Default::default()
        }
    }

    fn config(&self) -> Result<Config> {
        Ok(Config::resolve(self.overrides())?)
    }
}

async fn serve(args: ServeArgs) -> Result<()> {
    let config = Config::resolve(Overrides {
        listen: args.listen,
        web_dir: args.web_dir.clone(),
        opencode_bin: args.opencode_bin.clone(),
        code_server_dir: args.code_server_dir.clone(),
        ..args.local.overrides()
    })?;
    let data_dir = config.data_dir.clone();
    let web = config.web_dir.clone();
    let server = tandem_server::serve::Server::bind(config).await?;
    if let (Some(provider), Some(handle)) = (server.state().traces.provider(), OTEL.get()) {
        use opentelemetry::trace::TracerProvider;
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("tandem-server"));
        if handle.modify(|l| *l = Some(layer)).is_ok() {
            OTEL_ON.store(true, std::sync::atomic::Ordering::Relaxed);
            tracing::callsite::rebuild_interest_cache();
        }
    }
    let url = server.url();
    // Plain stdout, not the log: the login link is a secret and logs are shipped elsewhere.
    println!("Tandem {} is listening on {url}", tandem_server::VERSION);
    println!("  data dir:  {}", data_dir.display());
    println!("  database:  {}", server.state().db.backend().as_str());
    match &web {
        Some(dir) => println!("  web app:   {}", dir.display()),
        None => println!("  web app:   not built (run `cargo xtask up`)"),
    }
    match &server.first_login_url {
        Some(link) => println!(
            "\nFirst start: the admin user was created. Sign in with this one-time link:\n\n  {link}\n"
        ),
        None if args.print_login_link => {
            let db = &server.state().db;
            let admin = tandem_server::identity::auth::local_admin(db).await?;
            let code = tandem_server::identity::auth::create_login_code(db, admin.id).await?;
            println!(
                "\nSign in with this one-time link:\n\n  {}\n",
                tandem_server::identity::auth::login_url(&url, &code)
            );
        }
        None => println!("  sign in:   `tandem login-link` prints a new one-time login link"),
    }
    let traces = server.state().traces.clone();
    let ran = server.run(tandem_server::serve::shutdown_signal()).await;
    // What the collector has not been sent yet goes before the process does.
    tokio::task::spawn_blocking(move || traces.flush()).await?;
    ran?;
    println!("Tandem stopped.");
    Ok(())
}
