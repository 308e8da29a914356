//! The hostile checks that apply on a cluster, against a session's pod: it reaches neither
//! its node nor the outside, and writing past its disk gets it evicted (its session fails as
//! one whose workspace died).

use scripted_model::ScriptedModel;
use serde_json::json;
use tandem_host::runtime::kubernetes::KubernetesRuntime;
use tandem_protocol::*;
use tandem_server::config::kubernetes::KubernetesConfig;

use super::OwnNamespace;
use super::sessions::build_snapshot;
use crate::session_workspaces::{add_repo, events, exec, source_repo, wait_state};

/// This machine's addresses other than loopback (what a pod would try to reach the node by).
fn node_addresses() -> Vec<String> {
    let out = std::process::Command::new("hostname")
        .arg("-I")
        .output()
        .expect("hostname runs");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter(|a| !a.contains(':'))
        .map(str::to_string)
        .collect()
}

/// A server whose workspaces are pods in namespace `ns`, with small limits; `more` changes
/// the rest of its configuration.
async fn cluster_server(
    model: &ScriptedModel,
    kubeconfig: &std::path::Path,
    registry: &str,
    ns: &str,
    more: impl FnOnce(&mut tandem_server::config::Config) + Send + 'static,
) -> crate::harness::TestServer {
    let url = model.base_url.clone();
    let (kc, reg, name) = (
        kubeconfig.to_path_buf(),
        registry.to_string(),
        ns.to_string(),
    );
    crate::workspaces::server(move |c| {
        c.agents.model_base_url = Some(url);
        c.runtime = Some("kubernetes".into());
        c.kubernetes = Some(KubernetesConfig {
            kubeconfig: Some(kc),
            namespace: name,
            installation: "it".into(),
            registry: reg,
            registry_insecure: true,
            runtime_class: None,
            user_namespaces: false,
            root_on_node: true,
            start_timeout_secs: 240,
            isolate_links: true,
        });
        c.workspaces.limits.disk_gb = Some(1);
        c.workspaces.limits.memory_mb = Some(512);
        c.workspaces.limits.cpus = Some(0.5);
        more(c);
    })
    .await
    .expect("workspaces are required with Kubernetes")
}

#[tokio::test]
async fn a_hostile_pod_reaches_neither_the_node_nor_the_outside_and_is_evicted_past_its_disk() {
    let Some((kubeconfig, registry)) = super::cluster() else {
        return;
    };
    let client = KubernetesRuntime::client(Some(&kubeconfig)).await.unwrap();
    let ns = OwnNamespace::new(&client, &kubeconfig).await;
    let model = ScriptedModel::start(vec![]).await;
    let s = cluster_server(&model, &kubeconfig, &registry, &ns.name, |_| {}).await;
    super::seed_packed_image(&s, &registry).await;
    let src = source_repo("[workspace]\nsetup = []\n");
    let repo = add_repo(&s, "acme/hostile", src.path()).await;
    build_snapshot(&s, &repo).await;
    let started = crate::session_workspaces::start_session(&s, &repo).await;
    assert_eq!(started.session.state, SessionState::Ready);
    let id = started.session.id;

    // A service on every address of the node: reachable from the node itself, not the pod.
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = listener.accept().await {
            use tokio::io::AsyncWriteExt;
            let _ = c.write_all(b"node\n").await;
        }
    });
    let addresses = node_addresses();
    assert!(!addresses.is_empty(), "the node has an address");
    for address in &addresses {
        let control = tokio::net::TcpStream::connect((address.as_str(), port)).await;
        assert!(
            control.is_ok(),
            "the node reaches {address}:{port}: {control:?}"
        );
        let r = exec(
            &s,
            id,
            &format!("timeout 5 bash -c 'echo > /dev/tcp/{address}/{port}' 2>&1; echo rc=$?"),
        )
        .await;
        assert!(
            !r.stdout.ends_with("rc=0\n"),
            "the pod reached the node at {address}:{port}: {r:?}"
        );
    }
    let outside = exec(
        &s,
        id,
        "timeout 5 bash -c 'echo > /dev/tcp/1.1.1.1/443' 2>&1; echo rc=$?",
    )
    .await;
    assert!(
        !outside.stdout.ends_with("rc=0\n"),
        "the pod reached the outside: {outside:?}"
    );

    // Past its disk (1 GiB), the pod is evicted by its node, and the session fails as one
    // whose workspace died.
    let _ = s
        .post(
            &format!("/api/sessions/{id}/exec"),
            json!({ "command": "dd if=/dev/zero of=/workspace/fill bs=1M count=1400 2>&1" }),
        )
        .send()
        .await;
    let failed = wait_state(&s, id, &[SessionState::Failed]).await;
    assert_eq!(failed.session.state, SessionState::Failed);
    assert!(
        events(&s, id).await.iter().any(|e| matches!(&e.kind, EventKind::Error { message } if message.contains("stopped unexpectedly"))),
        "the timeline says the workspace went"
    );
}

