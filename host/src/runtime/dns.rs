//! The name server of a workspace with an egress allow-list: the server answers the
//! workspace's DNS queries itself (UDP, on the host end of its veth), so egress is an allow-list
//! of *names*, not of the addresses those names had at start. A query for an allow-listed name
//! (exact, or `*.example.com` for its subdomains) is answered from `egress_hosts` or the host's
//! own name server; every address in the answer (A, and AAAA where the workspace's link has
//! IPv6) that is not internal is admitted to the workspace's nftables set of its family for the
//! answer's TTL (bounded), so CDNs and changing addresses work.
//! Any other name gets NXDOMAIN, and the attempt is reported (a `egress_blocked` event).

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA};
use hickory_proto::rr::{RData, Record, RecordType};
use tokio::net::UdpSocket;
use tokio::sync::broadcast;

use super::network::is_internal;

/// Shortest and longest time an answered address stays admitted.
pub const MIN_TTL: u32 = 30;
pub const MAX_TTL: u32 = 3600;
/// TTL of answers from `egress_hosts`.
pub const STATIC_TTL: u32 = 300;
/// How long the host's name server may take.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(3);
/// A name refused again within this is not reported again.
const REPORT_EVERY: Duration = Duration::from_secs(60);
/// Largest DNS message handled (EDNS sizes included).
const MAX_MESSAGE: usize = 4096;

/// A refused lookup: the workspace (its id) and the name.
#[derive(Clone, Debug)]
pub struct Blocked {
    pub workspace: String,
    pub name: String,
}

/// Where refused lookups are announced (the scheduler records them as events).
pub fn blocked() -> broadcast::Receiver<Blocked> {
    BLOCKED.subscribe()
}

static BLOCKED: std::sync::LazyLock<broadcast::Sender<Blocked>> =
    std::sync::LazyLock::new(|| broadcast::channel(256).0);

/// True when `name` (lower case, no trailing dot) matches an allow-list `pattern`: the name
/// itself, or any subdomain of `x` for `*.x` (not `x` itself).
pub fn allowed(patterns: &[String], name: &str) -> bool {
    patterns.iter().any(|p| match p.strip_prefix("*.") {
        Some(base) => name.len() > base.len() + 1 && name.ends_with(&format!(".{base}")),
        None => p == name,
    })
}

/// What one workspace's name server needs.
pub struct Resolver {
    pub workspace: String,
    pub patterns: Vec<String>,
    pub hosts: BTreeMap<String, Vec<IpAddr>>,
    /// The nftables set the answered IPv4 addresses join (`a<index>` in `inet tandem`).
    pub set: String,
    /// The set answered IPv6 addresses join (`a6<index>`), when the link has IPv6.
    pub set6: Option<String>,
    pub upstream: Option<SocketAddr>,
    reported: Mutex<HashMap<String, Instant>>,
}

impl Resolver {
    pub fn new(
        workspace: String,
        patterns: Vec<String>,
        hosts: BTreeMap<String, Vec<IpAddr>>,
        set: String,
        set6: Option<String>,
    ) -> Self {
        Self {
            workspace,
            patterns,
            hosts,
            set,
            set6,
            upstream: host_name_server(),
            reported: Mutex::new(HashMap::new()),
        }
    }

    /// Serves queries on `socket` until the task is aborted.
    pub async fn serve(self, socket: UdpSocket) {
        let mut buf = vec![0u8; MAX_MESSAGE];
        loop {
            let Ok((n, from)) = socket.recv_from(&mut buf).await else {
                continue;
            };
            let answer = self.answer(&buf[..n]).await;
            if let Some(bytes) = answer {
                let _ = socket.send_to(&bytes, from).await;
            }
        }
    }

