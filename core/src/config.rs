//! Server configuration: command-line flags, then `TANDEM_*` environment variables, then
//! `<data dir>/tandem.toml`, then the documented defaults.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

pub mod code_origin;
pub mod desktop;
pub mod kubernetes;
pub mod oidc;
pub mod telemetry;

pub use desktop::{DesktopCodec, DesktopConfig};

use code_origin::CodeOrigin;

use crate::{Error, Result};

/// Default address `tandem serve` listens on.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7878";
/// Name of the optional config file inside the data dir.
pub const CONFIG_FILE: &str = "tandem.toml";
/// Name of the SQLite database file inside the data dir (the embedded default).
pub const SQLITE_FILE: &str = "tandem.db";

/// What a [`RuntimeLayer`] does: a runtime in, the runtime to use out.
pub type WrapRuntime = dyn Fn(std::sync::Arc<dyn crate::runtime::Runtime>) -> std::sync::Arc<dyn crate::runtime::Runtime>
    + Send
    + Sync;

/// Wraps a workspace runtime in another (see [`Config::runtime_layer`]); none leaves it as is.
#[derive(Clone, Default)]
pub struct RuntimeLayer(pub Option<std::sync::Arc<WrapRuntime>>);

impl RuntimeLayer {
    /// `runtime`, wrapped when a layer is set.
    pub fn wrap(
        &self,
        runtime: std::sync::Arc<dyn crate::runtime::Runtime>,
    ) -> std::sync::Arc<dyn crate::runtime::Runtime> {
        match &self.0 {
            Some(layer) => layer(runtime),
            None => runtime,
        }
    }
}

impl std::fmt::Debug for RuntimeLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "RuntimeLayer(set)"
        } else {
            "RuntimeLayer(none)"
        })
    }
}

/// Everything `tandem serve` needs to run, fully resolved.
#[derive(Clone, Debug)]
pub struct Config {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Where the database file, keys and workspaces live.
    pub data_dir: PathBuf,
    /// `sqlite://…` or `postgres://…`.
    pub database_url: String,
    /// The URL people open; used in login and share links. Defaults to `http://<listen>`.
    pub public_url: Option<String>,
    /// The built web app (`index.html`, `pkg/`); none serves a page that says how to build it.
    pub web_dir: Option<PathBuf>,
    /// Where built images live. Default: `<data dir>/images`.
    pub images_dir: PathBuf,
    /// The workspace image's recipe; none means the built-in `images/base/image.toml`.
    pub image_recipe: Option<PathBuf>,
    /// `runc`, `crun` or `runsc`; none picks one (`tandem doctor` says which).
    pub runtime: Option<String>,
    /// The workspace agent binary; none means `tandem-workspace-agent` next to this binary.
    pub agent_bin: Option<PathBuf>,
    /// Static name → addresses entries for egress allow-lists, used before the host's resolver
    /// (internal services without DNS).
    pub egress_hosts: std::collections::BTreeMap<String, Vec<std::net::IpAddr>>,
    /// What the workspace runtime this server builds is wrapped in (never from a file: a
    /// program embedding the server, e.g. a test running workspaces behind a network hop).
    pub runtime_layer: RuntimeLayer,
    /// How often every repo's snapshot is checked and rebuilt if stale (seconds; 0 = never).
    pub snapshot_interval_secs: u64,
    /// Good snapshots kept per repo (besides those in use).
    pub snapshot_keep: usize,
    /// How often workspaces whose sessions ended are swept (seconds; 0 = never).
    pub orphan_sweep_secs: u64,
    /// Agents and the model they use (`[agents]` in the file).
    pub agents: AgentsConfig,
    /// The GitHub App (`[github]` in the file); none turns GitHub off.
    pub github: Option<GithubConfig>,
    /// OpenID Connect providers people sign in with (`[[oidc]]` in the file).
    pub oidc: Vec<oidc::OidcConfig>,
    /// The desktop stream (`[desktop]` in the file).
    pub desktop: DesktopConfig,
    /// Where each session's VS Code is served, parsed from `code_url`
    /// (`http(s)://{session}.<domain>[:port]`: wildcard DNS and certificate pointing at this
    /// server). Once the server is bound, none becomes `<session>.localhost` when the public URL
    /// is on loopback; none left means VS Code has no origin of its own.
    pub code_url: Option<CodeOrigin>,
    /// Where the other server processes sharing the database reach this one (plain HTTP on
    /// the cluster's network): requests about sessions whose workspace runs on this server's
    /// host are forwarded here. Default: `http://<listen address>`.
    pub advertise_url: Option<String>,
    /// Which of the settings page's values `tandem.toml` sets (those the page cannot change).
    pub file_sets: FileSets,
    /// Directories under which a repo may be a local path or `file://` URL (the server's git
    /// reads them as root). None: only network remotes.
    pub local_repo_dirs: Vec<PathBuf>,
    /// Serve VS Code on Tandem's own origin where it has none of its own. Unsafe: pages a
    /// workspace serves (VS Code, its extensions) then run next to Tandem's credentials.
    pub unsafe_code_on_tandem_origin: bool,
    /// Serve VS Code on a `code_url` of the same site (registrable domain) as the public URL.
    /// Unsafe: a page a workspace serves could then set cookies Tandem's origin receives and
    /// send same-site requests; the server refuses to start with such a `code_url` unless this
    /// says the admin insists, and then `tandem doctor` and the dashboard warn.
    pub unsafe_same_site_code_url: bool,
    /// `[workspaces]`: every workspace's limits.
    pub workspaces: WorkspacesConfig,
    /// `[extension]`: the Chrome extension's package.
    pub extension: ExtensionConfig,
    /// `[automations]`: scheduled prompts.
    pub automations: AutomationsConfig,
    /// The Slack app (`[slack]` in the file); none turns Slack off.
    pub slack: Option<SlackConfig>,
    /// `[kubernetes]`: the cluster `runtime = "kubernetes"` runs workspaces on.
    pub kubernetes: Option<kubernetes::KubernetesConfig>,
    /// `[telemetry]`: `/metrics` and OpenTelemetry traces.
    pub telemetry: telemetry::TelemetryConfig,
}

