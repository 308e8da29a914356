//! Fuzzes the live channel's client → server frames (a hostile client sends whatever it likes on
//! the session WebSocket): JSON text frames parsed as `WsClient`, binary terminal-input frames
//! decoded by `decode_terminal` and fed to the hub, and terminal output (from a hostile
//! workspace) fanned out through the hub. Nothing may panic, bad frames are `Err`/`None`, good
//! ones round-trip, and what the hub passes on stays within its documented bounds.

use proptest::collection::vec;
use proptest::prelude::*;
use serde_json::Value;
use tandem_protocol::PromptMode;
use tandem_protocol::live::*;
use tokio::sync::mpsc;

use super::hub::{Hub, Inbox, Out, Upstream, outbox};
use crate::fuzz_support::{config, json, mutate, mutations, nested, same_json, tagged};

/// Tags and field names of `WsClient` and `DesktopInput`, so random objects reach the fields.
const WORDS: &[&str] = &[
    "type",
    "subscribe",
    "open_terminal",
    "resize",
    "presence",
    "request_control",
    "grant_control",
    "release_control",
    "take_control",
    "prompt",
    "desktop_offer",
    "desktop_close",
    "desktop_input",
    "after",
    "cols",
    "rows",
    "terminal",
    "looking_at",
    "to",
    "text",
    "mode",
    "queue",
    "steer",
    "sdp",
    "input",
    "kind",
    "move",
    "down",
    "up",
    "scroll",
    "key",
    "x",
    "y",
    "button",
    "dy",
    "ctrl",
    "alt",
    "shift",
    "meta",
];

/// A finite coordinate; most of them exact in binary, some not.
fn coord() -> impl Strategy<Value = f64> {
    prop_oneof![
        (0u32..=65536).prop_map(|k| f64::from(k) / 65536.0),
        any::<f64>().prop_filter("finite", |f| f.is_finite()),
    ]
}

fn desktop_input() -> impl Strategy<Value = DesktopInput> {
    prop_oneof![
        (coord(), coord()).prop_map(|(x, y)| DesktopInput::Move { x, y }),
        (coord(), coord(), any::<u8>()).prop_map(|(x, y, button)| DesktopInput::Down {
            x,
            y,
            button
        }),
        (coord(), coord(), any::<u8>()).prop_map(|(x, y, button)| DesktopInput::Up {
            x,
            y,
            button
        }),
        (coord(), coord(), any::<i32>()).prop_map(|(x, y, dy)| DesktopInput::Scroll { x, y, dy }),
        (any::<String>(), any::<[bool; 4]>()).prop_map(|(key, [ctrl, alt, shift, meta])| {
            DesktopInput::Key {
                key,
                ctrl,
                alt,
                shift,
                meta,
            }
        }),
        any::<String>().prop_map(|text| DesktopInput::Text { text }),
    ]
}

/// Every kind of valid client message.
fn ws_client() -> impl Strategy<Value = WsClient> {
    prop_oneof![
        any::<i64>().prop_map(|after| WsClient::Subscribe { after }),
        (any::<u16>(), any::<u16>()).prop_map(|(cols, rows)| WsClient::OpenTerminal { cols, rows }),
        (any::<u32>(), any::<u16>(), any::<u16>()).prop_map(|(terminal, cols, rows)| {
            WsClient::Resize {
                terminal,
                cols,
                rows,
            }
        }),
        proptest::option::of(any::<String>())
            .prop_map(|looking_at| WsClient::Presence { looking_at }),
        Just(WsClient::RequestControl),
        any::<u32>().prop_map(|to| WsClient::GrantControl { to }),
        Just(WsClient::ReleaseControl),
        Just(WsClient::TakeControl),
        (any::<String>(), any::<bool>()).prop_map(|(text, steer)| WsClient::Prompt {
            text,
            mode: if steer {
                PromptMode::Steer
            } else {
                PromptMode::Queue
            },
        }),
        any::<String>().prop_map(|sdp| WsClient::DesktopOffer { sdp }),
        Just(WsClient::DesktopClose),
        desktop_input().prop_map(|input| WsClient::DesktopInput { input }),
    ]
}

