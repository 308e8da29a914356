//! The company's tools for the agent, under a policy a person controls: a real remote MCP
//! server (npm's `@modelcontextprotocol/server-everything` over streamable HTTP on loopback,
//! behind a proxy that demands its credential) reached only through the gateway; a read-only
//! tool allowed, a tool the admin denied refused with why, an open-world tool asking a driver
//! (approved over the live channel, approved for the session, denied with a reason, timed
//! out), a viewer's answer refused, and the credential nowhere in the workspace.
//!
//! The MCP servers come from `tests/mcp-servers` (`cargo xtask test` installs them); without
//! them the tests print SKIP, unless `TANDEM_TEST_REQUIRE_MCP=1`, when they fail.

use std::time::Duration;

use axum::http::{Method, StatusCode};
use scripted_model::{Reply, ScriptedModel};
use serde_json::json;
use tandem_protocol::approval::{Approval, ApprovalState};
use tandem_protocol::live::{ShareLink, WsClient, WsServer};
use tandem_protocol::*;
use tandem_server::client::live::{Credentials, Incoming, LiveClient};

use crate::agent_runs::wait_events;
use crate::harness::TestServer;

pub use crate::mcp_servers::{Everything, SECRET, servers_dir};

fn tool_results(evs: &[Event], name: &str) -> Vec<(String, bool)> {
    evs.iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolResult {
                name: n,
                output,
                is_error,
                ..
            } if n == name => Some((output.clone(), *is_error)),
            _ => None,
        })
        .collect()
}

fn turns_ended(evs: &[Event]) -> usize {
    evs.iter()
        .filter(|e| matches!(e.kind, EventKind::TurnEnded { .. }))
        .count()
}

fn asked(evs: &[Event]) -> Vec<Approval> {
    evs.iter()
        .filter_map(|e| match &e.kind {
            EventKind::ApprovalAsked { approval } => Some(approval.clone()),
            _ => None,
        })
        .collect()
}

async fn prompt(s: &TestServer, id: SessionId, text: &str) {
    let r = s
        .post(
            &format!("/api/sessions/{id}/prompts"),
            json!({ "text": text }),
        )
        .send()
        .await;
    assert_eq!(
        r.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
}

/// Waits for approval number `n` (1-based) of the session to be asked.
async fn nth_card(s: &TestServer, id: SessionId, n: usize) -> Approval {
    let evs = wait_events(s, id, |e| asked(e).len() >= n).await;
    asked(&evs)[n - 1].clone()
}

async fn answer(
    c: &mut LiveClient,
    approval: &Approval,
    approve: bool,
    for_session: bool,
    reason: Option<&str>,
) {
    c.send(&WsClient::AnswerApproval {
        approval: approval.id,
        approve,
        for_session,
        reason: reason.map(String::from),
    })
    .await
    .unwrap();
}

/// Reads `c` until it refuses `request`; the reason.
async fn refusal(c: &mut LiveClient, request: &str) -> String {
    tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match c.next().await {
                Some(Incoming::Message(m)) => {
                    if let WsServer::Refused { request: r, reason } = *m
                        && r == request
                    {
                        return reason;
                    }
                }
                Some(_) => {}
                None => panic!("the channel ended before refusing {request}"),
            }
        }
    })
    .await
    .expect("a refusal within 30 s")
}

