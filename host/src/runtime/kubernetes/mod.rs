//! The Kubernetes runtime: each workspace is one Pod in a configured namespace, started from an
//! image in a registry ([`crate::runtime::oci::Files::image`]). The server reaches a pod's agent
//! through the API server's port-forward to the agent's port on the pod's own loopback: no pod
//! listens on the cluster's network, and no pod can reach another's agent (see
//! docs/SECURITY.md). Commands run through the API server's exec. A NetworkPolicy gives the
//! installation's workspace pods no network in either direction.

use std::time::Duration;

use futures::future::BoxFuture;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{AttachParams, DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use kube::{Api, Client};
use tokio::io::AsyncReadExt;

use super::{
    AgentStream, ExecOutput, ExecRequest, GatewayListener, Keep, Limits, MAX_EXEC_OUTPUT, Runtime,
    Workspace, WorkspaceSpec,
};
use crate::{Error, Result};

pub mod pod;

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
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            namespace: "default".into(),
            installation: "tandem".into(),
            runtime_class: None,
            user_namespaces: false,
            start_timeout: Duration::from_secs(300),
        }
    }
}

/// Workspaces as pods of one cluster.
pub struct KubernetesRuntime {
    pods: Api<Pod>,
    settings: Settings,
}

fn kube_error(what: &str) -> impl Fn(kube::Error) -> Error + '_ {
    move |e| match &e {
        kube::Error::Api(s) if s.code == 404 => Error::NotFound(format!("{what}: {}", s.message)),
        kube::Error::Api(s) if s.code == 409 => Error::Conflict(format!("{what}: {}", s.message)),
        kube::Error::Api(s) if s.code == 403 || s.code == 401 => Error::Config(format!(
            "{what}: the cluster refused Tandem's account ({}): give it the Role in the book's Kubernetes page",
            s.message
        )),
        kube::Error::Api(s) if s.code == 422 => Error::Invalid(format!("{what}: {}", s.message)),
        _ => Error::Unavailable(format!("{what}: the cluster did not answer: {e}")),
    }
}

