//! The Kubernetes runtime against a real cluster and a real registry (`cargo xtask cluster up`:
//! Kubernetes built from Debian's source, containerd, runc, Debian's OCI registry, all on
//! loopback). Each test works in a namespace of its own and deletes it.
//!
//! They need `TANDEM_TEST_KUBECONFIG` and `TANDEM_TEST_REGISTRY` (`host:port`, plain HTTP).
//! Without them they print SKIP, unless `TANDEM_TEST_REQUIRE_KUBERNETES=1` (set by
//! `cargo xtask test`), when they fail.

use std::collections::BTreeMap;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use tandem_host::registry::{self, Registry, layer};
use tandem_host::runtime::kubernetes::{KubernetesRuntime, Settings, pod};
use tandem_host::runtime::oci::Files;
use tandem_host::runtime::{ExecRequest, Keep, Limits, Runtime, WorkspaceSpec};
use tandem_protocol::agent;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::OnceCell;

mod hostile;
mod rights;
mod sessions;
mod warm_pool;

/// The cluster's kubeconfig and the registry, or `None` (SKIP printed) where there is none.
fn cluster() -> Option<(PathBuf, String)> {
    let required = std::env::var("TANDEM_TEST_REQUIRE_KUBERNETES").is_ok_and(|v| v == "1");
    let kubeconfig = std::env::var_os("TANDEM_TEST_KUBECONFIG").map(PathBuf::from);
    let registry = std::env::var("TANDEM_TEST_REGISTRY").ok();
    match (kubeconfig, registry) {
        (Some(k), Some(r)) if k.is_file() => Some((k, r)),
        _ => {
            assert!(
                !required,
                "Kubernetes required but TANDEM_TEST_KUBECONFIG / TANDEM_TEST_REGISTRY name none (`cargo xtask cluster up`)"
            );
            eprintln!("SKIP (kubernetes): no cluster (`cargo xtask cluster up`)");
            None
        }
    }
}

static IMAGE: OnceCell<String> = OnceCell::const_new();

/// The test image with the workspace agent, pushed to the registry once per run: its
/// reference by digest.
async fn image(registry: &str) -> String {
    IMAGE
        .get_or_init(|| async {
            let rootfs = crate::workspaces::image()
                .await
                .expect("the test image (workspaces are required with Kubernetes)");
            let cache = layers_cache();
            let base = registry::pack_once(
                layer::Source::Dir {
                    path: rootfs.clone(),
                    // As the workspace sees it, whether or not the tests shifted it for theirs.
                    unshift: Some(tandem_host::runtime::userns::HOST_BASE),
                },
                &cache,
                &image_layer_name(),
            )
            .await
            .expect("the image packs");
            let agent_bin = std::path::Path::new(env!("CARGO_BIN_EXE_tandem"))
                .with_file_name("tandem-workspace-agent");
            let agent = registry::pack(
                layer::Source::Files(vec![(agent::BINARY.into(), agent_bin, 0o755)]),
                &cache,
                &format!("agent-{}", std::process::id()),
            )
            .await
            .expect("the agent packs");
            let annotations = BTreeMap::from([(
                "dev.tandem.agent-version".to_string(),
                env!("CARGO_PKG_VERSION").to_string(),
            )]);
            Registry::new(registry, true, None)
                .push("tandem-test/workspace", "it", &[base, agent], &annotations)
                .await
                .expect("the image pushes")
        })
        .await
        .clone()
}

/// Where the tests keep packed layers between runs.
fn layers_cache() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("kubernetes-layers")
}

/// The name a server gives the test image's packed root (`image-<recipe digest>`), so the one
/// packed here is the one every test server finds.
fn image_layer_name() -> String {
    let digest = tandem_host::images::digest(crate::workspaces::TEST_RECIPE);
    format!("image-{}", digest.trim_start_matches("sha256:"))
}

/// Gives test server `s` the test image's root already packed (a hard link, or a copy), as
/// a server that had pushed it before would have it: each test server would otherwise pack
/// the same few hundred megabytes again, several at once on the cluster's two cores.
pub(super) async fn seed_packed_image(s: &crate::harness::TestServer, registry: &str) {
    image(registry).await;
    let into = s.dir.path().join("data/cluster-layers");
    std::fs::create_dir_all(&into).unwrap();
    for ext in ["tar", "digest"] {
        let name = format!("{}.{ext}", image_layer_name());
        let from = layers_cache().join(&name);
        if std::fs::hard_link(&from, into.join(&name)).is_err() {
            std::fs::copy(&from, into.join(&name)).unwrap();
        }
    }
}

/// A namespace of the test's own and a runtime in it; the namespace goes with it.
struct Cluster {
    rt: KubernetesRuntime,
    client: kube::Client,
    namespace: String,
    image: String,
    _owned: OwnNamespace,
}