#[tokio::test]
async fn a_remote_mcp_servers_tools_run_under_the_policy_with_approvals_from_drivers_only() {
    let Some(dir) = servers_dir() else {
        return;
    };
    let gz = |n: &str| json!({ "name": format!("{n}.gz"), "data": "data:text/plain;base64,aGVsbG8gbWNw", "outputType": "resource" });
    let model = ScriptedModel::start(vec![
        Reply::tool(
            "everything__echo",
            json!({ "message": "hello from the tool" }),
        )
        .for_last_prompt("one: echo"),
        Reply::tool("everything__get-env", json!({})).for_last_prompt("two: env"),
        Reply::tool("everything__gzip-file-as-resource", gz("three"))
            .for_last_prompt("three: gzip"),
        Reply::tool("everything__gzip-file-as-resource", gz("four")).for_last_prompt("four: gzip"),
        Reply::tool("everything__gzip-file-as-resource", gz("five")).for_last_prompt("five: gzip"),
        Reply::tool("everything__gzip-file-as-resource", gz("six")).for_last_prompt("six: gzip"),
        Reply::tool("everything__gzip-file-as-resource", gz("seven"))
            .for_last_prompt("seven: gzip"),
    ])
    .await;
    model.fallback(Reply::text("done"));
    let url = model.base_url.clone();
    let Some(s) = crate::workspaces::server(move |c| {
        c.agents.model_base_url = Some(url);
        c.agents.model = "scripted-1".into();
        c.agents.approval_timeout_secs = 8;
    })
    .await
    else {
        return;
    };
    let server = Everything::start(&dir).await;

    // An admin configures the server: its credential into the secret store, `get-env` denied
    // (a server's environment is no agent's business).
    let put = s
        .req(Method::PUT, "/api/mcp/servers/everything")
        .bearer(&s.admin_token)
        .json(&json!({
            "url": server.url,
            "secret": "everything_token",
            "secret_value": SECRET,
            "rules": [{ "tool": "get-env", "action": "deny" }],
        }))
        .send()
        .await;
    assert_eq!(
        put.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&put.body)
    );
    assert!(!String::from_utf8_lossy(&put.body).contains(SECRET));
    assert_eq!(put.json()["secret_set"], true);

    let src = crate::session_workspaces::source_repo("[workspace]\nsetup = []\n");
    let repo = crate::session_workspaces::add_repo(&s, "acme/tools", src.path()).await;
    let created: SessionDetail = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo, "prompt": "one: echo" }),
        )
        .send()
        .await
        .parse();
    let id = created.session.id;

    // A read-only tool: called at once, its result in the timeline.
    let evs = wait_events(&s, id, |e| turns_ended(e) == 1).await;
    let echoed = tool_results(&evs, "everything__echo");
    assert_eq!(echoed.len(), 1, "{echoed:?}");
    assert!(
        echoed[0].0.contains("hello from the tool") && !echoed[0].1,
        "{echoed:?}"
    );
    assert!(asked(&evs).is_empty(), "a read-only tool asks no one");
    let offered = model.requests()[0].body["tools"].to_string();
    assert!(
        offered.contains("everything__echo"),
        "the model is offered the server's tools"
    );
    assert!(
        !offered.contains("everything__get-env"),
        "a denied tool is not offered"
    );

    // A denied tool: refused, the agent told why, nobody asked.
    prompt(&s, id, "two: env").await;
    let evs = wait_events(&s, id, |e| turns_ended(e) == 2).await;
    let env = tool_results(&evs, "everything__get-env");
    assert!(
        env.len() == 1 && env[0].1 && env[0].0.contains("denied by the installation's policy"),
        "{env:?}"
    );
    assert!(asked(&evs).is_empty());

    // An open-world tool asks; a viewer's answer is refused (live channel and REST), a
    // driver's approval lets it run.
    let link: ShareLink = s
        .post(
            &format!("/api/sessions/{id}/links"),
            json!({ "role": "viewer", "allow_guests": true }),
        )
        .send()
        .await
        .parse();
    let mut viewer = LiveClient::connect(
        &s.url,
        id,
        &Credentials {
            share: link.token.clone(),
            name: Some("Vera".into()),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let mut owner = LiveClient::connect(&s.url, id, &crate::live::token(&s.admin_token))
        .await
        .unwrap();
    prompt(&s, id, "three: gzip").await;
    let card = nth_card(&s, id, 1).await;
    assert_eq!(card.state, ApprovalState::Pending);
    assert_eq!(
        card.subject,
        approval::ApprovalSubject::Tool {
            server: "everything".into(),
            tool: "gzip-file-as-resource".into()
        }
    );
    assert_eq!(
        card.arguments["name"], "three.gz",
        "the card shows the call's arguments"
    );
    assert_eq!(
        card.asked_for.as_ref().map(|a| a.name.as_str()),
        Some("admin")
    );
    answer(&mut viewer, &card, true, false, None).await;
    let why = refusal(&mut viewer, "answer_approval").await;
    assert!(why.contains("viewer"), "{why}");
    let (_, bob) = crate::agent_runs::another_user(&s, "bob").await;
    let rest = s
        .req(
            Method::POST,
            &format!("/api/sessions/{id}/approvals/{}", card.id),
        )
        .bearer(&bob)
        .json(&json!({ "approve": true }))
        .send()
        .await;
    assert_eq!(
        rest.status,
        StatusCode::FORBIDDEN,
        "a watcher cannot answer over REST either"
    );
    let still: Vec<Approval> = s
        .get(&format!("/api/sessions/{id}/approvals"))
        .send()
        .await
        .parse();
    assert_eq!(
        still[0].state,
        ApprovalState::Pending,
        "the refused answers changed nothing"
    );
    answer(&mut owner, &card, true, false, None).await;
    let evs = wait_events(&s, id, |e| turns_ended(e) == 3).await;
    let ran = tool_results(&evs, "everything__gzip-file-as-resource");
    assert!(ran.len() == 1 && !ran[0].1, "approved, it ran: {ran:?}");
    assert!(evs.iter().any(|e| matches!(&e.kind,
        EventKind::ApprovalAnswered { approval_id, state: ApprovalState::Approved, by: Some(by), .. }
            if *approval_id == card.id && by.name == "admin")));
    // A second answer to the same card is refused: one answer wins.
    let again = s
        .post(
            &format!("/api/sessions/{id}/approvals/{}", card.id),
            json!({ "approve": false }),
        )
        .send()
        .await;
    assert_eq!(again.status, StatusCode::CONFLICT);

    // Denied with a reason: the agent is told it.
    prompt(&s, id, "four: gzip").await;
    let card = nth_card(&s, id, 2).await;
    answer(&mut owner, &card, false, false, Some("not on a Friday")).await;
    let evs = wait_events(&s, id, |e| turns_ended(e) == 4).await;
    let ran = tool_results(&evs, "everything__gzip-file-as-resource");
    assert!(
        ran[1].1 && ran[1].0.contains("denied by admin: not on a Friday"),
        "{ran:?}"
    );

    // Nobody answers: it times out into a denial the agent is told about; the turn ends.
    prompt(&s, id, "five: gzip").await;
    let card = nth_card(&s, id, 3).await;
    let evs = wait_events(&s, id, |e| turns_ended(e) == 5).await;
    let ran = tool_results(&evs, "everything__gzip-file-as-resource");
    assert!(
        ran[2].1 && ran[2].0.contains("nobody in the session answered"),
        "{ran:?}"
    );
    assert!(evs.iter().any(|e| matches!(&e.kind,
        EventKind::ApprovalAnswered { approval_id, state: ApprovalState::TimedOut, by: None, .. }
            if *approval_id == card.id)));

    // Approved for the rest of the session: the next call of that tool asks no one.
    prompt(&s, id, "six: gzip").await;
    let card = nth_card(&s, id, 4).await;
    answer(&mut owner, &card, true, true, None).await;
    wait_events(&s, id, |e| turns_ended(e) == 6).await;
    prompt(&s, id, "seven: gzip").await;
    let evs = wait_events(&s, id, |e| turns_ended(e) == 7).await;
    let ran = tool_results(&evs, "everything__gzip-file-as-resource");
    assert!(ran.len() == 5 && !ran[3].1 && !ran[4].1, "{ran:?}");
    assert_eq!(
        asked(&evs).len(),
        4,
        "the session's grant answered the seventh"
    );

    // The credential reached the server on every request, and never the workspace.
    let seen = server.authorizations();
    assert!(!seen.is_empty());
    assert!(
        seen.iter()
            .all(|a| a.as_deref() == Some(&format!("Bearer {SECRET}"))),
        "{seen:?}"
    );
    let found = crate::session_workspaces::exec(
        &s,
        id,
        // Where a workspace's files can be (not the image's read-only system files: reading all
        // of those takes longer than a request may on a busy machine).
        &format!("env | grep -c {SECRET}; grep -rIl {SECRET} /workspace /tmp /root /home /etc /run /var 2>/dev/null | head; true"),
    )
    .await;
    assert_eq!(
        found.stdout.trim(),
        "0",
        "the credential is in the workspace: {found:?}"
    );
    let timeline = serde_json::to_string(&evs).unwrap();
    assert!(!timeline.contains(SECRET));

    // Every call, approval, denial and timeout is in the audit log.
    let audit = tandem_store::audit::recent(&s.state.db, 200).await.unwrap();
    let count = |a: &str| audit.iter().filter(|(x, _)| x == a).count();
    assert_eq!(count("mcp.call"), 7, "{audit:?}");
    assert_eq!(count("approval.asked"), 4);
    assert_eq!(count("approval.approved"), 2);
    assert_eq!(count("approval.denied"), 1);
    assert_eq!(count("approval.timed_out"), 1);
}

/// A repo's own MCP servers (npm's `server-filesystem` and `server-everything`, over stdio
/// inside the workspace, named in its `tandem.toml`): read-only tools run at once, a destructive
/// one waits for a driver's approval (here over REST) and then changes the workspace.
#[tokio::test]
async fn a_repos_own_stdio_mcp_server_runs_in_the_workspace_and_asks_before_a_destructive_call() {
    let (Some(dir), Some(code)) = (servers_dir(), crate::code::code_server_dir()) else {
        return;
    };
    let model = ScriptedModel::start(vec![
        Reply::tool("files__list_directory", json!({ "path": "/workspace" }))
            .for_last_prompt("one: list"),
        Reply::tool(
            "everything__echo",
            json!({ "message": "echoed over stdio" }),
        )
        .for_last_prompt("one: list")
        .at_step(1),
        Reply::tool(
            "files__write_file",
            json!({ "path": "/workspace/notes.txt", "content": "written through MCP" }),
        )
        .for_last_prompt("two: write"),
    ])
    .await;
    model.fallback(Reply::text("done"));
    let url = model.base_url.clone();
    // The test image has no node: the host's (bound in for VS Code) runs the server.
    let Some(s) = crate::workspaces::server(move |c| {
        c.agents.model_base_url = Some(url);
        c.agents.model = "scripted-1".into();
        c.agents.code_server_dir = Some(code);
    })
    .await
    else {
        return;
    };
    let src = crate::session_workspaces::source_repo(
        "[workspace]\nsetup = []\n\n[[mcp]]\nname = \"files\"\ncommand = [\"/run/tandem/bin/node\", \"/workspace/.mcp/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js\", \"/workspace\"]\n\n[[mcp]]\nname = \"everything\"\ncommand = [\"/run/tandem/bin/node\", \"/workspace/.mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js\", \"stdio\"]\n",
    );
    // The server and its dependencies, committed into the repo (`dir` is node_modules/@…).
    std::fs::create_dir_all(src.path().join(".mcp")).unwrap();
    assert!(
        std::process::Command::new("cp")
            .arg("-r")
            .arg(dir.parent().unwrap())
            .arg(src.path().join(".mcp/node_modules"))
            .status()
            .unwrap()
            .success()
    );
    let git = |args: &[&str]| {
        assert!(
            std::process::Command::new("git")
                .args(args)
                .current_dir(src.path())
                .status()
                .unwrap()
                .success()
        )
    };
    git(&["add", "-A"]);
    git(&["commit", "-qm", "the repo's MCP server"]);
    let repo = crate::session_workspaces::add_repo(&s, "acme/own-tools", src.path()).await;
    let created: SessionDetail = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo, "prompt": "one: list" }),
        )
        .send()
        .await
        .parse();
    let id = created.session.id;
    let evs = wait_events(&s, id, |e| turns_ended(e) == 1).await;
    let listed = tool_results(&evs, "files__list_directory");
    assert!(
        listed.len() == 1 && !listed[0].1 && listed[0].0.contains("README.md"),
        "{listed:?} {:#?}",
        evs.iter().map(|e| e.kind.summary()).collect::<Vec<_>>()
    );
    assert!(asked(&evs).is_empty(), "a read-only tool asks no one");
    let echoed = tool_results(&evs, "everything__echo");
    assert!(
        echoed.len() == 1 && !echoed[0].1 && echoed[0].0.contains("echoed over stdio"),
        "server-everything over stdio in the workspace: {echoed:?}"
    );

    prompt(&s, id, "two: write").await;
    let card = nth_card(&s, id, 1).await;
    assert_eq!(
        card.subject,
        approval::ApprovalSubject::Tool {
            server: "files".into(),
            tool: "write_file".into()
        }
    );
    assert_eq!(card.arguments["content"], "written through MCP");
    let before =
        crate::session_workspaces::exec(&s, id, "cat /workspace/notes.txt 2>&1; true").await;
    assert!(
        !before.stdout.contains("written through MCP"),
        "it waits for the answer"
    );
    let answered = s
        .post(
            &format!("/api/sessions/{id}/approvals/{}", card.id),
            json!({ "approve": true }),
        )
        .send()
        .await;
    assert_eq!(answered.status, StatusCode::OK);
    let evs = wait_events(&s, id, |e| turns_ended(e) == 2).await;
    let wrote = tool_results(&evs, "files__write_file");
    assert!(wrote.len() == 1 && !wrote[0].1, "{wrote:?}");
    let after = crate::session_workspaces::exec(&s, id, "cat /workspace/notes.txt").await;
    assert_eq!(after.stdout.trim(), "written through MCP");
}