/// What the socket does with a text frame: parse it; a message that parses must say the same
/// thing when encoded again, and must not have carried fields the message does not have
/// (`deny_unknown_fields`: a typo is refused, not ignored). Two leniences of serde's internally
/// tagged enums are let through: a message without fields (`request_control`, …) ignores
/// unknown ones, and a JSON array is taken as the tag then the fields in order.
fn check_text_frame(text: &str) {
    let Ok(m) = serde_json::from_str::<WsClient>(text) else {
        return;
    };
    let again = serde_json::to_string(&m).expect("a parsed message encodes");
    let back: WsClient = serde_json::from_str(&again)
        .unwrap_or_else(|e| panic!("{again} (from {text:?}) does not parse back: {e}"));
    let (a, b) = (
        serde_json::to_value(&m).unwrap(),
        serde_json::to_value(&back).unwrap(),
    );
    assert!(same_json(&a, &b), "{a} became {b}");
    let sent: Value = serde_json::from_str(text).expect("a message is JSON");
    let known = a.as_object().expect("a message encodes as an object");
    let Some(sent) = sent.as_object() else {
        assert!(sent.is_array(), "{text:?} parsed as {m:?}");
        return;
    };
    if known.len() == 1 {
        return;
    }
    for k in sent.keys() {
        assert!(
            known.contains_key(k),
            "{text:?} parsed as {m:?} though it has the unknown field {k:?}"
        );
    }
}

/// A hub with terminals 1 and 2, a driver (who may type) and a viewer (who may not).
struct Fixture {
    hub: Hub,
    driver: u32,
    viewer: u32,
    upstreams: Vec<(u32, mpsc::Receiver<Upstream>)>,
    inboxes: Vec<Inbox>,
}

fn fixture() -> Fixture {
    let hub = Hub::default();
    let mut upstreams = Vec::new();
    for id in [1, 2] {
        let (tx, rx) = mpsc::channel(super::hub::UPSTREAM_QUEUE);
        hub.add_terminal(
            Terminal {
                id,
                cols: 80,
                rows: 24,
                command: vec!["bash".into()],
            },
            tx,
        );
        upstreams.push((id, rx));
    }
    let mut inboxes = Vec::new();
    let mut join = |role| {
        let (out, inbox) = outbox();
        let (me, _) = hub.join("p".into(), None, role, None, out, |_, _, c, _, _| {
            WsServer::Control { controller: c }
        });
        inboxes.push(inbox);
        me.id
    };
    let driver = join(Role::Driver);
    let viewer = join(Role::Viewer);
    let mut f = Fixture {
        hub,
        driver,
        viewer,
        upstreams,
        inboxes,
    };
    f.drain();
    f
}

impl Fixture {
    /// Everything queued to the members so far: (texts, binary frames).
    fn drain(&mut self) -> (Vec<String>, Vec<bytes::Bytes>) {
        let (mut texts, mut frames) = (Vec::new(), Vec::new());
        for inbox in &mut self.inboxes {
            while let Ok(out) = inbox.rx.try_recv() {
                inbox.written(&out);
                match out {
                    Out::Text(t) => texts.push(t),
                    Out::Json(b) => texts.push(String::from_utf8_lossy(&b).into_owned()),
                    Out::Binary(b) => frames.push(b),
                }
            }
        }
        (texts, frames)
    }

    /// What the hub sent upstream to terminal `id`.
    fn upstream(&mut self, id: u32) -> Vec<Upstream> {
        let rx = &mut self.upstreams.iter_mut().find(|(t, _)| *t == id).unwrap().1;
        let mut v = Vec::new();
        while let Ok(u) = rx.try_recv() {
            v.push(u);
        }
        v
    }
}

/// What the socket does with a binary frame: decode it, hand its bytes to the hub as `member`'s
/// input. Input reaches the named terminal, whole and alone; anything else is refused.
fn check_binary_frame(f: &mut Fixture, member: u32, frame: &[u8]) {
    let Some((terminal, bytes)) = decode_terminal(frame) else {
        assert!(
            frame.len() < 4,
            "{frame:?} has a terminal id but did not decode"
        );
        return;
    };
    assert_eq!(frame.len(), bytes.len() + 4);
    assert_eq!(terminal.to_be_bytes(), frame[..4]);
    let r = f.hub.input(member, terminal, bytes.to_vec());
    let ups = (f.upstream(1), f.upstream(2));
    let known = terminal == 1 || terminal == 2;
    if member == f.driver && known {
        assert!(
            r.is_ok(),
            "the driver's input to {terminal} was refused: {r:?}"
        );
        let (mine, other) = if terminal == 1 {
            (ups.0, ups.1)
        } else {
            (ups.1, ups.0)
        };
        assert!(other.is_empty(), "input leaked to the other terminal");
        assert!(
            matches!(&mine[..], [Upstream::Input(b)] if b == bytes),
            "terminal {terminal} got {mine:?}"
        );
    } else {
        assert!(r.is_err(), "input from {member} to {terminal} was taken");
        assert!(
            ups.0.is_empty() && ups.1.is_empty(),
            "refused input went upstream"
        );
    }
}

