//! What every request handler shares.

use std::sync::Arc;

use crate::Host;
use crate::auth::JwtKeys;
use crate::config::Config;
use crate::db::Db;

/// Cheap to clone: everything inside is shared.
#[derive(Clone)]
pub struct AppState {
    pub db: Db,
    pub jwt: Arc<JwtKeys>,
    pub config: Arc<Config>,
    /// The workspace runtime, or why this server cannot run workspaces (probed again while
    /// missing).
    pub workspaces: Arc<crate::availability::Slot>,
    /// What the settings page changes, layered under `tandem.toml`.
    pub settings: Arc<crate::settings::Settings>,
    /// Sessions whose boot is under way or waiting for a cause to go away.
    pub boots: Arc<crate::sessions::boots::Boots>,
    /// Limits how many workspaces boot at once.
    pub boot_slots: Arc<tokio::sync::Semaphore>,
    /// Started, unclaimed workspaces per repo.
    pub pool: Arc<crate::sessions::pool::WarmPool>,
    /// The secret store (model API keys).
    pub secrets: Arc<crate::secrets::Secrets>,
    /// The prompt queues this process is working through.
    pub turns: Arc<crate::turns::Turns>,
    /// Each workspace's gateway listener.
    pub gateways: Arc<crate::gateway::Gateways>,
    /// Live sessions (someone connected).
    pub hubs: Arc<crate::live::Hubs>,
    /// Workspaces whose VS Code is up.
    pub code: Arc<crate::code::CodeServers>,
    /// The sessions' desktop streams.
    pub desktops: Arc<crate::desktop::Desktops>,
    /// The GitHub App, when configured.
    pub github: Option<Arc<crate::github::GitHub>>,
    /// People's GitHub permissions, looked up lately.
    pub permissions: Arc<crate::permissions::Permissions>,
    /// OpenID Connect providers' discovery documents and keys.
    pub oidc: Arc<crate::oidc::Providers>,
    /// The progress reports this process runs (Slack threads, GitHub issues).
    pub followers: Arc<crate::progress::Running>,
    /// The Slack app, when configured.
    pub slack: Option<Arc<crate::slack::Slack>>,
    /// Per-address limits on unauthenticated starts (pairings, OpenID sign-ins).
    pub rate_limits: Arc<crate::rate_limit::Limits>,
    /// The extension's signing key and its signed package, made once.
    pub extension_crx: Arc<crate::extension_crx::Cache>,
}

impl AppState {
    /// The workspaces, or a 503 that says why there are none.
    pub fn workspaces(&self) -> crate::Result<Arc<Host>> {
        self.workspaces.get().map_err(|p| {
            crate::Error::Unavailable(format!(
                "this server cannot run workspaces: {}",
                crate::availability::sentence(&p)
            ))
        })
    }

    /// The URL people open (used in login links).
    pub fn public_url(&self) -> String {
        self.config
            .public_url
            .clone()
            .unwrap_or_else(|| format!("http://{}", self.config.listen))
    }
}
