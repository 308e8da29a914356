//! The workspace's name server never hands the workspace an internal address: an allow-listed
//! name whose DNS answer (from a zone anyone may run, or a poisoned resolver) points at a
//! private, loopback, link-local, shared or metadata address gets no address at all, and no
//! firewall change is attempted for it; a mixed answer admits its public addresses only.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use tokio::net::UdpSocket;

use super::dns::Resolver;

/// What the hostile zone answers, every family's internal ranges.
const INTERNAL: &[&str] = &[
    "169.254.169.254",
    "10.1.2.3",
    "172.16.0.1",
    "192.168.1.1",
    "127.0.0.1",
    "100.64.0.1",
    "0.0.0.0",
    "fc00::1",
    "fd12:3456::1",
    "fe80::1",
    "::1",
    "::ffff:169.254.169.254",
    "64:ff9b::a9fe:a9fe",
    "64:ff9b:1::a9fe:a9fe",
    "64:ff9b:1::a00:1",
];

/// A public address the hostile zone mixes in with the internal ones.
const PUBLIC: &str = "93.184.216.34";

/// A name server the test runs in place of the host's: it answers every A and AAAA query with
/// all of `answers` of that family, and counts the queries it got.
async fn hostile_name_server(answers: Vec<&'static str>) -> (SocketAddr, Arc<AtomicUsize>) {
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = sock.local_addr().unwrap();
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = asked.clone();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        while let Ok((n, from)) = sock.recv_from(&mut buf).await {
            let Ok(q) = Message::from_vec(&buf[..n]) else {
                continue;
            };
            counter.fetch_add(1, Ordering::SeqCst);
            let mut res = Message::new();
            res.set_id(q.id())
                .set_message_type(MessageType::Response)
                .set_op_code(OpCode::Query)
                .set_recursion_available(true);
            for query in q.queries() {
                res.add_query(query.clone());
                for ip in answers.iter().map(|a| a.parse::<IpAddr>().unwrap()) {
                    let data = match (ip, query.query_type()) {
                        (IpAddr::V4(a), RecordType::A) => RData::A(A(a)),
                        (IpAddr::V6(a), RecordType::AAAA) => RData::AAAA(AAAA(a)),
                        _ => continue,
                    };
                    res.add_answer(Record::from_rdata(query.name().clone(), 300, data));
                }
            }
            let _ = sock.send_to(&res.to_vec().unwrap(), from).await;
        }
    });
    (addr, asked)
}

#[tokio::test]
async fn an_allowed_name_that_resolves_to_internal_addresses_gets_none() {
    let (upstream, asked) = hostile_name_server(INTERNAL.to_vec()).await;
    // Sets no firewall has: were an address admitted, the change would fail (SERVFAIL).
    let mut resolver = Resolver::new(
        "ws-test".into(),
        vec!["*.attacker.test".into()],
        BTreeMap::new(),
        "tandem_test_no_such_set".into(),
        Some("tandem_test_no_such_set6".into()),
    );
    resolver.upstream = Some(upstream);
    for (i, kind) in [RecordType::A, RecordType::AAAA].into_iter().enumerate() {
        let mut q = Message::new();
        q.set_id(7 + i as u16)
            .set_message_type(MessageType::Query)
            .set_op_code(OpCode::Query)
            .set_recursion_desired(true)
            .add_query(Query::query(
                Name::from_ascii("metadata.attacker.test.").unwrap(),
                kind,
            ));
        let answer = resolver
            .answer(&q.to_vec().unwrap())
            .await
            .expect("an answer");
        let answer = Message::from_vec(&answer).unwrap();
        assert_eq!(
            answer.response_code(),
            ResponseCode::NoError,
            "{kind}: answered without admitting anything"
        );
        assert!(
            answer.answers().is_empty(),
            "{kind}: the workspace got {:?}",
            answer.answers()
        );
        assert_eq!(
            asked.load(Ordering::SeqCst),
            i + 1,
            "the name server was asked"
        );
    }
}

/// An nftables set of the test's own in Tandem's table, deleted when dropped.
struct TestSet(String);

impl TestSet {
    /// A fresh IPv4 set, or `None` where this host cannot have one (not root) and the test
    /// environment does not require workspaces.
    async fn new() -> Option<Self> {
        if !nix::unistd::geteuid().is_root() {
            let required = std::env::var("TANDEM_TEST_REQUIRE_WORKSPACES").is_ok_and(|v| v == "1");
            assert!(!required, "the name server test needs root (nftables)");
            eprintln!("skipped: the name server's firewall test needs root (nftables)");
            return None;
        }
        let name = format!("tdmtest{}", std::process::id());
        super::network::nft(&format!(
            "add table inet tandem\nadd set inet tandem {name} {{ type ipv4_addr ; flags timeout ; }}\n"
        ))
        .await
        .expect("a test set");
        Some(Self(name))
    }

    /// The addresses in the set.
    fn addresses(&self) -> Vec<IpAddr> {
        let out = std::process::Command::new("nft")
            .args(["-j", "list", "set", "inet", "tandem", &self.0])
            .output()
            .expect("nft runs");
        assert!(out.status.success(), "{out:?}");
        let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        listed["nftables"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|o| o["set"]["elem"].as_array())
            .flatten()
            .map(|e| {
                let val = e["elem"]["val"].as_str().or(e.as_str()).unwrap();
                val.parse().unwrap()
            })
            .collect()
    }
}

impl Drop for TestSet {
    fn drop(&mut self) {
        let _ = std::process::Command::new("nft")
            .args(["delete", "set", "inet", "tandem", &self.0])
            .status();
    }
}

#[tokio::test]
async fn a_mixed_answer_admits_and_answers_its_public_address_only() {
    let Some(set) = TestSet::new().await else {
        return;
    };
    let mut answers = INTERNAL.to_vec();
    answers.insert(INTERNAL.len() / 2, PUBLIC);
    let (upstream, _) = hostile_name_server(answers).await;
    let mut resolver = Resolver::new(
        "ws-test".into(),
        vec!["*.attacker.test".into()],
        BTreeMap::new(),
        set.0.clone(),
        None,
    );
    resolver.upstream = Some(upstream);
    let mut q = Message::new();
    q.set_id(9)
        .set_message_type(MessageType::Query)
        .set_op_code(OpCode::Query)
        .set_recursion_desired(true)
        .add_query(Query::query(
            Name::from_ascii("mixed.attacker.test.").unwrap(),
            RecordType::A,
        ));
    let answer = resolver
        .answer(&q.to_vec().unwrap())
        .await
        .expect("an answer");
    let answer = Message::from_vec(&answer).unwrap();
    assert_eq!(answer.response_code(), ResponseCode::NoError);
    let public: IpAddr = PUBLIC.parse().unwrap();
    let answered: Vec<IpAddr> = answer
        .answers()
        .iter()
        .filter_map(|r| match r.data() {
            RData::A(a) => Some(IpAddr::V4(a.0)),
            _ => None,
        })
        .collect();
    assert_eq!(
        answered,
        vec![public],
        "the workspace is told the public address only"
    );
    assert_eq!(
        set.addresses(),
        vec![public],
        "the firewall admits the public address only"
    );
}