impl KubernetesRuntime {
    /// A runtime on the cluster `client` talks to; makes sure the isolation policy exists.
    pub async fn new(client: Client, settings: Settings) -> Result<Self> {
        pod::check_name(&settings.installation)?;
        let policies: Api<NetworkPolicy> = Api::namespaced(client.clone(), &settings.namespace);
        let policy: NetworkPolicy = serde_json::from_value(pod::isolation(&settings))
            .map_err(|e| Error::Internal(format!("the isolation policy: {e}")))?;
        let name = policy.metadata.name.clone().unwrap_or_default();
        match policies.create(&PostParams::default(), &policy).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {
                policies
                    .replace(&name, &PostParams::default(), &{
                        let mut p = policy.clone();
                        p.metadata.resource_version = policies
                            .get(&name)
                            .await
                            .map_err(kube_error("reading the isolation policy"))?
                            .metadata
                            .resource_version;
                        p
                    })
                    .await
                    .map_err(kube_error("updating the isolation policy"))?;
            }
            Err(e) => return Err(kube_error("making the isolation policy")(e)),
        }
        Ok(Self {
            pods: Api::namespaced(client, &settings.namespace),
            settings,
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
        let pod = pod::build(&want, &self.settings)?;
        let made = self
            .pods
            .create(&PostParams::default(), &pod)
            .await
            .map_err(kube_error("starting the workspace's pod"))?;
        let version = made.metadata.resource_version.clone().unwrap_or_default();
        match tokio::time::timeout(
            self.settings.start_timeout,
            self.until_running(&want.id, &version),
        )
        .await
        {
            Ok(Ok(pod)) => Ok(Workspace {
                id: want.id,
                instance: instance_of(&pod),
            }),
            Ok(Err(e)) => {
                let _ = self.delete(&want.id).await;
                Err(e)
            }
            Err(_) => {
                let why = self
                    .pods
                    .get_opt(&want.id)
                    .await
                    .ok()
                    .flatten()
                    .and_then(|p| waiting_reason(&p))
                    .unwrap_or_else(|| "no reason given".into());
                let _ = self.delete(&want.id).await;
                Err(Error::Unavailable(format!(
                    "the workspace's pod did not run within {} s ({why}); see `kubectl -n {} describe pod {}`",
                    self.settings.start_timeout.as_secs(),
                    self.settings.namespace,
                    want.id
                )))
            }
        }
    }

    /// Waits until pod `name` runs, from `version` on; fails as soon as it cannot.
    async fn until_running(&self, name: &str, version: &str) -> Result<Pod> {
        let params = WatchParams::default().fields(&format!("metadata.name={name}"));
        let mut version = version.to_string();
        loop {
            // A pod that runs already (its events came before the watch) is taken at once.
            if let Some(p) = self
                .pods
                .get_opt(name)
                .await
                .map_err(kube_error("reading the pod"))?
            {
                if let Some(done) = judge(&p)? {
                    return Ok(done);
                }
                version = p.metadata.resource_version.clone().unwrap_or(version);
            } else {
                return Err(Error::Unavailable(format!(
                    "the workspace's pod {name} was deleted while it started"
                )));
            }
            let mut events = self
                .pods
                .watch(&params, &version)
                .await
                .map_err(kube_error("watching the pod"))?
                .boxed();
            while let Some(event) = events
                .try_next()
                .await
                .map_err(kube_error("watching the pod"))?
            {
                match event {
                    WatchEvent::Added(p) | WatchEvent::Modified(p) => {
                        if let Some(done) = judge(&p)? {
                            return Ok(done);
                        }
                    }
                    WatchEvent::Deleted(_) => {
                        return Err(Error::Unavailable(format!(
                            "the workspace's pod {name} was deleted while it started"
                        )));
                    }
                    // Too old a version, or the watch ended: read it again and go on.
                    WatchEvent::Error(_) | WatchEvent::Bookmark(_) => break,
                }
            }
        }
    }

    async fn delete(&self, name: &str) -> Result<()> {
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        };
        match self.pods.delete(name, &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(e) => return Err(kube_error("stopping the workspace's pod")(e)),
        }
        // Gone once the API server no longer has it (its containers are killed by then).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let params = WatchParams::default().fields(&format!("metadata.name={name}"));
        loop {
            let Some(p) = self
                .pods
                .get_opt(name)
                .await
                .map_err(kube_error("reading the pod"))?
            else {
                return Ok(());
            };
            let version = p.metadata.resource_version.unwrap_or_default();
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Err(Error::Unavailable(format!(
                    "the workspace's pod {name} is still there a minute after it was deleted"
                )));
            }
            let mut events = self
                .pods
                .watch(&params, &version)
                .await
                .map_err(kube_error("watching the pod"))?
                .boxed();
            let gone = tokio::time::timeout(left, async {
                while let Ok(Some(e)) = events.try_next().await {
                    if matches!(e, WatchEvent::Deleted(_)) {
                        return true;
                    }
                }
                false
            })
            .await
            .unwrap_or(false);
            if gone {
                return Ok(());
            }
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
        let mut proc = self
            .pods
            .exec(id, argv, &params)
            .await
            .map_err(kube_error("running a command in the workspace"))?;
        let status = proc.take_status();
        let (out, err) = (proc.stdout(), proc.stderr());
        let ((stdout, t1), (stderr, t2)) = tokio::join!(read_capped(out), read_capped(err));
        let status = match status {
            Some(s) => s.await,
            None => None,
        };
        let _ = proc.join().await;
        Ok(ExecOutput {
            code: exit_code(status.as_ref()),
            stdout,
            stderr,
            truncated: t1 || t2,
        })
    }

    async fn is_running_inner(&self, id: &str) -> Result<bool> {
        let pod = self
            .pods
            .get_opt(id)
            .await
            .map_err(kube_error("reading the pod"))?;
        Ok(pod.is_some_and(|p| running(&p)))
    }

    async fn connect_inner(&self, id: &str, instance: i32) -> Result<AgentStream> {
        let pod = self
            .pods
            .get_opt(id)
            .await
            .map_err(kube_error("reading the pod"))?
            .ok_or_else(|| Error::Unavailable(format!("workspace {id} has no pod")))?;
        if !running(&pod) || instance_of(&pod) != instance {
            return Err(Error::Unavailable(format!(
                "workspace {id}'s pod is not the one that started (it was replaced or stopped)"
            )));
        }
        let mut forward = self
            .pods
            .portforward(id, &[pod::AGENT_PORT])
            .await
            .map_err(kube_error("reaching the workspace's agent"))?;
        let stream = forward.take_stream(pod::AGENT_PORT).ok_or_else(|| {
            Error::Internal("the port-forward gave no stream for the agent's port".into())
        })?;
        Ok(Box::new(stream))
    }
}

