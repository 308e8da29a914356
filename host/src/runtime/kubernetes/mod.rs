//! The Kubernetes runtime: each workspace is one Pod in a configured namespace, started from an
//! image in a registry ([`crate::runtime::oci::Files::image`]). The server reaches a pod's agent
//! through the API server's port-forward to the agent's port on the pod's own loopback: no pod
//! listens on the cluster's network, and no pod can reach another's agent (see
//! docs/SECURITY.md). Commands run through the API server's exec. A NetworkPolicy gives the
//! installation's workspace pods no network in either direction.

use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{AttachParams, ListParams, PostParams};
use kube::{Api, Client};

use super::egress_proxy;
use super::{
    AgentStream, ExecOutput, ExecRequest, GatewayListener, Keep, Limits, Runtime, Workspace,
    WorkspaceSpec,
};
use crate::{Error, Result};

mod isolation;
pub mod keep;
mod lifecycle;
pub mod pod;
mod status;
mod stopping;

use status::{exit_code, instance_of, read_capped, running, waiting_reason};

/// How the runtime uses its cluster.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The namespace workspace pods run in.
    pub namespace: String,
    /// Names this installation's pods (a label), so servers sharing a namespace keep apart.
    pub installation: String,
    /// The pods' `runtimeClassName` (gVisor, Kata), if any.
    pub runtime_class: Option<String>,
    /// Ask for a user namespace per pod (`hostUsers: false`; Kubernetes 1.30 and later).
    pub user_namespaces: bool,
    /// How long a pod may take to run (scheduling, pulling its image, starting).
    pub start_timeout: Duration,
    /// The operator accepts workspaces whose root is the node's root (no user namespace and no
    /// sandboxed runtime class: a cluster older than 1.30 without gVisor or Kata). Without it
    /// such a start is refused.
    pub root_on_node: bool,
    /// How long the isolation policy's uid (every pod's owner) is taken as current before it
    /// is read again. A policy deleted and made again within it gives the pods started
    /// meanwhile an owner that is gone: the garbage collector removes them and their sessions
    /// start again, as after any lost pod.
    pub policy_recheck: Duration,
    /// Take the pod's links but loopback down before its workspace starts (an init container
    /// with `CAP_NET_ADMIN`; `[kubernetes] isolate_links`).
    pub isolate_links: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            namespace: "default".into(),
            installation: "tandem".into(),
            runtime_class: None,
            user_namespaces: false,
            start_timeout: Duration::from_secs(300),
            root_on_node: false,
            policy_recheck: Duration::from_secs(10),
            isolate_links: true,
        }
    }
}

/// Workspaces as pods of one cluster.
pub struct KubernetesRuntime {
    pods: Api<Pod>,
    /// The installation's isolation policy, every pod's owner.
    isolation: isolation::Isolation,
    settings: Settings,
    /// Keeps a stopping pod's work (none: such a stop is refused).
    keeper: Option<keep::Keeper>,
    /// Workspaces this runtime is stopping: their pods are going on purpose, not dying (a
    /// pod takes seconds to go, while the session is still live).
    stopping: std::sync::Mutex<std::collections::HashSet<String>>,
}

fn kube_error(what: &str) -> impl Fn(kube::Error) -> Error + '_ {
    move |e| match &e {
        kube::Error::Api(s) if s.code == 404 => Error::NotFound(format!("{what}: {}", s.message)),
        kube::Error::Api(s) if s.code == 409 => Error::Conflict(format!("{what}: {}", s.message)),
        kube::Error::Api(s) if s.code == 403 || s.code == 401 => Error::Config(format!(
            "{what}: the cluster refused ({}): check the rights the book's Kubernetes page lists, and the namespace's admission policies and quotas",
            s.message
        )),
        kube::Error::Api(s) if s.code == 422 || s.code == 400 => {
            Error::Invalid(format!("{what}: {}", s.message))
        }
        _ => Error::Unavailable(format!("{what}: the cluster did not answer: {e}")),
    }
}

impl KubernetesRuntime {
    /// A runtime on the cluster `client` talks to; makes sure the isolation policy exists.
    pub async fn new(client: Client, settings: Settings) -> Result<Self> {
        pod::check_name(&settings.installation)?;
        let isolation = isolation::Isolation::ensure(
            Api::namespaced(client.clone(), &settings.namespace),
            &settings,
        )
        .await?;
        Ok(Self {
            pods: Api::namespaced(client, &settings.namespace),
            isolation,
            settings,
            keeper: None,
            stopping: Default::default(),
        })
    }