/// `[slack]`: the Slack app people mention to start sessions. Its signing secret and bot token
/// are in the secret store under the names given here.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlackConfig {
    /// Web API root.
    #[serde(default = "default_slack_api")]
    pub api_url: String,
    /// Where files attached to messages are downloaded from (the origin of their
    /// `url_private`); the bot token is sent nowhere else.
    #[serde(default = "default_slack_files")]
    pub files_url: String,
    /// Secret holding the app's signing secret (Basic Information → App Credentials).
    #[serde(default = "default_slack_signing_secret")]
    pub signing_secret: String,
    /// Secret holding the bot token (`xoxb-…`, OAuth & Permissions).
    #[serde(default = "default_slack_bot_token")]
    pub bot_token: String,
    /// The Slack workspaces (team ids, `T…`) whose messages are taken. None: only the bot
    /// token's own workspace.
    #[serde(default)]
    pub allowed_teams: Vec<String>,
}

fn default_slack_api() -> String {
    "https://slack.com/api".into()
}
fn default_slack_files() -> String {
    "https://files.slack.com".into()
}
fn default_slack_signing_secret() -> String {
    "slack_signing_secret".into()
}
fn default_slack_bot_token() -> String {
    "slack_bot_token".into()
}

/// `[automations]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AutomationsConfig {
    /// The shortest time between two runs a schedule may ask for (seconds).
    pub min_interval_secs: u64,
}

impl Default for AutomationsConfig {
    fn default() -> Self {
        Self {
            min_interval_secs: 300,
        }
    }
}

/// `[extension]`: what the Chrome extension this server packages may reach.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExtensionConfig {
    /// Ask for every site up front (`<all_urls>`), so the picker and screenshots work on any
    /// page without a click on the toolbar button first. Off: this server and the pages its
    /// URL rules name, and other pages once the person clicks the button there.
    pub all_sites: bool,
}

/// `[workspaces]`: the limits a workspace gets and the most a recipe may ask for.
pub use tandem_host::runtime::limits::LimitPolicy as WorkspacesConfig;

/// The settings-page keys `<data dir>/tandem.toml` gives a value (it wins over the page).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileSets {
    pub model_base_url: bool,
    pub model: bool,
    pub api_key_secret: bool,
    pub default_agent: bool,
    /// A `[github]` table.
    pub github: bool,
    pub local_repo_dirs: bool,
}

