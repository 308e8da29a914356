//! `[kubernetes]`: where workspaces run when `runtime = "kubernetes"` — the cluster, the
//! namespace their pods go in, and the OCI registry snapshots are pushed to as images.

use std::path::PathBuf;

use serde::Deserialize;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesConfig {
    /// The kubeconfig to use; none: the in-cluster service account, else `$KUBECONFIG` or
    /// `~/.kube/config`.
    #[serde(default)]
    pub kubeconfig: Option<PathBuf>,
    /// The namespace workspace pods run in.
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// Names this installation's pods (a label), so installations sharing a namespace keep
    /// apart.
    #[serde(default = "default_installation")]
    pub installation: String,
    /// Where snapshot images are pushed and pods pull them from: `host[:port][/path]`. The
    /// nodes must reach it under the same name.
    pub registry: String,
    /// Speak plain HTTP to the registry (a registry on the cluster's own network). Pushes are
    /// anonymous; the nodes pull with the namespace's own pull secrets.
    #[serde(default)]
    pub registry_insecure: bool,
    /// The pods' `runtimeClassName` (gVisor, Kata), if any.
    #[serde(default)]
    pub runtime_class: Option<String>,
    /// Ask for a user namespace per pod (`hostUsers: false`; Kubernetes 1.30 and later).
    #[serde(default)]
    pub user_namespaces: bool,
    /// Accept workspaces whose root is the node's root (no user namespace and no sandboxed
    /// runtime class). Without it such a start is refused.
    #[serde(default)]
    pub root_on_node: bool,
    /// How long a pod may take to run: scheduling, pulling its image, starting (seconds).
    #[serde(default = "default_start_timeout")]
    pub start_timeout_secs: u64,
    /// Take every pod's links but loopback down before its workspace starts (an init container
    /// with `CAP_NET_ADMIN`): no network whatever the network plugin enforces. Off only where
    /// the namespace's Pod Security level refuses `NET_ADMIN` (baseline, restricted) and the
    /// plugin enforces NetworkPolicies.
    #[serde(default = "default_isolate_links")]
    pub isolate_links: bool,
}

fn default_isolate_links() -> bool {
    true
}

fn default_namespace() -> String {
    "default".into()
}

fn default_installation() -> String {
    "tandem".into()
}

fn default_start_timeout() -> u64 {
    300
}
