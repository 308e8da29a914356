//! The contract between Tandem's server, CLI, workspace agent and web app.
//!
//! serde types only: no tokio, no axum, no sqlx, no leptos. This crate compiles to
//! `wasm32-unknown-unknown` so the web app uses exactly these types.
#![forbid(unsafe_code)]

pub mod agent;
pub mod api;
pub mod approval;
pub mod automation;
pub mod event;
pub mod extension;
pub mod github;
pub mod ids;
pub mod limits;
pub mod links;
pub mod live;
pub mod people;
pub mod settings;
pub mod slack;
pub mod snapshot;
pub mod spend;
pub mod turn;

pub use api::*;
pub use event::{BootPhase, Event, EventKind, EventsPage};
pub use ids::*;
pub use settings::*;
pub use snapshot::{Snapshot, SnapshotState};
pub use turn::*;
