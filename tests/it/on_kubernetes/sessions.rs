//! A whole session on Kubernetes, as people use one: the snapshot is pushed as an image, the
//! session's pod starts from it and catches up with the branch, the agent's turn reaches the
//! model through the gateway (bridges through the pod's agent), commands run, a suspend keeps
//! the pod's work as an image that the resumed pod starts from, a fork starts from the running
//! pod's files, and the pods go when the sessions stop.

use std::time::{Duration, Instant};

use axum::http::{Method, StatusCode};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use scripted_model::{Reply, ScriptedModel};
use serde_json::json;
use tandem_host::runtime::kubernetes::KubernetesRuntime;
use tandem_protocol::*;
use tandem_server::config::kubernetes::KubernetesConfig;

use super::OwnNamespace;
use crate::harness::TestServer;
use crate::session_workspaces::{add_repo, events, exec, source_repo, wait_state};
use crate::snapshots::{git, wait_built_within};

pub(super) const KEY: &str = "sk-test-kube-never-leaks";

/// A server whose workspaces are pods in `namespace`, its model `model`.
pub(super) async fn server(
    model: &ScriptedModel,
    kubeconfig: std::path::PathBuf,
    registry: String,
    namespace: String,
) -> TestServer {
    let url = model.base_url.clone();
    let registry_for_seed = registry.clone();
    let s = crate::workspaces::server(move |c| {
        c.agents.model_base_url = Some(url);
        c.agents.model = "scripted-1".into();
        c.runtime = Some("kubernetes".into());
        c.kubernetes = Some(KubernetesConfig {
            kubeconfig: Some(kubeconfig),
            namespace,
            installation: "it".into(),
            registry,
            registry_insecure: true,
            runtime_class: None,
            user_namespaces: false,
            // Kubernetes 1.20 has no user namespaces, and this cluster no sandboxed runtime.
            root_on_node: true,
            start_timeout_secs: 240,
            isolate_links: true,
        });
        // Small, so the tests running at once fit the one node's two cores.
        c.workspaces.limits.cpus = Some(0.5);
        c.workspaces.limits.memory_mb = Some(1024);
    })
    .await
    .expect("workspaces are required with Kubernetes");
    super::seed_packed_image(&s, &registry_for_seed).await;
    let res = s
        .req(Method::PUT, "/api/secrets/model_api_key")
        .bearer(&s.admin_token)
        .json(&json!({ "value": KEY }))
        .send()
        .await;
    assert_eq!(res.status, StatusCode::NO_CONTENT);
    s
}

/// Builds `repo`'s snapshot (pushed as an image) and waits for it.
pub(super) async fn build_snapshot(s: &TestServer, repo: &str) {
    let snap: Snapshot = s
        .req(Method::POST, &format!("/api/repos/{repo}/snapshots"))
        .bearer(&s.admin_token)
        .send()
        .await
        .parse();
    // Pushing to the registry beside the other tests' pods on two cores: longer than a
    // local build may take.
    let built = wait_built_within(s, &snap.id.to_string(), Duration::from_secs(420)).await;
    assert_eq!(built.state, SnapshotState::Ready, "{:?}", built.error);
}

pub(super) async fn pods(client: &kube::Client, namespace: &str) -> Vec<Pod> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    api.list(&ListParams::default()).await.unwrap().items
}

