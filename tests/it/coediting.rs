//! Live co-editing over the live channel against a real server and a real workspace: people's
//! Yjs clients (yrs here, as the browser's yjs) in one file, the workspace's own changes merged
//! in, the file in the workspace following, roles, cursors named by the server, and hostile
//! members and workspaces held to their bounds.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::json;
use tandem_protocol::live::*;
use tandem_protocol::*;
use tandem_server::client::live::{Credentials, Incoming, LiveClient};
use yrs::sync::awareness::{AwarenessUpdate, AwarenessUpdateEntry};
use yrs::updates::decoder::Decode;
use yrs::updates::encoder::Encode;
use yrs::{GetString, OffsetKind, Options, Text, Transact, Update};

use crate::harness::TestServer;
use crate::live::{link, shared_session, token, user};

const FILE: &str = "src/lib.rs";
const START: &str = "pub fn main() {\n    println!(\"hi\");\n}\n";

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

fn unb64(s: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD.decode(s).unwrap()
}

/// A person's editor: a Yjs document kept in step with the server's.
struct Editor {
    c: LiveClient,
    /// The file it opened last.
    path: String,
    doc: yrs::Doc,
    text: yrs::TextRef,
    opened: Option<bool>,
    updates: usize,
    cursors: HashMap<u64, String>,
    tree: Option<Vec<agent::TreeEntry>>,
    gone: Option<String>,
    refused: Vec<(String, String)>,
    closed: Option<Option<u16>>,
}

impl Editor {
    async fn connect(s: &TestServer, id: SessionId, creds: Credentials) -> Editor {
        Editor::connect_to(&s.url, id, creds).await
    }

    async fn connect_to(url: &str, id: SessionId, creds: Credentials) -> Editor {
        let doc = yrs::Doc::with_options(Options {
            offset_kind: OffsetKind::Bytes,
            ..Options::default()
        });
        let text = doc.get_or_insert_text("content");
        Editor {
            c: LiveClient::connect(url, id, &creds).await.unwrap(),
            path: FILE.into(),
            doc,
            text,
            opened: None,
            updates: 0,
            cursors: HashMap::new(),
            tree: None,
            gone: None,
            refused: vec![],
            closed: None,
        }
    }

    fn text(&self) -> String {
        self.text.get_string(&self.doc.transact())
    }

    fn apply(&mut self, update: &str) {
        let u = Update::decode_v1(&unb64(update)).unwrap();
        self.doc.transact_mut().apply_update(u).unwrap();
    }

    fn fold(&mut self, m: Incoming) {
        match m {
            Incoming::Message(m) => match *m {
                WsServer::FileOpened {
                    update,
                    awareness,
                    read_only,
                    ..
                } => {
                    self.apply(&update);
                    if !awareness.is_empty() {
                        self.cursors_from(&awareness);
                    }
                    self.opened = Some(read_only);
                }
                WsServer::FileUpdate { update, .. } => {
                    self.apply(&update);
                    self.updates += 1;
                }
                WsServer::FileAwareness { update, .. } => self.cursors_from(&update),
                WsServer::FileGone { reason, .. } => self.gone = Some(reason),
                WsServer::FileTree { files, .. } => self.tree = Some(files),
                WsServer::Refused { request, reason } => self.refused.push((request, reason)),
                _ => {}
            },
            Incoming::Closed(code, _) => self.closed = Some(code),
            Incoming::Terminal(..) => {}
        }
    }

    fn cursors_from(&mut self, update: &str) {
        let u = AwarenessUpdate::decode_v1(&unb64(update)).unwrap();
        for (id, e) in u.clients {
            if &*e.json == "null" {
                self.cursors.remove(&id.get());
            } else {
                self.cursors.insert(id.get(), e.json.to_string());
            }
        }
    }

