//! A member's writer: drains its queue to the WebSocket in batches (a terminal's consecutive
//! output merged into larger frames), sends the newest terminal list and audience count as
//! they change, pings, and closes when the hub says so.

use std::time::Duration;

use tandem_protocol::live::*;

use super::hub::{Inbox, Out, Watches};
use crate::websocket::{InFile, Piece, Wire, Writer};

/// Writes queued frames and the newest terminal list, pings on the heartbeat,
/// and closes when the hub says so.
pub async fn write(
    mut sink: Writer<impl Wire>,
    mut inbox: Inbox,
    mut watches: Watches,
    mut pongs: tokio::sync::watch::Receiver<bytes::Bytes>,
    metrics: std::sync::Arc<crate::metrics::Metrics>,
) {
    let mut beat = tokio::time::interval(Duration::from_secs(HEARTBEAT_SECS));
    beat.tick().await;
    let signal = inbox.close_signal();
    // The audience count is sent at most once per interval: a change waits until `due`.
    let audience_every = Duration::from_millis(AUDIENCE_INTERVAL_MS);
    let mut audience_sent: Option<tokio::time::Instant> = None;
    let mut due: Option<tokio::time::Instant> = None;
    // The hello (the first thing queued) carries the count as of the join: none goes before it.
    let mut greeted = false;
    loop {
        tokio::select! {
            biased;
            code = signal.closed() => {
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
            Ok(()) = watches.audience.changed(), if greeted && due.is_none() => {
                let now = tokio::time::Instant::now();
                due = Some(audience_sent.map_or(now, |t| (t + audience_every).max(now)));
            }
            () = tokio::time::sleep_until(due.unwrap_or_else(tokio::time::Instant::now)), if due.is_some() => {
                due = None;
                audience_sent = Some(tokio::time::Instant::now());
                let viewers = *watches.audience.borrow_and_update();
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
            Ok(()) = watches.screens.changed() => {
                let text = watches.screens.borrow_and_update().clone();
                sink.text(text);
                if !flushed(&mut sink).await {
                    return;
                }
            }
            Ok(()) = pongs.changed() => {
                let payload = pongs.borrow_and_update().clone();
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
async fn flushed(sink: &mut Writer<impl Wire>) -> bool {
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
    sink: &mut Writer<impl Wire>,
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
            Frame::Binary(pieces) => sink.binary_pieces(pieces),
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
    /// A binary message's pieces, in order (and where each also lies in a file).
    Binary(Vec<Piece>),
}

/// The messages for a batch, in order: consecutive output of one terminal merged into frames
/// of up to [`MAX_OUTPUT_FRAME_BYTES`] (the terminal's id, then views of the queued buffers, not
/// copies), and output longer than that (a new member's scrollback) cut to fit, as the
/// protocol promises clients.
fn frames(items: Vec<Out>) -> Vec<Frame> {
    let mut frames = Vec::new();
    // The run of one terminal's output being merged: its id's 4 bytes, then payload pieces.
    let mut run: Vec<Piece> = Vec::new();
    let mut run_bytes = 0;
    let mut run_terminal = None;
    let end_run = |run: &mut Vec<Piece>, frames: &mut Vec<Frame>| {
        if !run.is_empty() {
            frames.push(Frame::Binary(std::mem::take(run)));
        }
    };
    for out in items {
        match out {
            Out::Binary(frame, mut file) if frame.len() >= 4 => {
                let terminal = decode_terminal(&frame).map(|(id, _)| id);
                if run_terminal != terminal {
                    end_run(&mut run, &mut frames);
                    run_bytes = 0;
                }
                run_terminal = terminal;
                let mut payload = frame.slice(4..);
                loop {
                    if run.is_empty() {
                        run.push((frame.slice(..4), None));
                    }
                    let take = payload.len().min(MAX_OUTPUT_FRAME_BYTES - run_bytes);
                    if take > 0 {
                        let rest = file.as_ref().map(|f| InFile {
                            file: f.file.clone(),
                            at: f.at + take as u64,
                        });
                        run.push((payload.split_to(take), std::mem::replace(&mut file, rest)));
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
                    Out::Binary(b, _) => Frame::Binary(vec![(b, None)]),
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
            Frame::Binary(p) => p.iter().flat_map(|(b, _)| b.to_vec()).collect(),
            Frame::Text(t) => t.to_vec(),
        }
    }

    fn output(terminal: u32, s: &[u8]) -> Out {
        Out::Binary(encode_terminal(terminal, s).into(), None)
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

    /// Output cut into frames keeps, piece by piece, where it lies in the terminal's log.
    #[test]
    fn cut_output_keeps_its_place_in_the_log() {
        let mut log = crate::live::output_log::OutputLog::default();
        log.append(b"0123456789");
        let big = vec![b'q'; 150_000];
        let file = log.append(&big).expect("logged");
        assert_eq!(file.at, 10);
        let f = frames(vec![Out::Binary(
            encode_terminal(1, &big).into(),
            Some(file),
        )]);
        let mut want = 10;
        for frame in &f {
            let Frame::Binary(pieces) = frame else {
                panic!("{frame:?}")
            };
            assert!(pieces[0].1.is_none(), "the terminal's id is not in the log");
            for (b, file) in &pieces[1..] {
                assert_eq!(file.as_ref().expect("in the log").at, want);
                want += b.len() as u64;
            }
        }
        assert_eq!(want, 150_010);
    }

    /// No frame carries more output than the protocol's bound, however large what was queued
    /// (a new member's scrollback is one item of up to 2 MiB), and nothing is lost or reordered.
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