/// A pod whose recipe names an allow-list reaches those names through the server's proxy (the
/// gateway, over the bridges the server opened) — by `CONNECT` and as plain HTTP — and nothing
/// else: another name is refused with what to do and shows in its timeline, and the allowed
/// name's own address is no nearer without the proxy (the pod still has no network).
#[tokio::test]
async fn a_pod_reaches_its_allow_listed_names_through_the_servers_proxy_and_nothing_else() {
    let Some((kubeconfig, registry)) = super::cluster() else {
        return;
    };
    let client = KubernetesRuntime::client(Some(&kubeconfig)).await.unwrap();
    let ns = OwnNamespace::new(&client, &kubeconfig).await;
    let model = ScriptedModel::start(vec![]).await;
    let out = crate::egress::outside().await;
    let (allowed, blocked) = (out.allowed, out.blocked);
    let s = cluster_server(&model, &kubeconfig, &registry, &ns.name, move |c| {
        c.egress_hosts
            .insert("allowed.test".into(), vec![std::net::IpAddr::V4(allowed)]);
        c.egress_hosts
            .insert("blocked.test".into(), vec![std::net::IpAddr::V4(blocked)]);
    })
    .await;
    super::seed_packed_image(&s, &registry).await;
    let src = source_repo("[workspace]\nsetup = []\negress = [\"allowed.test\"]\n");
    let repo = add_repo(&s, "acme/egress", src.path()).await;
    build_snapshot(&s, &repo).await;
    let started = crate::session_workspaces::start_session(&s, &repo).await;
    assert_eq!(started.session.state, SessionState::Ready);
    let id = started.session.id;
    let bash = |script: &str| format!("bash -c '{}'", script.replace('\'', "'\\''"));

    let env = exec(&s, id, "printenv HTTPS_PROXY").await;
    assert_eq!(env.stdout, "http://127.0.0.1:7312\n", "{env:?}");
    // A tunnel, as curl, git or npm open one through HTTPS_PROXY.
    let tunnel = exec(
        &s,
        id,
        &bash("exec 3<>/dev/tcp/127.0.0.1/7312; printf \"CONNECT allowed.test:8080 HTTP/1.1\\r\\nHost: allowed.test:8080\\r\\n\\r\\nGET / HTTP/1.0\\r\\nHost: allowed.test\\r\\n\\r\\n\" >&3; timeout 10 cat <&3"),
    )
    .await;
    assert!(
        tunnel.stdout.starts_with("HTTP/1.1 200") && tunnel.stdout.contains("hello from outside"),
        "the allow-listed name through a tunnel: {tunnel:?}"
    );
    // A plain http:// request, as clients send a proxy for one.
    let plain = exec(
        &s,
        id,
        &bash("exec 3<>/dev/tcp/127.0.0.1/7312; printf \"GET http://allowed.test:8080/ HTTP/1.1\\r\\nHost: allowed.test:8080\\r\\nConnection: close\\r\\n\\r\\n\" >&3; timeout 10 cat <&3"),
    )
    .await;
    assert!(
        plain.stdout.contains("hello from outside"),
        "the allow-listed name as plain HTTP: {plain:?}"
    );
    // Another name: refused, saying what to do, and in the timeline.
    let refused = exec(
        &s,
        id,
        &bash("exec 3<>/dev/tcp/127.0.0.1/7312; printf \"CONNECT blocked.test:8080 HTTP/1.1\\r\\nHost: blocked.test:8080\\r\\n\\r\\n\" >&3; timeout 10 cat <&3"),
    )
    .await;
    assert!(
        refused.stdout.starts_with("HTTP/1.1 403")
            && refused
                .stdout
                .contains("blocked.test is not on this workspace's egress allow-list"),
        "{refused:?}"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !events(&s, id)
        .await
        .iter()
        .any(|e| matches!(&e.kind, EventKind::EgressBlocked { name, .. } if name == "blocked.test"))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the refused name is not in the timeline"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // No link but loopback is up in the pod (the init container took them down), and the
    // workspace cannot bring one up.
    let links = exec(
        &s,
        id,
        "for l in /sys/class/net/*; do echo \"$(basename $l) $(cat $l/operstate)\"; done",
    )
    .await;
    let up: Vec<&str> = links
        .stdout
        .lines()
        .filter(|l| !l.starts_with("lo ") && !l.ends_with(" down"))
        .collect();
    assert!(
        up.is_empty() && links.stdout.lines().count() >= 2,
        "links up in the pod: {links:?}"
    );
    // Without the proxy, not even the allowed name's address.
    let direct = exec(
        &s,
        id,
        &format!("timeout 5 bash -c 'echo > /dev/tcp/{allowed}/8080' 2>&1; echo rc=$?"),
    )
    .await;
    assert!(
        !direct.stdout.ends_with("rc=0\n"),
        "the pod reached {allowed} without the proxy: {direct:?}"
    );
    drop(out);
}
