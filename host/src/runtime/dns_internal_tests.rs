//! The workspace's name server never hands the workspace an internal address: an allow-listed
//! name whose DNS answer (from a zone anyone may run, or a poisoned resolver) points at a
//! private, loopback, link-local, shared or metadata address gets no address at all, and no
//! firewall change is attempted for it.

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
];

/// A name server the test runs in place of the host's: it answers every A and AAAA query with
/// all of [`INTERNAL`] of that family, and counts the queries it got.
async fn hostile_name_server() -> (SocketAddr, Arc<AtomicUsize>) {
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
                for ip in INTERNAL.iter().map(|a| a.parse::<IpAddr>().unwrap()) {
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
    let (upstream, asked) = hostile_name_server().await;
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
