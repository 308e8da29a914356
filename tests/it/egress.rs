//! Egress allow-lists on real network namespaces: a workspace reaches the allow-listed name and
//! nothing else, not even the host. The "outside" is a network namespace this test makes, with a
//! web server on two addresses of the 198.19.0.0/16 test range.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use tandem_protocol::*;

use crate::harness::TestServer;
use crate::snapshots::git;

fn ip(args: &[&str]) {
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .expect("ip runs");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A namespace standing in for the internet, linked to the host by a veth pair.
pub(crate) struct Outside {
    ns: String,
    link: String,
    pub(crate) allowed: Ipv4Addr,
    pub(crate) blocked: Ipv4Addr,
    allowed6: Ipv6Addr,
    blocked6: Ipv6Addr,
    _web: tokio::process::Child,
    _root: tempfile::TempDir,
}

impl Drop for Outside {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["link", "del", &self.link])
            .status();
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.ns])
            .status();
    }
}

pub(crate) async fn outside() -> Outside {
    // One number per outside in this process (two tests at once drew the same random one);
    // the offset keeps a later run clear of what a killed one left.
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let k = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + std::process::id();
    let n: u8 = (k % 200) as u8 + 20;
    let (ns, link) = (format!("tdmtest{n}"), format!("tdmt{n}"));
    let (host, allowed, blocked) = (
        Ipv4Addr::new(198, 19, n, 1),
        Ipv4Addr::new(198, 19, n, 2),
        Ipv4Addr::new(198, 19, n, 3),
    );
    let _ = std::process::Command::new("ip")
        .args(["netns", "del", &ns])
        .status();
    ip(&["netns", "add", &ns]);
    ip(&[
        "link", "add", &link, "type", "veth", "peer", "name", "eth0", "netns", &ns,
    ]);
    ip(&["addr", "add", &format!("{host}/29"), "dev", &link]);
    ip(&["link", "set", &link, "up"]);
    for a in [allowed, blocked] {
        ip(&["-n", &ns, "addr", "add", &format!("{a}/29"), "dev", "eth0"]);
    }
    // IPv6 too: the outside's addresses in a unique-local /64 of the test's own.
    let v6 = |h: u16| Ipv6Addr::new(0xfd00, 0x7464, n.into(), 0, 0, 0, 0, h);
    let (host6, allowed6, blocked6) = (v6(1), v6(2), v6(3));
    ip(&[
        "-6",
        "addr",
        "add",
        &format!("{host6}/64"),
        "dev",
        &link,
        "nodad",
    ]);
    for a in [allowed6, blocked6] {
        ip(&[
            "-6",
            "-n",
            &ns,
            "addr",
            "add",
            &format!("{a}/64"),
            "dev",
            "eth0",
            "nodad",
        ]);
    }
    ip(&["-n", &ns, "link", "set", "eth0", "up"]);
    ip(&["-n", &ns, "link", "set", "lo", "up"]);
    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("index.html"), "hello from outside\n").unwrap();
    let web = tokio::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns,
            "python3",
            "-m",
            "http.server",
            "8080",
            "--bind",
            "::",
            "--directory",
        ])
        .arg(root.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // Ready when it accepts (from the host, through the link).
    let deadline = Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect((allowed, 8080))
        .await
        .is_err()
    {
        assert!(
            Instant::now() < deadline,
            "the outside web server never came up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    while tokio::net::TcpStream::connect((allowed6, 8080))
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "the outside is not up on IPv6");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Outside {
        ns,
        link,
        allowed,
        blocked,
        allowed6,
        blocked6,
        _web: web,
        _root: root,
    }
}

/// Runs `command` with bash (for `/dev/tcp`).
async fn exec(s: &TestServer, id: SessionId, command: &str) -> ExecResult {
    let quoted = format!("bash -c '{}'", command.replace('\'', "'\\''"));
    s.post(
        &format!("/api/sessions/{id}/exec"),
        json!({ "command": quoted, "timeout_secs": 30 }),
    )
    .send()
    .await
    .parse()
}

#[tokio::test]
async fn a_workspace_reaches_only_its_allow_listed_names() {
    if crate::workspaces::image().await.is_none() {
        return;
    }
    let out = outside().await;
    let (allowed, blocked) = (out.allowed, out.blocked);
    let (allowed6, blocked6) = (out.allowed6, out.blocked6);
    let s = crate::workspaces::server(|c| {
        c.egress_hosts.insert(
            "allowed.test".into(),
            vec![IpAddr::V4(allowed), IpAddr::V6(allowed6)],
        );
        c.egress_hosts.insert(
            "blocked.test".into(),
            vec![IpAddr::V4(blocked), IpAddr::V6(blocked6)],
        );
    })
    .await
    .unwrap();
    let src = tempfile::tempdir().unwrap();
    git(src.path(), &["init", "-q"]);
    std::fs::write(
        src.path().join("tandem.toml"),
        "[workspace]\negress = [\"allowed.test\"]\n",
    )
    .unwrap();
    git(src.path(), &["add", "-A"]);
    git(src.path(), &["commit", "-qm", "egress"]);
    let repo = s
        .post(
            "/api/repos",
            json!({ "name": "acme/net", "url": src.path().to_str().unwrap() }),
        )
        .send()
        .await
        .json()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let created: SessionDetail = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo, "agent": { "kind": "none" } }),
        )
        .send()
        .await
        .parse();
    let id = created.session.id;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let d: SessionDetail = s.get(&format!("/api/sessions/{id}")).send().await.parse();
        match d.session.state {
            SessionState::Ready => break,
            SessionState::Failed => panic!(
                "{:#?}",
                s.get(&format!("/api/sessions/{id}/events"))
                    .send()
                    .await
                    .json()
            ),
            _ => {}
        }
        assert!(Instant::now() < deadline, "session never became ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let get = "exec 3<>/dev/tcp/allowed.test/8080 && printf 'GET / HTTP/1.0\\r\\nHost: allowed.test\\r\\n\\r\\n' >&3 && cat <&3";
    let r = exec(&s, id, get).await;
    assert!(
        r.stdout.contains("hello from outside"),
        "the allow-listed name is reachable: {r:?}"
    );
    let r = exec(
        &s,
        id,
        &format!(
            "timeout 2 bash -c 'exec 3<>/dev/tcp/{blocked}/8080' && echo OPEN || echo BLOCKED"
        ),
    )
    .await;
    assert_eq!(
        r.stdout.trim(),
        "BLOCKED",
        "another address of the same host is not: {r:?}"
    );
    // The same over IPv6: the name's address opens, the host's other address does not.
    let r = exec(
        &s,
        id,
        &format!(
            "exec 3<>/dev/tcp/{allowed6}/8080 && printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3 && cat <&3"
        ),
    )
    .await;
    assert!(
        r.stdout.contains("hello from outside"),
        "the allow-listed name's IPv6 address is reachable: {r:?}"
    );
    let r = exec(
        &s,
        id,
        &format!(
            "timeout 2 bash -c 'exec 3<>/dev/tcp/{blocked6}/8080' && echo OPEN || echo BLOCKED"
        ),
    )
    .await;
    assert_eq!(r.stdout.trim(), "BLOCKED", "over IPv6 neither: {r:?}");
    let r = exec(&s, id, "getent hosts blocked.test || echo UNRESOLVED").await;
    assert_eq!(
        r.stdout.trim(),
        "UNRESOLVED",
        "names off the list do not even resolve"
    );
    let wid = tandem_store::sessions::workspace(&s.state.db, id)
        .await
        .unwrap()
        .unwrap()
        .workspace_id
        .unwrap();
    let net: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            s.dir
                .path()
                .join("data/workspaces")
                .join(&wid)
                .join("net.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let host_ip = net["host_ip"].as_str().unwrap().to_string();
    let port = s.url.rsplit(':').next().unwrap();
    let r = exec(
        &s,
        id,
        &format!(
            "timeout 2 bash -c 'exec 3<>/dev/tcp/{host_ip}/{port}' && echo OPEN || echo BLOCKED"
        ),
    )
    .await;
    assert_eq!(
        r.stdout.trim(),
        "BLOCKED",
        "the host's own services are out of reach: {r:?}"
    );

    let stopped = s
        .req(
            axum::http::Method::POST,
            &format!("/api/sessions/{id}/stop"),
        )
        .bearer(&s.admin_token)
        .send()
        .await;
    assert_eq!(stopped.status, axum::http::StatusCode::OK);
    let ns = format!("tdm-{wid}");
    assert!(
        !Path::new("/var/run/netns").join(&ns).exists(),
        "the network namespace is gone"
    );
    let host_if = net["host_if"].as_str().unwrap();
    assert!(
        !Path::new("/sys/class/net").join(host_if).exists(),
        "the veth is gone"
    );
    let rules = std::process::Command::new("nft")
        .args(["list", "ruleset"])
        .output()
        .unwrap();
    let tag = format!("\"tdm-{}\"", net["index"]);
    assert!(
        !String::from_utf8_lossy(&rules.stdout).contains(&tag),
        "the firewall rules are gone"
    );
}

/// Egress by name: a wildcard on the allow-list is answered by the server's name server for the
/// workspace, which admits the answered address (for its TTL); a name off the list gets no
/// answer, and the refused lookup is an event of the session.
#[tokio::test]
async fn a_wildcard_name_resolves_through_the_servers_name_server_and_a_refused_lookup_is_an_event()
{
    if crate::workspaces::image().await.is_none() {
        return;
    }
    let out = outside().await;
    let (allowed, blocked) = (out.allowed, out.blocked);
    let s = crate::workspaces::server(|c| {
        c.egress_hosts
            .insert("api.allowed.test".into(), vec![IpAddr::V4(allowed)]);
        c.egress_hosts
            .insert("other.blocked.test".into(), vec![IpAddr::V4(blocked)]);
    })
    .await
    .unwrap();
    let src = tempfile::tempdir().unwrap();
    git(src.path(), &["init", "-q"]);
    std::fs::write(
        src.path().join("tandem.toml"),
        "[workspace]\negress = [\"*.allowed.test\"]\n",
    )
    .unwrap();
    git(src.path(), &["add", "-A"]);
    git(src.path(), &["commit", "-qm", "egress"]);
    let repo = crate::session_workspaces::add_repo(&s, "acme/dns", src.path()).await;
    let d = crate::session_workspaces::start_session(&s, &repo).await;
    assert_eq!(d.session.state, SessionState::Ready, "{d:?}");
    let id = d.session.id;
    // Not in /etc/hosts (a wildcard is not resolved ahead): the lookup goes to the name server.
    let hosts = exec(&s, id, "cat /etc/hosts").await;
    assert!(!hosts.stdout.contains("api.allowed.test"), "{hosts:?}");
    let get = "exec 3<>/dev/tcp/api.allowed.test/8080 && printf 'GET / HTTP/1.0\\r\\nHost: api.allowed.test\\r\\n\\r\\n' >&3 && cat <&3";
    let r = exec(&s, id, get).await;
    assert!(
        r.stdout.contains("hello from outside"),
        "a subdomain of the wildcard resolves and is reachable: {r:?}"
    );
    let r = exec(&s, id, "getent hosts other.blocked.test || echo UNRESOLVED").await;
    assert_eq!(r.stdout.trim(), "UNRESOLVED", "{r:?}");
    let r = exec(
        &s,
        id,
        &format!(
            "timeout 2 bash -c 'exec 3<>/dev/tcp/{blocked}/8080' && echo OPEN || echo BLOCKED"
        ),
    )
    .await;
    assert_eq!(r.stdout.trim(), "BLOCKED", "{r:?}");
    let evs = crate::agent_runs::wait_events(&s, id, |e| {
        e.iter().any(|e| {
            matches!(&e.kind, EventKind::EgressBlocked { name, .. } if name == "other.blocked.test")
        })
    })
    .await;
    assert!(
        !evs.iter().any(
            |e| matches!(&e.kind, EventKind::EgressBlocked { name, others, .. } if name.contains("allowed") || others.iter().any(|n| n.contains("allowed")))
        ),
        "an allowed name is not reported"
    );
}

/// `egress_ask`: a name off the allow-list becomes an approval in the session's timeline;
/// approved by a driver, that session's workspace resolves and reaches it — another session of
/// the same repo still does not.
#[tokio::test]
async fn a_name_off_the_allow_list_is_asked_about_and_once_approved_reachable_for_that_session_only()
 {
    if crate::workspaces::image().await.is_none() {
        return;
    }
    let out = outside().await;
    let (allowed, blocked) = (out.allowed, out.blocked);
    let s = crate::workspaces::server(|c| {
        c.egress_hosts
            .insert("allowed.test".into(), vec![IpAddr::V4(allowed)]);
        c.egress_hosts
            .insert("api.example.test".into(), vec![IpAddr::V4(blocked)]);
    })
    .await
    .unwrap();
    let src = tempfile::tempdir().unwrap();
    git(src.path(), &["init", "-q"]);
    std::fs::write(
        src.path().join("tandem.toml"),
        "[workspace]\negress = [\"allowed.test\"]\negress_ask = true\n",
    )
    .unwrap();
    git(src.path(), &["add", "-A"]);
    git(src.path(), &["commit", "-qm", "egress"]);
    let repo = crate::session_workspaces::add_repo(&s, "acme/ask", src.path()).await;
    let a = crate::session_workspaces::start_session(&s, &repo)
        .await
        .session
        .id;
    let b = crate::session_workspaces::start_session(&s, &repo)
        .await
        .session
        .id;
    let get = "exec 3<>/dev/tcp/api.example.test/8080 && printf 'GET / HTTP/1.0\\r\\nHost: api.example.test\\r\\n\\r\\n' >&3 && cat <&3";

    let r = exec(&s, a, "getent hosts api.example.test || echo UNRESOLVED").await;
    assert_eq!(r.stdout.trim(), "UNRESOLVED", "{r:?}");
    let evs = crate::agent_runs::wait_events(&s, a, |e| {
        e.iter()
            .any(|e| matches!(&e.kind, EventKind::ApprovalAsked { .. }))
    })
    .await;
    let card = evs
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::ApprovalAsked { approval } => Some(approval.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        card.subject,
        approval::ApprovalSubject::Egress {
            host: "api.example.test".into()
        }
    );
    let r = exec(&s, a, get).await;
    assert!(
        !r.stdout.contains("hello from outside"),
        "not before the answer: {r:?}"
    );

    let answered = s
        .post(
            &format!("/api/sessions/{a}/approvals/{}", card.id),
            json!({ "approve": true }),
        )
        .send()
        .await;
    assert_eq!(answered.status, axum::http::StatusCode::OK);
    let r = exec(&s, a, get).await;
    assert!(
        r.stdout.contains("hello from outside"),
        "approved, the session reaches it: {r:?}"
    );
    // The other session of the same repo does not.
    let r = exec(&s, b, get).await;
    assert!(!r.stdout.contains("hello from outside"), "{r:?}");
    let r = exec(
        &s,
        b,
        &format!(
            "timeout 2 bash -c 'exec 3<>/dev/tcp/{blocked}/8080' && echo OPEN || echo BLOCKED"
        ),
    )
    .await;
    assert_eq!(r.stdout.trim(), "BLOCKED", "{r:?}");
}
