//! The gateway over the agent's bridges, for a runtime that cannot hand a workspace a socket (a
//! pod on a cluster): the server keeps [`IDLE`] upgraded connections open to the agent
//! ([`agent::routes::GATEWAY_BRIDGE`]); when a process in the workspace connects to the gateway
//! socket the agent takes one, says so with [`agent::BRIDGE_TAKEN`], and carries that
//! connection over it. Here a taken bridge is the listener's next accepted connection, and
//! another is opened in its place. Every bridge is opened by the server, with the workspace's
//! token, through the runtime's own connection to that workspace: which workspace calls is
//! known by construction, as with a bound socket.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use hyper_util::rt::TokioIo;
use tandem_protocol::agent;
use tokio::io::AsyncReadExt;
use tokio::task::JoinSet;

use super::WorkspaceAgent;
use crate::runtime::{AgentStream, GatewayListener};
use crate::{Error, Host, Result};

/// Bridges kept open per workspace: as many of its connections to the gateway can start at
/// once without waiting for a new bridge (a model request, a push, a child's status).
pub const IDLE: usize = 4;
/// An idle bridge is replaced after this long, so one a proxy on the way closed silently is
/// never the only way out.
const MAX_IDLE_AGE: Duration = Duration::from_secs(600);
/// Longest wait between attempts when bridges cannot be opened (the workspace is restarting,
/// the cluster does not answer).
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Why an idle bridge ended without being taken.
enum Ended {
    /// It was idle too long and is replaced, not an error.
    Aged,
    Failed(Error),
}

/// Workspace `wid`'s (start `instance`) gateway connections, arriving over bridges.
pub fn listen(host: Arc<Host>, wid: &str, instance: i32) -> Box<dyn GatewayListener> {
    Box::new(Bridges {
        host,
        wid: wid.to_string(),
        instance,
        pending: JoinSet::new(),
        failures: 0,
    })
}

struct Bridges {
    host: Arc<Host>,
    wid: String,
    instance: i32,
    /// Bridges being opened or idle: each completes when the agent takes it.
    pending: JoinSet<std::result::Result<AgentStream, Ended>>,
    /// Failed openings in a row.
    failures: u32,
}

impl Bridges {
    fn open(&mut self) {
        let (host, wid, instance) = (self.host.clone(), self.wid.clone(), self.instance);
        self.pending.spawn(async move {
            let upgraded = WorkspaceAgent::new(&host, wid, instance)
                .gateway_bridge()
                .await
                .map_err(Ended::Failed)?;
            let mut io = TokioIo::new(upgraded);
            let mut taken = [0u8; 1];
            match tokio::time::timeout(MAX_IDLE_AGE, io.read_exact(&mut taken)).await {
                Err(_) => Err(Ended::Aged),
                Ok(Err(e)) => Err(Ended::Failed(Error::Unavailable(format!(
                    "a gateway bridge closed: {e}"
                )))),
                Ok(Ok(_)) if taken[0] != agent::BRIDGE_TAKEN => {
                    Err(Ended::Failed(Error::Unavailable(
                        "a gateway bridge sent something other than its go-ahead".into(),
                    )))
                }
                Ok(Ok(_)) => Ok(Box::new(io) as AgentStream),
            }
        });
    }
}

impl GatewayListener for Bridges {
    fn accept(&mut self) -> BoxFuture<'_, std::io::Result<AgentStream>> {
        Box::pin(async move {
            loop {
                while self.pending.len() < IDLE {
                    self.open();
                }
                match self.pending.join_next().await {
                    Some(Ok(Ok(stream))) => {
                        self.failures = 0;
                        return Ok(stream);
                    }
                    Some(Ok(Err(Ended::Aged))) => {}
                    Some(Ok(Err(Ended::Failed(e)))) => {
                        self.failures += 1;
                        if self.failures == 1 {
                            tracing::debug!(workspace = %self.wid, error = %e, "a gateway bridge failed");
                        }
                        // Doubling from 50 ms up to MAX_BACKOFF: a restarting workspace is
                        // back soon; one that is gone is not asked in a tight loop.
                        let wait = Duration::from_millis(50)
                            .saturating_mul(1 << self.failures.min(8))
                            .min(MAX_BACKOFF);
                        tokio::time::sleep(wait).await;
                    }
                    Some(Err(e)) => {
                        tracing::warn!(workspace = %self.wid, error = %e, "a gateway bridge task failed");
                    }
                    None => {}
                }
            }
        })
    }
}

impl Host {
    /// A listener for workspace `wid`'s (start `instance`) connections to its gateway: the
    /// runtime's own ([`crate::runtime::Runtime::listen_gateway`]), or bridges through its agent
    /// where the runtime has none ([`crate::runtime::Runtime::gateway_through_agent`]).
    pub async fn listen_gateway(
        self: &Arc<Self>,
        wid: &str,
        instance: i32,
    ) -> Result<Box<dyn GatewayListener>> {
        if self.runtime.gateway_through_agent() {
            Ok(listen(self.clone(), wid, instance))
        } else {
            self.runtime.listen_gateway(wid).await
        }
    }
}
