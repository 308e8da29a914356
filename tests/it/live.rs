//! The live channel over real WebSockets against a real server and a real workspace PTY:
//! shared terminals, roles, control, share links, reconnecting, slow clients, hostile frames.

use std::time::{Duration, Instant};

use axum::http::{Method, StatusCode};
use serde_json::json;
use tandem_protocol::live::*;
use tandem_protocol::*;
use tandem_server::client::live::{Credentials, Incoming, LiveClient};
use tokio_tungstenite::tungstenite::Message;

use crate::harness::TestServer;
use crate::session_workspaces::{add_repo, source_repo, wait_state};

/// One connected participant, folding what arrives into what it has seen.
pub struct Peer {
    pub c: LiveClient,
    me: Option<Participant>,
    pub terminals: Vec<Terminal>,
    screen: Vec<u8>,
    participants: Vec<Participant>,
    /// Viewers connected but not listed.
    audience: u32,
    controller: Option<u32>,
    events: Vec<Event>,
    refused: Vec<(String, String)>,
    closed: Option<(Option<u16>, String)>,
}

impl Peer {
    pub async fn connect(s: &TestServer, id: SessionId, creds: Credentials) -> Peer {
        let c = LiveClient::connect(&s.url, id, &creds)
            .await
            .expect("connects");
        Peer {
            c,
            me: None,
            terminals: vec![],
            screen: vec![],
            participants: vec![],
            audience: 0,
            controller: None,
            events: vec![],
            refused: vec![],
            closed: None,
        }
    }

    fn fold(&mut self, m: Incoming) {
        match m {
            Incoming::Message(m) => match *m {
                WsServer::Hello {
                    you,
                    terminals,
                    participants,
                    controller,
                    audience,
                    ..
                } => {
                    self.me = Some(you);
                    self.terminals = terminals;
                    self.participants = participants;
                    self.audience = audience;
                    self.controller = controller;
                }
                WsServer::Events { events } => self.events.extend(events),
                WsServer::Terminals { terminals } => self.terminals = terminals,
                WsServer::Joined { participant } => {
                    self.participants.retain(|p| p.id != participant.id);
                    self.participants.push(participant);
                }
                WsServer::Left { id } => self.participants.retain(|p| p.id != id),
                WsServer::Presence { id, looking_at } => {
                    if let Some(p) = self.participants.iter_mut().find(|p| p.id == id) {
                        p.looking_at = looking_at;
                    }
                }
                WsServer::Control { controller } => self.controller = controller,
                WsServer::Audience { viewers } => self.audience = viewers,
                WsServer::ControlRequested { .. } | WsServer::DesktopAnswer { .. } => {}
                WsServer::Refused { request, reason } => self.refused.push((request, reason)),
                WsServer::FileTree { .. }
                | WsServer::FileOpened { .. }
                | WsServer::FileUpdate { .. }
                | WsServer::FileAwareness { .. }
                | WsServer::FileGone { .. } => {}
            },
            Incoming::Terminal(_, bytes) => {
                self.screen.extend_from_slice(&bytes);
                // Keep the recent screen only (floods are tens of MiB): cut back to 1 MiB once
                // past 2 MiB, so a flood costs its length and the reader keeps up on 2 cores.
                if self.screen.len() > 2 << 20 {
                    let over = self.screen.len() - (1 << 20);
                    self.screen.drain(..over);
                }
            }
            Incoming::Closed(code, reason) => self.closed = Some((code, reason)),
        }
    }

    /// Reads until `done` holds (30 s at most).
    pub async fn until(&mut self, what: &str, done: impl Fn(&Peer) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !done(self) {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.c.next()).await {
                Ok(Some(m)) => self.fold(m),
                Ok(None) => panic!(
                    "the channel ended while waiting for {what} (closed: {:?})",
                    self.closed
                ),
                Err(_) => {
                    let screen = String::from_utf8_lossy(&self.screen);
                    let tail: String = screen
                        .chars()
                        .rev()
                        .take(300)
                        .collect::<Vec<_>>()
                        .into_iter()
                        .rev()
                        .collect();
                    panic!(
                        "timed out waiting for {what}; refused: {:?}; screen ends: {tail:?}",
                        self.refused.len()
                    )
                }
            }
        }
    }

    fn id(&self) -> u32 {
        self.me.as_ref().unwrap().id
    }

    /// Whether the recent screen holds `text` (searched as bytes: it runs after every frame).
    pub fn sees(&self, text: &str) -> bool {
        memchr::memmem::find(&self.screen, text.as_bytes()).is_some()
    }

    async fn send(&mut self, m: WsClient) {
        self.c.send(&m).await.unwrap();
    }

    /// Waits for a refusal of `request`.
    async fn refused_for(&mut self, request: &str) -> String {
        let n = self.refused.len();
        self.until(request, |p| {
            p.refused[n..].iter().any(|(r, _)| r == request)
        })
        .await;
        self.refused[n..]
            .iter()
            .find(|(r, _)| r == request)
            .unwrap()
            .1
            .clone()
    }

    async fn closed_with(&mut self) -> Option<u16> {
        self.until("the close", |p| p.closed.is_some()).await;
        self.closed.as_ref().unwrap().0
    }
}

