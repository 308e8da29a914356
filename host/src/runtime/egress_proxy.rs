//! Egress for a workspace that has no network of its own (a pod on a cluster): its processes
//! reach allow-listed names through an HTTP proxy in the workspace (the agent's
//! [`tandem_protocol::agent::EGRESS_PROXY_PORT`], named by `HTTPS_PROXY`), whose connections
//! come over the workspace's gateway bridges to the server, which opens each `CONNECT
//! name:port` here — or refuses it. The same rules as a local workspace's name server
//! ([`super::dns`]): names on the allow-list (exact, or `*.x`) or granted by a person; an
//! address from `egress_hosts` or the host's resolver, never an internal one from the resolver;
//! a refused name reported as an `egress_blocked` event (and asked about where the recipe
//! says so). Only what speaks through a proxy gets out: `CONNECT` carries any TCP protocol a
//! client tunnels (HTTPS, git over HTTPS, most package managers); there is nothing else.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::dns::{Tally, allowed, announce, granted};
use super::network::{Egress, is_internal};
use crate::{Error, Result};

/// Most tunnels one workspace holds open at once.
pub const MAX_TUNNELS: usize = 64;
/// Most tunnels the whole server holds open at once.
pub const MAX_TUNNELS_ALL: usize = 4096;
/// Most names one workspace, and the whole server, resolves at once: a lookup runs on a
/// blocking thread until the host's resolver answers, however long that takes, so the
/// lookups (not only the waits for them) are bounded.
pub const MAX_LOOKUPS: usize = 4;
pub const MAX_LOOKUPS_ALL: usize = 32;
/// How long resolving and connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// What one workspace may reach through the proxy.
pub struct Rules {
    workspace: String,
    patterns: Vec<String>,
    hosts: BTreeMap<String, Vec<IpAddr>>,
    ask: bool,
    refused: Mutex<Tally>,
    /// A report of refusals is waiting for its period's end.
    flushing: std::sync::atomic::AtomicBool,
    tunnels: Arc<Semaphore>,
    lookups: Arc<Semaphore>,
}

static TUNNELS: LazyLock<Arc<Semaphore>> =
    LazyLock::new(|| Arc::new(Semaphore::new(MAX_TUNNELS_ALL)));
static LOOKUPS: LazyLock<Arc<Semaphore>> =
    LazyLock::new(|| Arc::new(Semaphore::new(MAX_LOOKUPS_ALL)));

static RULES: LazyLock<Mutex<HashMap<String, Arc<Rules>>>> = LazyLock::new(Default::default);

/// Serves workspace `workspace`'s egress by `egress` from now on (its start, or a restarted
/// server taking it back).
pub fn serve(workspace: &str, egress: &Egress) {
    let rules = Rules {
        workspace: workspace.to_string(),
        patterns: egress
            .allow
            .iter()
            .map(|p| p.to_ascii_lowercase())
            .collect(),
        hosts: egress.hosts.clone(),
        ask: egress.ask,
        refused: Mutex::default(),
        flushing: Default::default(),
        tunnels: Arc::new(Semaphore::new(MAX_TUNNELS)),
        lookups: Arc::new(Semaphore::new(MAX_LOOKUPS)),
    };
    lock().insert(workspace.to_string(), Arc::new(rules));
}

/// Ends workspace `workspace`'s egress (it stopped); tunnels open now end with their
/// connections.
pub fn end(workspace: &str) {
    lock().remove(workspace);
    super::dns::forget(workspace);
}

/// Workspace `workspace`'s rules, if it has egress through the proxy.
pub fn rules(workspace: &str) -> Option<Arc<Rules>> {
    lock().get(workspace).cloned()
}

fn lock() -> std::sync::MutexGuard<'static, HashMap<String, Arc<Rules>>> {
    RULES.lock().unwrap_or_else(|e| e.into_inner())
}

/// An opened tunnel's connection out, and its place among the workspace's and the server's
/// tunnels.
pub struct Tunnel {
    pub stream: TcpStream,
    pub permit: (OwnedSemaphorePermit, OwnedSemaphorePermit),
}

