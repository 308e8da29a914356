//! OpenTelemetry traces exported over OTLP/HTTP to a real receiver: Arize Phoenix from PyPI
//! (`cargo xtask test` installs it; `TANDEM_TEST_PHOENIX` names its venv's python), started
//! here on a loopback port of its own and read back through its REST API. A scripted session's
//! boot is one trace with a span per phase, each of its two turns another with the model
//! requests and the tool call under it, and every span carries the session's id.
//!
//! Without `TANDEM_TEST_PHOENIX` the test prints SKIP, unless `TANDEM_TEST_REQUIRE_PHOENIX=1`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use axum::http::{Method, StatusCode};
use scripted_model::{Reply, ScriptedModel};
use serde::Deserialize;
use serde_json::{Value, json};
use tandem_protocol::*;

use crate::agent_runs::wait_events;
use crate::session_workspaces::add_repo;

/// Phoenix on a loopback port, its files in a directory of its own; stopped when dropped.
struct Phoenix {
    url: String,
    child: Child,
    _dir: tempfile::TempDir,
}

impl Phoenix {
    async fn start() -> Option<Self> {
        let required = std::env::var("TANDEM_TEST_REQUIRE_PHOENIX").is_ok_and(|v| v == "1");
        let Some(python) = std::env::var_os("TANDEM_TEST_PHOENIX").map(PathBuf::from) else {
            assert!(
                !required,
                "Phoenix required but TANDEM_TEST_PHOENIX names none (`cargo xtask test` installs it)"
            );
            eprintln!("SKIP (traces): no OpenTelemetry receiver (TANDEM_TEST_PHOENIX)");
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let launcher =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/phoenix/run_phoenix.py");
        let log = std::fs::File::create(dir.path().join("phoenix.log")).unwrap();
        let child = Command::new(python)
            .arg(launcher)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", dir.path())
            .env("TMPDIR", dir.path())
            .env("PHOENIX_HOST", "127.0.0.1")
            .env("PHOENIX_PORT", port.to_string())
            .env("PHOENIX_WORKING_DIR", dir.path())
            .env("PHOENIX_LOG_MIGRATIONS", "false")
            .env("PHOENIX_TELEMETRY_ENABLED", "false")
            .env("PHOENIX_ALLOW_EXTERNAL_RESOURCES", "false")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("Phoenix starts");
        let mut phoenix = Self {
            url: format!("http://127.0.0.1:{port}"),
            child,
            _dir: dir,
        };
        // Python's imports alone take seconds on a busy machine.
        let deadline = Instant::now() + Duration::from_secs(120);
        let client = reqwest::Client::new();
        loop {
            if let Ok(res) = client.get(format!("{}/readyz", phoenix.url)).send().await
                && res.status().is_success()
            {
                return Some(phoenix);
            }
            if let Ok(Some(status)) = phoenix.child.try_wait() {
                panic!("Phoenix exited ({status}): {}", phoenix.log());
            }
            assert!(
                Instant::now() < deadline,
                "Phoenix was not ready in 120 s: {}",
                phoenix.log()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("phoenix.log")).unwrap_or_default()
    }

    /// Every span Phoenix holds with `session.id` = `session`.
    async fn spans(&self, session: SessionId) -> Vec<Stored> {
        #[derive(Deserialize)]
        struct Page {
            data: Vec<Stored>,
        }
        let res = reqwest::Client::new()
            .get(format!("{}/v1/projects/default/spans", self.url))
            .query(&[
                ("attribute", format!("session.id:{session}")),
                ("limit", "1000".into()),
            ])
            .send()
            .await
            .unwrap();
        // The project is made by the first span it gets.
        if res.status() == reqwest::StatusCode::NOT_FOUND {
            return vec![];
        }
        assert!(res.status().is_success(), "{}", res.text().await.unwrap());
        res.json::<Page>().await.unwrap().data
    }
}

impl Drop for Phoenix {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A span as Phoenix gives it back.
#[derive(Clone, Debug, Deserialize)]
struct Stored {
    name: String,
    context: SpanIds,
    parent_id: Option<String>,
    start_time: String,
    end_time: String,
    status_code: String,
    attributes: HashMap<String, Value>,
}

#[derive(Clone, Debug, Deserialize)]
struct SpanIds {
    trace_id: String,
    span_id: String,
}

fn children<'a>(all: &'a [Stored], parent: &Stored) -> Vec<&'a Stored> {
    all.iter()
        .filter(|s| s.parent_id.as_deref() == Some(&parent.context.span_id))
        .collect()
}

fn time(s: &str) -> chrono::DateTime<chrono::FixedOffset> {
    chrono::DateTime::parse_from_rfc3339(s).unwrap()
}

#[tokio::test]
async fn a_sessions_boot_and_turns_are_traces_with_phases_model_requests_and_tool_calls() {
    let Some(phoenix) = Phoenix::start().await else {
        return;
    };
    let model = ScriptedModel::start(vec![
        Reply::tool("run_command", json!({ "command": "echo traced" }))
            .for_prompt("Trace this")
            .at_step(0),
        Reply::text("Ran it.").for_prompt("Trace this").at_step(1),
        Reply::text("Nothing more.")
            .for_last_prompt("again")
            .at_step(2),
    ])
    .await;
    let url = model.base_url.clone();
    let endpoint = phoenix.url.clone();
    let Some(s) = crate::workspaces::server(move |c| {
        c.agents.model_base_url = Some(url);
        c.agents.model = "scripted-1".into();
        c.telemetry.otlp_endpoint = Some(endpoint);
    })
    .await
    else {
        return;
    };
    let res = s
        .req(Method::PUT, "/api/secrets/model_api_key")
        .bearer(&s.admin_token)
        .json(&json!({ "value": "sk-test-traces" }))
        .send()
        .await;
    assert_eq!(res.status, StatusCode::NO_CONTENT);
    let src = crate::session_workspaces::source_repo("[workspace]\nsetup = []\n");
    let repo = add_repo(&s, "acme/traced", src.path()).await;
    let created = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo, "prompt": "Trace this command" }),
        )
        .send()
        .await;
    assert_eq!(created.status, StatusCode::CREATED);
    let id = created.parse::<SessionDetail>().session.id;
    let ended = |e: &[Event]| {
        e.iter()
            .filter(|e| matches!(e.kind, EventKind::TurnEnded { .. }))
            .count()
    };
    wait_events(&s, id, |e| ended(e) == 1).await;
    let res = s
        .post(
            &format!("/api/sessions/{id}/prompts"),
            json!({ "text": "Once again" }),
        )
        .send()
        .await;
    assert_eq!(res.status, StatusCode::CREATED);
    let evs = wait_events(&s, id, |e| ended(e) == 2).await;
    let phases = evs
        .iter()
        .filter(|e| matches!(e.kind, EventKind::BootPhase { .. }))
        .count();

    // Exported within a second or two of each span's end, stored shortly after.
    let deadline = Instant::now() + Duration::from_secs(60);
    let spans = loop {
        let spans = phoenix.spans(id).await;
        let roots = spans.iter().filter(|s| s.parent_id.is_none()).count();
        let models = spans.iter().filter(|s| s.name == "chat scripted-1").count();
        if roots >= 3 && models >= 3 {
            break spans;
        }
        assert!(
            Instant::now() < deadline,
            "Phoenix has {} spans of the session: {:#?}",
            spans.len(),
            spans.iter().map(|s| &s.name).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };

    // Every span is the session's, and each trace is one boot or one turn.
    for span in &spans {
        assert_eq!(
            span.attributes.get("session.id"),
            Some(&Value::String(id.to_string())),
            "{span:?}"
        );
    }
    let roots: Vec<&Stored> = spans.iter().filter(|s| s.parent_id.is_none()).collect();
    let mut names: Vec<&str> = roots.iter().map(|s| s.name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["session boot", "turn", "turn"], "{roots:#?}");
    let traces: std::collections::HashSet<&str> =
        roots.iter().map(|s| s.context.trace_id.as_str()).collect();
    assert_eq!(traces.len(), 3, "one trace each");

    // The boot: a span per phase it went through before ready, inside the boot's time.
    let boot = roots.iter().find(|s| s.name == "session boot").unwrap();
    let boot_phases = children(&spans, boot);
    assert_eq!(boot_phases.len(), phases - 1, "{boot_phases:#?}");
    assert!(
        boot_phases.iter().any(|p| p.name == "boot starting"),
        "{boot_phases:#?}"
    );
    for p in &boot_phases {
        assert!(p.name.starts_with("boot "), "{p:?}");
        assert_eq!(p.context.trace_id, boot.context.trace_id);
        assert!(
            time(&p.start_time) >= time(&boot.start_time),
            "{p:?} {boot:?}"
        );
        assert!(time(&p.end_time) <= time(&boot.end_time), "{p:?} {boot:?}");
    }

    // The turns, in order: the first ran a command between two model requests, the second
    // asked the model once.
    let mut turns: Vec<&Stored> = roots.iter().copied().filter(|s| s.name == "turn").collect();
    turns.sort_by_key(|t| time(&t.start_time));
    let first = children(&spans, turns[0]);
    let mut first_names: Vec<&str> = first.iter().map(|s| s.name.as_str()).collect();
    first_names.sort();
    assert_eq!(
        first_names,
        ["chat scripted-1", "chat scripted-1", "tool run_command"],
        "{first:#?}"
    );
    let tool = first.iter().find(|s| s.name == "tool run_command").unwrap();
    assert_eq!(tool.attributes.get("process.exit.code"), Some(&json!(0)));
    assert_ne!(tool.status_code, "ERROR");
    let chat = first.iter().find(|s| s.name == "chat scripted-1").unwrap();
    assert_eq!(
        chat.attributes.get("gen_ai.request.model"),
        Some(&json!("scripted-1"))
    );
    assert_eq!(
        chat.attributes.get("http.response.status_code"),
        Some(&json!(200))
    );
    for t in &turns {
        assert_eq!(
            t.attributes.get("tandem.turn.outcome"),
            Some(&json!("completed"))
        );
    }
    let second: Vec<&str> = children(&spans, turns[1])
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(second, ["chat scripted-1"]);
}