/// A running session with no agent (a shared workspace).
pub(crate) async fn shared_session(s: &TestServer) -> SessionId {
    let src = source_repo("[workspace]\nsetup = []\n");
    let repo = add_repo(
        s,
        &format!("acme/live-{}", uuid::Uuid::new_v4().simple()),
        src.path(),
    )
    .await;
    let created: SessionDetail = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo, "agent": { "kind": "none" } }),
        )
        .send()
        .await
        .parse();
    wait_state(s, created.session.id, &[SessionState::Ready]).await;
    std::mem::forget(src);
    created.session.id
}

/// The session's newest event's number.
async fn last_seq(s: &TestServer, id: SessionId) -> i64 {
    s.get(&format!("/api/sessions/{id}"))
        .send()
        .await
        .parse::<SessionDetail>()
        .session
        .last_seq
}

pub(crate) async fn user(s: &TestServer, name: &str) -> String {
    crate::agent_runs::another_user(s, name).await.1
}

pub(crate) async fn link(s: &TestServer, id: SessionId, body: serde_json::Value) -> ShareLink {
    let res = s
        .post(&format!("/api/sessions/{id}/links"), body)
        .send()
        .await;
    assert_eq!(
        res.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&res.body)
    );
    res.parse()
}

pub fn token(t: &str) -> Credentials {
    Credentials {
        token: Some(t.into()),
        ..Default::default()
    }
}