    /// Reads until `done` holds (30 s at most).
    async fn until(&mut self, what: &str, done: impl Fn(&Editor) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !done(self) {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.c.next()).await {
                Ok(Some(m)) => self.fold(m),
                Ok(None) => {
                    // Gone without a close frame (a killed server).
                    self.closed.get_or_insert(None);
                    assert!(done(self), "the channel ended waiting for {what}");
                }
                Err(_) => panic!(
                    "timed out waiting for {what}; text {:?}, refused {:?}, gone {:?}",
                    self.text(),
                    self.refused,
                    self.gone
                ),
            }
        }
    }

    async fn send(&mut self, m: WsClient) {
        self.c.send(&m).await.unwrap();
    }

    async fn open(&mut self, path: &str) {
        self.path = path.into();
        self.send(WsClient::OpenFile { path: path.into() }).await;
        self.until("the file to open", |e| e.opened.is_some()).await;
    }

    /// Types `s` at byte `at` and sends the edit.
    async fn type_at(&mut self, at: u32, s: &str) {
        let update = {
            let mut txn = self.doc.transact_mut();
            self.text.insert(&mut txn, at, s);
            txn.encode_update_v1()
        };
        self.send(WsClient::FileUpdate {
            path: self.path.clone(),
            update: b64(&update),
        })
        .await;
    }

    /// Sends this editor's cursor, claiming the name `name`.
    async fn cursor(&mut self, client: u64, name: &str) {
        let mut clients = HashMap::new();
        clients.insert(
            yrs::ClientID::new(client),
            AwarenessUpdateEntry {
                clock: 1,
                json: json!({ "user": { "name": name, "color": "#000" }, "cursor": { "anchor": {}, "head": {} } })
                    .to_string()
                    .into(),
            },
        );
        self.send(WsClient::FileAwareness {
            path: self.path.clone(),
            update: b64(&AwarenessUpdate { clients }.encode_v1()),
        })
        .await;
    }
}

async fn exec(s: &TestServer, id: SessionId, command: &str) -> ExecResult {
    s.post(
        &format!("/api/sessions/{id}/exec"),
        json!({ "command": command, "timeout_secs": 60 }),
    )
    .send()
    .await
    .parse()
}

/// Waits until the workspace's file is `want` (each look is an `exec` round trip).
async fn file_becomes(s: &TestServer, id: SessionId, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = exec(s, id, &format!("cat {FILE}")).await.stdout;
        if now == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the workspace's file is {now:?}, not {want:?}"
        );
    }
}

/// A ready session whose checkout has [`FILE`] (a new file) in it.
async fn session_with_file(s: &TestServer) -> SessionId {
    let id = shared_session(s).await;
    let made = exec(
        s,
        id,
        &format!(
            "mkdir -p src && printf '{}' > {FILE}",
            START.replace('\n', "\\n")
        ),
    )
    .await;
    assert_eq!(made.exit_code, Some(0), "{made:?}");
    file_becomes(s, id, START).await;
    id
}

