//! The name server of a workspace with an egress allow-list: the server answers the
//! workspace's DNS queries itself (UDP, on the host end of its veth), so egress is an allow-list
//! of *names*, not of the addresses those names had at start. A query for an allow-listed name
//! (exact, or `*.example.com` for its subdomains) is answered from `egress_hosts` or the host's
//! own name server; every address in the answer (A, and AAAA where the workspace's link has
//! IPv6) that is not internal is admitted to the workspace's nftables set of its family for the
//! answer's TTL (bounded), so CDNs and changing addresses work.
//! Any other name gets NXDOMAIN, and the attempt is reported (an `egress_blocked` event): the
//! first after a quiet period at once, the rest summed up once per period (a count and the first
//! names), so a workspace looking up a million names makes one event a minute, in constant
//! memory and constant work per lookup.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA};
use hickory_proto::rr::{RData, Record, RecordType};
use tandem_protocol::limits::{EGRESS_REPORT_PERIOD_SECS, MAX_EGRESS_REPORT_NAMES};
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
/// Refused lookups are reported at most once per this.
const REPORT_EVERY: Duration = Duration::from_secs(EGRESS_REPORT_PERIOD_SECS);
/// Largest DNS message handled (EDNS sizes included).
const MAX_MESSAGE: usize = 4096;

/// Refused lookups of one workspace (its id) since its last report: how many, and the first
/// distinct names (at most [`MAX_EGRESS_REPORT_NAMES`]).
#[derive(Clone, Debug)]
pub struct Blocked {
    pub workspace: String,
    pub lookups: u64,
    pub names: Vec<String>,
    /// The workspace's recipe says to ask a person about a refused name.
    pub ask: bool,
}

/// The refused lookups of one workspace not yet reported. Constant work per lookup and constant
/// memory: a count, at most [`MAX_EGRESS_REPORT_NAMES`] names, and when the last report went.
#[derive(Debug, Default)]
pub(super) struct Tally {
    /// When the last report went (none yet: the next refusal is reported at once).
    last: Option<Instant>,
    lookups: u64,
    names: Vec<String>,
}

impl Tally {
    /// Counts one refused lookup of `name`; the report to send now, if one is due: the first
    /// refusal after a quiet period goes at once, the others wait for [`Tally::due`].
    pub(super) fn note(&mut self, name: &str, now: Instant) -> Option<(u64, Vec<String>)> {
        self.lookups = self.lookups.saturating_add(1);
        // At most MAX_EGRESS_REPORT_NAMES compared: constant work.
        if self.names.len() < MAX_EGRESS_REPORT_NAMES && !self.names.iter().any(|n| n == name) {
            self.names.push(name.chars().take(253).collect());
        }
        let quiet = self
            .last
            .is_none_or(|t| now.saturating_duration_since(t) >= REPORT_EVERY);
        quiet.then(|| self.take(now))
    }

    /// When the refusals counted since the last report are to be reported, if any are.
    pub(super) fn due_at(&self) -> Option<Instant> {
        match self.last {
            Some(t) if self.lookups > 0 => Some(t + REPORT_EVERY),
            _ => None,
        }
    }

    /// The report of the refusals counted so far, if it is due at `now`.
    pub(super) fn due(&mut self, now: Instant) -> Option<(u64, Vec<String>)> {
        self.due_at()
            .is_some_and(|at| at <= now)
            .then(|| self.take(now))
    }

    fn take(&mut self, now: Instant) -> (u64, Vec<String>) {
        self.last = Some(now);
        (
            std::mem::take(&mut self.lookups),
            std::mem::take(&mut self.names),
        )
    }
}

/// Where refused lookups are announced (the scheduler records them as events).
pub fn blocked() -> broadcast::Receiver<Blocked> {
    BLOCKED.subscribe()
}

static BLOCKED: std::sync::LazyLock<broadcast::Sender<Blocked>> =
    std::sync::LazyLock::new(|| broadcast::channel(256).0);

/// Names a person allowed for one workspace (an approved egress request), by workspace id.
static GRANTED: std::sync::LazyLock<Mutex<std::collections::HashMap<String, Vec<String>>>> =
    std::sync::LazyLock::new(Default::default);

/// Most names one workspace may be granted.
pub const MAX_GRANTED_NAMES: usize = 256;

/// Lets workspace `workspace` resolve (and so reach) `name` from now on.
pub fn grant(workspace: &str, name: &str) {
    let mut all = GRANTED.lock().unwrap_or_else(|e| e.into_inner());
    let names = all.entry(workspace.to_string()).or_default();
    let name = name.to_ascii_lowercase();
    if names.len() < MAX_GRANTED_NAMES && !names.contains(&name) {
        names.push(name);
    }
}

/// Forgets a stopped workspace's grants.
pub fn forget(workspace: &str) {
    GRANTED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(workspace);
}

