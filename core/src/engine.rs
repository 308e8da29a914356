//! The core's handle: what every command, boot and turn shares. The composition root (the
//! server's `serve`) makes one and fills [`Engine::hooks`] with what the surfaces provide.

use std::sync::Arc;

use crate::config::Config;
use crate::db::Db;
use crate::hooks::Hooks;
use crate::jwt::JwtKeys;
use crate::{Error, Host, Result};

/// Cheap to clone: everything inside is shared.
#[derive(Clone)]
pub struct Engine {
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
    /// People's code-host permissions, looked up lately.
    pub permissions: Arc<crate::permissions::Permissions>,
    /// What the surfaces do for the core (a code host's permissions, a turn's gateway, …).
    pub hooks: Arc<dyn Hooks>,
    /// This server's counters for Prometheus (`/metrics`).
    pub metrics: Arc<crate::metrics::Metrics>,
    /// This server's traces for an OpenTelemetry collector (`[telemetry] otlp_endpoint`).
    pub traces: Arc<crate::traces::Traces>,
}

impl Engine {
    /// The workspaces, or an `Unavailable` error that says why there are none.
    pub fn workspaces(&self) -> Result<Arc<Host>> {
        self.workspaces.get().map_err(|p| {
            Error::Unavailable(format!(
                "this server cannot run workspaces: {}",
                crate::availability::sentence(&p)
            ))
        })
    }

    /// The URL people open (used in login and share links).
    pub fn public_url(&self) -> String {
        self.config
            .public_url
            .clone()
            .unwrap_or_else(|| format!("http://{}", self.config.listen))
    }
}