impl Rules {
    /// Opens a connection to `name:port` if the workspace may reach `name`; a refusal says why
    /// and what to do ([`Error::Forbidden`]), and is reported.
    pub async fn open(self: &Arc<Self>, name: &str, port: u16) -> Result<Tunnel> {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        if !allowed(&self.patterns, &name) && !granted(&self.workspace, &name) {
            self.refuse(&name);
            return Err(Error::Forbidden(format!(
                "{name} is not on this workspace's egress allow-list: add it to the recipe's `egress` (tandem.toml)"
            )));
        }
        let own = self.tunnels.clone().try_acquire_owned().map_err(|_| {
            Error::Unavailable(format!(
                "this workspace has {MAX_TUNNELS} connections out open already: close one"
            ))
        })?;
        let all = TUNNELS.clone().try_acquire_owned().map_err(|_| {
            Error::Unavailable(
                "the server has as many connections out open as it holds: try again later".into(),
            )
        })?;
        let permit = (own, all);
        let addrs = tokio::time::timeout(CONNECT_TIMEOUT, self.resolve(&name, port))
            .await
            .map_err(|_| Error::Unavailable(format!("resolving {name} timed out")))??;
        let mut last = None;
        for addr in addrs {
            match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
                Ok(Ok(stream)) => return Ok(Tunnel { stream, permit }),
                Ok(Err(e)) => last = Some(e.to_string()),
                Err(_) => last = Some("timed out".into()),
            }
        }
        Err(Error::Unavailable(format!(
            "connecting to {name}:{port}: {}",
            last.unwrap_or_else(|| "no address".into())
        )))
    }

    /// Counts a refused name; reports it at once after a quiet period, else when the period
    /// ends.
    fn refuse(self: &Arc<Self>, name: &str) {
        let report = self.tally().note(name, Instant::now());
        if let Some(report) = report {
            announce(&self.workspace, self.ask, report);
            return;
        }
        if self
            .flushing
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            return;
        }
        let rules = self.clone();
        tokio::spawn(async move {
            let at = rules.tally().due_at();
            if let Some(at) = at {
                tokio::time::sleep_until(at.into()).await;
            }
            rules
                .flushing
                .store(false, std::sync::atomic::Ordering::Release);
            let report = rules.tally().due(Instant::now());
            if let Some(report) = report {
                announce(&rules.workspace, rules.ask, report);
            }
        });
    }

    fn tally(&self) -> std::sync::MutexGuard<'_, Tally> {
        self.refused.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `name`'s addresses: from `egress_hosts` as the operator wrote them, else from the
    /// host's resolver without internal ones.
    async fn resolve(&self, name: &str, port: u16) -> Result<Vec<SocketAddr>> {
        if let Some(addrs) = self.hosts.get(name) {
            return Ok(addrs.iter().map(|ip| SocketAddr::new(*ip, port)).collect());
        }
        let busy =
            || Error::Unavailable("too many names are being resolved at once: try again".into());
        let own = self
            .lookups
            .clone()
            .try_acquire_owned()
            .map_err(|_| busy())?;
        let all = LOOKUPS.clone().try_acquire_owned().map_err(|_| busy())?;
        let target = (name.to_string(), port);
        // The permits go with the lookup: one that outlives its caller's timeout still counts.
        let found: Vec<SocketAddr> = tokio::task::spawn_blocking(move || {
            let _permits = (own, all);
            std::net::ToSocketAddrs::to_socket_addrs(&target).map(Iterator::collect)
        })
        .await
        .map_err(|e| Error::Internal(format!("resolving {name}: {e}")))?
        .map_err(|e| Error::Unavailable(format!("cannot resolve {name}: {e}")))?;
        let open: Vec<SocketAddr> = found
            .iter()
            .copied()
            .filter(|a| !is_internal(a.ip()))
            .collect();
        if open.is_empty() && !found.is_empty() {
            return Err(Error::Forbidden(format!(
                "{name} resolves only to internal addresses; an operator who means it lists them under [egress_hosts] in tandem.toml"
            )));
        }
        Ok(open)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_allow_listed_or_granted_names_open_and_refusals_are_reported() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let wid = format!("s-{:016x}", rand::random::<u64>());
        let mut hosts = BTreeMap::new();
        hosts.insert(
            "allowed.test".to_string(),
            vec!["127.0.0.1".parse().unwrap()],
        );
        hosts.insert("later.test".to_string(), vec!["127.0.0.1".parse().unwrap()]);
        serve(
            &wid,
            &Egress {
                allow: vec!["allowed.test".into(), "localhost".into()],
                hosts,
                ask: true,
            },
        );
        let mut reports = super::super::dns::blocked();
        let rules = rules(&wid).unwrap();
        assert!(rules.open("Allowed.Test.", port).await.is_ok());
        let refused = rules.open("later.test", port).await.err().unwrap();
        assert!(
            matches!(&refused, Error::Forbidden(m) if m.contains("later.test") && m.contains("egress")),
            "{refused:?}"
        );
        let report = loop {
            match reports.recv().await {
                Ok(r) if r.workspace == wid => break r,
                // Other tests' reports share the channel.
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(e) => panic!("{e}"),
            }
        };
        assert_eq!(
            (report.names, report.ask),
            (vec!["later.test".to_string()], true)
        );
        super::super::dns::grant(&wid, "later.test");
        assert!(rules.open("later.test", port).await.is_ok(), "granted");
        // A name the resolver maps to an internal address stays shut.
        let internal = rules.open("localhost", port).await.err().unwrap();
        assert!(
            matches!(&internal, Error::Forbidden(m) if m.contains("internal")),
            "{internal:?}"
        );
        // The tunnels are bounded.
        let mut open = vec![];
        while let Ok(t) = rules.open("allowed.test", port).await {
            open.push(t);
        }
        assert_eq!(open.len(), MAX_TUNNELS);
        end(&wid);
        assert!(super::rules(&wid).is_none());
    }
}
