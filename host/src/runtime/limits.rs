//! Limit requests: what a recipe or the server's configuration asks a workspace's limits to be,
//! checked against their ranges and capped.

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// The file limit requests come from, named in errors.
const FILE: &str = "tandem.toml";

/// The largest disk a recipe gets when `[workspaces.max]` names none (GiB).
pub const DEFAULT_MAX_DISK_GB: i64 = 100;

/// The server's `[workspaces]`: what a workspace gets when its repo's recipe names no limit
/// (`[workspaces.limits]`), and the most a recipe may ask for (`[workspaces.max]`); both take
/// the recipe's keys (`memory_mb`, `cpus`, `pids`, `disk_gb`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitPolicy {
    pub limits: LimitRequest,
    pub max: LimitRequest,
}

impl LimitPolicy {
    /// The limits a workspace of `recipe` runs with: the recipe's over the server's defaults,
    /// each capped at the server's most.
    pub fn limits(&self, recipe: &LimitRequest) -> Result<super::Limits> {
        let base = self.limits.apply(super::Limits::default())?;
        let mut most = self.max.clone();
        // A disk image is sparse: without a stated most, a recipe could ask for terabytes.
        most.disk_gb = most.disk_gb.or(Some(DEFAULT_MAX_DISK_GB));
        Ok(most.cap(recipe.apply(base)?))
    }
}

/// Limits as a recipe's `[workspace.limits]` or the server's `[workspaces.limits]` and
/// `[workspaces.max]` name them; unset ones keep what they are applied over.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LimitRequest {
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

impl LimitRequest {
    /// The limits to run with: these over `base`, refused when out of range.
    pub fn apply(&self, base: super::Limits) -> Result<super::Limits> {
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
    pub fn cap(&self, limits: super::Limits) -> super::Limits {
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
