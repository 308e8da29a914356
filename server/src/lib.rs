//! The Tandem server: REST API, authentication, the session store and (in later layers) the
//! scheduler, live hubs and workspace runtime drivers. The `tandem` binary wraps it.
#![forbid(unsafe_code)]

pub mod agent;
pub mod auth;
pub mod availability;
pub mod client;
pub mod cluster;
pub mod code;
pub mod config;
pub mod data_dir;
pub mod db;
pub mod desktop;
pub mod error;
pub mod gateway;
pub mod github;
pub mod http;
pub mod images;
pub mod live;
pub mod mirrors;
pub mod proxy;
pub mod repos;
pub mod runtime;
pub mod scheduler;
pub mod secrets;
pub mod serve;
pub mod sessions;
pub mod settings;
pub mod snapshots;
pub mod state;
pub mod turns;

#[cfg(test)]
mod fuzz_support;

pub use error::{Error, Result};
pub use http::app;
pub use state::AppState;

/// The server's version, as reported by `/api/health` and `tandem --version`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
