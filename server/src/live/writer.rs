//! A member's writer: drains its queue to the WebSocket in batches (a terminal's consecutive
//! output merged into larger frames), sends the newest terminal list and audience count as
//! they change, pings, and closes when the hub says so.

use std::time::Duration;

use tandem_protocol::live::*;

use super::hub::{Inbox, Out, Watches};
use tokio::io::AsyncWrite;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::WatchStream;

use crate::websocket::Writer;

/// Writes queued frames and the newest terminal list, pings on the heartbeat,
/// and closes when the hub says so.
///
/// What it waits on besides the queue (the close signal, the hub's terminal list and audience
/// count, the reader's pongs) is waited on by futures kept across the loop, not made again on
/// every wake: each new wait registers with a `Notify` (the hub's two shared by every member)
/// and each dropped one takes itself off again, and with 2,000 viewers woken for every burst
/// of output those registrations were a twentieth of the server's CPU (docs/PERF.md).
pub async fn write(
    mut sink: Writer<impl AsyncWrite + Unpin>,
    mut inbox: Inbox,
    watches: Watches,
    pongs: tokio::sync::watch::Receiver<bytes::Bytes>,
    metrics: std::sync::Arc<crate::metrics::Metrics>,
) {
    let mut beat = tokio::time::interval(Duration::from_secs(HEARTBEAT_SECS));
    beat.tick().await;
    let signal = inbox.close_signal();
    let closed = signal.closed();
    tokio::pin!(closed);
    let mut screens = WatchStream::from_changes(watches.screens);
    let mut audience = WatchStream::from_changes(watches.audience);
    let mut pongs = WatchStream::from_changes(pongs);
    // The audience count is sent at most once per interval: a change waits until `due`.
    let audience_every = Duration::from_millis(AUDIENCE_INTERVAL_MS);
    let mut audience_sent: Option<tokio::time::Instant> = None;
    let mut due: Option<tokio::time::Instant> = None;
    // The newest count, and whether it has changed since it was last sent.
    let (mut viewers, mut viewers_changed) = (0, false);
    // The hello (the first thing queued) carries the count as of the join: none goes before it.
    let mut greeted = false;
    loop {
        if greeted && viewers_changed && due.is_none() {
            let now = tokio::time::Instant::now();
            due = Some(audience_sent.map_or(now, |t| (t + audience_every).max(now)));
        }
        tokio::select! {
            biased;
            code = &mut closed => {
                if code == close::TOO_SLOW {
                    metrics.live_slow();
                }
                let reason = match code {
                    close::TOO_SLOW => "too slow: fell too far behind",
                    close::FORBIDDEN => "access revoked",
                    _ => "",
                };
                // A client too slow to read the rest will not read this either: give it a moment.
                sink.close(code, reason);
                let _ = tokio::time::timeout(Duration::from_secs(1), sink.flush()).await;
                return;
            }
            // Before the queue: under a steady stream of output the queue is always ready, and
            // the count would never go out.
            Some(n) = audience.next() => {
                (viewers, viewers_changed) = (n, true);
            }
            () = tokio::time::sleep_until(due.unwrap_or_else(tokio::time::Instant::now)), if due.is_some() => {
                (due, viewers_changed) = (None, false);
                audience_sent = Some(tokio::time::Instant::now());
                let text = serde_json::to_string(&WsServer::Audience { viewers }).unwrap_or_default();
                sink.text(text.into());
                if !flushed(&mut sink).await {
                    return;
                }
            }
            out = inbox.rx.recv() => {
                let Some(out) = out else { return };
                // A client that takes nothing for this long is gone (its TCP window stays shut).
                match tokio::time::timeout(WRITE_STALL, write_queued(&mut sink, &mut inbox, out)).await {
                    Ok(Ok(n)) => {
                        greeted = true;
                        metrics.live_sent(n);
                    }
                    _ => return,
                }
            }
            Some(text) = screens.next() => {
                sink.text(text);
                if !flushed(&mut sink).await {
                    return;
                }
            }
            Some(payload) = pongs.next() => {
                sink.pong(&payload);
                if !flushed(&mut sink).await {
                    return;
                }
            }
            _ = beat.tick() => {
                sink.ping();
                if !flushed(&mut sink).await {
                    return;
                }
            }
        }
    }
}