impl FileSets {
    /// Reads which keys a `tandem.toml` text sets.
    pub fn of(text: &str) -> Self {
        let Ok(v) = text.parse::<toml::Table>() else {
            return Self::default();
        };
        let agents = v.get("agents").and_then(|a| a.as_table());
        let has = |k: &str| agents.is_some_and(|a| a.contains_key(k));
        Self {
            model_base_url: has("model_base_url"),
            model: has("model"),
            api_key_secret: has("api_key_secret"),
            default_agent: has("default"),
            github: v.contains_key("github"),
            local_repo_dirs: v.contains_key("local_repo_dirs"),
        }
    }
}

/// `[github]`: the GitHub App Tandem acts as. Its private key, webhook secret and OAuth client
/// secret live in the secret store (`tandem secret set NAME < file`), under the names below.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GithubConfig {
    /// The App's id (its settings page, "App ID").
    pub app_id: u64,
    /// The App's slug (`github.com/apps/<slug>`): `@<slug>` in a PR comment makes a prompt.
    pub app_slug: String,
    /// The App's OAuth client id, for "Sign in with GitHub"; none turns sign-in off.
    #[serde(default)]
    pub client_id: Option<String>,
    /// GitHub logins that may get a Tandem account by signing in with GitHub (case-insensitive).
    /// Anyone else is refused unless `open_signup`; people with an account link GitHub to it by
    /// choosing "Sign in with GitHub" while signed in.
    #[serde(default)]
    pub allowed_logins: Vec<String>,
    /// Any GitHub user may get an account (for a private GitHub Enterprise, say).
    #[serde(default)]
    pub open_signup: bool,
    /// REST API root.
    #[serde(default = "default_github_api")]
    pub api_url: String,
    /// Web root: OAuth pages and git remotes (`<web_url>/<owner>/<name>.git`).
    #[serde(default = "default_github_web")]
    pub web_url: String,
    /// Secret holding the App's private key (PEM).
    #[serde(default = "default_private_key_secret")]
    pub private_key_secret: String,
    /// Secret holding the webhook secret.
    #[serde(default = "default_webhook_secret")]
    pub webhook_secret: String,
    /// Secret holding the OAuth client secret.
    #[serde(default = "default_client_secret")]
    pub client_secret: String,
    /// An issue given this label by someone who may start sessions on the repo becomes a
    /// session, like one whose comment mentions the App.
    #[serde(default)]
    pub issue_label: Option<String>,
}

fn default_github_api() -> String {
    "https://api.github.com".into()
}
fn default_github_web() -> String {
    "https://github.com".into()
}
fn default_private_key_secret() -> String {
    "github_private_key".into()
}
fn default_webhook_secret() -> String {
    "github_webhook_secret".into()
}
fn default_client_secret() -> String {
    "github_client_secret".into()
}

/// `[agents]`: the model endpoint, the default agent, what happens to interrupted turns.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentsConfig {
    /// An OpenAI-compatible API (`…/v1`); the server calls it for workspaces, which never see
    /// the key. None: builtin and opencode turns fail with a message saying so.
    pub model_base_url: Option<String>,
    /// The model name sent with every request.
    pub model: String,
    /// The secret (`tandem secret set NAME`) holding the API key; a missing secret sends none.
    pub api_key_secret: String,
    /// The agent of sessions that do not name one.
    pub default: tandem_protocol::AgentSpec,
    /// What happens to a prompt whose turn a restart interrupted.
    pub on_interrupt: OnInterrupt,
    /// Most model requests in one turn.
    pub max_steps: u32,
    /// Times a prompt may be interrupted before it is left for people to resubmit.
    pub max_attempts: i64,
    /// Most model requests one session tree (a session, the children its agent spawns, forks)
    /// may make through its gateways: the budget of a tree whose root has none of its own (an
    /// automation's run has its automation's, below this). Counted in the store.
    pub max_model_requests_per_session: u32,
    /// Models a workspace's request may name besides `model`; any other is replaced by `model`.
    pub allowed_models: Vec<String>,
    /// Most output tokens one model request may ask for: a larger `max_tokens` or
    /// `max_completion_tokens` is lowered to it.
    pub max_output_tokens: u32,
    /// Provider-side tools a workspace's model request may offer (`web_search`, `file_search`,
    /// `code_interpreter`, …); by default none: the provider would reach the internet, or the
    /// account's files, past the workspace's egress allow-list.
    pub provider_tools: Vec<String>,
    /// A host `opencode` binary to bind into workspaces (else the image's own, if any).
    /// `cargo xtask` installs one from `images/agents/package.json`.
    pub opencode_bin: Option<PathBuf>,
    /// A host code-server (its npm package directory) to bind into workspaces for VS Code, run
    /// with the host's `node`. `cargo xtask` installs one from `images/agents/package.json`.
    pub code_server_dir: Option<PathBuf>,
    /// How long an agent's tool call waits for a person's approval before it is denied.
    pub approval_timeout_secs: u64,
}

