//! One terminal's upstream, the workspace agent's PTY WebSocket: its output handed to the hub
//! (paced by the size of the audience), the hub's input and resizes sent to it.
//!
//! Each hand-over costs every member a queued item, a wake of its writer, a write to its socket
//! and a TCP segment, whatever its size: at 2,000 viewers of a terminal writing 10 KiB every
//! 10 ms that per-write work, not the bytes, was most of the server's CPU (the same bytes in
//! tenfold larger pieces cost a third, docs/PERF.md). So hand-overs are spaced by
//! [`PER_MEMBER`] for each member (at most [`MOST`]): output that comes while the last
//! hand-over is that recent is held and goes with the next one. Output after a quiet spell goes
//! at once; with a handful of members the spacing is tens of microseconds (the timer's grain
//! makes a held piece wait at most about a millisecond), so typing is not slowed; only a large
//! audience trades up to 25 ms of latency for a bounded fan-out rate.

use std::time::Duration;

use futures::{Sink, SinkExt, Stream};
use tandem_protocol::agent::PtyControl;
use tandem_protocol::live::MAX_OUTPUT_FRAME_BYTES;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;

use super::hub::Upstream;
use super::pty_output::{FromPty, PtyOutput};

/// The spacing of hand-overs per member of the audience.
pub const PER_MEMBER: Duration = Duration::from_micros(10);

/// The most hand-overs are spaced by (reached at 2,500 members).
pub const MOST: Duration = Duration::from_millis(25);

/// Most output held between hand-overs: past it the upstream is not read until the next
/// hand-over (the agent's PTY then waits), so a terminal's rate to a large audience is bounded
/// at this much per [`MOST`] (10 MiB/s) instead of every member falling behind.
pub const HELD_MOST: usize = 4 * MAX_OUTPUT_FRAME_BYTES;

/// How long after a hand-over to `members` the next may follow.
pub fn spacing(members: usize) -> Duration {
    PER_MEMBER
        .saturating_mul(u32::try_from(members).unwrap_or(u32::MAX))
        .min(MOST)
}

/// Output held until its hand-over may go.
#[derive(Default)]
struct Held {
    bytes: Vec<u8>,
    /// When the next hand-over may go.
    next: Option<Instant>,
}

impl Held {
    fn hold(&mut self, b: Vec<u8>) {
        if self.bytes.is_empty() {
            self.bytes = b;
        } else {
            self.bytes.extend_from_slice(&b);
        }
    }

    /// When what is held may go; `None` when nothing is.
    fn due(&self) -> Option<Instant> {
        if self.bytes.is_empty() {
            return None;
        }
        Some(self.next.unwrap_or_else(Instant::now))
    }

    fn full(&self) -> bool {
        self.bytes.len() >= HELD_MOST
    }

    /// Hands what is held over with `hand` (which says to how many members it went, or `None`
    /// when the session's hub is gone). False when it is gone.
    fn hand(&mut self, hand: &impl Fn(&[u8]) -> Option<usize>) -> bool {
        let Some(members) = hand(&self.bytes) else {
            return false;
        };
        self.bytes.clear();
        self.next = Some(Instant::now() + spacing(members));
        true
    }
}

