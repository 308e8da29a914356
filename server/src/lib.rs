//! The Tandem server: the REST API, authentication, sessions and turns, the scheduler, the live
//! hubs, the desktop and VS Code, GitHub. It runs workspaces through the host layer
//! (`tandem-host`) and stores through the store layer. The `tandem` binary wraps it.
#![forbid(unsafe_code)]

pub mod actions;
pub mod auth;
pub mod automations;
pub mod availability;
pub mod client;
pub mod cluster;
pub mod code;
pub mod config;
pub mod desktop;
pub mod error;
pub mod extension_crx;
pub mod extension_package;
pub mod gateway;
pub mod github;
pub mod http;
pub mod live;
pub mod oidc;
pub mod page_context;
pub mod people;
pub mod permissions;
pub mod progress;
pub mod prompt_images;
pub mod proxy;
pub mod rate_limit;
pub mod repos;
pub mod scheduler;
pub mod secrets;
pub mod serve;
pub mod sessions;
pub mod settings;
pub mod slack;
pub mod snapshots;
pub mod state;
pub mod turns;

#[cfg(test)]
mod fuzz_support;

pub use error::{Error, Result};
// The host layer (its own crate): the server's modules reach it by these names.
pub use http::app;
pub use state::AppState;
pub use tandem_host::{Host, data_dir, images, mirrors, runtime, workspace_agent};
// The store layer (its own crate), as `db`.
pub use tandem_store as db;

/// The server's version, as reported by `/api/health` and `tandem --version`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