impl Default for AgentsConfig {
    fn default() -> Self {
        Self {
            model_base_url: None,
            model: "gpt-4.1-mini".into(),
            api_key_secret: "model_api_key".into(),
            default: tandem_protocol::AgentSpec::Builtin,
            on_interrupt: OnInterrupt::Rerun,
            max_steps: 50,
            max_attempts: 3,
            max_model_requests_per_session: 2000,
            allowed_models: Vec::new(),
            max_output_tokens: DEFAULT_MAX_OUTPUT_TOKENS,
            provider_tools: Vec::new(),
            opencode_bin: None,
            code_server_dir: None,
            approval_timeout_secs: 600,
        }
    }
}

/// Default of [`AgentsConfig::max_output_tokens`]: every relayed request carries it (or less),
/// so it is the most the common chat models accept (gpt-4o's 16,384), not the largest any does.
pub const DEFAULT_MAX_OUTPUT_TOKENS: u32 = 16_384;

/// [`AgentsConfig::on_interrupt`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnInterrupt {
    /// Run it again before anything else queued.
    Rerun,
    /// Queue it again behind the prompts already waiting.
    Requeue,
}

/// Default of [`Config::snapshot_interval_secs`]: 30 minutes.
pub const DEFAULT_SNAPSHOT_INTERVAL_SECS: u64 = 30 * 60;
/// Default of [`Config::snapshot_keep`].
pub const DEFAULT_SNAPSHOT_KEEP: usize = 3;

/// The optional `<data dir>/tandem.toml`; every key is optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub listen: Option<SocketAddr>,
    #[serde(default)]
    pub egress_hosts: std::collections::BTreeMap<String, Vec<std::net::IpAddr>>,
    pub agent_bin: Option<PathBuf>,
    pub snapshot_interval_secs: Option<u64>,
    pub snapshot_keep: Option<usize>,
    pub orphan_sweep_secs: Option<u64>,
    pub images_dir: Option<PathBuf>,
    pub image_recipe: Option<PathBuf>,
    pub runtime: Option<String>,
    pub database_url: Option<String>,
    pub public_url: Option<String>,
    pub web_dir: Option<PathBuf>,
    #[serde(default)]
    pub agents: AgentsConfig,
    pub github: Option<GithubConfig>,
    #[serde(default)]
    pub oidc: Vec<oidc::OidcConfig>,
    #[serde(default)]
    pub desktop: DesktopConfig,
    pub code_url: Option<String>,
    pub advertise_url: Option<String>,
    #[serde(default)]
    pub local_repo_dirs: Vec<PathBuf>,
    #[serde(default)]
    pub unsafe_code_on_tandem_origin: bool,
    #[serde(default)]
    pub unsafe_same_site_code_url: bool,
    #[serde(default)]
    pub workspaces: WorkspacesConfig,
    #[serde(default)]
    pub extension: ExtensionConfig,
    #[serde(default)]
    pub automations: AutomationsConfig,
    pub slack: Option<SlackConfig>,
    pub kubernetes: Option<kubernetes::KubernetesConfig>,
    #[serde(default)]
    pub telemetry: telemetry::TelemetryConfig,
}

