//! Tandem's core: sessions and their workspaces, turns, snapshots, who may see and do what,
//! repos, and the commands every surface calls ([`commands`]). It stores through `tandem-store`
//! and runs workspaces through `tandem-host`.
//!
//! It deliberately knows no surface: no HTTP server, no WebSocket, no code host, no chat app,
//! no browser extension. What it needs of them is [`hooks::Hooks`], which the composition root
//! (the server's `serve`) fills in; the compiler, not a convention, keeps the two apart.
#![forbid(unsafe_code)]

pub mod approvals;
pub mod availability;
pub mod commands;
pub mod config;
pub mod engine;
pub mod error;
pub mod hooks;
pub mod insights;
pub mod jwt;
pub mod mcp;
pub mod metrics;
pub mod page_context;
pub mod permissions;
pub mod prompt_images;
pub mod repos;
pub mod secrets;
pub mod sessions;
pub mod settings;
pub mod snapshots;
pub mod spend;
pub mod supervisor;
pub mod traces;
pub mod turns;

#[cfg(any(test, feature = "testing"))]
pub mod fuzz_support;

pub use engine::Engine;
pub use error::{Error, Result};
// The host layer (its own crate): the core's modules reach it by these names.
pub use tandem_host::{Host, data_dir, images, layers, mirrors, runtime, workspace_agent};
// The store layer (its own crate), as `db`.
pub use tandem_store as db;

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Tandem's version (the agent version a snapshot records; every crate of the workspace shares
/// it).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