/// Tandem's own actions follow the admins' policy too: `spawn_sessions` denied outright, then
/// asked about and denied by a driver; with no rule it is allowed (the default).
#[tokio::test]
async fn the_agents_own_actions_follow_the_policy() {
    let model = ScriptedModel::start(vec![
        Reply::tool("spawn_sessions", json!({ "prompt": "child: a" }))
            .for_last_prompt("one: spawn"),
        Reply::tool("spawn_sessions", json!({ "prompt": "child: b" }))
            .for_last_prompt("two: spawn"),
        Reply::tool("spawn_sessions", json!({ "prompt": "child: c" }))
            .for_last_prompt("three: spawn"),
    ])
    .await;
    model.fallback(Reply::text("done"));
    let url = model.base_url.clone();
    let Some(s) = crate::workspaces::server(move |c| {
        c.agents.model_base_url = Some(url);
        c.agents.model = "scripted-1".into();
    })
    .await
    else {
        return;
    };
    let rules = |action: &str| json!({ "rules": [{ "tool": "spawn_sessions", "action": action }] });
    let put = s
        .req(Method::PUT, "/api/mcp/actions")
        .bearer(&s.admin_token)
        .json(&rules("deny"))
        .send()
        .await;
    assert_eq!(
        put.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&put.body)
    );
    let src = crate::session_workspaces::source_repo("[workspace]\nsetup = []\n");
    let repo = crate::session_workspaces::add_repo(&s, "acme/actions", src.path()).await;
    let created: SessionDetail = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo, "prompt": "one: spawn" }),
        )
        .send()
        .await
        .parse();
    let id = created.session.id;
    let evs = wait_events(&s, id, |e| turns_ended(e) == 1).await;
    let r = tool_results(&evs, "spawn_sessions");
    assert!(
        r[0].1 && r[0].0.contains("denied by the installation's policy"),
        "{r:?}"
    );
    assert!(
        !evs.iter()
            .any(|e| matches!(e.kind, EventKind::ChildSpawned { .. }))
    );

    let put = s
        .req(Method::PUT, "/api/mcp/actions")
        .bearer(&s.admin_token)
        .json(&rules("ask"))
        .send()
        .await;
    assert_eq!(put.status, StatusCode::OK);
    prompt(&s, id, "two: spawn").await;
    let evs = wait_events(&s, id, |e| {
        asked(e).len() == 1 || tool_results(e, "spawn_sessions").len() == 2
    })
    .await;
    assert_eq!(
        asked(&evs).len(),
        1,
        "{:?}",
        tool_results(&evs, "spawn_sessions")
    );
    let card = nth_card(&s, id, 1).await;
    assert_eq!(
        card.subject,
        approval::ApprovalSubject::Action {
            action: "spawn_sessions".into()
        }
    );
    let denied = s
        .post(
            &format!("/api/sessions/{id}/approvals/{}", card.id),
            json!({ "approve": false, "reason": "no children today" }),
        )
        .send()
        .await;
    assert_eq!(denied.status, StatusCode::OK);
    let evs = wait_events(&s, id, |e| turns_ended(e) == 2).await;
    let r = tool_results(&evs, "spawn_sessions");
    assert!(r[1].1 && r[1].0.contains("no children today"), "{r:?}");

    // No rule: allowed, as before the policy existed.
    s.req(Method::PUT, "/api/mcp/actions")
        .bearer(&s.admin_token)
        .json(&json!({}))
        .send()
        .await;
    prompt(&s, id, "three: spawn").await;
    let evs = wait_events(&s, id, |e| {
        turns_ended(e) == 3
            && e.iter()
                .any(|e| matches!(e.kind, EventKind::ChildSpawned { .. }))
    })
    .await;
    assert_eq!(asked(&evs).len(), 1);
    for e in &evs {
        if let EventKind::ChildSpawned { child_id, .. } = e.kind {
            s.post(&format!("/api/sessions/{child_id}/stop"), json!({}))
                .send()
                .await;
        }
    }
}