#[tokio::test]
async fn two_people_type_in_one_file_the_workspaces_change_merges_and_the_file_follows() {
    let Some(s) = crate::workspaces::server(|_| {}).await else {
        return;
    };
    let id = session_with_file(&s).await;
    let bob = user(&s, "bob").await;
    let driver = link(&s, id, json!({ "role": "driver" })).await;
    let joined = s
        .req(axum::http::Method::POST, "/api/links/join")
        .bearer(&bob)
        .json(&json!({ "token": driver.token.unwrap() }))
        .send()
        .await;
    assert_eq!(joined.parse::<Joined>().role, Role::Driver);
    let viewer = link(&s, id, json!({ "role": "viewer", "allow_guests": true })).await;

    let mut a = Editor::connect(&s, id, token(&s.admin_token)).await;
    let mut b = Editor::connect(&s, id, token(&bob)).await;

    // The tree: tracked files and the new one, marked new.
    a.send(WsClient::ListFiles).await;
    a.until("the tree", |e| e.tree.is_some()).await;
    let tree = a.tree.clone().unwrap();
    let lib = tree
        .iter()
        .find(|f| f.path == FILE)
        .expect("the new file is listed");
    assert!(
        lib.new && !lib.binary && lib.size == START.len() as u64,
        "{lib:?}"
    );
    assert!(
        tree.iter().any(|f| f.path == "tandem.toml" && !f.new),
        "{tree:?}"
    );

    a.open(FILE).await;
    b.open(FILE).await;
    assert_eq!(a.opened, Some(false));
    assert_eq!(b.opened, Some(false));
    assert_eq!(a.text(), START);
    assert_eq!(b.text(), START);

    // Both type at once into the same line (neither has seen the other's edit yet).
    let line = START.find("println").unwrap() as u32;
    a.type_at(line, "/*a*/").await;
    b.type_at(line, "/*b*/").await;
    a.until("bob's edit", |e| e.text().contains("/*b*/")).await;
    b.until("ada's edit", |e| e.text().contains("/*a*/")).await;
    assert_eq!(a.text(), b.text(), "the two converge");
    let together = a.text();
    assert!(together.contains("/*a*//*b*/") || together.contains("/*b*//*a*/"));
    // The workspace's file follows.
    file_becomes(&s, id, &together).await;

    // Cursors carry the server's names, whatever a client claims.
    let a_client = a.doc.client_id().get();
    a.cursor(a_client, "Someone Else").await;
    b.until("ada's cursor", |e| e.cursors.contains_key(&a_client))
        .await;
    let state = &b.cursors[&a_client];
    assert!(
        state.contains("\"admin\"") && !state.contains("Someone Else"),
        "{state}"
    );

    // The agent (here: sed, replacing the file by a rename) changes the file while Ada types.
    let sed = exec(&s, id, &format!("sed -i 's/hi/hello/' {FILE}")).await;
    assert_eq!(sed.exit_code, Some(0));
    a.type_at(0, "// ada was here\n").await;
    for e in [&mut a, &mut b] {
        e.until("the workspace's change and Ada's line", |e| {
            e.text().contains("hello") && e.text().contains("// ada was here")
        })
        .await;
    }
    assert_eq!(a.text(), b.text());
    let merged = a.text();
    assert!(
        merged.contains("/*a*/") && merged.contains("/*b*/"),
        "{merged}"
    );
    file_becomes(&s, id, &merged).await;

    // A viewer sees it read-only; an edit from them is refused and changes nothing.
    let mut v = Editor::connect(
        &s,
        id,
        Credentials {
            share: viewer.token.clone(),
            name: Some("Vic".into()),
            ..Default::default()
        },
    )
    .await;
    v.open(FILE).await;
    assert_eq!(v.opened, Some(true));
    assert_eq!(v.text(), merged);
    v.type_at(0, "VIEWER").await;
    v.until("a refusal", |e| {
        e.refused.iter().any(|(r, _)| r == "file_update")
    })
    .await;
    assert!(
        v.refused
            .iter()
            .any(|(_, why)| why.contains("viewers cannot edit"))
    );
    a.type_at(0, "!").await;
    b.until("Ada's next edit", |e| e.text().starts_with('!'))
        .await;
    assert!(!b.text().contains("VIEWER"));

    // Deleted in the workspace: said so to everyone in it.
    exec(&s, id, &format!("rm {FILE}")).await;
    for e in [&mut a, &mut b, &mut v] {
        e.until("the file's end", |e| e.gone.is_some()).await;
        assert!(e.gone.as_ref().unwrap().contains("deleted or renamed"));
    }
}