#[tokio::test]
async fn two_drivers_and_a_viewer_share_one_terminal_and_control_is_handed_over() {
    let Some(s) = crate::workspaces::server(|_| {}).await else {
        return;
    };
    let id = shared_session(&s).await;
    let bob = user(&s, "bob").await;
    let driver = link(&s, id, json!({ "role": "driver" })).await;
    let viewer = link(&s, id, json!({ "role": "viewer", "allow_guests": true })).await;
    assert!(driver.url.as_deref().unwrap().contains("/join#token="));
    let joined = s
        .req(Method::POST, "/api/links/join")
        .bearer(&bob)
        .json(&json!({ "token": driver.token.unwrap() }))
        .send()
        .await;
    assert_eq!(joined.parse::<Joined>().role, Role::Driver);

    let mut owner = Peer::connect(&s, id, token(&s.admin_token)).await;
    owner
        .until("a terminal", |p| p.me.is_some() && !p.terminals.is_empty())
        .await;
    assert_eq!(owner.me.as_ref().unwrap().role, Role::Owner);
    let term = owner.terminals[0].id;
    let mut b = Peer::connect(&s, id, token(&bob)).await;
    let mut g = Peer::connect(
        &s,
        id,
        Credentials {
            share: viewer.token.clone(),
            name: Some("Gina".into()),
            ..Default::default()
        },
    )
    .await;
    b.until("hello", |p| p.me.is_some()).await;
    g.until("hello", |p| p.me.is_some()).await;
    assert_eq!(b.me.as_ref().unwrap().role, Role::Driver);
    assert_eq!(g.me.as_ref().unwrap().role, Role::Viewer);
    assert_eq!(g.me.as_ref().unwrap().name, "Gina (guest)");
    owner
        .until("three participants", |p| p.participants.len() == 3)
        .await;

    // Everyone sees the same bytes, in the same order.
    owner
        .c
        .input(term, b"echo START; echo from-owner-$((6*7))\r")
        .await
        .unwrap();
    b.until("the owner's command", |p| p.sees("from-owner-42"))
        .await;
    b.c.input(term, b"echo from-bob-$((7*6)); echo END\r")
        .await
        .unwrap();
    for p in [&mut owner, &mut b, &mut g] {
        p.until("bob's command and the end", |p| {
            p.sees("from-bob-42") && p.sees("\r\nEND")
        })
        .await;
    }
    let window = |p: &Peer| {
        let text = String::from_utf8_lossy(&p.screen).to_string();
        let start = text.find("START\r\n").expect("start");
        let end = text.rfind("\r\nEND").expect("end");
        text[start..end].to_string()
    };
    assert_eq!(window(&owner), window(&b));
    assert_eq!(window(&owner), window(&g));

    // The viewer cannot type, resize, take control or prompt: refused, reported, nothing typed.
    g.c.input(term, b"echo viewer-typed\r").await.unwrap();
    assert_eq!(g.refused_for("input").await, "viewers cannot type");
    g.send(WsClient::Resize {
        terminal: term,
        cols: 20,
        rows: 5,
    })
    .await;
    g.refused_for("resize").await;
    g.send(WsClient::RequestControl).await;
    g.refused_for("request_control").await;
    g.send(WsClient::Prompt {
        text: "hi".into(),
        mode: PromptMode::Queue,
    })
    .await;
    assert_eq!(g.refused_for("prompt").await, "viewers cannot send prompts");
    owner.c.input(term, b"echo after-viewer\r").await.unwrap();
    owner
        .until("the next command", |p| p.sees("after-viewer\r\n"))
        .await;
    assert!(
        !owner.sees("viewer-typed"),
        "the viewer's keystrokes reached the terminal"
    );

    // Control: bob takes it (free), the owner's typing is refused, the owner takes it back and
    // hands it to bob, bob releases it.
    b.send(WsClient::RequestControl).await;
    let bob_id = b.id();
    owner
        .until("bob holds control", |p| p.controller == Some(bob_id))
        .await;
    g.until("everyone sees who holds control", |p| {
        p.controller == Some(bob_id)
    })
    .await;
    owner.c.input(term, b"echo blocked\r").await.unwrap();
    assert!(
        owner
            .refused_for("input")
            .await
            .contains("bob holds control")
    );
    owner.send(WsClient::TakeControl).await;
    let owner_id = owner.id();
    b.until("the owner took control", |p| p.controller == Some(owner_id))
        .await;
    b.send(WsClient::GrantControl { to: bob_id }).await;
    b.refused_for("grant_control").await;
    owner.send(WsClient::GrantControl { to: g.id() }).await;
    assert_eq!(
        owner.refused_for("grant_control").await,
        "viewers cannot hold control"
    );
    owner.send(WsClient::GrantControl { to: bob_id }).await;
    b.until("handed to bob", |p| p.controller == Some(bob_id))
        .await;
    b.send(WsClient::ReleaseControl).await;
    g.until("control is free", |p| p.controller.is_none()).await;

    // Resize: the smallest size among drivers.
    owner
        .send(WsClient::Resize {
            terminal: term,
            cols: 100,
            rows: 30,
        })
        .await;
    b.send(WsClient::Resize {
        terminal: term,
        cols: 80,
        rows: 24,
    })
    .await;
    g.until("the terminal is 80x24", |p| {
        p.terminals
            .iter()
            .any(|t| t.id == term && (t.cols, t.rows) == (80, 24))
    })
    .await;

    // Drivers open more terminals, up to the limit.
    for n in 2..=MAX_TERMINALS {
        b.send(WsClient::OpenTerminal { cols: 80, rows: 24 }).await;
        b.until("another terminal", |p| p.terminals.len() >= n)
            .await;
    }
    b.send(WsClient::OpenTerminal { cols: 80, rows: 24 }).await;
    assert_eq!(
        b.refused_for("open_terminal").await,
        format!("a session has at most {MAX_TERMINALS} terminals")
    );
    owner
        .until("everyone sees them", |p| p.terminals.len() == MAX_TERMINALS)
        .await;

    // Presence and leaving.
    b.send(WsClient::Presence {
        looking_at: Some("diff".into()),
    })
    .await;
    owner
        .until("bob looks at the diff", |p| {
            p.participants
                .iter()
                .any(|x| x.id == bob_id && x.looking_at.as_deref() == Some("diff"))
        })
        .await;
    b.c.close().await;
    owner.until("bob left", |p| p.participants.len() == 2).await;
    g.c.close().await;
    owner.c.close().await;
    s.post(&format!("/api/sessions/{id}/stop"), json!({}))
        .send()
        .await;
}