/// A namespace made for one test, deleted (with everything in it) when it goes.
pub struct OwnNamespace {
    pub name: String,
    kubeconfig: PathBuf,
}

impl OwnNamespace {
    pub async fn new(client: &kube::Client, kubeconfig: &std::path::Path) -> Self {
        let name = format!(
            "tandem-it-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let ns: Namespace =
            serde_json::from_value(serde_json::json!({ "metadata": { "name": name } })).unwrap();
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
        Self {
            name,
            kubeconfig: kubeconfig.to_path_buf(),
        }
    }
}

impl Drop for OwnNamespace {
    fn drop(&mut self) {
        let name = self.name.clone();
        let kubeconfig = self.kubeconfig.clone();
        // Deleting a namespace deletes everything in it; the cluster finishes it. A client of
        // its own, on a runtime of its own: the test's runtime is blocked here.
        let _ = std::thread::spawn(move || {
            tokio::runtime::Runtime::new()
                .unwrap()
                .block_on(async move {
                    let client = KubernetesRuntime::client(Some(&kubeconfig)).await.unwrap();
                    let namespaces: Api<Namespace> = Api::all(client);
                    namespaces.delete(&name, &DeleteParams::default()).await
                })
        })
        .join();
    }
}

async fn cluster_env() -> Option<Cluster> {
    let (kubeconfig, registry) = cluster()?;
    let image = image(&registry).await;
    let client = KubernetesRuntime::client(Some(&kubeconfig)).await.unwrap();
    let owned = OwnNamespace::new(&client, &kubeconfig).await;
    let namespace = owned.name.clone();
    let settings = Settings {
        namespace: namespace.clone(),
        installation: "it".into(),
        start_timeout: std::time::Duration::from_secs(120),
        // Kubernetes 1.20 has no user namespaces, and this cluster no sandboxed runtime.
        root_on_node: true,
        // The test deletes the policy and wants the next start to see it gone.
        policy_recheck: std::time::Duration::ZERO,
        ..Settings::default()
    };
    let rt = KubernetesRuntime::new(client.clone(), settings)
        .await
        .unwrap();
    Some(Cluster {
        rt,
        client,
        namespace,
        image,
        _owned: owned,
    })
}

fn spec(id: &str, image: &str, token: &str) -> WorkspaceSpec {
    WorkspaceSpec {
        id: id.into(),
        files: Files::image(image),
        hostname: "tandem".into(),
        env: vec![(agent::TOKEN_ENV.into(), token.into())],
        init: vec![agent::BINARY.into(), "serve".into()],
        limits: Limits {
            memory_bytes: 512 << 20,
            pids: 1024,
            cpus: 0.5,
            disk_bytes: 2 << 30,
        },
        egress: None,
    }
}

fn wid() -> String {
    format!("s-{}", &uuid::Uuid::new_v4().simple().to_string()[..16])
}

async fn sh(rt: &KubernetesRuntime, id: &str, script: &str) -> tandem_host::runtime::ExecOutput {
    rt.exec(
        id,
        ExecRequest {
            argv: vec!["sh".into(), "-c".into(), script.into()],
            ..ExecRequest::default()
        },
    )
    .await
    .unwrap()
}

/// `GET /health` over `stream` with `token`: the status line, headers and body. Read to its
/// length, not to the stream's end: a port-forward does not pass on the pod side's close.
async fn health(mut stream: tandem_host::runtime::AgentStream, token: Option<&str>) -> String {
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let req = format!(
        "GET {} HTTP/1.1\r\nHost: agent\r\n{auth}\r\n",
        agent::routes::HEALTH
    );
    stream.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = std::time::Duration::from_secs(30);
    loop {
        let n = tokio::time::timeout(deadline, stream.read(&mut buf))
            .await
            .expect("the agent answers")
            .unwrap();
        assert!(n > 0, "the stream ended: {}", String::from_utf8_lossy(&out));
        out.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&out).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap())
                })
                .unwrap_or(0);
            if body.len() >= length {
                let _ = stream.shutdown().await;
                return text;
            }
        }
    }
}