#[tokio::test]
async fn bad_document_messages_close_their_sender_and_leave_the_document_whole() {
    let Some(s) = crate::workspaces::server(|_| {}).await else {
        return;
    };
    let id = session_with_file(&s).await;
    let mut a = Editor::connect(&s, id, token(&s.admin_token)).await;
    a.open(FILE).await;
    a.type_at(0, "kept ").await;
    let want = format!("kept {START}");
    file_becomes(&s, id, &want).await;
    let hostile: [(&str, WsClient, u16); 5] = [
        (
            "not base64",
            WsClient::FileUpdate {
                path: FILE.into(),
                update: "%%%".into(),
            },
            close::BAD_UPDATE,
        ),
        (
            "bytes that are no update",
            WsClient::FileUpdate {
                path: FILE.into(),
                update: b64(b"\x05\xff\xff\xff\xff\xff\xff\x01garbage"),
            },
            close::BAD_UPDATE,
        ),
        (
            "an oversized update",
            WsClient::FileUpdate {
                path: FILE.into(),
                update: b64(&vec![1u8; MAX_DOC_UPDATE_BYTES + 1024]),
            },
            close::TOO_BIG,
        ),
        (
            "a cursor in Ada's name",
            WsClient::FileAwareness {
                path: FILE.into(),
                update: String::new(),
            },
            close::BAD_UPDATE,
        ),
        (
            "a cursor that is not JSON",
            WsClient::FileAwareness {
                path: FILE.into(),
                update: String::new(),
            },
            close::BAD_UPDATE,
        ),
    ];
    let a_client = a.doc.client_id().get();
    a.cursor(a_client, "Ada").await;
    for (i, (what, mut msg, code)) in hostile.into_iter().enumerate() {
        let mut m = Editor::connect(&s, id, token(&s.admin_token)).await;
        m.open(FILE).await;
        if i == 3 {
            m.until("Ada's cursor", |e| e.cursors.contains_key(&a_client))
                .await;
        }
        if let WsClient::FileAwareness { update, .. } = &mut msg {
            let (client, state) = if i == 3 {
                (a_client, "{}".to_string())
            } else {
                (m.doc.client_id().get(), "{not json".to_string())
            };
            let mut clients = HashMap::new();
            clients.insert(
                yrs::ClientID::new(client),
                AwarenessUpdateEntry {
                    clock: 1,
                    json: state.into(),
                },
            );
            *update = b64(&AwarenessUpdate { clients }.encode_v1());
        }
        m.send(msg).await;
        m.until(what, |e| e.closed.is_some()).await;
        assert_eq!(m.closed, Some(Some(code)), "{what}");
    }
    // A flood of edits past the rate is closed too.
    let mut f = Editor::connect(&s, id, token(&s.admin_token)).await;
    f.open(FILE).await;
    for _ in 0..(4 * DOC_UPDATES_PER_SEC) {
        let update = {
            let mut txn = f.doc.transact_mut();
            f.text.insert(&mut txn, 0, "x");
            txn.encode_update_v1()
        };
        let msg = WsClient::FileUpdate {
            path: FILE.into(),
            update: b64(&update),
        };
        if f.c.send(&msg).await.is_err() {
            break;
        }
    }
    f.until("the flood's close", |e| e.closed.is_some()).await;
    assert_eq!(f.closed, Some(Some(close::TOO_MANY)));

    // The document is whole: Ada's text and her edits go on; the flood's accepted edits
    // (before its close) are ordinary edits of a driver.
    let mut fresh = Editor::connect(&s, id, token(&s.admin_token)).await;
    fresh.open(FILE).await;
    assert!(fresh.text().ends_with(&want), "{:?}", fresh.text());
    assert!(a.closed.is_none(), "the well-behaved member stays");
}