/// How long one write may wait on a client before the channel is dropped.
const WRITE_STALL: Duration = Duration::from_secs(30);

/// Writes what is queued; false if the client is gone or took nothing for [`WRITE_STALL`]
/// (the writer then stops: a flush cut short cannot be resumed).
async fn flushed(sink: &mut Writer<impl AsyncWrite + Unpin>) -> bool {
    matches!(
        tokio::time::timeout(WRITE_STALL, sink.flush()).await,
        Ok(Ok(()))
    )
}

/// Most queued items one write takes before it flushes.
const BATCH_ITEMS: usize = 256;

/// Writes `first` and what else is already queued (up to [`BATCH_ITEMS`]) with one flush,
/// consecutive output of one terminal sent as one frame of up to [`MAX_OUTPUT_FRAME_BYTES`]
/// (its pieces written from the hub's shared buffers, not copied): the further a client falls
/// behind, the fewer and larger its frames, so the cost per byte falls as the load rises. Order
/// is kept.
async fn write_queued(
    sink: &mut Writer<impl AsyncWrite + Unpin>,
    inbox: &mut Inbox,
    first: Out,
) -> std::io::Result<usize> {
    let mut items = vec![first];
    while items.len() < BATCH_ITEMS {
        match inbox.rx.try_recv() {
            Ok(out) => items.push(out),
            Err(_) => break,
        }
    }
    // The batch counts against the member's queue bound until it is written.
    let taken: usize = items.iter().map(super::hub::size).sum();
    for frame in frames(items) {
        match frame {
            Frame::Text(t) => sink.text(t),
            Frame::Binary(pieces) => sink.binary(pieces),
        }
    }
    sink.flush().await?;
    inbox.written_bytes(taken);
    Ok(taken)
}

/// A WebSocket message of a batch.
#[derive(Debug)]
enum Frame {
    Text(bytes::Bytes),
    /// A binary message's pieces, in order.
    Binary(Vec<bytes::Bytes>),
}

/// The messages for a batch, in order: consecutive output of one terminal merged into frames
/// of up to [`MAX_OUTPUT_FRAME_BYTES`] (the terminal's id, then views of the queued buffers, not
/// copies), and output longer than that (a new member's scrollback) cut to fit, as the
/// protocol promises clients.
fn frames(items: Vec<Out>) -> Vec<Frame> {
    let mut frames = Vec::new();
    // The run of one terminal's output being merged: its id's 4 bytes, then payload pieces.
    let mut run: Vec<bytes::Bytes> = Vec::new();
    let mut run_bytes = 0;
    let mut run_terminal = None;
    let end_run = |run: &mut Vec<bytes::Bytes>, frames: &mut Vec<Frame>| {
        if !run.is_empty() {
            frames.push(Frame::Binary(std::mem::take(run)));
        }
    };
    for out in items {
        match out {
            Out::Binary(frame) if frame.len() >= 4 => {
                let terminal = decode_terminal(&frame).map(|(id, _)| id);
                if run_terminal != terminal {
                    end_run(&mut run, &mut frames);
                    run_bytes = 0;
                }
                run_terminal = terminal;
                let mut payload = frame.slice(4..);
                loop {
                    if run.is_empty() {
                        run.push(frame.slice(..4));
                    }
                    let take = payload.len().min(MAX_OUTPUT_FRAME_BYTES - run_bytes);
                    if take > 0 {
                        run.push(payload.split_to(take));
                        run_bytes += take;
                    }
                    if payload.is_empty() {
                        break;
                    }
                    end_run(&mut run, &mut frames);
                    run_bytes = 0;
                }
            }
            other => {
                end_run(&mut run, &mut frames);
                run_bytes = 0;
                run_terminal = None;
                frames.push(match other {
                    Out::Text(t) => Frame::Text(t.into()),
                    // Made by serde_json: UTF-8.
                    Out::Json(b) => Frame::Text(b),
                    // Shorter than a terminal id: not made by the hub; sent as it is.
                    Out::Binary(b) => Frame::Binary(vec![b]),
                });
            }
        }
    }
    end_run(&mut run, &mut frames);
    frames
}