proptest! {
    #![proptest_config(config(2000))]

    #[test]
    fn terminal_frames_decode_any_bytes(frame in vec(any::<u8>(), 0..64)) {
        match decode_terminal(&frame) {
            None => prop_assert!(frame.len() < 4),
            Some((id, bytes)) => {
                prop_assert_eq!(encode_terminal(id, bytes), frame.clone());
                prop_assert_eq!(bytes, &frame[4..]);
            }
        }
    }

    #[test]
    fn terminal_frames_round_trip(id in any::<u32>(), bytes in vec(any::<u8>(), 0..512)) {
        let frame = encode_terminal(id, &bytes);
        prop_assert_eq!(frame.len(), 4 + bytes.len());
        prop_assert_eq!(decode_terminal(&frame), Some((id, &bytes[..])));
    }

    #[test]
    fn binary_input_frames_reach_only_their_terminal(
        frames in vec(
            prop_oneof![
                vec(any::<u8>(), 0..40),
                (0u32..4, vec(any::<u8>(), 0..64)).prop_map(|(t, b)| encode_terminal(t, &b)),
            ],
            1..8,
        ),
        as_viewer in any::<bool>(),
    ) {
        let mut f = fixture();
        let member = if as_viewer { f.viewer } else { f.driver };
        for frame in &frames {
            check_binary_frame(&mut f, member, frame);
        }
        let (texts, out) = f.drain();
        prop_assert!(texts.is_empty() && out.is_empty(), "input is not echoed to members");
    }

    #[test]
    fn text_frames_of_any_text_never_panic(text in any::<String>()) {
        check_text_frame(&text);
    }

    #[test]
    fn text_frames_of_random_messages_never_panic(v in tagged("type", WORDS)) {
        check_text_frame(&v.to_string());
    }

    #[test]
    fn text_frames_of_random_json_never_panic(v in json(WORDS)) {
        check_text_frame(&v.to_string());
    }

    #[test]
    fn valid_text_frames_round_trip(m in ws_client()) {
        let text = serde_json::to_string(&m).unwrap();
        let back: WsClient = serde_json::from_str(&text)
            .map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
        let (a, b) = (serde_json::to_value(&m).unwrap(), serde_json::to_value(&back).unwrap());
        prop_assert!(same_json(&a, &b), "{} became {}", a, b);
        check_text_frame(&text);
    }

    #[test]
    fn mutated_text_frames_never_panic(m in ws_client(), muts in mutations()) {
        let text = serde_json::to_string(&m).unwrap();
        // A text frame is UTF-8 (the WebSocket layer refuses anything else).
        let bad = String::from_utf8_lossy(&mutate(text.as_bytes(), &muts)).into_owned();
        check_text_frame(&bad);
    }

    /// Messages as they come off the wire, applied to the hub: presence is cut to 100
    /// characters, sizes outside 1–1000 × 1–500 are refused, a terminal never gets one.
    #[test]
    fn parsed_messages_keep_the_hubs_bounds(
        msgs in vec(
            prop_oneof![
                proptest::option::of(any::<String>())
                    .prop_map(|looking_at| WsClient::Presence { looking_at }),
                (0u32..4, any::<u16>(), any::<u16>()).prop_map(|(terminal, cols, rows)| {
                    WsClient::Resize { terminal, cols, rows }
                }),
                (0u32..4, 0u16..1200, 0u16..600).prop_map(|(terminal, cols, rows)| {
                    WsClient::Resize { terminal, cols, rows }
                }),
            ],
            1..10,
        ),
    ) {
        let mut f = fixture();
        let mut screens = f.hub_screens();
        for m in msgs {
            let wire = serde_json::to_string(&m).unwrap();
            let m: WsClient = serde_json::from_str(&wire).unwrap();
            match m {
                WsClient::Presence { looking_at } => {
                    f.hub.presence(f.driver, looking_at.clone());
                    f.hub.flush_presence(f.driver);
                    let (texts, _) = f.drain();
                    for t in texts {
                        if let Ok(WsServer::Presence { looking_at: Some(l), .. }) =
                            serde_json::from_str::<WsServer>(&t)
                        {
                            prop_assert!(l.chars().count() <= 100, "presence of {} chars", l.chars().count());
                        }
                    }
                }
                WsClient::Resize { terminal, cols, rows } => {
                    let r = f.hub.resize(f.driver, terminal, cols, rows);
                    let fits = (1..=1000).contains(&cols) && (1..=500).contains(&rows);
                    prop_assert_eq!(r.is_ok(), fits && (terminal == 1 || terminal == 2));
                    for u in f.upstream(1).into_iter().chain(f.upstream(2)) {
                        if let Upstream::Resize { cols, rows } = u {
                            prop_assert!((1..=1000).contains(&cols) && (1..=500).contains(&rows));
                        }
                    }
                    if screens.has_changed().unwrap_or(false) {
                        let text = screens.borrow_and_update().clone();
                        let Ok(WsServer::Terminals { terminals }) = serde_json::from_slice(&text) else {
                            panic!("screens: {}", String::from_utf8_lossy(&text));
                        };
                        for t in terminals {
                            prop_assert!((1..=1000).contains(&t.cols) && (1..=500).contains(&t.rows));
                        }
                    }
                    f.drain();
                }
                _ => unreachable!(),
            }
        }
    }
}

