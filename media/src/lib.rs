//! Tandem's desktop media pipeline: a workspace's display captured and encoded to VP8 by an
//! encoder child process (GStreamer, [`encode`]), sent to each viewer over WebRTC ([`peer`]),
//! and a receive-only Rust viewer the tests and benchmarks watch with ([`viewer`]).
//!
//! It depends on nothing of the server: the server decides who may watch and starts the
//! display through the workspace agent.

pub mod confine;
pub mod encode;
pub mod error;
pub mod peer;
pub mod viewer;

pub use error::{Error, Result};
