//! The queue to one member's socket: what the hub and the event feed put in it, bounded by
//! bytes, and the member's side its writer drains.

use std::sync::Arc;
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};

use tandem_protocol::live::*;
use tokio::sync::{Notify, mpsc};

/// What a member's writer sends.
#[derive(Debug)]
pub enum Out {
    Text(String),
    /// Shared: one JSON message (UTF-8) queued to many members without a copy each.
    Json(bytes::Bytes),
    /// Shared: one terminal frame is queued to every member without a copy each.
    Binary(bytes::Bytes),
}

/// The queue to one member's socket: bounded by bytes; overflowing it closes the member with
/// [`close::TOO_SLOW`] instead of growing or blocking anyone.
#[derive(Clone)]
pub struct Outbox {
    tx: mpsc::UnboundedSender<Out>,
    queued: Arc<AtomicUsize>,
    closing: Arc<(AtomicU16, Notify)>,
}

/// The member's side of its outbox.
pub struct Inbox {
    pub rx: mpsc::UnboundedReceiver<Out>,
    queued: Arc<AtomicUsize>,
    closing: Arc<(AtomicU16, Notify)>,
}

impl Inbox {
    /// Marks `out` as written (its bytes leave the queue).
    pub fn written(&self, out: &Out) {
        self.written_bytes(size(out));
    }

    /// Marks `n` queued bytes as written.
    pub fn written_bytes(&self, n: usize) {
        self.queued.fetch_sub(n, Ordering::Relaxed);
    }

    /// What completes when the hub closes this member.
    pub fn close_signal(&self) -> CloseSignal {
        CloseSignal(self.closing.clone())
    }
}

/// Completes when a member is closed ([`Inbox::close_signal`]).
pub struct CloseSignal(Arc<(AtomicU16, Notify)>);

impl CloseSignal {
    /// The close code, once there is one.
    pub async fn closed(&self) -> u16 {
        loop {
            let notified = self.0.1.notified();
            let code = self.0.0.load(Ordering::Acquire);
            if code != 0 {
                return code;
            }
            notified.await;
        }
    }
}

/// Bytes `out` takes in a member's queue.
pub fn size(out: &Out) -> usize {
    match out {
        Out::Text(t) => t.len(),
        Out::Json(b) | Out::Binary(b) => b.len(),
    }
}

/// A new outbox and its inbox.
pub fn outbox() -> (Outbox, Inbox) {
    let (tx, rx) = mpsc::unbounded_channel();
    let queued = Arc::new(AtomicUsize::new(0));
    let closing = Arc::new((AtomicU16::new(0), Notify::new()));
    (
        Outbox {
            tx,
            queued: queued.clone(),
            closing: closing.clone(),
        },
        Inbox {
            rx,
            queued,
            closing,
        },
    )
}

impl Outbox {
    /// Queues `out`; false (and the member is closed as too slow) if that would pass
    /// [`MAX_QUEUED_BYTES`].
    pub fn push(&self, out: Out) -> bool {
        let n = size(&out);
        if self.queued.fetch_add(n, Ordering::Relaxed) + n > MAX_QUEUED_BYTES {
            self.queued.fetch_sub(n, Ordering::Relaxed);
            self.close(close::TOO_SLOW);
            return false;
        }
        if self.tx.send(out).is_err() {
            self.queued.fetch_sub(n, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Queues a JSON message.
    pub fn send(&self, msg: &WsServer) -> bool {
        self.push(Out::Text(serde_json::to_string(msg).unwrap_or_default()))
    }

    /// Closes the member's channel with `code` (the first code wins).
    pub fn close(&self, code: u16) {
        if self
            .closing
            .0
            .compare_exchange(0, code, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.closing.1.notify_waiters();
        }
    }

    /// Bytes waiting to be written.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    pub fn is_closed(&self) -> bool {
        self.closing.0.load(Ordering::Acquire) != 0 || self.tx.is_closed()
    }
}
