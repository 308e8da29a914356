//! A member's writer: drains its queue to the WebSocket in batches (a terminal's consecutive
//! output merged into larger frames), sends the newest terminal list and audience count as
//! they change, pings, and closes when the hub says so.

use std::time::Duration;

use tandem_protocol::live::*;
use tokio::io::AsyncWrite;

use super::hub::{Inbox, Out, Watches};
use crate::websocket::Writer;

/// Writes queued frames and the newest terminal list, pings on the heartbeat,
/// and closes when the hub says so.
pub async fn write(
    mut sink: Writer<impl AsyncWrite + Unpin>,
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
    // Consecutive frames of one terminal, their payload bytes and whose they are.
    let mut run: Vec<bytes::Bytes> = Vec::new();
    let mut run_bytes = 0;
    let mut run_terminal = None;
    for out in items {
        match out {
            Out::Binary(frame) => {
                let terminal = decode_terminal(&frame).map(|(id, _)| id);
                if !run.is_empty()
                    && (run_terminal != terminal
                        || run_bytes + frame.len().saturating_sub(4) > MAX_OUTPUT_FRAME_BYTES)
                {
                    sink.binary(merged(&mut run));
                    run_bytes = 0;
                }
                run_terminal = terminal;
                run_bytes += frame.len().saturating_sub(4);
                run.push(frame);
            }
            other => {
                if !run.is_empty() {
                    sink.binary(merged(&mut run));
                    run_bytes = 0;
                }
                match other {
                    Out::Text(t) => sink.text(t.into()),
                    // Made by serde_json: UTF-8.
                    Out::Json(b) => sink.text(b),
                    Out::Binary(_) => {}
                }
            }
        }
    }
    if !run.is_empty() {
        sink.binary(merged(&mut run));
    }
    sink.flush().await?;
    inbox.written_bytes(taken);
    Ok(taken)
}

/// One terminal frame's pieces from consecutive frames of the same terminal: the first whole,
/// the others without their 4-byte terminal id. Views of the same buffers, not copies.
fn merged(run: &mut Vec<bytes::Bytes>) -> Vec<bytes::Bytes> {
    run.drain(..)
        .enumerate()
        .map(|(i, f)| if i == 0 { f } else { f.slice(4.min(f.len())..) })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_output_keeps_one_header_and_every_byte_in_order() {
        let mut run: Vec<bytes::Bytes> = ["ab", "cd", "ef"]
            .iter()
            .map(|s| encode_terminal(7, s.as_bytes()).into())
            .collect();
        let one: Vec<u8> = merged(&mut run).concat();
        assert_eq!(decode_terminal(&one), Some((7, &b"abcdef"[..])));
        assert!(run.is_empty());
        let mut single = vec![bytes::Bytes::from(encode_terminal(2, b"x"))];
        assert_eq!(
            decode_terminal(&merged(&mut single).concat()),
            Some((2, &b"x"[..]))
        );
    }
}
