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

#[tokio::test]
async fn a_hostile_pod_reaches_neither_the_node_nor_the_outside_and_is_evicted_past_its_disk() {
    let Some((kubeconfig, registry)) = super::cluster() else {
        return;
    };
    let client = KubernetesRuntime::client(Some(&kubeconfig)).await.unwrap();
    let ns = OwnNamespace::new(&client, &kubeconfig).await;
    let model = ScriptedModel::start(vec![]).await;
    let url = model.base_url.clone();
    let (kc, reg, name) = (kubeconfig.clone(), registry.clone(), ns.name.clone());
    let s = crate::workspaces::server(move |c| {
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
        });
        c.workspaces.limits.disk_gb = Some(1);
        c.workspaces.limits.memory_mb = Some(512);
        c.workspaces.limits.cpus = Some(0.5);
    })
    .await
    .expect("workspaces are required with Kubernetes");
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