#[tokio::test]
async fn share_links_expire_are_revoked_and_forged_or_missing_credentials_are_refused() {
    let Some(s) = crate::workspaces::server(|_| {}).await else {
        return;
    };
    let id = shared_session(&s).await;
    let guest = |t: &Option<String>| Credentials {
        share: t.clone(),
        name: Some("Gus".into()),
        ..Default::default()
    };

    // No credential, an unknown session, a forged token, a link without guests.
    assert_eq!(
        Peer::connect(&s, id, Credentials::default())
            .await
            .closed_with()
            .await,
        Some(close::UNAUTHORIZED)
    );
    assert_eq!(
        Peer::connect(&s, SessionId(uuid::Uuid::new_v4()), token(&s.admin_token))
            .await
            .closed_with()
            .await,
        Some(close::NOT_FOUND)
    );
    let forger = tandem_server::identity::auth::JwtKeys::from_secret(&[7u8; 32]).unwrap();
    let claims = tandem_server::identity::auth::jwt::ShareClaims {
        sub: id.to_string(),
        jti: "forged".into(),
        role: Role::Driver,
        guests: true,
        iat: 0,
        exp: i64::MAX / 2000,
        kind: "share".into(),
    };
    let forged = forger.issue_share(&claims).unwrap();
    assert_eq!(
        Peer::connect(&s, id, guest(&Some(forged)))
            .await
            .closed_with()
            .await,
        Some(close::UNAUTHORIZED)
    );
    let members_only = link(&s, id, json!({ "role": "driver" })).await;
    assert_eq!(
        Peer::connect(&s, id, guest(&members_only.token))
            .await
            .closed_with()
            .await,
        Some(close::UNAUTHORIZED)
    );
    // A guest needs a name.
    let open = link(&s, id, json!({ "role": "driver", "allow_guests": true })).await;
    let nameless = Credentials {
        share: open.token.clone(),
        ..Default::default()
    };
    assert_eq!(
        Peer::connect(&s, id, nameless).await.closed_with().await,
        Some(close::UNAUTHORIZED)
    );

    // Expired: a real link whose token has run out.
    let expired = link(
        &s,
        id,
        json!({ "role": "driver", "allow_guests": true, "expires_in": 1 }),
    )
    .await;
    let stale = tandem_server::identity::auth::jwt::ShareClaims {
        sub: id.to_string(),
        jti: expired.jti.clone(),
        role: Role::Driver,
        guests: true,
        iat: 0,
        exp: 1,
        kind: "share".into(),
    };
    let stale = s.state.jwt.issue_share(&stale).unwrap();
    assert_eq!(
        Peer::connect(&s, id, guest(&Some(stale)))
            .await
            .closed_with()
            .await,
        Some(close::UNAUTHORIZED)
    );
    // A link token is not a login.
    let res = s
        .req(Method::GET, "/api/me")
        .bearer(open.token.as_deref().unwrap())
        .send()
        .await;
    res.assert_error(StatusCode::UNAUTHORIZED, "unauthorized");

    // Revoking disconnects its holders, and the link no longer opens.
    let mut g = Peer::connect(&s, id, guest(&open.token)).await;
    g.until("hello", |p| p.me.is_some()).await;
    let mut owner = Peer::connect(&s, id, token(&s.admin_token)).await;
    owner
        .until("two participants", |p| p.participants.len() == 2)
        .await;
    let bob = user(&s, "bob").await;
    s.req(
        Method::DELETE,
        &format!("/api/sessions/{id}/links/{}", open.jti),
    )
    .bearer(&bob)
    .send()
    .await
    .assert_error(StatusCode::FORBIDDEN, "forbidden");
    assert_eq!(
        s.req(
            Method::DELETE,
            &format!("/api/sessions/{id}/links/{}", open.jti)
        )
        .bearer(&s.admin_token)
        .send()
        .await
        .status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(g.closed_with().await, Some(close::FORBIDDEN));
    owner
        .until("the guest is gone", |p| p.participants.len() == 1)
        .await;
    assert_eq!(
        Peer::connect(&s, id, guest(&open.token))
            .await
            .closed_with()
            .await,
        Some(close::FORBIDDEN)
    );
    let links: Vec<ShareLink> = s
        .get(&format!("/api/sessions/{id}/links"))
        .send()
        .await
        .parse();
    assert!(
        links
            .iter()
            .any(|l| l.jti == open.jti && l.revoked_at.is_some())
    );
    assert!(
        links.iter().all(|l| l.token.is_none()),
        "tokens are shown once"
    );
    s.post(
        &format!("/api/sessions/{id}/links"),
        json!({ "role": "owner" }),
    )
    .send()
    .await
    .assert_error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input");
    owner.c.close().await;
    s.post(&format!("/api/sessions/{id}/stop"), json!({}))
        .send()
        .await;
}

#[tokio::test]
async fn the_viewers_of_a_session_share_one_read_of_each_new_event() {
    let Some(s) = crate::workspaces::server(|_| {}).await else {
        return;
    };
    let id = shared_session(&s).await;
    let last = last_seq(&s, id).await;
    let mut peers = Vec::new();
    for _ in 0..20 {
        let mut p = Peer::connect(&s, id, token(&s.admin_token)).await;
        p.send(WsClient::Subscribe { after: 0 }).await;
        p.until("the log so far", |p| {
            p.events.last().is_some_and(|e| e.seq >= last)
        })
        .await;
        peers.push(p);
    }
    let live = s.state.hubs.get(id).expect("the session's hub");
    let before = live.feed.reads();
    let began = Instant::now();
    for i in 0..5 {
        s.post(
            &format!("/api/sessions/{id}/exec"),
            json!({ "command": format!("echo shared-{i}") }),
        )
        .send()
        .await;
        for p in &mut peers {
            p.until("the new event", |p| {
                p.events
                    .iter()
                    .filter(|e| matches!(e.kind, EventKind::CommandRun { .. }))
                    .count()
                    > i
            })
            .await;
        }
    }
    // Every viewer got every event once, in order…
    for p in &peers {
        let seqs: Vec<i64> = p.events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (1..=last + 5).collect::<Vec<_>>());
    }
    // …from a few reads of the store between them: one per append woken in 20 viewers (a
    // read may catch two appends, and the look for other processes' events adds at most one
    // a second), not 20 per append.
    let reads = live.feed.reads() - before;
    let bound = 5 + began.elapsed().as_secs() + 1;
    assert!(
        (1..=bound).contains(&reads),
        "{reads} reads of the store for 5 events to 20 viewers (at most {bound})"
    );
    // A channel replaying the whole history and one starting at the head both get what
    // comes next, whatever the feed held when they came.
    let head = last + 5;
    let mut replay = Peer::connect(&s, id, token(&s.admin_token)).await;
    replay.send(WsClient::Subscribe { after: 0 }).await;
    let mut fresh = Peer::connect(&s, id, token(&s.admin_token)).await;
    fresh.send(WsClient::Subscribe { after: head }).await;
    replay
        .until("the history", |p| {
            p.events.last().is_some_and(|e| e.seq >= head)
        })
        .await;
    s.post(
        &format!("/api/sessions/{id}/exec"),
        json!({ "command": "echo after-them" }),
    )
    .send()
    .await;
    for p in [&mut replay, &mut fresh] {
        p.until("the next event", |p| {
            p.events.last().is_some_and(|e| e.seq == head + 1)
        })
        .await;
    }
    assert_eq!(
        replay.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=head + 1).collect::<Vec<_>>()
    );
    assert_eq!(
        fresh.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [head + 1]
    );
}