#[tokio::test]
async fn a_session_on_kubernetes_starts_from_its_pushed_snapshot_catches_up_answers_through_the_gateway_runs_commands_keeps_its_work_across_a_suspend_forks_and_its_pods_go_at_stop()
 {
    let Some((kubeconfig, registry)) = super::cluster() else {
        return;
    };
    let client = KubernetesRuntime::client(Some(&kubeconfig)).await.unwrap();
    let ns = OwnNamespace::new(&client, &kubeconfig).await;
    let model = ScriptedModel::start(vec![
        Reply::tool("run_command", json!({ "command": "cat news.txt" })).saying("Reading it."),
        Reply::text("The pod answers."),
    ])
    .await;
    let s = server(&model, kubeconfig, registry, ns.name.clone()).await;

    let src = source_repo("[workspace]\nsetup = []\n");
    let repo = add_repo(&s, "acme/kube", src.path()).await;
    build_snapshot(&s, &repo).await;
    // A commit past the snapshot: the pod, which cannot see the server's mirror, catches up.
    std::fs::write(src.path().join("news.txt"), "pushed after the snapshot\n").unwrap();
    git(src.path(), &["add", "-A"]);
    git(src.path(), &["commit", "-qm", "news after the snapshot"]);
    let head = git(src.path(), &["rev-parse", "HEAD"]).trim().to_string();

    let created: SessionDetail = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo, "prompt": "What is new?" }),
        )
        .send()
        .await
        .parse();
    let id = created.session.id;
    let deadline = Instant::now() + Duration::from_secs(180);
    let evs = loop {
        let evs = events(&s, id).await;
        if evs.iter().any(|e| e.kind.type_name() == "turn_ended") {
            break evs;
        }
        let failed = evs.iter().find(|e| e.kind.type_name() == "error");
        assert!(failed.is_none(), "the session failed: {failed:?}");
        assert!(Instant::now() < deadline, "no turn ended: {evs:#?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // The model was reached from the pod, with the key the gateway adds (never in the pod).
    let outcome = evs.iter().find_map(|e| match &e.kind {
        EventKind::TurnEnded { outcome, error, .. } => Some((*outcome, error.clone())),
        _ => None,
    });
    assert_eq!(outcome, Some((TurnOutcome::Completed, None)), "{evs:#?}");
    let output = evs.iter().find_map(|e| match &e.kind {
        EventKind::ToolResult { output, .. } => Some(output.clone()),
        _ => None,
    });
    assert_eq!(
        output.as_deref().map(str::trim),
        Some("pushed after the snapshot"),
        "the command ran on the caught-up checkout"
    );
    assert!(
        model
            .requests()
            .iter()
            .all(|r| r.authorization.as_deref() == Some(&format!("Bearer {KEY}"))),
        "every model request carried the key"
    );
    let says = evs.iter().any(|e| {
        matches!(&e.kind, EventKind::AgentMessage { text, .. } if text.contains("The pod answers."))
    });
    assert!(says, "the model's answer is the agent's message");

    // The workspace is a pod of this namespace, on the branch's head, without the key.
    let live = pods(&client, &ns.name).await;
    assert_eq!(live.len(), 1, "one pod for the one session");
    let r = exec(&s, id, "git rev-parse HEAD; git status --porcelain; env").await;
    assert_eq!(r.exit_code, Some(0), "{}", r.stderr);
    let mut lines = r.stdout.lines();
    assert_eq!(lines.next(), Some(head.as_str()), "{}", r.stdout);
    assert!(
        !r.stdout.contains("tandem-sync"),
        "the catch-up bundle is gone: {}",
        r.stdout
    );
    assert!(!r.stdout.contains(KEY), "the model key is in the pod");

    // Work the pod does is kept when it stops: new files, changes, deletions, the home dir.
    let r = exec(
        &s,
        id,
        "echo kept > work.txt && echo changed >> README.md && git rm -q --cached news.txt && rm news.txt && echo history > ~/.notes",
    )
    .await;
    assert_eq!(r.exit_code, Some(0), "{}", r.stderr);
    let suspended = s
        .req(Method::POST, &format!("/api/sessions/{id}/suspend"))
        .bearer(&s.admin_token)
        .send()
        .await;
    assert_eq!(
        suspended.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&suspended.body)
    );
    assert!(
        pods(&client, &ns.name).await.is_empty(),
        "a suspended session has no pod"
    );
    // The pod took seconds to go, on purpose: the supervisor did not take it for dead.
    let troubles: Vec<String> = events(&s, id)
        .await
        .iter()
        .filter(|e| {
            e.kind.type_name() == "error"
                || matches!(&e.kind, EventKind::StateChanged { to, .. } if *to == SessionState::Failed)
        })
        .map(|e| e.kind.summary())
        .collect();
    assert!(troubles.is_empty(), "{troubles:?}");
    let resumed = s
        .req(Method::POST, &format!("/api/sessions/{id}/resume"))
        .bearer(&s.admin_token)
        .send()
        .await;
    assert_eq!(
        resumed.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&resumed.body)
    );
    wait_state(&s, id, &[SessionState::Ready]).await;
    let r = exec(
        &s,
        id,
        "cat work.txt; tail -1 README.md; test -e news.txt || echo news-gone; cat ~/.notes; git rev-parse HEAD",
    )
    .await;
    assert_eq!(r.exit_code, Some(0), "{}", r.stderr);
    assert_eq!(
        r.stdout,
        format!("kept\nchanged\nnews-gone\nhistory\n{head}\n"),
        "the resumed pod has the work of the one before"
    );

    // A fork starts from the running pod's files, in a pod of its own.
    let forked = s
        .post(&format!("/api/sessions/{id}/fork"), json!({ "count": 1 }))
        .send()
        .await;
    assert_eq!(
        forked.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&forked.body)
    );
    let forks: Vec<Session> = forked.parse();
    let child = forks[0].id;
    wait_state(&s, child, &[SessionState::Ready]).await;
    let r = exec(
        &s,
        child,
        "cat work.txt; cat ~/.notes; echo mine > only-child.txt",
    )
    .await;
    assert_eq!(r.stdout, "kept\nhistory\n", "{}", r.stderr);
    let r = exec(&s, id, "ls only-child.txt 2>&1 || true").await;
    assert!(
        r.stdout.contains("No such file"),
        "the fork is a pod of its own: {}",
        r.stdout
    );
    assert_eq!(pods(&client, &ns.name).await.len(), 2);

    for session in [child, id] {
        let stopped = s
            .req(Method::POST, &format!("/api/sessions/{session}/stop"))
            .bearer(&s.admin_token)
            .send()
            .await;
        assert_eq!(
            stopped.status,
            StatusCode::OK,
            "{}",
            String::from_utf8_lossy(&stopped.body)
        );
        wait_state(&s, session, &[SessionState::Stopped]).await;
    }
    assert!(
        pods(&client, &ns.name).await.is_empty(),
        "the sessions' pods are gone once they are stopped"
    );
}