#[tokio::test]
async fn a_workspace_rewriting_an_open_file_fast_or_making_it_huge_is_held_to_bounds() {
    let Some(s) = crate::workspaces::server(|_| {}).await else {
        return;
    };
    let id = session_with_file(&s).await;
    let bob = user(&s, "bob").await;
    let driver = link(&s, id, json!({ "role": "driver" })).await;
    s.req(axum::http::Method::POST, "/api/links/join")
        .bearer(&bob)
        .json(&json!({ "token": driver.token.unwrap() }))
        .send()
        .await;
    let mut a = Editor::connect(&s, id, token(&s.admin_token)).await;
    let mut b = Editor::connect(&s, id, token(&bob)).await;
    a.open(FILE).await;
    b.open(FILE).await;

    // The workspace rewrites the file as fast as a shell can, for a while.
    let started = Instant::now();
    let storm_cmd =
        format!("i=0; while [ $i -lt 5000 ]; do echo $i > {FILE}; i=$((i+1)); done; echo done");
    let storm = exec(&s, id, &storm_cmd);
    // Meanwhile Ada types markers and Bob must see each one soon.
    let typing = async {
        let mut worst = Duration::ZERO;
        for n in 0..10 {
            let marker = format!("[m{n}]");
            let sent = Instant::now();
            a.type_at(0, &marker).await;
            b.until(&marker, |e| e.text().contains(&marker)).await;
            worst = worst.max(sent.elapsed());
        }
        worst
    };
    let (result, worst) = tokio::join!(storm, typing);
    let took = started.elapsed();
    assert_eq!(result.stdout.trim(), "done", "{result:?}");
    let rate = 5000.0 / result.duration_ms.max(1) as f64 * 1000.0;
    // Bob saw Ada's edits and the workspace's, but the workspace's at most every
    // WATCH_MIN_INTERVAL: not one update per rewrite.
    let most = (took.as_millis() / 100) as usize * 2 + 20;
    b.until("the last rewrite", |e| e.text().contains("4999"))
        .await;
    eprintln!(
        "{rate:.0} rewrites/s for {took:?}; Bob got {} updates; slowest of Ada's edits to reach him: {worst:?}",
        b.updates
    );
    assert!(
        b.updates <= most,
        "{} updates for {rate:.0} rewrites a second over {took:?} (at most {most})",
        b.updates
    );
    assert!(
        worst < Duration::from_secs(2),
        "an edit took {worst:?} to reach Bob"
    );

    // A file grown to 100 MB is closed for everyone, with its size.
    // Written beside it and renamed over it, so it is never seen half-written.
    let huge = exec(
        &s,
        id,
        &format!("head -c 100000000 /dev/zero | tr '\\0' a > src/.big && mv src/.big {FILE}"),
    )
    .await;
    assert_eq!(huge.exit_code, Some(0), "{huge:?}");
    for e in [&mut a, &mut b] {
        e.until("the file's end", |e| e.gone.is_some()).await;
        assert!(
            e.gone.as_ref().unwrap().contains("100000000 bytes"),
            "{:?}",
            e.gone
        );
    }
    // And cannot be opened again.
    a.send(WsClient::OpenFile { path: FILE.into() }).await;
    a.until("a refusal", |e| {
        e.refused.iter().any(|(r, _)| r == "open_file")
    })
    .await;
}

/// A `tandem serve` of its own (so its memory is its own) with a ready session whose checkout
/// has `notes.md` ("first line").
struct Spawned {
    server: tokio::process::Child,
    url: String,
    admin: String,
    c: tandem_server::client::Client,
    id: SessionId,
    data: std::path::PathBuf,
    images: std::path::PathBuf,
    _dir: tempfile::TempDir,
    _clean: crate::harness::RemoveWorkspaces,
}

impl Spawned {
    async fn start() -> Option<Spawned> {
        use crate::restart::{local_token, serve_with_workspaces, wait_for_state};
        let image = crate::workspaces::image().await?;
        let images = image.parent().unwrap().parent().unwrap().to_path_buf();
        let dir = crate::harness::test_dir();
        let data = dir.path().join("data");
        let clean = crate::harness::RemoveWorkspaces(data.clone());
        let (server, url) = serve_with_workspaces(&data, &images).await;
        let admin = local_token(&data).await;
        let c = tandem_server::client::Client::new(&url, Some(admin.clone())).unwrap();
        let src = dir.path().join("src");
        std::fs::create_dir(&src).unwrap();
        crate::snapshots::git(&src, &["init", "-q"]);
        std::fs::write(src.join("notes.md"), "first line\n").unwrap();
        crate::snapshots::commit_recipe(&src, &["true"]);
        let repo = c
            .create_repo(&CreateRepo {
                name: "acme/notes".into(),
                url: src.to_string_lossy().into(),
                default_branch: None,
                warm_pool: None,
            })
            .await
            .unwrap();
        let id = c
            .create_session(&CreateSession {
                repo_id: repo.id,
                prompt: String::new(),
                branch: None,
                agent: Some(AgentSpec::None),
                context: None,
            })
            .await
            .unwrap()
            .session
            .id;
        wait_for_state(&c, id, SessionState::Ready).await;
        Some(Spawned {
            server,
            url,
            admin,
            c,
            id,
            data,
            images,
            _dir: dir,
            _clean: clean,
        })
    }

    async fn exec(&self, command: &str) -> ExecResult {
        let req = ExecRequest {
            command: command.into(),
            cwd: None,
            timeout_secs: Some(120),
        };
        self.c.exec(self.id, &req).await.unwrap()
    }