    /// The answer to one query message (none for what is not a query at all).
    pub async fn answer(&self, query: &[u8]) -> Option<Vec<u8>> {
        let q = Message::from_vec(query).ok()?;
        if q.message_type() != MessageType::Query {
            return None;
        }
        let mut res = Message::new();
        res.set_id(q.id())
            .set_message_type(MessageType::Response)
            .set_op_code(q.op_code())
            .set_recursion_desired(q.recursion_desired())
            .set_recursion_available(true);
        for query in q.queries() {
            res.add_query(query.clone());
        }
        let [query] = q.queries() else {
            res.set_response_code(ResponseCode::FormErr);
            return res.to_vec().ok();
        };
        if q.op_code() != OpCode::Query {
            res.set_response_code(ResponseCode::NotImp);
            return res.to_vec().ok();
        }
        let name = query.name().to_lowercase().to_ascii();
        let name = name.trim_end_matches('.').to_string();
        if !allowed(&self.patterns, &name) {
            self.report(&name);
            res.set_response_code(ResponseCode::NXDomain);
            return res.to_vec().ok();
        }
        // A, and AAAA where the link has IPv6; other record types get an empty answer.
        let v6 = match query.query_type() {
            RecordType::A => false,
            RecordType::AAAA if self.set6.is_some() => true,
            _ => return res.to_vec().ok(),
        };
        let family = |ip: &IpAddr| ip.is_ipv6() == v6;
        let found: Vec<(IpAddr, u32)> = match self.hosts.get(&name) {
            Some(addrs) => addrs
                .iter()
                .filter(|a| family(a))
                .map(|a| (*a, STATIC_TTL))
                .collect(),
            None => match self.upstream(query).await {
                Some(a) => a
                    .into_iter()
                    // The resolver (or whoever controls a zone) must not open internal
                    // addresses; only `egress_hosts` names those.
                    .filter(|(ip, _)| family(ip) && !is_internal(*ip))
                    .collect(),
                None => {
                    res.set_response_code(ResponseCode::ServFail);
                    return res.to_vec().ok();
                }
            },
        };
        let found: Vec<(IpAddr, u32)> = found
            .into_iter()
            .map(|(ip, ttl)| (ip, ttl.clamp(MIN_TTL, MAX_TTL)))
            .collect();
        let set = if v6 {
            self.set6.as_deref()
        } else {
            Some(self.set.as_str())
        };
        if admit(set.unwrap_or_default(), &found).await.is_err() {
            res.set_response_code(ResponseCode::ServFail);
            return res.to_vec().ok();
        }
        for (ip, ttl) in found {
            let data = match ip {
                IpAddr::V4(a) => RData::A(A(a)),
                IpAddr::V6(a) => RData::AAAA(AAAA(a)),
            };
            res.add_answer(Record::from_rdata(query.name().clone(), ttl, data));
        }
        res.to_vec().ok()
    }

    /// Asks the host's name server for `query`'s A or AAAA records: `(address, ttl)`.
    async fn upstream(&self, query: &hickory_proto::op::Query) -> Option<Vec<(IpAddr, u32)>> {
        let upstream = self.upstream?;
        let mut m = Message::new();
        m.set_id(rand::random())
            .set_message_type(MessageType::Query)
            .set_op_code(OpCode::Query)
            .set_recursion_desired(true)
            .add_query(query.clone());
        let bytes = m.to_vec().ok()?;
        let bind: SocketAddr = if upstream.is_ipv4() {
            "0.0.0.0:0".parse().ok()?
        } else {
            "[::]:0".parse().ok()?
        };
        let sock = UdpSocket::bind(bind).await.ok()?;
        sock.send_to(&bytes, upstream).await.ok()?;
        let mut buf = vec![0u8; MAX_MESSAGE];
        let n = tokio::time::timeout(UPSTREAM_TIMEOUT, async {
            loop {
                let (n, from) = sock.recv_from(&mut buf).await.ok()?;
                if from == upstream {
                    return Some(n);
                }
            }
        })
        .await
        .ok()??;
        let res = Message::from_vec(&buf[..n]).ok()?;
        if res.id() != m.id() {
            return None;
        }
        Some(
            res.answers()
                .iter()
                .filter_map(|r| match r.data() {
                    RData::A(a) => Some((IpAddr::V4(a.0), r.ttl())),
                    RData::AAAA(a) => Some((IpAddr::V6(a.0), r.ttl())),
                    _ => None,
                })
                .collect(),
        )
    }

    fn report(&self, name: &str) {
        let mut seen = self.reported.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if seen
            .get(name)
            .is_some_and(|t| now.duration_since(*t) < REPORT_EVERY)
        {
            return;
        }
        if seen.len() > 1024 {
            seen.retain(|_, t| now.duration_since(*t) < REPORT_EVERY);
        }
        seen.insert(name.to_string(), now);
        let _ = BLOCKED.send(Blocked {
            workspace: self.workspace.clone(),
            name: name.chars().take(253).collect(),
        });
    }
}

/// Adds `addrs` to the nftables set, each for its TTL.
async fn admit(set: &str, addrs: &[(IpAddr, u32)]) -> crate::Result<()> {
    if addrs.is_empty() {
        return Ok(());
    }
    let elements: Vec<String> = addrs
        .iter()
        .map(|(ip, ttl)| format!("{ip} timeout {ttl}s"))
        .collect();
    let script = format!(
        "add element inet tandem {set} {{ {} }}\n",
        elements.join(", ")
    );
    super::network::nft(&script).await
}

/// The host's first name server (`/etc/resolv.conf`), on port 53.
fn host_name_server() -> Option<SocketAddr> {
    let conf = std::fs::read_to_string("/etc/resolv.conf").ok()?;
    conf.lines()
        .filter_map(|l| l.trim().strip_prefix("nameserver"))
        .filter_map(|a| a.trim().parse::<IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, 53))
        .next()
}

#[cfg(test)]
mod tests {
    use super::allowed;

    #[test]
    fn wildcards_match_subdomains_only() {
        let p = vec!["*.npmjs.org".to_string(), "github.com".to_string()];
        assert!(allowed(&p, "registry.npmjs.org"));
        assert!(allowed(&p, "a.b.npmjs.org"));
        assert!(!allowed(&p, "npmjs.org"));
        assert!(!allowed(&p, "evilnpmjs.org"));
        assert!(!allowed(&p, "npmjs.org.evil.com"));
        assert!(allowed(&p, "github.com"));
        assert!(!allowed(&p, "api.github.com"));
    }
}
