//! A terminal's output as it comes from the workspace agent's PTY WebSocket: after a frame, the
//! frames already waiting behind it are taken with it, so output the agent sent as several frames
//! in a burst goes to the hub, and out to every member, once. Each hand-over to the hub is a push
//! to every member's queue and a wake of its writer: with hundreds of viewers that, not the bytes,
//! was most of the server's work at a steady 1 MiB/s in small writes (docs/PERF.md). Nothing is
//! held back to wait for more.

use std::task::Poll;

use futures::{Stream, StreamExt};
use tandem_protocol::agent::PtyControl;
use tandem_protocol::live::MAX_OUTPUT_FRAME_BYTES;
use tokio_tungstenite::tungstenite::Message;

/// What the terminal's upstream said next.
#[derive(Debug, PartialEq, Eq)]
pub enum FromPty {
    /// Output: one frame, or several that were waiting together (at most
    /// [`MAX_OUTPUT_FRAME_BYTES`] unless one frame alone is larger).
    Output(Vec<u8>),
    /// The program in the terminal exited.
    Exited,
    /// The upstream closed or failed.
    Ended,
}

/// Reads a PTY upstream ([`FromPty`]).
pub struct PtyOutput<S> {
    stream: S,
    /// What was read while joining output and comes after it.
    pending: Option<FromPty>,
}

impl<S, E> PtyOutput<S>
where
    S: Stream<Item = Result<Message, E>> + Unpin,
{
    pub fn new(stream: S) -> Self {
        Self {
            stream,
            pending: None,
        }
    }

    /// The next thing the upstream said. Cancel-safe: the only await that can wait is for the
    /// first frame; what follows it is taken only if already there.
    pub async fn next(&mut self) -> FromPty {
        let mut out = match self.pending.take() {
            Some(FromPty::Output(b)) => b,
            Some(said) => return said,
            None => match self.first().await {
                Ok(b) => b,
                Err(said) => return said,
            },
        };
        while out.len() < MAX_OUTPUT_FRAME_BYTES {
            // One poll, with the task's own waker: a frame not there yet is not waited for, and
            // the task is woken when it comes.
            let next = std::future::poll_fn(|cx| {
                Poll::Ready(match self.stream.poll_next_unpin(cx) {
                    Poll::Ready(x) => Some(x),
                    Poll::Pending => None,
                })
            })
            .await;
            let Some(next) = next else {
                break;
            };
            match next {
                Some(Ok(Message::Binary(b))) => {
                    if out.len() + b.len() > MAX_OUTPUT_FRAME_BYTES {
                        self.pending = Some(FromPty::Output(Vec::from(b)));
                        break;
                    }
                    out.extend_from_slice(&b);
                }
                Some(Ok(m)) => {
                    if let Some(said) = control(&m) {
                        self.pending = Some(said);
                        break;
                    }
                }
                Some(Err(_)) | None => {
                    self.pending = Some(FromPty::Ended);
                    break;
                }
            }
        }
        FromPty::Output(out)
    }

    /// Waits for the first output frame; `Err` with what came instead.
    async fn first(&mut self) -> Result<Vec<u8>, FromPty> {
        loop {
            match self.stream.next().await {
                Some(Ok(Message::Binary(b))) => return Ok(Vec::from(b)),
                Some(Ok(m)) => {
                    if let Some(said) = control(&m) {
                        return Err(said);
                    }
                }
                Some(Err(_)) | None => return Err(FromPty::Ended),
            }
        }
    }
}

/// A text frame that says the program exited; other messages say nothing here.
fn control(m: &Message) -> Option<FromPty> {
    match m {
        Message::Text(t) => matches!(
            serde_json::from_str::<PtyControl>(t),
            Ok(PtyControl::Exit { .. })
        )
        .then_some(FromPty::Exited),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;

    use super::*;

    type Item = Result<Message, ()>;

    fn bin(b: &[u8]) -> Item {
        Ok(Message::Binary(b.to_vec().into()))
    }

    fn exit() -> Item {
        let t = serde_json::to_string(&PtyControl::Exit { code: Some(0) }).unwrap();
        Ok(Message::Text(t.into()))
    }

    #[tokio::test]
    async fn frames_waiting_together_go_out_as_one_and_what_follows_keeps_its_place() {
        let mut up = PtyOutput::new(futures::stream::iter(vec![
            bin(b"ab"),
            bin(b"cd"),
            Ok(Message::Ping(Vec::new().into())),
            bin(b"ef"),
            exit(),
            bin(b"never read"),
        ]));
        assert_eq!(up.next().await, FromPty::Output(b"abcdef".to_vec()));
        assert_eq!(up.next().await, FromPty::Exited);
        let mut up = PtyOutput::new(futures::stream::iter(vec![bin(b"ab"), Err(())]));
        assert_eq!(up.next().await, FromPty::Output(b"ab".to_vec()));
        assert_eq!(up.next().await, FromPty::Ended);
        assert_eq!(up.next().await, FromPty::Ended);
    }

    #[tokio::test]
    async fn a_joined_piece_stays_within_a_frame_and_nothing_is_waited_for() {
        let big = vec![b'z'; MAX_OUTPUT_FRAME_BYTES / 2 + 1];
        let mut up = PtyOutput::new(futures::stream::iter(vec![bin(&big), bin(&big), bin(b"x")]));
        assert_eq!(up.next().await, FromPty::Output(big.clone()));
        let mut second = big.clone();
        second.push(b'x');
        assert_eq!(up.next().await, FromPty::Output(second));
        // Output not yet sent is not waited for: what is there goes now.
        let (tx, rx) = futures::channel::mpsc::unbounded::<Item>();
        let mut up = PtyOutput::new(rx);
        tx.unbounded_send(bin(b"first")).unwrap();
        // Ready at the first poll: it did not wait for a second frame.
        assert_eq!(
            up.next().now_or_never(),
            Some(FromPty::Output(b"first".to_vec()))
        );
        tx.unbounded_send(bin(b"then ")).unwrap();
        tx.unbounded_send(bin(b"more")).unwrap();
        assert_eq!(
            up.next().now_or_never(),
            Some(FromPty::Output(b"then more".to_vec()))
        );
        // A frame sent while the reader waits wakes it.
        let later = tokio::spawn(async move {
            tokio::task::yield_now().await;
            tx.unbounded_send(bin(b"later")).unwrap();
            tx
        });
        let got = tokio::time::timeout(std::time::Duration::from_secs(10), up.next()).await;
        assert_eq!(got, Ok(FromPty::Output(b"later".to_vec())));
        drop(later.await.unwrap());
        assert_eq!(up.next().await, FromPty::Ended);
    }

    #[tokio::test]
    async fn an_exit_first_and_a_frame_over_the_bound_pass_as_they_are() {
        let mut up = PtyOutput::new(futures::stream::iter(vec![exit(), bin(b"after")]));
        assert_eq!(up.next().await, FromPty::Exited);
        let huge = vec![b'y'; MAX_OUTPUT_FRAME_BYTES * 3];
        let exact = vec![b'w'; MAX_OUTPUT_FRAME_BYTES - 2];
        let mut up = PtyOutput::new(futures::stream::iter(vec![
            bin(&huge),
            bin(&exact),
            bin(b"ww"),
            bin(b"v"),
        ]));
        assert_eq!(up.next().await, FromPty::Output(huge));
        let mut full = exact.clone();
        full.extend_from_slice(b"ww");
        assert_eq!(up.next().await, FromPty::Output(full));
        assert_eq!(up.next().await, FromPty::Output(b"v".to_vec()));
    }
}