/// Relays one terminal until its program exits, the upstream ends or refuses input, the hub
/// stops sending input (the hub is gone) or `hand` says the hub is gone. Output is handed over
/// with `hand`, paced as the module says; what is held when the relay ends is handed over first
/// (to a hub that is gone it goes nowhere). Input is polled before output, so a terminal
/// streaming output still takes a Ctrl-C at once.
pub async fn relay<S, E, K>(
    stream: S,
    mut sink: K,
    mut input: mpsc::Receiver<Upstream>,
    hand: impl Fn(&[u8]) -> Option<usize>,
) where
    S: Stream<Item = Result<Message, E>> + Unpin,
    K: Sink<Message> + Unpin,
{
    let mut output = PtyOutput::new(stream);
    let mut held = Held::default();
    loop {
        let due = held.due();
        tokio::select! {
            biased;
            () = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {
                if !held.hand(&hand) {
                    return;
                }
            }
            up = input.recv() => {
                let msg = match up {
                    Some(Upstream::Input(b)) => Message::Binary(b.into()),
                    Some(Upstream::Resize { cols, rows }) => Message::Text(
                        serde_json::to_string(&PtyControl::Resize { cols, rows })
                            .unwrap_or_default()
                            .into(),
                    ),
                    None => break,
                };
                if sink.send(msg).await.is_err() {
                    break;
                }
            }
            said = output.next(), if !held.full() => match said {
                FromPty::Output(b) => {
                    held.hold(b);
                    if held.due().is_some_and(|d| d <= Instant::now()) && !held.hand(&hand) {
                        return;
                    }
                }
                FromPty::Exited | FromPty::Ended => break,
            },
        }
    }
    if held.due().is_some() {
        held.hand(&hand);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use futures::StreamExt;

    use super::*;

    type Item = Result<Message, ()>;

    /// What was handed over: when, and what.
    type Handed = Arc<Mutex<Vec<(Instant, Vec<u8>)>>>;

    /// A relay over channels: the upstream's output in, what was handed over out, with
    /// `members` as the audience; its input and its task.
    fn relay_to(
        members: usize,
    ) -> (
        futures::channel::mpsc::UnboundedSender<Item>,
        Handed,
        mpsc::Sender<Upstream>,
        tokio::task::JoinHandle<()>,
    ) {
        let (out_tx, out_rx) = futures::channel::mpsc::unbounded::<Item>();
        let (in_tx, in_rx) = mpsc::channel(8);
        let handed = Arc::new(Mutex::new(Vec::new()));
        let log = handed.clone();
        let task = tokio::spawn(relay(
            out_rx,
            futures::sink::drain(),
            in_rx,
            move |b: &[u8]| {
                log.lock().unwrap().push((Instant::now(), b.to_vec()));
                Some(members)
            },
        ));
        (out_tx, handed, in_tx, task)
    }

    fn bin(b: &[u8]) -> Item {
        Ok(Message::Binary(b.to_vec().into()))
    }

    /// The relay's end, or a failure if it hangs (paused time with no timer left would
    /// otherwise park the test for ever).
    async fn ended(task: tokio::task::JoinHandle<()>) {
        tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .expect("the relay ends")
            .unwrap();
    }

    /// Steps paused time until `n` hand-overs were made.
    async fn until(handed: &Mutex<Vec<(Instant, Vec<u8>)>>, n: usize) {
        while handed.lock().unwrap().len() < n {
            tokio::time::sleep(Duration::from_micros(100)).await;
        }
    }

    /// With 2,000 members, output every millisecond goes out once per spacing (20 ms), all of
    /// it in order; the first piece after a quiet spell goes at once.
    #[tokio::test(start_paused = true)]
    async fn a_large_audience_gets_output_once_per_spacing() {
        let (out, handed, _input, task) = relay_to(2000);
        assert_eq!(spacing(2000), Duration::from_millis(20));
        let start = Instant::now();
        out.unbounded_send(bin(b"first")).unwrap();
        until(&handed, 1).await;
        assert_eq!(
            handed.lock().unwrap()[0].0,
            start,
            "held after a quiet spell"
        );
        let mut sent = Vec::new();
        for i in 0..40u32 {
            tokio::time::sleep(Duration::from_millis(1)).await;
            let piece = format!("<{i}>");
            sent.extend_from_slice(piece.as_bytes());
            out.unbounded_send(bin(piece.as_bytes())).unwrap();
        }
        drop(out);
        ended(task).await;
        let handed = handed.lock().unwrap();
        let got: Vec<u8> = handed[1..].iter().flat_map(|(_, b)| b.clone()).collect();
        assert_eq!(got, sent, "every byte, in order");
        // 40 pieces over 40 ms: the first hand-over, then one per 20 ms (and what was held
        // when the upstream ended).
        assert!(handed.len() <= 4, "{} hand-overs", handed.len());
        for w in handed.windows(2) {
            assert!(w[1].0 - w[0].0 >= Duration::from_millis(20) || w[1].1.ends_with(b"<39>"));
        }
    }

    /// Output held while nothing else comes goes out on its own when the spacing has passed
    /// (the timer, not the next piece, hands it over).
    #[tokio::test(start_paused = true)]
    async fn held_output_goes_out_on_time_without_more_output() {
        let (out, handed, _input, task) = relay_to(2000);
        out.unbounded_send(bin(b"a")).unwrap();
        until(&handed, 1).await;
        tokio::time::sleep(Duration::from_millis(1)).await;
        out.unbounded_send(bin(b"b")).unwrap();
        tokio::time::timeout(Duration::from_secs(1), until(&handed, 2))
            .await
            .expect("the held piece goes out");
        {
            let handed = handed.lock().unwrap();
            assert_eq!(handed[1].1, b"b");
            // On the timer's millisecond grain.
            let after = handed[1].0 - handed[0].0;
            assert!(
                after >= spacing(2000) && after <= spacing(2000) + Duration::from_millis(1),
                "{after:?}"
            );
        }
        drop(out);
        ended(task).await;
    }

    /// A handful of members gets every piece as it comes: typing is not held.
    #[tokio::test(start_paused = true)]
    async fn a_small_audience_is_not_held() {
        let (out, handed, _input, task) = relay_to(3);
        for i in 0..10u8 {
            let at = Instant::now();
            out.unbounded_send(bin(&[b'a' + i])).unwrap();
            until(&handed, usize::from(i) + 1).await;
            assert!(handed.lock().unwrap()[usize::from(i)].0 - at < Duration::from_millis(1));
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        drop(out);
        ended(task).await;
        assert_eq!(handed.lock().unwrap().len(), 10);
    }

    /// Output held when the program exits is handed over before the relay ends; a hub that is
    /// gone ends it.
    #[tokio::test(start_paused = true)]
    async fn held_output_goes_out_at_the_exit_and_a_gone_hub_ends_the_relay() {
        let (out, handed, _input, task) = relay_to(2500);
        out.unbounded_send(bin(b"a")).unwrap();
        until(&handed, 1).await;
        out.unbounded_send(bin(b"b")).unwrap();
        let exit = serde_json::to_string(&PtyControl::Exit { code: Some(0) }).unwrap();
        out.unbounded_send(Ok(Message::Text(exit.into()))).unwrap();
        ended(task).await;
        {
            let handed = handed.lock().unwrap();
            assert_eq!(handed.len(), 2);
            assert_eq!(handed[1].1, b"b");
            assert!(handed[1].0 - handed[0].0 < MOST, "not held to its time");
        }

        let (out_tx, out_rx) = futures::channel::mpsc::unbounded::<Item>();
        let (_in_tx, in_rx) = mpsc::channel(8);
        let task = tokio::spawn(relay(
            out_rx,
            futures::sink::drain(),
            in_rx,
            |_: &[u8]| None,
        ));
        out_tx.unbounded_send(bin(b"x")).unwrap();
        ended(task).await;
    }

    /// Past [`HELD_MOST`] the upstream is not read until the next hand-over: what is held stays
    /// bounded however fast the terminal writes.
    #[tokio::test(start_paused = true)]
    async fn what_is_held_stays_bounded() {
        let (out, handed, _input, task) = relay_to(2500);
        let piece = vec![b'z'; MAX_OUTPUT_FRAME_BYTES];
        for _ in 0..20 {
            out.unbounded_send(bin(&piece)).unwrap();
        }
        drop(out);
        ended(task).await;
        let handed = handed.lock().unwrap();
        let total: usize = handed.iter().map(|(_, b)| b.len()).sum();
        assert_eq!(total, 20 * MAX_OUTPUT_FRAME_BYTES);
        assert!(
            handed
                .iter()
                .all(|(_, b)| b.len() <= HELD_MOST + MAX_OUTPUT_FRAME_BYTES),
            "{:?}",
            handed.iter().map(|(_, b)| b.len()).collect::<Vec<_>>()
        );
        assert!(handed.len() >= 20 * MAX_OUTPUT_FRAME_BYTES / (HELD_MOST + MAX_OUTPUT_FRAME_BYTES));
    }

    /// Input from the hub reaches the upstream while output is held.
    #[tokio::test(start_paused = true)]
    async fn input_passes_while_output_is_held() {
        let (out_tx, out_rx) = futures::channel::mpsc::unbounded::<Item>();
        let (in_tx, in_rx) = mpsc::channel(8);
        let (sink_tx, mut sink_rx) = futures::channel::mpsc::unbounded::<Message>();
        let task = tokio::spawn(relay(out_rx, sink_tx, in_rx, |_: &[u8]| Some(2500)));
        out_tx.unbounded_send(bin(b"a")).unwrap();
        out_tx.unbounded_send(bin(b"b")).unwrap();
        in_tx.send(Upstream::Input(b"ls\r".to_vec())).await.unwrap();
        in_tx
            .send(Upstream::Resize { cols: 80, rows: 24 })
            .await
            .unwrap();
        assert_eq!(
            sink_rx.next().await,
            Some(Message::Binary(b"ls\r".to_vec().into()))
        );
        assert!(matches!(sink_rx.next().await, Some(Message::Text(t)) if t.contains("resize")));
        drop(in_tx);
        ended(task).await;
    }
}
