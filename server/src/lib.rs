//! The Tandem server: the surfaces around the core (`tandem-core`) — the REST API and
//! authentication, the live hubs, the desktop and VS Code, the workspace gateway, GitHub, Slack,
//! the extension, automations — and the composition root (`serve`) that ties them to the core. The `tandem` binary
//! wraps it.
#![forbid(unsafe_code)]

pub mod automations;
pub mod client;
pub mod cluster;
pub mod desktop;
pub mod error;
pub mod extension_crx;
pub mod extension_package;
pub mod gateway;
pub mod github;
pub mod http;
pub mod identity;
pub mod live;
pub mod openapi;
pub mod progress;
pub mod proxy;
pub mod rate_limit;
pub mod serve;
pub mod slack;
pub mod state;
pub mod vscode;
pub mod websocket;

#[cfg(test)]
use tandem_core::fuzz_support;

pub use error::{Error, Result};
// The core (its own crate): the server's modules reach its parts by these names.
pub use tandem_core::{
    Engine, approvals, availability, commands, config, insights, mcp, metrics, now_ms,
    page_context, permissions, prompt_images, repos, secrets, sessions, settings, snapshots, spend,
    supervisor, traces, turns,
};
// The host layer (its own crate): the server's modules reach it by these names.
pub use http::app;
pub use state::AppState;
pub use tandem_host::{Host, data_dir, images, mirrors, runtime, workspace_agent};
// The store layer (its own crate), as `db`.
pub use tandem_store as db;

/// The server's version, as reported by `/api/health` and `tandem --version`.
pub const VERSION: &str = tandem_core::VERSION;
