//! A real one-node Kubernetes for the Kubernetes runtime's tests: v1.20.2 built from Debian's
//! `kubernetes` source package (binaries cached in `~/.cache/tandem-kubernetes`), etcd,
//! containerd, runc, a bridge CNI without a gateway or NAT, and Debian's OCI registry, every
//! listener on 127.0.0.1. `xtask/cluster/up.sh` and `down.sh` do the work (the build, the
//! certificates, the configs, the processes); this starts and stops them.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result};

use crate::run::{self, cmd};

/// The registry on loopback the cluster pulls from (plain HTTP).
pub const REGISTRY: &str = "127.0.0.1:5000";

/// A running cluster; stopped (and everything it made removed) when dropped.
pub struct Cluster {
    /// The admin kubeconfig.
    pub kubeconfig: PathBuf,
    pub registry: &'static str,
    /// [`Cluster::stop`] ran.
    stopped: bool,
}

fn script(name: &str) -> Command {
    let mut c = Command::new("bash");
    c.arg(run::root().join("xtask/cluster").join(name));
    c
}

fn cache() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/root"))
        .join(".cache/tandem-kubernetes")
}

impl Cluster {
    /// Builds (once) and starts the cluster; returns when its node is ready.
    pub fn start() -> Result<Self> {
        let t = run::step("Kubernetes v1.20.2 on loopback (built from Debian's source once)");
        if let Err(e) = cmd(&mut script("up.sh")) {
            // Whatever half started goes, so a retry starts clean.
            let _ = cmd(&mut script("down.sh"));
            return Err(e);
        }
        run::done(t);
        Ok(Self {
            kubeconfig: cache().join("run/admin.kubeconfig"),
            registry: REGISTRY,
            stopped: false,
        })
    }
}

impl Cluster {
    /// Stops the cluster; fails when anything it made is left (processes, mounts, cgroups,
    /// the bridge).
    pub fn stop(mut self) -> Result<()> {
        self.stopped = true;
        let t = run::step("Kubernetes down");
        cmd(&mut script("down.sh")).context("the cluster left something behind")?;
        run::done(t);
        Ok(())
    }
}

impl Drop for Cluster {
    /// A run that ended early still takes the cluster down.
    fn drop(&mut self) {
        if self.stopped {
            return;
        }
        let t = run::step("Kubernetes down");
        if let Err(e) = cmd(&mut script("down.sh")) {
            eprintln!("    the cluster did not stop cleanly: {e}");
        }
        run::done(t);
    }
}

/// `cargo xtask cluster up|down`.
pub fn run(args: &[String]) -> Result<()> {
    match args.first().map(String::as_str) {
        Some("up") => {
            let c = Cluster::start()?;
            eprintln!(
                "    up: KUBECONFIG={} (registry {}); `cargo xtask cluster down` stops it",
                c.kubeconfig.display(),
                c.registry
            );
            std::mem::forget(c);
            Ok(())
        }
        Some("down") => cmd(&mut script("down.sh")).context("the cluster left something behind"),
        _ => anyhow::bail!("usage: cargo xtask cluster up|down"),
    }
}