#[tokio::test]
async fn a_reconnecting_client_gets_exactly_the_events_it_missed() {
    let Some(s) = crate::workspaces::server(|_| {}).await else {
        return;
    };
    let id = shared_session(&s).await;
    let mut a = Peer::connect(&s, id, token(&s.admin_token)).await;
    a.send(WsClient::Subscribe { after: 0 }).await;
    let last = last_seq(&s, id).await;
    a.until("the log so far", |p| {
        p.events.last().is_some_and(|e| e.seq >= last)
    })
    .await;
    let seen = a.events.last().unwrap().seq;
    a.c.close().await;
    for i in 0..3 {
        s.post(
            &format!("/api/sessions/{id}/exec"),
            json!({ "command": format!("echo missed-{i}") }),
        )
        .send()
        .await;
    }
    let mut a = Peer::connect(&s, id, token(&s.admin_token)).await;
    a.send(WsClient::Subscribe { after: seen }).await;
    a.until("the missed events", |p| p.events.len() >= 3).await;
    let seqs: Vec<i64> = a.events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [seen + 1, seen + 2, seen + 3]);
    assert!(
        a.events
            .iter()
            .all(|e| matches!(e.kind, EventKind::CommandRun { .. }))
    );
    // And new ones as they happen, pushed (the exec answers before we look).
    s.post(
        &format!("/api/sessions/{id}/exec"),
        json!({ "command": "echo live" }),
    )
    .send()
    .await;
    a.until("the live event", |p| p.events.len() == 4).await;
    assert_eq!(a.events[3].seq, seen + 4);
    a.c.close().await;
    s.post(&format!("/api/sessions/{id}/stop"), json!({}))
        .send()
        .await;
}

