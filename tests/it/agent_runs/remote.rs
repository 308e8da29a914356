//! A runtime whose workspaces the server reaches only over the network: every connection to a
//! workspace's agent is a TCP connection to a forwarder standing in for another machine (it
//! checks a per-workspace secret, then reaches the agent on its side). A session on it boots,
//! runs a turn and opens its terminal through the live channel, so nothing between the core and
//! the agent assumes the agent is a unix socket on this machine.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::future::BoxFuture;
use scripted_model::{Reply, ScriptedModel};
use serde_json::json;
use tandem_host::runtime::{
    AgentStream, ExecOutput, ExecRequest, Keep, Limits, Runtime, Workspace, WorkspaceSpec,
};
use tandem_protocol::*;
use tandem_server::config::RuntimeLayer;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use super::{ended, new_session, repo, turn_ends, wait_events};

/// This machine's runtime for everything but the agent connection, which goes through a
/// loopback TCP forwarder per workspace: the server never touches the agent's socket itself.
struct Remote {
    inner: Arc<dyn Runtime>,
    /// Each workspace's forwarder: its address and the secret a connection must open with.
    forwarders: std::sync::Mutex<std::collections::HashMap<String, (std::net::SocketAddr, String)>>,
    /// Connections the server opened through a forwarder.
    forwarded: Arc<AtomicUsize>,
}

impl Remote {
    /// The forwarder of workspace `id`'s start `instance`: a TCP listener that takes a
    /// connection only after its first line is the secret, then joins it to the agent.
    async fn forwarder(&self, id: &str, instance: i32) -> (std::net::SocketAddr, String) {
        if let Some(f) = self.forwarders.lock().unwrap().get(id) {
            return f.clone();
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let secret = uuid::Uuid::new_v4().simple().to_string();
        let (inner, wid, want, forwarded) = (
            self.inner.clone(),
            id.to_string(),
            secret.clone(),
            self.forwarded.clone(),
        );
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (inner, wid, want, forwarded) =
                    (inner.clone(), wid.clone(), want.clone(), forwarded.clone());
                tokio::spawn(async move {
                    let mut tcp = tokio::io::BufReader::new(tcp);
                    let mut line = String::new();
                    if tcp.read_line(&mut line).await.is_err() || line.trim_end() != want {
                        return;
                    }
                    let Ok(mut agent) = inner.connect_agent(&wid, instance).await else {
                        return;
                    };
                    forwarded.fetch_add(1, Ordering::SeqCst);
                    let _ = tokio::io::copy_bidirectional(&mut tcp, &mut agent).await;
                });
            }
        });
        self.forwarders
            .lock()
            .unwrap()
            .insert(id.to_string(), (addr, secret.clone()));
        (addr, secret)
    }
}

impl Runtime for Remote {
    fn name(&self) -> &str {
        "remote"
    }
    fn start(&self, spec: WorkspaceSpec) -> BoxFuture<'_, tandem_host::Result<Workspace>> {
        self.inner.start(spec)
    }
    fn exec<'a>(
        &'a self,
        id: &'a str,
        req: ExecRequest,
    ) -> BoxFuture<'a, tandem_host::Result<ExecOutput>> {
        self.inner.exec(id, req)
    }
    fn is_running<'a>(&'a self, id: &'a str) -> BoxFuture<'a, tandem_host::Result<bool>> {
        self.inner.is_running(id)
    }
    fn pause<'a>(&'a self, id: &'a str) -> BoxFuture<'a, tandem_host::Result<()>> {
        self.inner.pause(id)
    }
    fn resume<'a>(&'a self, id: &'a str) -> BoxFuture<'a, tandem_host::Result<()>> {
        self.inner.resume(id)
    }
    fn prepare<'a>(
        &'a self,
        id: &'a str,
        limits: Limits,
    ) -> BoxFuture<'a, tandem_host::Result<()>> {
        self.inner.prepare(id, limits)
    }
    // Its layers stay on this machine, in the local runtime's store.
    fn local(&self) -> Option<&tandem_host::runtime::oci::OciRuntime> {
        self.inner.local()
    }
    fn listen_gateway<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, tandem_host::Result<Box<dyn tandem_host::runtime::GatewayListener>>> {
        self.inner.listen_gateway(id)
    }
    fn gateway_listening(&self, id: &str) -> bool {
        self.inner.gateway_listening(id)
    }
    fn list(&self) -> BoxFuture<'_, tandem_host::Result<Vec<String>>> {
        self.inner.list()
    }
    fn stop<'a>(&'a self, id: &'a str, keep: Keep) -> BoxFuture<'a, tandem_host::Result<()>> {
        self.forwarders.lock().unwrap().remove(id);
        self.inner.stop(id, keep)
    }
    fn reattach<'a>(&'a self, id: &'a str) -> BoxFuture<'a, tandem_host::Result<()>> {
        self.inner.reattach(id)
    }
    fn alive<'a>(&'a self, id: &'a str, instance: i32) -> BoxFuture<'a, bool> {
        self.inner.alive(id, instance)
    }
    fn connect_agent<'a>(
        &'a self,
        id: &'a str,
        instance: i32,
    ) -> BoxFuture<'a, tandem_host::Result<AgentStream>> {
        Box::pin(async move {
            let (addr, secret) = self.forwarder(id, instance).await;
            let mut tcp = tokio::net::TcpStream::connect(addr).await.map_err(|e| {
                tandem_host::Error::Unavailable(format!("the forwarder is not reachable: {e}"))
            })?;
            tcp.write_all(format!("{secret}\n").as_bytes()).await?;
            Ok(Box::new(tcp) as AgentStream)
        })
    }
}