#[cfg(test)]
mod tests {
    use super::*;

    fn joined(f: &Frame) -> Vec<u8> {
        match f {
            Frame::Binary(p) => p.concat(),
            Frame::Text(t) => t.to_vec(),
        }
    }

    fn output(terminal: u32, s: &[u8]) -> Out {
        Out::Binary(encode_terminal(terminal, s).into())
    }

    #[test]
    fn merged_output_keeps_one_header_and_every_byte_in_order() {
        let items = vec![
            output(7, b"ab"),
            output(7, b"cd"),
            output(7, b"ef"),
            Out::Json(bytes::Bytes::from_static(b"{}")),
            output(2, b"x"),
            output(3, b"y"),
        ];
        let f = frames(items);
        assert_eq!(f.len(), 4, "{f:?}");
        assert_eq!(decode_terminal(&joined(&f[0])), Some((7, &b"abcdef"[..])));
        assert!(matches!(&f[1], Frame::Text(t) if t == "{}"), "{f:?}");
        assert_eq!(decode_terminal(&joined(&f[2])), Some((2, &b"x"[..])));
        assert_eq!(decode_terminal(&joined(&f[3])), Some((3, &b"y"[..])));
    }

    /// A member's writer over a pipe: its queue, its audience count, the client's side of the
    /// WebSocket (once awaited) and the writer's task.
    fn member() -> (
        crate::live::outbox::Outbox,
        tokio::sync::watch::Sender<u32>,
        impl Future<Output = tokio_tungstenite::WebSocketStream<tokio::io::DuplexStream>>,
        tokio::task::JoinHandle<()>,
    ) {
        let (server, client) = tokio::io::duplex(1 << 20);
        let (out, inbox) = crate::live::outbox::outbox();
        let (screens_tx, screens) = tokio::sync::watch::channel(bytes::Bytes::new());
        let (audience_tx, audience) = tokio::sync::watch::channel(0u32);
        let (pong_tx, pongs) = tokio::sync::watch::channel(bytes::Bytes::new());
        let writer = tokio::spawn(async move {
            // The hub and the reader outlive the writer.
            let _keep = (screens_tx, pong_tx);
            write(
                Writer::new(server),
                inbox,
                Watches { screens, audience },
                pongs,
                Default::default(),
            )
            .await
        });
        let client = tokio_tungstenite::WebSocketStream::from_raw_socket(
            client,
            tokio_tungstenite::tungstenite::protocol::Role::Client,
            None,
        );
        (out, audience_tx, client, writer)
    }