/// Whether a person allowed `name` for workspace `workspace`.
pub(super) fn granted(workspace: &str, name: &str) -> bool {
    GRANTED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(workspace)
        .is_some_and(|n| n.iter().any(|g| g == name))
}

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
    /// [`Blocked::ask`].
    pub ask: bool,
    /// Refused lookups not yet reported (held for a few instructions at a time, never across
    /// an await).
    refused: Mutex<Tally>,
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
            ask: false,
            refused: Mutex::new(Tally::default()),
        }
    }

    /// Reports refused names as ones to ask a person about.
    pub fn asking(mut self, ask: bool) -> Self {
        self.ask = ask;
        self
    }

    /// Serves queries on `socket` until the task is aborted, and reports the refused lookups
    /// summed up when their period ends.
    pub async fn serve(self, socket: UdpSocket) {
        let mut buf = vec![0u8; MAX_MESSAGE];
        loop {
            let due = self.tally().due_at();
            let received = match due {
                // `recv_from` is cancel-safe: a query that arrives as the period ends waits.
                Some(at) => tokio::select! {
                    r = socket.recv_from(&mut buf) => Some(r),
                    () = tokio::time::sleep_until(at.into()) => None,
                },
                None => Some(socket.recv_from(&mut buf).await),
            };
            let Some(received) = received else {
                let report = self.tally().due(Instant::now());
                if let Some(report) = report {
                    self.send(report);
                }
                continue;
            };
            let Ok((n, from)) = received else {
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
        if !allowed(&self.patterns, &name) && !granted(&self.workspace, &name) {
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

    fn tally(&self) -> std::sync::MutexGuard<'_, Tally> {
        self.refused.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts a refused lookup of `name` (and reports it at once after a quiet period).
    fn report(&self, name: &str) {
        let report = self.tally().note(name, Instant::now());
        if let Some(report) = report {
            self.send(report);
        }
    }

    fn send(&self, report: (u64, Vec<String>)) {
        announce(&self.workspace, self.ask, report);
    }
}

/// Announces refused names of workspace `workspace` ([`blocked`]).
pub(super) fn announce(workspace: &str, ask: bool, (lookups, names): (u64, Vec<String>)) {
    let _ = BLOCKED.send(Blocked {
        workspace: workspace.to_string(),
        lookups,
        names,
        ask,
    });
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
    use super::*;

    /// A flood of distinct refused names makes one report at once and one per period, each
    /// with the count and the first names only; nothing grows with the flood.
    #[test]
    fn refused_lookups_are_summed_up_once_a_period_in_constant_memory() {
        let t0 = Instant::now();
        let mut tally = Tally::default();
        assert_eq!(
            tally.note("first.test", t0),
            Some((1, vec!["first.test".to_string()])),
            "the first refusal after a quiet period is reported at once"
        );
        assert_eq!(tally.due_at(), None, "nothing waits");
        let mut reports = Vec::new();
        for i in 0..100_000u64 {
            // 100,000 distinct names over 90 seconds.
            let now = t0 + Duration::from_micros(1 + i * 900);
            if let Some(r) = tally.due(now) {
                reports.push(r);
            }
            if let Some(r) = tally.note(&format!("n{i}.flood.test"), now) {
                reports.push(r);
            }
            assert!(tally.names.len() <= MAX_EGRESS_REPORT_NAMES);
            assert!(tally.names.capacity() <= 2 * MAX_EGRESS_REPORT_NAMES);
        }
        // The period ended at 60 s: one summary then; the rest waits for the next one.
        assert_eq!(
            reports.len(),
            1,
            "one summary per period: {:?}",
            reports.len()
        );
        let (lookups, names) = &reports[0];
        assert_eq!(names.len(), MAX_EGRESS_REPORT_NAMES);
        assert_eq!(names[0], "n0.flood.test", "the first names are kept");
        let at = tally.due_at().expect("the rest is due");
        // Taken at the lookup after the ones it counts.
        assert_eq!(
            at,
            t0 + Duration::from_micros(1 + lookups * 900) + REPORT_EVERY
        );
        let (rest, _) = tally.due(at).expect("due at the period's end");
        assert_eq!(
            lookups + rest,
            100_000,
            "every refused lookup is counted once"
        );
        assert_eq!(tally.due_at(), None);
        // The same name again and again is one name, many lookups.
        let later = at + Duration::from_secs(1);
        assert_eq!(tally.note("again.test", later), None);
        assert_eq!(tally.note("again.test", later), None);
        assert_eq!(
            tally.due(later + REPORT_EVERY),
            Some((2, vec!["again.test".to_string()]))
        );
        // After a quiet period, at once again.
        let quiet = later + 3 * REPORT_EVERY;
        assert_eq!(
            tally.note("x.test", quiet),
            Some((1, vec!["x.test".to_string()]))
        );
    }

    /// The name server answers a refused name NXDOMAIN and counts it, however many there are.
    #[tokio::test]
    async fn a_refused_name_gets_nxdomain_and_is_counted() {
        let r = Resolver::new(
            "w".into(),
            vec!["*.allowed.test".into()],
            BTreeMap::new(),
            "a0".into(),
            None,
        );
        for i in 0..1000 {
            let mut q = Message::new();
            q.set_id(i)
                .set_message_type(MessageType::Query)
                .set_op_code(OpCode::Query)
                .add_query(hickory_proto::op::Query::query(
                    hickory_proto::rr::Name::from_ascii(format!("n{i}.flood.test.")).unwrap(),
                    RecordType::A,
                ));
            let a = Message::from_vec(&r.answer(&q.to_vec().unwrap()).await.unwrap()).unwrap();
            assert_eq!(a.response_code(), ResponseCode::NXDomain);
        }
        let tally = r.tally();
        assert_eq!(
            tally.lookups, 999,
            "the first went at once, the rest are counted"
        );
        assert_eq!(tally.names.len(), MAX_EGRESS_REPORT_NAMES);
    }

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