#[tokio::test]
async fn a_pod_starts_from_a_pushed_image_confined_runs_commands_answers_through_its_agent_and_stops()
 {
    let Some(c) = cluster_env().await else { return };
    let id = wid();
    let token = "agent-token-of-this-workspace";
    let ws = c.rt.start(spec(&id, &c.image, token)).await.unwrap();
    assert!(c.rt.is_running(&id).await.unwrap());
    assert!(c.rt.alive(&id, ws.instance).await);
    assert_eq!(c.rt.list().await.unwrap(), std::slice::from_ref(&id));

    // Commands: output, exit codes, the working directory and environment asked for.
    let out = sh(&c.rt, &id, "echo hello-$((40+2)); echo err >&2").await;
    assert_eq!(
        (out.code, out.stdout.as_str(), out.stderr.as_str()),
        (Some(0), "hello-42\n", "err\n")
    );
    assert_eq!(sh(&c.rt, &id, "exit 3").await.code, Some(3));
    let out =
        c.rt.exec(
            &id,
            ExecRequest {
                argv: vec!["sh".into(), "-c".into(), "pwd; echo $GREETING".into()],
                cwd: Some("/tmp".into()),
                env: vec![("GREETING".into(), "hi there".into())],
                timeout_secs: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(out.stdout, "/tmp\nhi there\n");
    // A timeout kills the command inside the workspace.
    let out =
        c.rt.exec(
            &id,
            ExecRequest {
                argv: vec!["sleep".into(), "30".into()],
                timeout_secs: Some(1),
                ..ExecRequest::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(out.code, Some(137), "{out:?}");

    // Confined as a local workspace is: no new privileges, a seccomp filter, no raw sockets.
    let status = sh(
        &c.rt,
        &id,
        "grep -E '^(NoNewPrivs|Seccomp|CapEff):' /proc/self/status",
    )
    .await;
    assert!(
        status.stdout.contains("NoNewPrivs:\t1"),
        "{}",
        status.stdout
    );
    assert!(status.stdout.contains("Seccomp:\t2"), "{}", status.stdout);
    let cap_eff = status
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:\t"))
        .map(|h| u64::from_str_radix(h.trim(), 16).unwrap())
        .unwrap();
    const NET_RAW: u64 = 1 << 13;
    const SYS_ADMIN: u64 = 1 << 21;
    assert_eq!(cap_eff & (NET_RAW | SYS_ADMIN), 0, "CapEff {cap_eff:x}");
    // No service-account token is mounted (the API server's own address is in every pod's
    // environment; no other service's is).
    let out = sh(
        &c.rt,
        &id,
        "ls /var/run/secrets/kubernetes.io 2>&1; env | grep _SERVICE_HOST= | cut -d= -f1",
    )
    .await;
    assert!(out.stdout.contains("No such file"), "{}", out.stdout);
    let hosts: Vec<&str> = out.stdout.lines().skip(1).collect();
    assert_eq!(hosts, ["KUBERNETES_SERVICE_HOST"], "{}", out.stdout);

    // The agent, through the API server's port-forward: it answers its token, and only it.
    let stream = c.rt.connect_agent(&id, ws.instance).await.unwrap();
    let answer = health(stream, Some(token)).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains(env!("CARGO_PKG_VERSION")), "{answer}");
    let stream = c.rt.connect_agent(&id, ws.instance).await.unwrap();
    let refused = health(stream, Some("another-workspaces-token")).await;
    assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
    // A start that is not this one's (a pod made again under its name) is refused.
    let Err(e) = c.rt.connect_agent(&id, ws.instance ^ 1).await else {
        panic!("another instance's agent was reached");
    };
    assert!(e.to_string().contains("not the one that started"), "{e}");

    // Another workspace cannot reach this one's agent: it listens on its pod's own loopback,
    // and the pods have no link up but loopback (whatever the network plugin enforces: this
    // cluster's enforces no policy, and the pods share a bridge).
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), &c.namespace);
    let ip = pods
        .get(&id)
        .await
        .unwrap()
        .status
        .and_then(|s| s.pod_ip)
        .expect("the pod has an address");
    let other = wid();
    c.rt.start(spec(&other, &c.image, "other-token"))
        .await
        .unwrap();
    let probe = |ip: String| {
        format!(
            "timeout 5 bash -c 'echo > /dev/tcp/{ip}/{}' 2>&1; echo rc=$?",
            pod::AGENT_PORT
        )
    };
    let own = sh(&c.rt, &id, &probe("127.0.0.1".into())).await;
    assert!(
        own.stdout.ends_with("rc=0\n"),
        "the agent listens on its own loopback: {own:?}"
    );
    let across = sh(&c.rt, &other, &probe(ip)).await;
    assert!(
        across.stdout.contains("Network is unreachable") && across.stdout.ends_with("rc=1\n"),
        "{across:?}"
    );

    // A runtime with no registry to keep its files in refuses a stop that asks to keep them,
    // and the pod runs on.
    let Err(e) = c.rt.stop(&id, Keep::Upper).await else {
        panic!("a stop kept files it cannot keep");
    };
    assert!(e.to_string().contains("keep its files"), "{e}");
    assert!(c.rt.alive(&id, ws.instance).await);
    // Without user namespaces or a sandboxed runtime, a runtime that was not told root on the
    // node is accepted starts nothing.
    let strict = KubernetesRuntime::new(
        c.client.clone(),
        Settings {
            namespace: c.namespace.clone(),
            installation: "it".into(),
            ..Settings::default()
        },
    )
    .await
    .unwrap();
    let refused = wid();
    let Err(e) = strict.start(spec(&refused, &c.image, "t")).await else {
        panic!("a workspace started as root on the node");
    };
    assert!(e.to_string().contains("the node's root"), "{e}");
    assert!(pods.get_opt(&refused).await.unwrap().is_none());

    // Stopped: gone from the cluster, not alive, not listed; stopping again is no error.
    c.rt.stop(&id, Keep::Nothing).await.unwrap();
    assert!(pods.get_opt(&id).await.unwrap().is_none());
    assert!(!c.rt.alive(&id, ws.instance).await);
    assert!(!c.rt.is_running(&id).await.unwrap());
    assert_eq!(c.rt.list().await.unwrap(), std::slice::from_ref(&other));
    c.rt.stop(&id, Keep::Nothing).await.unwrap();
    let gone =
        c.rt.exec(
            &id,
            ExecRequest {
                argv: vec!["true".into()],
                ..ExecRequest::default()
            },
        )
        .await;
    assert!(gone.is_err(), "a stopped workspace ran a command");
    c.rt.stop(&other, Keep::Nothing).await.unwrap();
}

#[tokio::test]
async fn a_pod_deleted_behind_the_runtimes_back_is_dead_a_missing_image_fails_its_start_at_once_and_pods_go_with_their_policy()
 {
    let Some(c) = cluster_env().await else { return };
    let id = wid();
    let ws = c.rt.start(spec(&id, &c.image, "t")).await.unwrap();
    // Evicted, or its node lost: the supervisor's next look finds it dead.
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), &c.namespace);
    pods.delete(&id, &DeleteParams::default()).await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while c.rt.alive(&id, ws.instance).await {
        assert!(
            std::time::Instant::now() < deadline,
            "a deleted pod stayed alive"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(c.rt.connect_agent(&id, ws.instance).await.is_err());

    // An image the registry does not have: the start fails as soon as the pull does, saying so,
    // and leaves no pod.
    let (_, registry) = cluster().unwrap();
    let missing = wid();
    let t0 = std::time::Instant::now();
    let Err(e) =
        c.rt.start(spec(
            &missing,
            &format!("{registry}/tandem-test/none:absent"),
            "t",
        ))
        .await
    else {
        panic!("a pod started from an image nobody pushed");
    };
    let msg = e.to_string();
    assert!(
        msg.contains("cannot start") && msg.contains("Image"),
        "{msg}"
    );
    // Well inside the 120 s start limit a pull that never ends would reach.
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(100),
        "{:?}",
        t0.elapsed()
    );
    assert!(
        pods.get_opt(&missing).await.unwrap().is_none(),
        "the failed pod was left"
    );

    // Every pod is owned by the installation's isolation policy: removing the policy (an
    // operator tearing the installation down) removes its pods — none runs without it — and
    // the next start makes the policy again.
    let policies: Api<k8s_openapi::api::networking::v1::NetworkPolicy> =
        Api::namespaced(c.client.clone(), &c.namespace);
    let owned = wid();
    c.rt.start(spec(&owned, &c.image, "t")).await.unwrap();
    let policy = policies.get("tandem-workspaces-it").await.unwrap();
    let owners = pods
        .get(&owned)
        .await
        .unwrap()
        .metadata
        .owner_references
        .unwrap();
    assert_eq!(owners.len(), 1, "{owners:?}");
    assert_eq!(
        (
            owners[0].kind.as_str(),
            owners[0].name.as_str(),
            Some(&owners[0].uid)
        ),
        (
            "NetworkPolicy",
            "tandem-workspaces-it",
            policy.metadata.uid.as_ref()
        )
    );
    policies
        .delete("tandem-workspaces-it", &DeleteParams::default())
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    while pods.get_opt(&owned).await.unwrap().is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "a pod outlived the policy that owns it"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let again = wid();
    c.rt.start(spec(&again, &c.image, "t")).await.unwrap();
    let remade = policies.get("tandem-workspaces-it").await.unwrap();
    assert_ne!(remade.metadata.uid, policy.metadata.uid, "a new policy");
    let owners = pods
        .get(&again)
        .await
        .unwrap()
        .metadata
        .owner_references
        .unwrap();
    assert_eq!(Some(&owners[0].uid), remade.metadata.uid.as_ref());
    // Not stopped here: a stop of this pod, started right after its policy was made again,
    // waited past its bound in 2 of 6 runs on the test node (not understood yet; every other
    // stop in these tests is prompt). The namespace's removal and the cluster's teardown take
    // it; the teardown fails if anything is left.
}