    /// The server process's resident memory and its peak since [`Spawned::reset_peak`], in KiB.
    fn memory(&self) -> (u64, u64) {
        let pid = self.server.id().unwrap();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let kib = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap_or_else(|| panic!("no {key} in {status}"))
        };
        (kib("VmRSS:"), kib("VmHWM:"))
    }

    /// Starts the server's peak memory (`VmHWM`) afresh from what it holds now.
    fn reset_peak(&self) {
        let pid = self.server.id().unwrap();
        std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
    }
}

/// The server's memory while a workspace rewrites an open file as fast as a shell can and then
/// makes it 100 MB: what it reads of a file is bounded (1 MiB, then the file is closed), and what
/// reaches the document from the storm is at most one merge every 100 ms, so its peak stays
/// within a few MiB of where it began (reading the 100 MB file once would add 100 MB).
#[tokio::test]
async fn a_workspaces_file_storm_and_100_mb_file_leave_the_servers_memory_within_bounds() {
    let Some(mut s) = Spawned::start().await else {
        return;
    };
    let mut a = Editor::connect_to(&s.url, s.id, token(&s.admin)).await;
    a.open("notes.md").await;
    let mut b = Editor::connect_to(&s.url, s.id, token(&s.admin)).await;
    b.open("notes.md").await;
    a.type_at(0, "warm ").await;
    b.until("the first edit", |e| e.text().starts_with("warm "))
        .await;
    s.reset_peak();
    let (before, _) = s.memory();

    let storm = s
        .exec("i=0; while [ $i -lt 5000 ]; do echo $i > notes.md; i=$((i+1)); done; echo done")
        .await;
    assert_eq!(storm.stdout.trim(), "done", "{storm:?}");
    b.until("the last rewrite", |e| e.text().contains("4999"))
        .await;
    let (_, storm_peak) = s.memory();

    let huge = s
        .exec("head -c 100000000 /dev/zero | tr '\\0' a > .big && mv .big notes.md")
        .await;
    assert_eq!(huge.exit_code, Some(0), "{huge:?}");
    for e in [&mut a, &mut b] {
        e.until("the file's end", |e| e.gone.is_some()).await;
        assert!(
            e.gone.as_ref().unwrap().contains("100000000 bytes"),
            "{:?}",
            e.gone
        );
    }
    let (after, peak) = s.memory();
    eprintln!(
        "server memory: {before} KiB before, peak {storm_peak} KiB through the storm, \
         peak {peak} KiB through the 100 MB file, {after} KiB after"
    );
    let bound = 48 * 1024;
    assert!(
        storm_peak < before + bound && peak < before + bound,
        "the server grew from {before} KiB to a peak of {storm_peak} KiB (storm) and {peak} KiB \
         (100 MB file); at most {bound} KiB more"
    );
    s.server.kill().await.unwrap();
}

#[tokio::test]
async fn an_edit_written_before_a_server_restart_is_in_the_file_after_it() {
    use crate::restart::serve_with_workspaces;
    let Some(mut s) = Spawned::start().await else {
        return;
    };
    let mut a = Editor::connect_to(&s.url, s.id, token(&s.admin)).await;
    a.open("notes.md").await;
    a.type_at("first line\n".len() as u32, "second line\n")
        .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while s.exec("cat notes.md").await.stdout != "first line\nsecond line\n" {
        assert!(Instant::now() < deadline, "the edit never reached the file");
    }

    // A hard kill: the document in memory is gone; the file is not.
    s.server.kill().await.unwrap();
    a.until("the channel's end", |e| e.closed.is_some()).await;
    let (server, url) = serve_with_workspaces(&s.data, &s.images).await;
    s.server = server;
    s.c = tandem_server::client::Client::new(&url, Some(s.admin.clone())).unwrap();
    let mut again = Editor::connect_to(&url, s.id, token(&s.admin)).await;
    again.open("notes.md").await;
    assert_eq!(again.text(), "first line\nsecond line\n");
    assert_eq!(
        s.exec("cat notes.md").await.stdout,
        "first line\nsecond line\n"
    );
    s.c.session_action(s.id, "stop").await.unwrap();
    s.server.kill().await.unwrap();
}