#[tokio::test]
async fn collected_snapshots_and_forgotten_workspaces_leave_the_registry() {
    let Some((kubeconfig, registry)) = super::cluster() else {
        return;
    };
    let client = KubernetesRuntime::client(Some(&kubeconfig)).await.unwrap();
    let ns = OwnNamespace::new(&client, &kubeconfig).await;
    let model = ScriptedModel::start(vec![]).await;
    let s = server(&model, kubeconfig, registry.clone(), ns.name.clone()).await;
    let images = tandem_host::registry::Registry::new(&registry, true, None);
    let db = &s.state.db;
    let host = s.state.workspaces().unwrap().clone();

    let src = source_repo("[workspace]\nsetup = []\n");
    let repo_id = add_repo(&s, "acme/gc", src.path()).await;
    let repo = tandem_server::repos::get(db, repo_id.parse().unwrap())
        .await
        .unwrap();
    let mut built = Vec::new();
    for round in 0..2 {
        if round > 0 {
            std::fs::write(src.path().join("round.txt"), format!("{round}\n")).unwrap();
            git(src.path(), &["add", "-A"]);
            git(src.path(), &["commit", "-qm", "another round"]);
        }
        let snap: Snapshot = s
            .req(Method::POST, &format!("/api/repos/{repo_id}/snapshots"))
            .bearer(&s.admin_token)
            .send()
            .await
            .parse();
        let done = wait_built_within(&s, &snap.id.to_string(), Duration::from_secs(420)).await;
        assert_eq!(done.state, SnapshotState::Ready, "{:?}", done.error);
        built.push(done.id);
    }
    let tagged = |id: SnapshotId| {
        let images = &images;
        async move {
            images
                .resolve(tandem_host::cluster_layers::SNAPSHOTS, &id.to_string())
                .await
                .unwrap()
        }
    };
    let first_image = tagged(built[0]).await.expect("the first snapshot's image");
    assert!(tagged(built[1]).await.is_some());

    let collected = tandem_server::snapshots::collect_garbage(db, &host, &repo, 1, &[])
        .await
        .unwrap();
    assert_eq!(collected, [built[0]]);
    assert_eq!(
        tagged(built[0]).await,
        None,
        "the collected snapshot's tag is gone"
    );
    let manifest = images.annotations(&first_image).await;
    assert!(manifest.is_err(), "and its manifest: {manifest:?}");
    assert!(
        tagged(built[1]).await.is_some(),
        "the snapshot in use stays"
    );

    // A session's kept files go when its workspace is dropped, and only its own.
    let mut kept = Vec::new();
    for _ in 0..2 {
        let started = crate::session_workspaces::start_session(&s, &repo_id).await;
        assert_eq!(started.session.state, SessionState::Ready);
        let id = started.session.id;
        let res = s
            .req(Method::POST, &format!("/api/sessions/{id}/stop"))
            .bearer(&s.admin_token)
            .send()
            .await;
        assert_eq!(
            res.status,
            StatusCode::OK,
            "{}",
            String::from_utf8_lossy(&res.body)
        );
        kept.push(tandem_server::sessions::workspace::workspace_id(id));
    }
    let kept_image = |wid: String| {
        let images = &images;
        async move {
            images
                .resolve(
                    tandem_host::cluster_layers::SNAPSHOTS,
                    &tandem_host::runtime::kubernetes::keep::tag(&wid),
                )
                .await
                .unwrap()
        }
    };
    assert!(kept_image(kept[0].clone()).await.is_some());
    host.runtime
        .stop(&kept[0], tandem_host::runtime::Keep::Nothing)
        .await
        .unwrap();
    assert_eq!(kept_image(kept[0].clone()).await, None);
    assert!(
        kept_image(kept[1].clone()).await.is_some(),
        "another workspace's kept files stay"
    );
}

