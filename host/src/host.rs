//! [`Host`]: what workspaces run on here (a runtime, the image, where layers live, the agent's
//! binary and key), and the per-workspace directories on this host.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tandem_protocol::{Problem, ProblemKind, Repo, SessionId};

use crate::images::{self, Image};
use crate::runtime::limits::{LimitPolicy, LimitRequest};
use crate::runtime::network::Egress;
use crate::runtime::{Limits, Runtime};
use crate::{Error, Result};

/// What the server's git needs from the code host a repo lives on (GitHub, when configured):
/// set by the server at start-up, so this layer knows no code host.
#[async_trait::async_trait]
pub trait GitCredentials: Send + Sync {
    /// The credential header the server's git needs for `repo`'s remote, if any.
    async fn remote_auth(&self, repo: &Repo) -> Result<Option<String>>;
    /// `text` with the session's own credential hidden, when it holds it.
    fn redact(&self, session: SessionId, text: &str) -> Option<String>;
    /// Ends the credential an ended session held; a failure is logged and retried later.
    async fn revoke(&self, session: SessionId);
}

/// No code host: public remotes only, nothing to hide or revoke.
pub struct NoCredentials;

#[async_trait::async_trait]
impl GitCredentials for NoCredentials {
    async fn remote_auth(&self, _: &Repo) -> Result<Option<String>> {
        Ok(None)
    }
    fn redact(&self, _: SessionId, _: &str) -> Option<String> {
        None
    }
    async fn revoke(&self, _: SessionId) {}
}

/// What workspaces run on: a runtime, the image, and where layers live.
pub struct Host {
    pub runtime: Arc<dyn Runtime>,
    /// Where built images live and the recipe of the one workspaces start on (looked up at each
    /// start: [`Host::image`]).
    pub images_dir: PathBuf,
    pub image_recipe: String,
    pub data_dir: PathBuf,
    /// This server's id ([`crate::data_dir::server_id`]): sessions record it as their
    /// workspace's host, and only it supervises and recovers those workspaces.
    pub host_id: String,
    /// The `tandem-workspace-agent` binary bound into session workspaces.
    pub agent_bin: PathBuf,
    /// Key the per-workspace agent tokens are derived from.
    pub agent_key: Vec<u8>,
    /// Static name → address entries for egress allow-lists (before the host's resolver).
    pub egress_hosts: BTreeMap<String, Vec<IpAddr>>,
    /// The `opencode` binary bound into workspaces for the opencode agent, if the host has one.
    pub opencode_bin: Option<PathBuf>,
    /// `(node, code-server dir)` bound into workspaces for VS Code, if the host has them.
    pub code_server: Option<(PathBuf, PathBuf)>,
    /// The `tandem` binary (the desktop encoder runs as `tandem desktop-encode`).
    pub tandem_bin: PathBuf,
    /// Credentials for repos' remotes ([`NoCredentials`] without a code host).
    pub credentials: Arc<dyn GitCredentials>,
    /// The server's default and most limits (`[workspaces]`).
    pub limits: LimitPolicy,
    /// Where snapshots are images in a registry (workspaces on a cluster); none keeps them as
    /// directories here.
    pub cluster: Option<Arc<crate::cluster_layers::ClusterLayers>>,
}

impl Host {
    /// The limits a workspace whose recipe asks for `request` runs with (the server's defaults
    /// and caps applied).
    pub fn limits(&self, request: &LimitRequest) -> Result<Limits> {
        self.limits.limits(request)
    }

    /// This machine's runtime, which keeps workspaces' layers and sockets as directories
    /// here, or a 503 when workspaces run elsewhere.
    pub(crate) fn local(&self) -> Result<&crate::runtime::oci::OciRuntime> {
        self.runtime.local().ok_or_else(|| {
            Error::Unavailable(format!(
                "the {} runtime keeps no workspace files on this machine",
                self.runtime.name()
            ))
        })
    }

    /// The image workspaces start on, or a 503 saying to build it.
    pub fn image(&self) -> Result<Image> {
        images::find(&self.images_dir, &self.image_recipe).ok_or_else(|| {
            Error::Unavailable(
                "this server cannot run workspaces yet: the workspace image is not built; run `tandem image build`".into(),
            )
        })
    }

    /// What keeps a workspace from starting now (the image, the agent binary), if anything.
    pub fn start_problem(&self) -> Option<Problem> {
        if images::find(&self.images_dir, &self.image_recipe).is_none() {
            return Some(Problem {
                kind: ProblemKind::Image,
                message: format!(
                    "the workspace image is not built (looked in {})",
                    self.images_dir.display()
                ),
                fix: "build it: `tandem image build` (as root; a few minutes the first time)"
                    .into(),
            });
        }
        if !self.agent_bin.is_file() {
            return Some(Problem {
                kind: ProblemKind::AgentBinary,
                message: format!(
                    "the workspace agent binary is missing at {}",
                    self.agent_bin.display()
                ),
                fix: "build it next to `tandem`: `cargo build --release -p tandem-workspace-agent` (or set `agent_bin` in tandem.toml)".into(),
            });
        }
        None
    }

    /// The network a workspace allowed to reach `allow` gets: that allow-list, or none at all.
    pub fn egress(&self, allow: &[String], ask: bool) -> Option<Egress> {
        (!allow.is_empty()).then(|| Egress {
            allow: allow.to_vec(),
            hosts: self.egress_hosts.clone(),
            ask,
        })
    }
}
