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
    /// Readiness checks run after `start`, each retried until it exits 0 (e.g. `pg_isready`).
    #[serde(default)]
    pub ready: Vec<String>,
    /// Resource limits; unset ones keep the server's defaults.
    #[serde(default)]
    pub limits: RecipeLimits,
}

/// `[workspace.limits]`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RecipeLimits {
    /// Memory in MiB (64 to 262144).
    pub memory_mb: Option<i64>,
    /// CPU cores (0.1 to 64).
    pub cpus: Option<f64>,
    /// Processes and threads (64 to 1048576).
    pub pids: Option<i64>,
    /// The workspace's own disk in GiB (1 to 16384).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_gb: Option<i64>,
}

impl RecipeLimits {
    /// The limits to run with: these over `base`, refused when out of range.
    pub fn apply(&self, base: crate::runtime::Limits) -> Result<crate::runtime::Limits> {
        let mut l = base;
        if let Some(m) = self.memory_mb {
            if !(64..=262_144).contains(&m) {
                return Err(Error::Invalid(format!(
                    "{FILE}: limits.memory_mb must be 64–262144, got {m}"
                )));
            }
            l.memory_bytes = m << 20;
        }
        if let Some(c) = self.cpus {
            if !(0.1..=64.0).contains(&c) {
                return Err(Error::Invalid(format!(
                    "{FILE}: limits.cpus must be 0.1–64, got {c}"
                )));
            }
            l.cpus = c;
        }
        if let Some(p) = self.pids {
            if !(64..=1_048_576).contains(&p) {
                return Err(Error::Invalid(format!(
                    "{FILE}: limits.pids must be 64–1048576, got {p}"
                )));
            }
            l.pids = p;
        }
        if let Some(d) = self.disk_gb {
            if !(1..=16_384).contains(&d) {
                return Err(Error::Invalid(format!(
                    "{FILE}: limits.disk_gb must be 1–16384, got {d}"
                )));
            }
            l.disk_bytes = d << 30;
        }
        Ok(l)
    }

    /// `limits` with each value no larger than this one's (the server's most).
    pub fn cap(&self, limits: crate::runtime::Limits) -> crate::runtime::Limits {
        let mut l = limits;
        if let Some(m) = self.memory_mb {
            l.memory_bytes = l.memory_bytes.min(m << 20);
        }
        if let Some(c) = self.cpus {
            l.cpus = l.cpus.min(c);
        }
        if let Some(p) = self.pids {
            l.pids = l.pids.min(p);
        }
        if let Some(d) = self.disk_gb {
            l.disk_bytes = l.disk_bytes.min(d << 30);
        }
        l
    }
}

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