#[tokio::test]
async fn a_client_that_stops_reading_is_dropped_with_4408_while_the_others_keep_receiving() {
    let Some(s) = crate::workspaces::server(|_| {}).await else {
        return;
    };
    let id = shared_session(&s).await;
    let mut fast = Peer::connect(&s, id, token(&s.admin_token)).await;
    fast.until("a terminal", |p| !p.terminals.is_empty()).await;
    let term = fast.terminals[0].id;
    let mut slow = Peer::connect(&s, id, token(&s.admin_token)).await;
    slow.until("hello", |p| p.me.is_some()).await;
    fast.until("two participants", |p| p.participants.len() == 2)
        .await;
    // Floods of 2 MiB until the slow client, which reads nothing, is dropped (its socket
    // buffers take some first); the fast one reads everything. Each flood is half the queue a
    // member may have and the fast one reads each to its end before the next, so however slowly
    // a loaded machine runs it, it is never that far behind; the slow one falls further behind
    // with every flood.
    for round in 0..200 {
        let cmd = format!(
            "head -c 2097152 /dev/zero | tr '\\0' x; echo; echo ROUND-$(({round}+1000))-DONE\r"
        );
        fast.c.input(term, cmd.as_bytes()).await.unwrap();
        let marker = format!("ROUND-{}-DONE", round + 1000);
        fast.until("the end of a flood", |p| p.sees(&marker)).await;
        if fast.participants.len() == 1 {
            break;
        }
    }
    fast.until("the slow one is gone", |p| p.participants.len() == 1)
        .await;
    assert_eq!(slow.closed_with().await, Some(close::TOO_SLOW));
    fast.c.input(term, b"echo still-here\r").await.unwrap();
    fast.until("more output", |p| p.sees("still-here\r\n"))
        .await;
    fast.c.close().await;
    s.post(&format!("/api/sessions/{id}/stop"), json!({}))
        .send()
        .await;
}