/// The pod once it runs (`Some`), `None` while it may still, or why it never will.
fn judge(p: &Pod) -> Result<Option<Pod>> {
    let phase = p
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending");
    match phase {
        "Running" if running(p) => Ok(Some(p.clone())),
        "Failed" | "Succeeded" => Err(Error::Unavailable(format!(
            "the workspace's pod ended as it started ({phase}: {})",
            waiting_reason(p).unwrap_or_else(|| "no reason given".into())
        ))),
        _ => match waiting_reason(p) {
            Some(r)
                if [
                    "ErrImagePull",
                    "ImagePullBackOff",
                    "InvalidImageName",
                    "CreateContainerConfigError",
                    "CreateContainerError",
                    "RunContainerError",
                ]
                .iter()
                .any(|bad| r.starts_with(bad)) =>
            {
                Err(Error::Unavailable(format!(
                    "the workspace's pod cannot start: {r}"
                )))
            }
            _ => Ok(None),
        },
    }
}

/// Whether the pod's workspace container runs (and the pod is not being deleted).
fn running(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status.as_ref().is_some_and(|s| {
            s.phase.as_deref() == Some("Running")
                && s.container_statuses.iter().flatten().any(|c| {
                    c.name == pod::CONTAINER
                        && c.state.as_ref().is_some_and(|st| st.running.is_some())
                })
        })
}

/// Why the pod is not running, as its status says.
fn waiting_reason(p: &Pod) -> Option<String> {
    let status = p.status.as_ref()?;
    for c in status.container_statuses.iter().flatten() {
        let state = c.state.as_ref()?;
        if let Some(w) = &state.waiting {
            return Some(format!(
                "{}: {}",
                w.reason.clone().unwrap_or_default(),
                w.message.clone().unwrap_or_default()
            ));
        }
        if let Some(t) = &state.terminated {
            return Some(format!(
                "exited {}: {}",
                t.exit_code,
                t.reason.clone().unwrap_or_default()
            ));
        }
    }
    status.conditions.iter().flatten().find_map(|c| {
        (c.status == "False" && c.reason.is_some()).then(|| {
            format!(
                "{}: {}",
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default()
            )
        })
    })
}

/// Which start of the workspace a pod is: from its uid (a pod made again under the same name
/// has another).
fn instance_of(p: &Pod) -> i32 {
    use sha2::Digest;
    let uid = p.metadata.uid.clone().unwrap_or_default();
    let h = sha2::Sha256::digest(uid.as_bytes());
    i32::from_be_bytes([h[0] & 0x7f, h[1], h[2], h[3]])
}

/// The command's exit code from the exec's status (`Success`, or `NonZeroExitCode` with the
/// code among its causes).
fn exit_code(
    status: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Status>,
) -> Option<i32> {
    let s = status?;
    if s.status.as_deref() == Some("Success") {
        return Some(0);
    }
    s.details
        .as_ref()?
        .causes
        .iter()
        .flatten()
        .find(|c| c.reason.as_deref() == Some("ExitCode"))
        .and_then(|c| c.message.as_deref()?.parse().ok())
}

async fn read_capped(r: Option<impl tokio::io::AsyncRead + Unpin>) -> (String, bool) {
    let Some(mut r) = r else {
        return (String::new(), false);
    };
    let mut kept = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let mut truncated = false;
    while let Ok(n) = r.read(&mut buf).await {
        if n == 0 {
            break;
        }
        let room = MAX_EXEC_OUTPUT.saturating_sub(kept.len());
        kept.extend_from_slice(&buf[..n.min(room)]);
        truncated |= n > room;
    }
    (String::from_utf8_lossy(&kept).into_owned(), truncated)
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
        // A pod's writable layer is its node's, bounded by its ephemeral-storage limit.
        Box::pin(async move { pod::check_name(id) })
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<String>>> {
        Box::pin(async move {
            let params = ListParams::default().labels(&pod::selector(&self.settings));
            let pods = self
                .pods
                .list(&params)
                .await
                .map_err(kube_error("listing the workspaces' pods"))?;
            Ok(pods
                .items
                .into_iter()
                .filter_map(|p| p.metadata.name)
                .collect())
        })
    }

    fn stop<'a>(&'a self, id: &'a str, _keep: Keep) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            pod::check_name(id)?;
            self.delete(id).await
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
                "workspace {id} runs in a pod: the gateway does not reach pods yet"
            )))
        })
    }

    fn gateway_listening(&self, _id: &str) -> bool {
        false
    }

    fn alive<'a>(&'a self, id: &'a str, instance: i32) -> BoxFuture<'a, bool> {
        Box::pin(async move {
            match self.pods.get_opt(id).await {
                Ok(Some(p)) => running(&p) && instance_of(&p) == instance,
                Ok(None) => false,
                // The API server not answering is not the workspace dying.
                Err(_) => true,
            }
        })
    }
}