/// What flags and environment gave (clap merges the two); `None` = not given.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    pub listen: Option<SocketAddr>,
    pub agent_bin: Option<PathBuf>,
    pub images_dir: Option<PathBuf>,
    pub image_recipe: Option<PathBuf>,
    pub runtime: Option<String>,
    pub data_dir: Option<PathBuf>,
    pub database_url: Option<String>,
    pub public_url: Option<String>,
    pub web_dir: Option<PathBuf>,
    pub opencode_bin: Option<PathBuf>,
    pub code_server_dir: Option<PathBuf>,
}

/// As root `/var/lib/tandem` (workspaces' own uids must reach it, which `/root` does not let
/// them; a data dir already made at the old place is kept); else `$XDG_DATA_HOME/tandem`, else
/// `~/.local/share/tandem`, else `./.tandem`.
pub fn default_data_dir() -> PathBuf {
    if nix::unistd::geteuid().is_root() && std::env::var_os("XDG_DATA_HOME").is_none() {
        let old = std::env::var_os("HOME")
            .map(|h| PathBuf::from(h).join(".local/share/tandem"))
            .filter(|d| d.join("server-id").exists());
        return old.unwrap_or_else(|| PathBuf::from("/var/lib/tandem"));
    }
    if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|x| !x.is_empty()) {
        return PathBuf::from(x).join("tandem");
    }
    if let Some(home) = std::env::var_os("HOME").filter(|x| !x.is_empty()) {
        return PathBuf::from(home).join(".local/share/tandem");
    }
    PathBuf::from(".tandem")
}

/// The built web app next to the binary: `<exe dir>/../site` (the layout `cargo xtask` builds)
/// or `<exe dir>/site` (an installed layout), whichever exists.
pub fn default_web_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [dir.join("../site"), dir.join("site")]
        .into_iter()
        .find(|p| p.join("index.html").is_file())
}

impl Config {
    /// Resolves flags/env over the data dir's `tandem.toml` over defaults.
    pub fn resolve(over: Overrides) -> Result<Self> {
        let data_dir = over.data_dir.unwrap_or_else(default_data_dir);
        let file = read_file_config(&data_dir)?;
        if let Some(p) = file.telemetry.problem() {
            return Err(Error::Config(p));
        }
        let file_sets = std::fs::read_to_string(data_dir.join(CONFIG_FILE))
            .map(|t| FileSets::of(&t))
            .unwrap_or_default();
        let listen = match over.listen.or(file.listen) {
            Some(a) => a,
            None => DEFAULT_LISTEN
                .parse()
                .map_err(|e| Error::Config(format!("{e}")))?,
        };
        let database_url = over
            .database_url
            .or(file.database_url)
            .unwrap_or_else(|| sqlite_url(&data_dir.join(SQLITE_FILE)));
        Ok(Self {
            listen,
            database_url,
            public_url: over
                .public_url
                .or(file.public_url)
                .map(|u| u.trim_end_matches('/').to_string()),
            web_dir: over.web_dir.or(file.web_dir).or_else(default_web_dir),
            images_dir: over
                .images_dir
                .or(file.images_dir)
                .unwrap_or_else(|| data_dir.join("images")),
            image_recipe: over.image_recipe.or(file.image_recipe),
            runtime: over.runtime.or(file.runtime),
            agent_bin: over.agent_bin.or(file.agent_bin),
            egress_hosts: file.egress_hosts,
            runtime_layer: RuntimeLayer::default(),
            snapshot_interval_secs: file
                .snapshot_interval_secs
                .unwrap_or(DEFAULT_SNAPSHOT_INTERVAL_SECS),
            snapshot_keep: file.snapshot_keep.unwrap_or(DEFAULT_SNAPSHOT_KEEP),
            orphan_sweep_secs: file.orphan_sweep_secs.unwrap_or(30),
            agents: crate::config::AgentsConfig {
                opencode_bin: over.opencode_bin.or(file.agents.opencode_bin.clone()),
                code_server_dir: over.code_server_dir.or(file.agents.code_server_dir.clone()),
                ..file.agents
            },
            desktop: file.desktop.clone().validated()?,
            advertise_url: match file.advertise_url {
                Some(u) if !u.starts_with("http://") => {
                    return Err(Error::Config(format!(
                        "advertise_url {u:?}: must be http://host:port (the cluster's own network)"
                    )));
                }
                other => other.map(|u| u.trim_end_matches('/').to_string()),
            },
            code_url: file
                .code_url
                .as_deref()
                .map(CodeOrigin::parse)
                .transpose()?,
            github: file.github.map(|g| GithubConfig {
                api_url: g.api_url.trim_end_matches('/').to_string(),
                web_url: g.web_url.trim_end_matches('/').to_string(),
                ..g
            }),
            oidc: {
                let mut seen = std::collections::HashSet::new();
                let mut out = Vec::new();
                for p in file.oidc {
                    let p = p.validated()?;
                    if !seen.insert(p.id.clone()) {
                        return Err(Error::Config(format!(
                            "[[oidc]] id {:?} is used twice",
                            p.id
                        )));
                    }
                    out.push(p);
                }
                out
            },
            file_sets,
            local_repo_dirs: file.local_repo_dirs,
            unsafe_code_on_tandem_origin: file.unsafe_code_on_tandem_origin,
            unsafe_same_site_code_url: file.unsafe_same_site_code_url,
            workspaces: file.workspaces,
            extension: file.extension,
            automations: file.automations,
            slack: file.slack,
            kubernetes: file.kubernetes,
            telemetry: file.telemetry,
            data_dir,
        })
    }
}