    /// A client from the kubeconfig at `path`, or the in-cluster service account (then the
    /// usual kubeconfig search) without one.
    pub async fn client(path: Option<&std::path::Path>) -> Result<Client> {
        // The client's TLS takes the process's crypto provider, and more than one is linked
        // (the registry client's): ring, as everywhere in Tandem, unless one is chosen already.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let config = match path {
            Some(p) => {
                let file = kube::config::Kubeconfig::read_from(p).map_err(|e| {
                    Error::Config(format!(
                        "the kubeconfig {} cannot be read: {e}",
                        p.display()
                    ))
                })?;
                kube::Config::from_custom_kubeconfig(file, &Default::default())
                    .await
                    .map_err(|e| Error::Config(format!("the kubeconfig {}: {e}", p.display())))?
            }
            None => kube::Config::infer()
                .await
                .map_err(|e| Error::Config(format!("no cluster configured: {e}")))?,
        };
        Client::try_from(config).map_err(|e| Error::Config(format!("the cluster's client: {e}")))
    }

    /// The settings it runs with.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    async fn start_inner(&self, want: WorkspaceSpec) -> Result<Workspace> {
        let s = &self.settings;
        if !s.user_namespaces && s.runtime_class.is_none() && !s.root_on_node {
            return Err(Error::Config(
                "a workspace's root would be the node's root: set user namespaces (Kubernetes 1.30 and later) or a sandboxed runtime class (gVisor, Kata), or accept root on the node explicitly".into(),
            ));
        }
        let mut phases = crate::runtime::start_phases::Phases::default();
        let mut pod = pod::build(&want, s)?;
        // Owned by the policy that isolates it: a pod never outlives its isolation, and
        // removing the installation's policy removes its pods (the cluster's garbage collector).
        pod.metadata.owner_references = Some(vec![self.isolation.owner().await?]);
        let deadline = tokio::time::Instant::now() + s.start_timeout;
        let mut turned_away = 0;
        loop {
            let made = bounded(
                "starting the workspace's pod",
                self.pods.create(&PostParams::default(), &pod),
            )
            .await?;
            // An API server that does not know a field drops it: a pod that lost its user
            // namespace or runtime class does not run.
            let spec = made.spec.as_ref();
            let lost = (s.user_namespaces && spec.and_then(|p| p.host_users) != Some(false))
                .then_some("its user namespace (hostUsers: false; Kubernetes 1.30 and later)")
                .or_else(|| {
                    (s.runtime_class.is_some()
                        && spec.and_then(|p| p.runtime_class_name.clone()) != s.runtime_class)
                        .then_some("its runtime class")
                });
            if let Some(lost) = lost {
                let _ = self.delete(&want.id).await;
                return Err(Error::Config(format!(
                    "the cluster dropped {lost} from the workspace's pod: it does not support it"
                )));
            }
            let version = made.metadata.resource_version.clone().unwrap_or_default();
            phases.end("pod created");
            // Its connections out come through the gateway to the server's proxy, by this
            // start's rules only.
            egress_proxy::end(&want.id);
            if let Some(egress) = &want.egress {
                egress_proxy::serve(&want.id, egress);
            }
            let failed = match tokio::time::timeout_at(
                deadline,
                self.until_running(&want.id, &version),
            )
            .await
            {
                Ok(Ok(lifecycle::Started::Running(pod))) => {
                    return Ok(Workspace {
                        id: want.id,
                        instance: instance_of(&pod),
                        took: {
                            phases.end("pod running");
                            phases.done
                        },
                    });
                }
                Ok(Ok(lifecycle::Started::TurnedAway(why))) if turned_away < MAX_TURNED_AWAY => {
                    turned_away += 1;
                    tracing::warn!(
                        pod = %want.id,
                        "the node turned the workspace's pod away ({why}); making it again"
                    );
                    self.delete(&want.id).await?;
                    phases.end("pod turned away");
                    // What the node counted as taken is freed as the ending pod goes.
                    tokio::time::sleep(Duration::from_millis(500) * turned_away).await;
                    continue;
                }
                Ok(Ok(lifecycle::Started::TurnedAway(why))) => Error::Unavailable(format!(
                    "the node turned the workspace's pod away {} times ({why}): the cluster lacks room for it; see `kubectl describe node`",
                    turned_away + 1
                )),
                Ok(Err(e)) => e,
                Err(_) => {
                    let why = self
                        .pods
                        .get_opt(&want.id)
                        .await
                        .ok()
                        .flatten()
                        .and_then(|p| waiting_reason(&p))
                        .unwrap_or_else(|| "no reason given".into());
                    Error::Unavailable(format!(
                        "the workspace's pod did not run within {} s ({why}); see `kubectl -n {} describe pod {}`",
                        self.settings.start_timeout.as_secs(),
                        self.settings.namespace,
                        want.id
                    ))
                }
            };
            let _ = self.delete(&want.id).await;
            egress_proxy::end(&want.id);
            return Err(failed);
        }
    }

    async fn exec_inner(&self, id: &str, req: ExecRequest) -> Result<ExecOutput> {
        if req.argv.is_empty() {
            return Err(Error::Invalid("exec needs a command".into()));
        }
        if !self.is_running_inner(id).await? {
            return Err(Error::Conflict(format!(
                "workspace {id} is not running in the cluster"
            )));
        }
        if req
            .env
            .iter()
            .any(|(k, _)| k.is_empty() || k.starts_with('-') || k.contains('='))
        {
            return Err(Error::Invalid(
                "environment names may not be empty, start with '-' or hold '='".into(),
            ));
        }
        if req.argv[0].contains('=') {
            return Err(Error::Invalid("a command's name may not hold '='".into()));
        }
        let mut argv: Vec<String> = vec!["env".into()];
        if let Some(cwd) = &req.cwd {
            argv.extend(["-C".into(), cwd.clone()]);
        }
        argv.extend(req.env.iter().map(|(k, v)| format!("{k}={v}")));
        // The timeout is enforced inside the workspace, so the command dies with it.
        if let Some(t) = req.timeout_secs {
            argv.extend(["timeout".into(), "-s".into(), "KILL".into(), t.to_string()]);
        }
        argv.extend(req.argv.iter().cloned());
        let params = AttachParams::default()
            .container(pod::CONTAINER)
            .stdin(false)
            .stdout(true)
            .stderr(true);
        let mut proc = bounded(
            "running a command in the workspace",
            self.pods.exec(id, argv, &params),
        )
        .await?;
        let status = proc.take_status();
        let (out, err) = (proc.stdout(), proc.stderr());
        let run = async {
            let ((stdout, t1), (stderr, t2)) = tokio::join!(read_capped(out), read_capped(err));
            let status = match status {
                Some(s) => s.await,
                None => None,
            };
            (stdout, stderr, t1 || t2, status)
        };
        // The timeout inside the workspace is its own `timeout`; this one holds whatever the
        // workspace did to it.
        let outer = req
            .timeout_secs
            .map_or(Duration::MAX, |t| Duration::from_secs(t.saturating_add(30)));
        let Ok((stdout, stderr, truncated, status)) = tokio::time::timeout(outer, run).await else {
            proc.abort();
            return Err(Error::Unavailable(format!(
                "the command in workspace {id} outlived its timeout and was cut off"
            )));
        };
        let joined = proc.join().await;
        let code = exit_code(status.as_ref()).ok_or_else(|| {
            let why = status
                .and_then(|s| s.message)
                .or_else(|| joined.err().map(|e| e.to_string()))
                .unwrap_or_else(|| "the connection ended without the command's exit status".into());
            Error::Unavailable(format!(
                "the command in workspace {id} did not run to its end: {why}"
            ))
        })?;
        Ok(ExecOutput {
            code: Some(code),
            stdout,
            stderr,
            truncated,
        })
    }

    async fn is_running_inner(&self, id: &str) -> Result<bool> {
        let pod = bounded("reading the pod", self.pods.get_opt(id)).await?;
        Ok(pod.is_some_and(|p| running(&p)))
    }

    async fn connect_inner(&self, id: &str, instance: i32) -> Result<AgentStream> {
        let pod = bounded("reading the pod", self.pods.get_opt(id))
            .await?
            .ok_or_else(|| Error::Unavailable(format!("workspace {id} has no pod")))?;
        if !running(&pod) || instance_of(&pod) != instance {
            return Err(Error::Unavailable(format!(
                "workspace {id}'s pod is not the one that started (it was replaced or stopped)"
            )));
        }
        let mut forward = bounded(
            "reaching the workspace's agent",
            self.pods.portforward(id, &[pod::AGENT_PORT]),
        )
        .await?;
        let stream = forward.take_stream(pod::AGENT_PORT).ok_or_else(|| {
            Error::Internal("the port-forward gave no stream for the agent's port".into())
        })?;
        Ok(Box::new(stream))
    }
}