#[tokio::test]
async fn a_pod_deleted_mid_turn_is_replaced_and_the_interrupted_prompt_runs_again() {
    let Some((kubeconfig, registry)) = super::cluster() else {
        return;
    };
    let client = KubernetesRuntime::client(Some(&kubeconfig)).await.unwrap();
    let ns = OwnNamespace::new(&client, &kubeconfig).await;
    let model = ScriptedModel::start(vec![Reply::tool(
        "run_command",
        json!({ "command": "sleep 600" }),
    )])
    .await;
    // The prompt's second run (on the new pod) finishes.
    model.fallback(Reply::text("Done on the new pod."));
    let s = server(&model, kubeconfig, registry, ns.name.clone()).await;
    let src = source_repo("[workspace]\nsetup = []\n");
    let repo = add_repo(&s, "acme/evicted", src.path()).await;
    build_snapshot(&s, &repo).await;
    let created: SessionDetail = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo, "prompt": "Wait a long time" }),
        )
        .send()
        .await
        .parse();
    let id = created.session.id;
    let deadline = Instant::now() + Duration::from_secs(180);
    while !events(&s, id)
        .await
        .iter()
        .any(|e| e.kind.type_name() == "tool_call")
    {
        assert!(
            Instant::now() < deadline,
            "the command never started: {:#?}",
            events(&s, id)
                .await
                .iter()
                .map(|e| e.kind.summary())
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The cluster takes the pod away (an eviction, a lost node), not Tandem.
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let wid = pods(&client, &ns.name).await[0]
        .metadata
        .name
        .clone()
        .unwrap();
    api.delete(&wid, &Default::default()).await.unwrap();

    // The session is not failed: a new pod starts and the interrupted prompt runs again there.
    let deadline = Instant::now() + Duration::from_secs(240);
    let evs = loop {
        let evs = events(&s, id).await;
        let completed = evs.iter().any(|e| {
            matches!(
                &e.kind,
                EventKind::TurnEnded {
                    outcome: TurnOutcome::Completed,
                    ..
                }
            )
        });
        if completed {
            break evs;
        }
        assert!(
            Instant::now() < deadline,
            "the prompt never ran again: {:#?}",
            evs.iter().map(|e| e.kind.summary()).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let summary = evs.iter().map(|e| e.kind.summary()).collect::<Vec<_>>();
    assert!(
        evs.iter().any(
            |e| matches!(&e.kind, EventKind::Error { message } if message.contains("pod went"))
        ),
        "the timeline says the pod went and what happens: {summary:#?}"
    );
    assert!(
        evs.iter().any(|e| matches!(
            &e.kind,
            EventKind::TurnEnded {
                outcome: TurnOutcome::Interrupted,
                ..
            }
        )),
        "the first run was interrupted: {summary:#?}"
    );
    assert!(
        evs.iter()
            .any(|e| matches!(&e.kind, EventKind::PromptRequeued { .. })),
        "{summary:#?}"
    );
    assert!(
        !evs.iter().any(|e| matches!(
            &e.kind,
            EventKind::StateChanged {
                to: SessionState::Failed,
                ..
            }
        )),
        "{summary:#?}"
    );
    let asked = model
        .requests()
        .iter()
        .filter(|r| {
            r.user_messages()
                .iter()
                .any(|m| m.contains("Wait a long time"))
        })
        .count();
    assert!(asked >= 2, "the model got the prompt again: {asked}");
    let running = pods(&client, &ns.name).await;
    assert_eq!(running.len(), 1, "one new pod for the session");
    let detail = s
        .post(&format!("/api/sessions/{id}/stop"), json!({}))
        .send()
        .await;
    assert!(detail.status.is_success());
    assert_eq!(
        s.req(Method::GET, "/api/health").send().await.status,
        StatusCode::OK
    );
}
