//! The repo recipe: `tandem.toml` at the repo root says how to prepare a workspace.
//!
//! ```toml
//! [workspace]
//! setup = ["npm ci", "npm run build"]   # at snapshot build, in /workspace
//! start = ["redis-server --daemonize yes"] # at every session start
//! env = { NODE_ENV = "development" }
//! ports = [3000]
//! egress = []                            # allowed domains; empty = no network
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::{Error, Result};

/// Name of the recipe file at the repo root.
pub const FILE: &str = "tandem.toml";

/// The whole file.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RecipeFile {
    #[serde(default)]
    pub workspace: Recipe,
    /// MCP servers run inside the workspace (`[[mcp]]`); the builtin agent reads them from
    /// the checkout, this only refuses a malformed entry at snapshot build.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp: Vec<tandem_protocol::agent::LocalMcp>,
}

/// How to prepare and start a workspace for a repo.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Recipe {
    /// Shell commands run once per snapshot build, in `/workspace`.
    #[serde(default)]
    pub setup: Vec<String>,
    /// Shell commands run at every session start (services).
    #[serde(default)]
    pub start: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub ports: Vec<u16>,
    /// Domains the workspace may reach; empty means no network.
    #[serde(default)]
    pub egress: Vec<String>,
    /// With an allow-list: a name off it becomes an approval ("the agent wants to reach …"),
    /// and once a driver approves, this session's workspace reaches it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub egress_ask: bool,
    /// Readiness checks run after `start`, each retried until it exits 0 (e.g. `pg_isready`).
    #[serde(default)]
    pub ready: Vec<String>,
    /// Resource limits; unset ones keep the server's defaults.
    #[serde(default)]
    pub limits: RecipeLimits,
}

/// `[workspace.limits]` (the same keys as the server's `[workspaces.limits]`).
pub use crate::runtime::limits::LimitRequest as RecipeLimits;

impl Recipe {
    /// Parses `tandem.toml`; a missing file is the empty recipe.
    pub fn parse(text: Option<&str>) -> Result<Self> {
        match text {
            None => Ok(Self::default()),
            Some(t) => toml::from_str::<RecipeFile>(t)
                .map(|f| f.workspace)
                .map_err(|e| Error::Invalid(format!("{FILE}: {e}"))),
        }
    }

    /// `sha256:<hex>` of the recipe's meaning (not its formatting).
    pub fn hash(&self) -> String {
        let json = serde_json::to_vec(self).unwrap_or_default();
        format!("sha256:{:x}", Sha256::digest(&json))
    }
}

#[cfg(test)]
mod fuzz_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_default_and_hash() {
        assert_eq!(Recipe::parse(None).unwrap(), Recipe::default());
        let r = Recipe::parse(Some("[workspace]\nsetup = [\"make\"]\nports = [3000]\n")).unwrap();
        assert_eq!(r.setup, ["make"]);
        let same =
            Recipe::parse(Some("[workspace]\nports = [3000]\nsetup = [ \"make\" ]\n")).unwrap();
        assert_eq!(r.hash(), same.hash(), "formatting does not change the hash");
        assert!(
            Recipe::parse(Some("[workspace]\nsetpu = []\n"))
                .unwrap_err()
                .to_string()
                .contains("setpu")
        );
    }
}