/// How long one call to the API server may take (a watch is not one call).
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// How many times a start makes its pod again after the node turned it away at admission
/// ([`status::turned_away`]), within the start's timeout.
const MAX_TURNED_AWAY: u32 = 5;

/// `call` to the API server, bounded by [`CALL_TIMEOUT`], its error said as `what` failing.
async fn bounded<T>(
    what: &str,
    call: impl std::future::Future<Output = kube::Result<T>>,
) -> Result<T> {
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(r) => r.map_err(kube_error(what)),
        Err(_) => Err(Error::Unavailable(format!(
            "{what}: the cluster did not answer within {} s",
            CALL_TIMEOUT.as_secs()
        ))),
    }
}

impl Runtime for KubernetesRuntime {
    fn name(&self) -> &str {
        "kubernetes"
    }

    fn start(&self, spec: WorkspaceSpec) -> BoxFuture<'_, Result<Workspace>> {
        Box::pin(self.start_inner(spec))
    }

    fn exec<'a>(&'a self, id: &'a str, req: ExecRequest) -> BoxFuture<'a, Result<ExecOutput>> {
        Box::pin(self.exec_inner(id, req))
    }

    fn is_running<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.is_running_inner(id))
    }

    fn pause<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            Err(Error::Unavailable(format!(
                "workspace {id} runs in a pod, which Kubernetes cannot freeze"
            )))
        })
    }

    fn resume<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            Err(Error::Unavailable(format!(
                "workspace {id} runs in a pod, which Kubernetes cannot freeze or thaw"
            )))
        })
    }

    fn prepare<'a>(&'a self, id: &'a str, _limits: Limits) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move { pod::check_name(id) })
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<String>>> {
        Box::pin(async move {
            let params = ListParams::default().labels(&pod::selector(&self.settings));
            let pods = bounded("listing the workspaces' pods", self.pods.list(&params)).await?;
            Ok(pods
                .items
                .into_iter()
                .filter_map(|p| p.metadata.name)
                .collect())
        })
    }

    fn stop<'a>(&'a self, id: &'a str, keep: Keep) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            pod::check_name(id)?;
            let _stopping = stopping::Stopping::new(&self.stopping, id);
            if keep == Keep::Upper {
                // A failure leaves the pod running: nothing is lost.
                self.keep_inner(id).await?;
            }
            let deleted = self.delete(id).await;
            egress_proxy::end(id);
            deleted?;
            if keep == Keep::Nothing
                && let Some(keeper) = &self.keeper
            {
                // What it kept before goes too, as a local workspace's layer does.
                keeper.forget(id).await?;
            }
            Ok(())
        })
    }

    fn reattach<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            pod::check_name(id)?;
            // A restarted server serves the pod's egress again, by what it was started with.
            if let Some(egress) = bounded("reading the pod", self.pods.get_opt(id))
                .await?
                .as_ref()
                .and_then(pod::egress)
            {
                egress_proxy::serve(id, &egress);
            }
            Ok(())
        })
    }

    fn freezes(&self) -> bool {
        false
    }

    fn start_limit(&self) -> Option<Duration> {
        Some(self.settings.start_timeout + Duration::from_secs(30)) // + making, deleting
    }
    fn taken_away<'a>(&'a self, id: &'a str) -> BoxFuture<'a, bool> {
        Box::pin(async move {
            if self.is_stopping(id) {
                return false;
            }
            match bounded("reading the pod", self.pods.get_opt(id)).await {
                // Gone, or going: deleted by someone else. An evicted pod stays, failed.
                Ok(None) => true,
                Ok(Some(p)) => p.metadata.deletion_timestamp.is_some(),
                Err(_) => false,
            }
        })
    }

    fn copy_kept<'a>(&'a self, from: &'a str, to: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            pod::check_name(from)?;
            pod::check_name(to)?;
            let Some(keeper) = &self.keeper else {
                return Err(Error::Unavailable(
                    "no registry is configured to keep a pod's files: forks need one".into(),
                ));
            };
            if self.is_running_inner(from).await? {
                return self.keep_as(from, to).await;
            }
            // A suspended workspace: its kept image, under the copy's name.
            let kept = keeper.kept(from).await?.ok_or_else(|| {
                Error::NotFound(format!("workspace {from} has neither a pod nor kept files"))
            })?;
            keeper.retag(&kept, to).await.map(drop)
        })
    }

    fn connect_agent<'a>(
        &'a self,
        id: &'a str,
        instance: i32,
    ) -> BoxFuture<'a, Result<AgentStream>> {
        Box::pin(self.connect_inner(id, instance))
    }

    fn listen_gateway<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Box<dyn GatewayListener>>> {
        Box::pin(async move {
            Err(Error::Unavailable(format!(
                "workspace {id} runs in a pod: its gateway comes over bridges through its agent"
            )))
        })
    }

    fn gateway_through_agent(&self) -> bool {
        true
    }

    /// Bridges belong to one start of the workspace; the gateway's owner replaces them when
    /// the start changes.
    fn gateway_listening(&self, _id: &str) -> bool {
        true
    }

    fn alive<'a>(&'a self, id: &'a str, instance: i32) -> BoxFuture<'a, bool> {
        Box::pin(async move {
            if self.is_stopping(id) {
                return true;
            }
            match bounded("reading the pod", self.pods.get_opt(id)).await {
                // Being deleted by someone else (an eviction, a person, a lost node's
                // cleanup): gone already, though its containers may run out their grace.
                Ok(Some(p)) => {
                    running(&p)
                        && p.metadata.deletion_timestamp.is_none()
                        && instance_of(&p) == instance
                }
                Ok(None) => false,
                // The API server not answering is not the workspace dying.
                Err(_) => true,
            }
        })
    }
}