/// OpenCode takes the same tools from the gateway's own MCP endpoint (its configuration points
/// there): the same names, the same policy (an open-world tool asks a driver), the credential
/// added by the gateway.
#[tokio::test]
async fn opencode_gets_the_same_tools_and_approvals_from_the_gateways_mcp_endpoint() {
    let (Some(dir), Some(bin)) = (servers_dir(), crate::agent_runs::agents::opencode()) else {
        return;
    };
    let model = ScriptedModel::start(vec![
        Reply::text("Listed.")
            .with_tools(true)
            .for_prompt("first: list"),
    ])
    .await;
    model.fallback(Reply::text("A title"));
    let url = model.base_url.clone();
    let Some(s) = crate::workspaces::server(move |c| {
        c.agents.model_base_url = Some(url);
        c.agents.model = "scripted-1".into();
        c.agents.opencode_bin = Some(bin);
    })
    .await
    else {
        return;
    };
    let server = Everything::start(&dir).await;
    let put = s
        .req(Method::PUT, "/api/mcp/servers/everything")
        .bearer(&s.admin_token)
        .json(&json!({ "url": server.url, "secret": "everything_token", "secret_value": SECRET }))
        .send()
        .await;
    assert_eq!(put.status, StatusCode::OK);
    let src = crate::session_workspaces::source_repo("[workspace]\nsetup = []\n");
    let repo = crate::session_workspaces::add_repo(&s, "acme/oc-tools", src.path()).await;
    let created: SessionDetail = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo, "prompt": "first: list", "agent": { "kind": "opencode" } }),
        )
        .send()
        .await
        .parse();
    let id = created.session.id;
    wait_events(&s, id, |e| turns_ended(e) == 1).await;
    // The tools OpenCode offered the model: the gateway's, under OpenCode's own names.
    let offered: Vec<String> = model
        .requests()
        .iter()
        .flat_map(|r| r.body["tools"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t["function"]["name"].as_str().map(String::from))
        .collect();
    let named = |suffix: &str| {
        offered
            .iter()
            .find(|n| n.ends_with(suffix))
            .unwrap_or_else(|| panic!("OpenCode offers no {suffix}: {offered:?}"))
            .clone()
    };
    let (echo, gzip) = (
        named("everything__echo"),
        named("everything__gzip-file-as-resource"),
    );
    model.push([
        Reply::tool(&echo, json!({ "message": "hello from opencode" })).with_tools(true).for_last_prompt("second: tools"),
        Reply::tool(&gzip, json!({ "name": "oc.gz", "data": "data:text/plain;base64,aGVsbG8=", "outputType": "resource" }))
            .with_tools(true)
            .for_last_prompt("second: tools"),
        Reply::text("Both done.").with_tools(true).for_last_prompt("second: tools"),
    ]);
    prompt(&s, id, "second: tools").await;
    let card = nth_card(&s, id, 1).await;
    assert_eq!(
        card.subject,
        approval::ApprovalSubject::Tool {
            server: "everything".into(),
            tool: "gzip-file-as-resource".into()
        }
    );
    let answered = s
        .post(
            &format!("/api/sessions/{id}/approvals/{}", card.id),
            json!({ "approve": true }),
        )
        .send()
        .await;
    assert_eq!(answered.status, StatusCode::OK);
    let evs = wait_events(&s, id, |e| turns_ended(e) == 2).await;
    let said = serde_json::to_string(&evs).unwrap();
    assert!(
        said.contains("hello from opencode"),
        "the echo's result came back: {said}"
    );
    assert!(
        server
            .authorizations()
            .iter()
            .all(|a| a.as_deref() == Some(&format!("Bearer {SECRET}"))),
        "the gateway added the credential"
    );
    let audit = tandem_store::audit::recent(&s.state.db, 100).await.unwrap();
    assert_eq!(
        audit.iter().filter(|(a, _)| a == "mcp.call").count(),
        2,
        "{audit:?}"
    );
}