    /// The audience count reaches a member after its hello and at most once per interval,
    /// with the newest number; a change made before the hello is sent after it. (The writer
    /// waits on the count with a future kept across its loop: a change while it was writing is
    /// not missed.)
    #[tokio::test]
    async fn the_audience_count_follows_the_hello_once_per_interval() {
        use tokio_tungstenite::tungstenite::Message;
        let (out, audience_tx, client, writer) = member();
        // Changed before the hello is out: not sent before it.
        audience_tx.send_replace(3);
        tokio::task::yield_now().await;
        let before_first = tokio::time::Instant::now();
        out.push(Out::Text("{\"type\":\"hello\"}".into()));
        let mut ws = client.await;
        let mut next = async || match ws.next().await.unwrap().unwrap() {
            Message::Text(t) => t.to_string(),
            m => panic!("{m:?}"),
        };
        assert_eq!(next().await, "{\"type\":\"hello\"}");
        let audience = |n: u32| serde_json::to_string(&WsServer::Audience { viewers: n }).unwrap();
        assert_eq!(next().await, audience(3));
        // Three changes at once, and output in between: one message, the newest number, no
        // sooner than the interval after the last.
        for n in [4, 5, 6] {
            audience_tx.send_replace(n);
            out.push(Out::Text(format!("{{\"n\":{n}}}")));
            tokio::task::yield_now().await;
        }
        for n in [4, 5, 6] {
            assert_eq!(next().await, format!("{{\"n\":{n}}}"));
        }
        assert_eq!(next().await, audience(6));
        assert!(before_first.elapsed() >= Duration::from_millis(AUDIENCE_INTERVAL_MS));
        writer.abort();
    }

    /// A count changing all the time (a crowd arriving) goes out once per interval, not more,
    /// and ends at the newest number.
    #[tokio::test]
    async fn a_count_that_keeps_changing_goes_out_once_per_interval() {
        use tokio_tungstenite::tungstenite::Message;
        let (out, audience_tx, client, writer) = member();
        out.push(Out::Text("{}".into()));
        let mut ws = client.await;
        // A change every 10 ms for a second, some with output queued beside them, read as
        // they come; then until the newest number arrives.
        let started = tokio::time::Instant::now();
        let mut counts = Vec::new();
        let read = async |ws: &mut tokio_tungstenite::WebSocketStream<_>| match ws
            .next()
            .await
            .unwrap()
            .unwrap()
        {
            Message::Text(t) => match serde_json::from_str(&t) {
                Ok(WsServer::Audience { viewers }) => Some(viewers),
                _ => None,
            },
            _ => None,
        };
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        for n in 1..=100u32 {
            audience_tx.send_replace(n);
            if n % 3 == 0 {
                out.push(Out::Text("{}".into()));
            }
            tokio::select! {
                _ = tick.tick() => {}
                n = read(&mut ws) => counts.extend(n),
            }
        }
        let last = tokio::time::timeout(Duration::from_secs(5), async {
            while counts.last() != Some(&100) {
                counts.extend(read(&mut ws).await);
            }
        });
        last.await.expect("the newest count");
        writer.abort();
        let intervals = started.elapsed().as_millis() / u128::from(AUDIENCE_INTERVAL_MS);
        assert!(
            counts.len() as u128 <= intervals + 1,
            "{} counts in {intervals} intervals: {counts:?}",
            counts.len()
        );
        assert!(counts.windows(2).all(|w| w[0] < w[1]), "{counts:?}");
    }

    /// No frame carries more output than the protocol's bound, however large what was queued
    /// (a new member's scrollback is one item of up to 256 KiB), and nothing is lost or reordered.
    #[test]
    fn output_over_the_bound_is_cut_into_frames_that_fit() {
        let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let items = vec![
            output(1, &big[..1000]),
            output(1, &big[1000..150_000]),
            output(1, &big[150_000..]),
            output(1, b""),
            output(4, b"tail"),
        ];
        let f = frames(items);
        let mut got = Vec::new();
        for frame in &f[..f.len() - 1] {
            let bytes = joined(frame);
            let (id, out) = decode_terminal(&bytes).expect("a terminal frame");
            assert_eq!(id, 1);
            assert!(out.len() <= MAX_OUTPUT_FRAME_BYTES, "{} bytes", out.len());
            got.extend_from_slice(out);
        }
        assert_eq!(got, big);
        assert_eq!(f.len(), 200_000usize.div_ceil(MAX_OUTPUT_FRAME_BYTES) + 1);
        assert_eq!(
            decode_terminal(&joined(&f[f.len() - 1])),
            Some((4, &b"tail"[..]))
        );
    }
}