#[tokio::test]
async fn a_thousand_hostile_frames_cause_no_panic_and_no_leak() {
    let Some(s) = crate::workspaces::server(|_| {}).await else {
        return;
    };
    let id = shared_session(&s).await;
    let viewer = link(&s, id, json!({ "role": "viewer", "allow_guests": true })).await;
    let mut owner = Peer::connect(&s, id, token(&s.admin_token)).await;
    owner.until("a terminal", |p| !p.terminals.is_empty()).await;
    let mut v = Peer::connect(
        &s,
        id,
        Credentials {
            share: viewer.token.clone(),
            name: Some("Vic".into()),
            ..Default::default()
        },
    )
    .await;
    v.until("hello", |p| p.me.is_some()).await;
    let frames: Vec<Message> = vec![
        Message::Text("not json".into()),
        Message::Text("{\"type\":\"launch_missiles\"}".into()),
        Message::Text("{\"type\":\"resize\",\"terminal\":\"one\",\"cols\":-1}".into()),
        Message::Text("{\"type\":\"subscribe\",\"after\":-5}".into()),
        Message::Text("{\"type\":\"grant_control\",\"to\":99999}".into()),
        Message::Text("{\"type\":\"presence\",\"looking_at\":\"x\",\"extra\":1}".into()),
        Message::Binary(vec![1, 2].into()),
        Message::Binary(encode_terminal(987_654, b"ls\r").into()),
    ];
    let (mut sent, mut rounds) = (0, 0);
    while sent < 1000 {
        for f in &frames {
            owner.c.raw(f.clone()).await.unwrap();
            v.c.raw(f.clone()).await.unwrap();
            sent += 2;
        }
        // Wrong role: the viewer types and opens a terminal.
        v.c.input(owner.terminals[0].id, b"rm -rf /\r")
            .await
            .unwrap();
        v.send(WsClient::OpenTerminal { cols: 80, rows: 24 }).await;
        sent += 2;
        rounds += 1;
    }
    // Every hostile frame is answered with a refusal; none closes the channel.
    let (fo, fv) = (frames.len() * rounds, (frames.len() + 2) * rounds);
    owner
        .until("a refusal for each hostile frame", |p| {
            p.refused.len() >= fo
        })
        .await;
    v.until("a refusal for each hostile frame", |p| {
        p.refused.len() >= fv
    })
    .await;
    assert!(owner.closed.is_none() && v.closed.is_none());
    // An oversized frame closes that channel (4413) and only that one.
    let mut big = Peer::connect(&s, id, token(&s.admin_token)).await;
    big.until("hello", |p| p.me.is_some()).await;
    let _ = big
        .c
        .raw(Message::Text("x".repeat(MAX_FRAME_BYTES + 1).into()))
        .await;
    assert_eq!(big.closed_with().await, Some(close::TOO_BIG));
    owner
        .c
        .input(owner.terminals[0].id, b"echo alive\r")
        .await
        .unwrap();
    owner
        .until("the terminal still works", |p| p.sees("alive\r\n"))
        .await;
    assert_eq!(s.get("/api/health").send().await.status, StatusCode::OK);
    // Everyone leaves: nothing stays behind.
    owner.c.close().await;
    v.c.close().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !s.state.hubs.is_empty() {
        assert!(Instant::now() < deadline, "the hub outlived its members");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    s.post(&format!("/api/sessions/{id}/stop"), json!({}))
        .send()
        .await;
}

#[tokio::test]
async fn tandem_attach_drives_the_terminal_and_events_follow_tails_the_log() {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    let Some(s) = crate::workspaces::server(|_| {}).await else {
        return;
    };
    let id = shared_session(&s).await;
    let bin = env!("CARGO_BIN_EXE_tandem");
    let mut follow = tokio::process::Command::new(bin)
        .args([
            "events",
            &id.to_string(),
            "--follow",
            "--url",
            &s.url,
            "--token",
            &s.admin_token,
        ])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(follow.stdout.take().unwrap()).lines();
    // The log so far, then what happens next.
    loop {
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if line.contains("boot: ready") {
            break;
        }
    }
    s.post(
        &format!("/api/sessions/{id}/exec"),
        json!({ "command": "echo followed" }),
    )
    .send()
    .await;
    loop {
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if line.contains("ran `echo followed`") {
            break;
        }
    }
    follow.kill().await.unwrap();

    // Attach with a pipe for a keyboard: keys go in, the screen comes out; Ctrl-] detaches.
    let mut attach = tokio::process::Command::new(bin)
        .args([
            "attach",
            &id.to_string(),
            "--url",
            &s.url,
            "--token",
            &s.admin_token,
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = attach.stdin.take().unwrap();
    let mut stdout = attach.stdout.take().unwrap();
    stdin
        .write_all(b"echo via-attach-$((2+3))\r")
        .await
        .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("via-attach-5") {
        let n = tokio::time::timeout(Duration::from_secs(30), stdout.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "attach ended early");
        seen.extend_from_slice(&buf[..n]);
    }
    stdin.write_all(&[0x1d]).await.unwrap();
    let status = tokio::time::timeout(Duration::from_secs(10), attach.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());

    // A viewer's keys are not sent.
    let viewer = link(&s, id, json!({ "role": "viewer", "allow_guests": true })).await;
    let mut watch = tokio::process::Command::new(bin)
        .args([
            "attach",
            &id.to_string(),
            "--url",
            &s.url,
            "--share",
            viewer.token.as_deref().unwrap(),
            "--name",
            "Val",
        ])
        .env_remove("TANDEM_TOKEN")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut wstdin = watch.stdin.take().unwrap();
    let mut err = BufReader::new(watch.stderr.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(30), err.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(first.contains("as viewer (read-only)"), "{first}");
    wstdin.write_all(b"echo not-sent\r").await.unwrap();
    loop {
        let line = tokio::time::timeout(Duration::from_secs(30), err.next_line())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if line.contains("you are a viewer here") {
            break;
        }
    }
    watch.kill().await.unwrap();
    s.post(&format!("/api/sessions/{id}/stop"), json!({}))
        .send()
        .await;
}

/// A share token travels in the live channel's query (`?share=`); the request log names the
/// path only, so the token never reaches it.
#[tokio::test]
async fn share_tokens_in_the_query_stay_out_of_the_log() {
    let logs = crate::github::captured_logs();
    let Some(s) = crate::workspaces::server(|_| {}).await else {
        return;
    };
    let id = shared_session(&s).await;
    let guest = link(&s, id, json!({ "role": "viewer", "allow_guests": true })).await;
    let token = guest.token.clone().unwrap();
    let mut g = Peer::connect(
        &s,
        id,
        Credentials {
            share: Some(token.clone()),
            name: Some("Gus".into()),
            ..Default::default()
        },
    )
    .await;
    g.until("the hello", |p| p.me.is_some()).await;
    let text = String::from_utf8_lossy(&logs.lock().unwrap()).to_string();
    assert!(
        text.contains(&format!("/api/sessions/{id}/live")),
        "the request was logged"
    );
    assert!(!text.contains(&token), "the share token is in the log");
}

/// Person → person: a membership taken through a share link ends when the link expires, and
/// its holders are closed (4403) at expiry as at revocation — not only when it is revoked.
#[tokio::test]
async fn an_expired_link_ends_the_membership_it_gave_and_closes_its_holders() {
    let Some(s) = crate::workspaces::server(|_| {}).await else {
        return;
    };
    let id = shared_session(&s).await;
    let bob = user(&s, "bob").await;
    let driver = link(&s, id, json!({ "role": "driver", "expires_in": 2 })).await;
    let joined = s
        .req(Method::POST, "/api/links/join")
        .bearer(&bob)
        .json(&json!({ "token": driver.token.unwrap() }))
        .send()
        .await;
    assert_eq!(joined.parse::<Joined>().role, Role::Driver);
    let mut b = Peer::connect(&s, id, token(&bob)).await;
    b.until("hello", |p| p.me.is_some()).await;
    assert_eq!(b.me.as_ref().unwrap().role, Role::Driver);
    // The link expires: the channel it opened is closed as forbidden.
    assert_eq!(b.closed_with().await, Some(close::FORBIDDEN));
    // And the membership is gone: a driver's request is refused, a new channel watches.
    s.req(Method::POST, &format!("/api/sessions/{id}/code"))
        .bearer(&bob)
        .json(&json!({}))
        .send()
        .await
        .assert_error(StatusCode::FORBIDDEN, "forbidden");
    let mut again = Peer::connect(&s, id, token(&bob)).await;
    again.until("hello", |p| p.me.is_some()).await;
    assert_eq!(again.me.as_ref().unwrap().role, Role::Viewer);
}

/// Person → server: one share link opens a bounded audience; a guest holding it cannot open
/// live sockets without end.
#[tokio::test]
async fn one_links_guests_are_bounded() {
    let Some(s) = crate::workspaces::server(|_| {}).await else {
        return;
    };
    let id = shared_session(&s).await;
    let open = link(&s, id, json!({ "role": "viewer", "allow_guests": true })).await;
    let token = open.token.clone().unwrap();
    let guest = |t: &str| Credentials {
        share: Some(t.to_string()),
        name: Some("guest".into()),
        ..Default::default()
    };
    let mut guests = Vec::new();
    for _ in 0..tandem_protocol::live::MAX_GUESTS_PER_LINK {
        let mut g = Peer::connect(&s, id, guest(&token)).await;
        g.until("hello", |p| p.me.is_some()).await;
        guests.push(g);
    }
    let mut over = Peer::connect(&s, id, guest(&token)).await;
    assert_eq!(over.closed_with().await, Some(close::TOO_MANY));
    // One leaves: there is room again.
    guests.pop().unwrap().c.close().await;
    let mut owner = Peer::connect(&s, id, self::token(&s.admin_token)).await;
    owner
        .until("the guest is gone", |p| {
            // The owner and the first guests by name, the rest as a count.
            p.participants.len() == 1 + tandem_protocol::live::LISTED_VIEWERS
                && p.participants.len() + p.audience as usize
                    == tandem_protocol::live::MAX_GUESTS_PER_LINK
        })
        .await;
    let mut again = Peer::connect(&s, id, guest(&token)).await;
    again.until("hello", |p| p.me.is_some()).await;

    // Guests arriving together cannot pass the bound between its check and their join.
    let other = link(&s, id, json!({ "role": "viewer", "allow_guests": true })).await;
    let other = other.token.unwrap();
    let max = tandem_protocol::live::MAX_GUESTS_PER_LINK;
    let crowd = futures::future::join_all((0..max + 20).map(|_| async {
        let mut g = Peer::connect(&s, id, guest(&other)).await;
        g.until("hello or a close", |p| p.me.is_some() || p.closed.is_some())
            .await;
        g
    }))
    .await;
    let admitted = crowd.iter().filter(|p| p.me.is_some()).count();
    let turned_away = crowd
        .iter()
        .filter(|p| {
            p.closed
                .as_ref()
                .is_some_and(|(c, _)| *c == Some(close::TOO_MANY))
        })
        .count();
    assert_eq!(
        (admitted, turned_away),
        (max, 20),
        "at once, exactly the bound gets in"
    );
}
