//! The warm pool on a cluster: pods started ahead from the snapshot's image, claimed by new
//! sessions (whose terminal then works through the live channel), refilled and drained.

use std::time::{Duration, Instant};

use axum::http::{Method, StatusCode};
use k8s_openapi::api::core::v1::Pod;
use scripted_model::ScriptedModel;
use serde_json::json;
use tandem_host::runtime::kubernetes::KubernetesRuntime;
use tandem_protocol::*;

use super::OwnNamespace;
use super::sessions::{build_snapshot, pods, server};
use crate::harness::TestServer;
use crate::session_workspaces::{add_repo, events, exec, source_repo};

/// Waits until `repo`'s warm pool has `want` ready.
async fn wait_warm(s: &TestServer, repo: &str, want: i64) {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let r: Repo = s.get(&format!("/api/repos/{repo}")).send().await.parse();
        if r.warm_ready == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "warm pool of {repo} stuck at {} (want {want})",
            r.warm_ready
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_warm_pool_of_pods_is_claimed_by_new_sessions_with_a_live_terminal_refilled_and_drained()
{
    let Some((kubeconfig, registry)) = super::cluster() else {
        return;
    };
    let client = KubernetesRuntime::client(Some(&kubeconfig)).await.unwrap();
    let ns = OwnNamespace::new(&client, &kubeconfig).await;
    let model = ScriptedModel::start(vec![]).await;
    let s = server(&model, kubeconfig, registry, ns.name.clone()).await;
    let src = source_repo("[workspace]\nsetup = []\n");
    let repo = add_repo(&s, "acme/warm", src.path()).await;
    build_snapshot(&s, &repo).await;
    let set_pool = |size: i64| {
        let s = &s;
        let repo = &repo;
        async move {
            let res = s
                .req(Method::PUT, &format!("/api/repos/{repo}/warm-pool"))
                .bearer(&s.admin_token)
                .json(&json!({ "size": size }))
                .send()
                .await;
            assert_eq!(res.status, StatusCode::OK);
        }
    };
    set_pool(1).await;
    wait_warm(&s, &repo, 1).await;
    let names = |pods: Vec<Pod>| -> Vec<String> {
        pods.into_iter().filter_map(|p| p.metadata.name).collect()
    };
    let warm = names(pods(&client, &ns.name).await);
    assert_eq!(warm.len(), 1, "one pod waits: {warm:?}");

    let started = crate::session_workspaces::start_session(&s, &repo).await;
    assert_eq!(started.session.state, SessionState::Ready);
    let id = started.session.id;
    let claimed = events(&s, id).await.iter().any(|e| {
        matches!(&e.kind, EventKind::BootPhase { phase: BootPhase::Starting, detail: Some(d), .. } if d.contains("warm pool"))
    });
    assert!(claimed, "the session took the waiting pod");
    let r = exec(&s, id, "cat README.md").await;
    assert_eq!(r.stdout, "hello\n", "{}", r.stderr);
    // The terminal, through the live channel (the agent's PTY over the port-forward).
    let mut owner = crate::live::Peer::connect(&s, id, crate::live::token(&s.admin_token)).await;
    owner.until("a terminal", |p| !p.terminals.is_empty()).await;
    let term = owner.terminals[0].id;
    owner
        .c
        .input(term, b"echo from-the-pod-$((6*7))\r")
        .await
        .unwrap();
    owner
        .until("the command's output", |p| p.sees("from-the-pod-42"))
        .await;
    // Refilled: the claimed pod is the session's, a new one waits.
    wait_warm(&s, &repo, 1).await;
    let now = names(pods(&client, &ns.name).await);
    assert_eq!(now.len(), 2, "{now:?}");
    assert!(now.contains(&warm[0]), "the claimed pod runs on: {now:?}");

    // A server starting again removes the pool pods it left, never another replica's: one of
    // theirs (its name carries their tag) waits beside this server's new pool pod.
    let host = s.state.workspaces().unwrap();
    let waiting = now.iter().find(|n| **n != warm[0]).unwrap().clone();
    assert!(tandem_server::sessions::pool::started_by(
        &waiting,
        &host.host_id
    ));
    let api: kube::Api<Pod> = kube::Api::namespaced(client.clone(), &ns.name);
    let mut theirs = api.get(&waiting).await.unwrap();
    let their_name = tandem_server::sessions::pool::new_id("another-replica");
    theirs.metadata = kube::api::ObjectMeta {
        name: Some(their_name.clone()),
        labels: theirs.metadata.labels.take(),
        ..Default::default()
    };
    theirs.status = None;
    api.create(&Default::default(), &theirs).await.unwrap();
    tandem_server::supervisor::orphans::at_start(&s.state.db, &host)
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut left = names(pods(&client, &ns.name).await);
        left.sort();
        let mut want = vec![warm[0].clone(), their_name.clone()];
        want.sort();
        if left == want {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "after a restart's clean-up: {left:?}, want {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    api.delete(&their_name, &Default::default()).await.unwrap();

    // Drained: the waiting pod goes, the session's stays.
    set_pool(0).await;
    wait_warm(&s, &repo, 0).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while names(pods(&client, &ns.name).await) != [warm[0].clone()] {
        assert!(
            Instant::now() < deadline,
            "the drained pod is still there: {:?}",
            names(pods(&client, &ns.name).await)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
