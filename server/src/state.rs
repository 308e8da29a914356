//! What every request handler shares.

use std::sync::Arc;

use crate::auth::JwtKeys;
use crate::config::Config;
use crate::db::Db;

/// Cheap to clone: everything inside is shared.
#[derive(Clone)]
pub struct AppState {
    pub db: Db,
    pub jwt: Arc<JwtKeys>,
    pub config: Arc<Config>,
}

impl AppState {
    /// The URL people open (used in login links).
    pub fn public_url(&self) -> String {
        self.config
            .public_url
            .clone()
            .unwrap_or_else(|| format!("http://{}", self.config.listen))
    }
}
