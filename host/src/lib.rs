//! Tandem's host layer: running workspaces on this machine (the OCI runtime drivers, overlay
//! layers, user namespaces, disks, networks and egress), the workspace images, the repo
//! mirrors, the registry a cluster pulls workspace images from, the data dir's keys, and the
//! typed client of the agent inside each workspace.
//!
//! It depends on `tandem-protocol` and nothing of the server: features above it (sessions,
//! snapshots, the live channel, the desktop, VS Code) call it, never the other way.

pub mod cluster_layers;
pub mod data_dir;
pub mod error;
pub mod host;
pub mod images;
pub mod layers;
pub mod mirrors;
pub mod registry;
pub mod runtime;
pub mod workspace_agent;

pub use error::{Error, Result};
pub use host::{GitCredentials, Host, NoCredentials};