#[tokio::test]
async fn a_session_on_a_runtime_reached_over_the_network_boots_runs_a_turn_and_opens_its_terminal()
{
    let model = ScriptedModel::start(vec![
        Reply::tool(
            "edit_file",
            json!({ "path": "calc.sh", "old_text": "2 - 2", "new_text": "2 + 2" }),
        ),
        Reply::text("Fixed."),
    ])
    .await;
    let forwarded = Arc::new(AtomicUsize::new(0));
    let counted = forwarded.clone();
    let layer = RuntimeLayer(Some(Arc::new(move |inner: Arc<dyn Runtime>| {
        Arc::new(Remote {
            inner,
            forwarders: Default::default(),
            forwarded: counted.clone(),
        }) as Arc<dyn Runtime>
    })));
    let url = model.base_url.clone();
    let Some(s) = crate::workspaces::server(move |c| {
        c.agents.model_base_url = Some(url);
        c.agents.model = "scripted-1".into();
        c.runtime_layer = layer;
    })
    .await
    else {
        return;
    };
    let res = s
        .req(axum::http::Method::PUT, "/api/secrets/model_api_key")
        .bearer(&s.admin_token)
        .json(&json!({ "value": super::KEY }))
        .send()
        .await;
    assert_eq!(res.status, axum::http::StatusCode::NO_CONTENT);
    let (_src, repo) = repo(&s, "acme/remote").await;
    let id = new_session(&s, &repo, "Fix the sum").await;

    // It boots (the readiness check reaches the agent through the forwarder) and its turn runs.
    let evs = wait_events(&s, id, ended(1)).await;
    let ends = turn_ends(&evs);
    assert_eq!(ends[0].1, TurnOutcome::Completed, "{ends:?}");
    assert!(
        evs.iter()
            .any(|e| matches!(&e.kind, EventKind::FileChanged { path, .. } if path == "calc.sh")),
        "the turn's edit is recorded"
    );
    let through_turn = forwarded.load(Ordering::SeqCst);
    assert!(through_turn > 0, "the server reached the agent over TCP");

    // Its terminal, through the live channel, over the same hop.
    let mut owner = crate::live::Peer::connect(&s, id, crate::live::token(&s.admin_token)).await;
    owner.until("a terminal", |p| !p.terminals.is_empty()).await;
    let term = owner.terminals[0].id;
    owner
        .c
        .input(term, b"echo over-the-hop-$((6*7)); sh calc.sh\r")
        .await
        .unwrap();
    owner
        .until("the command's output", |p| {
            p.sees("over-the-hop-42") && p.sees("\r\n4\r\n")
        })
        .await;
    assert!(
        forwarded.load(Ordering::SeqCst) > through_turn,
        "the terminal came through the forwarder too"
    );
}
