//! What every request handler shares: the core's [`Engine`] and the surfaces' own handles.

use std::ops::Deref;
use std::sync::{Arc, Weak};

use crate::Engine;

/// Cheap to clone. Reads through to [`App`], and through it to the [`Engine`], so a handler
/// writes `state.db` and passes `&state` where the core takes `&Engine`.
#[derive(Clone)]
pub struct AppState(Arc<App>);

/// The surfaces' handles beside the core's.
pub struct App {
    pub engine: Engine,
    /// Each workspace's gateway listener.
    pub gateways: Arc<crate::gateway::Gateways>,
    /// Live sessions (someone connected).
    pub hubs: Arc<crate::live::Hubs>,
    /// Workspaces whose VS Code is up.
    pub vscode: Arc<crate::vscode::CodeServers>,
    /// The sessions' desktop streams.
    pub desktops: Arc<crate::desktop::Desktops>,
    /// The GitHub App, when configured.
    pub github: Option<Arc<crate::github::GitHub>>,
    /// OpenID Connect providers' discovery documents and keys.
    pub oidc: Arc<crate::identity::oidc::Providers>,
    /// The progress reports this process runs (Slack threads, GitHub issues).
    pub reporters: Arc<crate::progress::Reporters>,
    /// The Slack app, when configured.
    pub slack: Option<Arc<crate::slack::Slack>>,
    /// Per-address limits on unauthenticated starts (pairings, OpenID sign-ins).
    pub rate_limits: Arc<crate::rate_limit::Limits>,
    /// The extension's signing key and its signed package, made once.
    pub extension_crx: Arc<crate::extension_crx::Cache>,
}

impl AppState {
    pub fn new(app: App) -> Self {
        Self(Arc::new(app))
    }

    /// A handle that does not keep the state alive (for the core's hooks, which the state
    /// itself holds).
    pub fn downgrade(&self) -> WeakState {
        WeakState(Arc::downgrade(&self.0))
    }
}

impl Deref for AppState {
    type Target = App;
    fn deref(&self) -> &App {
        &self.0
    }
}

impl Deref for App {
    type Target = Engine;
    fn deref(&self) -> &Engine {
        &self.engine
    }
}

/// [`AppState::downgrade`]'s handle.
#[derive(Clone, Default)]
pub struct WeakState(Weak<App>);

impl WeakState {
    /// The state, while the server runs.
    pub fn upgrade(&self) -> Option<AppState> {
        self.0.upgrade().map(AppState)
    }
}