impl Fixture {
    fn hub_screens(&self) -> tokio::sync::watch::Receiver<bytes::Bytes> {
        let (out, _inbox) = outbox();
        let (me, watches) = self.hub.join(
            "w".into(),
            None,
            Role::Viewer,
            None,
            out,
            |_, _, c, _, _| WsServer::Control { controller: c },
        );
        self.hub.leave(me.id);
        watches.screens
    }
}

proptest! {
    // Up to a few hundred KiB of terminal output per case.
    #![proptest_config(config(128))]

    /// Output from the workspace's terminal: every member gets each chunk as one frame of that
    /// terminal; a late joiner's scrollback is the newest `TERMINAL_SCROLLBACK_BYTES` at most.
    #[test]
    fn terminal_output_is_fanned_out_and_its_scrollback_bounded(
        chunks in vec((any::<u8>(), 0usize..96 * 1024), 1..6),
    ) {
        let mut f = fixture();
        let mut all = Vec::new();
        for (seed, len) in chunks {
            let chunk: Vec<u8> = (0..len).map(|i| seed.wrapping_add(i as u8)).collect();
            f.hub.output(2, &chunk);
            all.extend_from_slice(&chunk);
            let (_, frames) = f.drain();
            prop_assert_eq!(frames.len(), 2, "one frame per member");
            for fr in frames {
                prop_assert_eq!(decode_terminal(&fr), Some((2, &chunk[..])));
            }
        }
        f.hub.output(9, b"no such terminal");
        prop_assert!(f.drain().1.is_empty());
        let (out, mut inbox) = outbox();
        f.hub.join("late".into(), None, Role::Viewer, None, out, |_, _, c, _, _| {
            WsServer::Control { controller: c }
        });
        let mut scrollback = Vec::new();
        while let Ok(o) = inbox.rx.try_recv() {
            if let Out::Binary(b) = o {
                let (t, bytes) = decode_terminal(&b).expect("a terminal frame");
                prop_assert_eq!(t, 2);
                scrollback.extend_from_slice(bytes);
            }
        }
        let keep = all.len().min(TERMINAL_SCROLLBACK_BYTES);
        prop_assert_eq!(scrollback.len(), keep);
        prop_assert!(scrollback[..] == all[all.len() - keep..], "the newest bytes");
    }
}

#[test]
fn deeply_nested_text_frames_are_refused() {
    // A client may send 64 KiB of brackets: refused, without exhausting the stack.
    let depth = MAX_FRAME_BYTES / 2;
    for text in [
        nested(depth),
        format!(
            r#"{{"type":"presence","looking_at":{}}}"#,
            nested(depth - 40)
        ),
        format!(
            r#"{{"type":"desktop_input","input":{{"kind":"text","text":{}}}}}"#,
            nested(depth - 60)
        ),
    ] {
        assert!(serde_json::from_str::<WsClient>(&text).is_err());
    }
}
