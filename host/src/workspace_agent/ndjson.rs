//! The one reader of the agent's newline-delimited JSON streams: each line one frame, parsed
//! as it arrives, every line and the pending buffer bounded (the agent is untrusted).

use http_body_util::BodyExt;
use serde::de::DeserializeOwned;

use super::MAX_ANSWER_BYTES;
use super::conn::unreachable;
use crate::{Error, Result};

/// Frames of one stream as they come; the channel is bounded so a slow reader slows the agent,
/// never memory. The last item is the frame `is_end` accepts, or the error that broke the
/// stream (a malformed or oversized line, a stream that closed early).
pub type Frames<T> = tokio::sync::mpsc::Receiver<Result<T>>;

/// Reads `body` in the background; dropping the receiver closes the stream.
pub fn read<T>(
    mut body: hyper::body::Incoming,
    what: &'static str,
    is_end: fn(&T) -> bool,
) -> Frames<T>
where
    T: DeserializeOwned + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(async move {
        let mut pending: Vec<u8> = Vec::new();
        loop {
            let frame = tokio::select! {
                f = body.frame() => f,
                () = tx.closed() => return,
            };
            let Some(frame) = frame else { break };
            let data = match frame {
                Ok(f) => match f.into_data() {
                    Ok(d) => d,
                    Err(_) => continue,
                },
                Err(e) => {
                    let _ = tx.send(Err(unreachable(&e))).await;
                    return;
                }
            };
            pending.extend_from_slice(&data);
            while let Some(nl) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=nl).collect();
                let item = serde_json::from_slice::<T>(&line).map_err(|e| {
                    Error::Internal(format!("a malformed {what} frame from the agent: {e}"))
                });
                let end = item.as_ref().map_or(true, is_end);
                if tx.send(item).await.is_err() || end {
                    return;
                }
            }
            if pending.len() > MAX_ANSWER_BYTES {
                let _ = tx
                    .send(Err(Error::Internal(format!(
                        "the agent sent an oversized {what} frame"
                    ))))
                    .await;
                return;
            }
        }
        let _ = tx
            .send(Err(unreachable(&format!(
                "the agent closed the {what} before it ended"
            ))))
            .await;
    });
    rx
}