/// Reads `<data dir>/tandem.toml` if it exists.
pub fn read_file_config(data_dir: &Path) -> Result<FileConfig> {
    let path = data_dir.join(CONFIG_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            toml::from_str(&text).map_err(|e| Error::Config(format!("{}: {e}", path.display())))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(FileConfig::default()),
        Err(e) => Err(Error::Config(format!("{}: {e}", path.display()))),
    }
}

/// The sqlx URL of a SQLite file, created if missing.
pub fn sqlite_url(path: &Path) -> String {
    format!("sqlite://{}?mode=rwc", path.display())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_config_is_overridden_by_flags_and_fills_gaps() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(CONFIG_FILE),
            "listen = \"127.0.0.1:9999\"\npublic_url = \"https://tandem.example/\"\n",
        )
        .unwrap();
        let cfg = Config::resolve(Overrides {
            data_dir: Some(dir.path().into()),
            listen: Some("127.0.0.1:1234".parse().unwrap()),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(cfg.listen.port(), 1234, "flag beats file");
        assert_eq!(
            cfg.public_url.as_deref(),
            Some("https://tandem.example"),
            "file fills the gap"
        );
        assert!(
            cfg.database_url.starts_with("sqlite://"),
            "embedded default is SQLite"
        );
    }

    #[test]
    fn unknown_keys_in_the_file_are_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(CONFIG_FILE), "lisen = \"x\"\n").unwrap();
        let err = Config::resolve(Overrides {
            data_dir: Some(dir.path().into()),
            ..Default::default()
        })
        .unwrap_err();
        assert!(err.to_string().contains("lisen"), "{err}");
    }

    #[test]
    fn recipe_limits_are_capped_by_the_servers_most_and_default_to_its_own() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(CONFIG_FILE),
            "[workspaces.limits]\ndisk_gb = 5\n[workspaces.max]\nmemory_mb = 1024\ncpus = 1.5\npids = 500\ndisk_gb = 10\n",
        )
        .unwrap();
        let cfg = Config::resolve(Overrides {
            data_dir: Some(dir.path().into()),
            ..Default::default()
        })
        .unwrap();
        let none = crate::runtime::limits::LimitRequest::default();
        let l = cfg.workspaces.limits(&none).unwrap();
        assert_eq!(l.disk_bytes, 5 << 30, "the server's default disk");
        assert_eq!(l.memory_bytes, 1024 << 20, "the default memory, capped");
        let greedy = crate::runtime::limits::LimitRequest {
            memory_mb: Some(65_536),
            cpus: Some(32.0),
            pids: Some(100_000),
            disk_gb: Some(1000),
        };
        let l = cfg.workspaces.limits(&greedy).unwrap();
        assert_eq!(
            (l.memory_bytes, l.cpus, l.pids, l.disk_bytes),
            (1024 << 20, 1.5, 500, 10 << 30),
            "a recipe gets no more than the server allows"
        );
        let modest = crate::runtime::limits::LimitRequest {
            disk_gb: Some(2),
            ..Default::default()
        };
        assert_eq!(cfg.workspaces.limits(&modest).unwrap().disk_bytes, 2 << 30);
    }
}
