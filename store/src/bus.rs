//! What one server process tells the others, and itself: per-session "newest committed event"
//! watches, and control messages (stop or steer a turn that runs in whichever process holds
//! it). Within a process it is a watch per session and a broadcast. On PostgreSQL, processes
//! also hear each other at once through LISTEN/NOTIFY: a transaction that appends events
//! notifies `tandem_events` as part of its commit, and control messages go out on
//! `tandem_control`. An event notification only ever says "look": subscribers read the store,
//! so a lost one (a listener reconnecting) costs time, never an event — the live channel still
//! looks every few seconds (the server's `live::socket::POLL_OTHER_PROCESSES`). A control message sent while the
//! listener that should hear it reconnects is lost; a stop is also kept with its prompt, which
//! the running turn's next heartbeat finds.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tandem_protocol::SessionId;
use tokio::sync::{broadcast, oneshot, watch};

/// The channel event appends are announced on (`<session>:<seq>`).
pub const EVENTS_CHANNEL: &str = "tandem_events";
/// The channel control messages travel on (JSON, read by the turns module).
pub const CONTROL_CHANNEL: &str = "tandem_control";
/// Control messages queued per receiver before the slowest misses some.
const CONTROL_QUEUE: usize = 256;

/// Per-session watches and the control broadcast.
#[derive(Debug)]
pub struct EventBus {
    sessions: Mutex<HashMap<SessionId, watch::Sender<i64>>>,
    control: broadcast::Sender<String>,
    /// Ends the PostgreSQL listener (dropped with the bus, or on [`EventBus::stop`]).
    stop: Mutex<Option<oneshot::Sender<()>>>,
    /// Told of every event this process appends (its metrics).
    observer: ObserverSlot,
}

#[derive(Default)]
struct ObserverSlot(std::sync::OnceLock<Observer>);

impl std::fmt::Debug for ObserverSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("observer")
    }
}

/// What [`EventBus::observe`] is told of.
pub enum Observation<'a> {
    /// An event this process appended.
    Event(SessionId, &'a tandem_protocol::EventKind),
    /// A prompt claimed by a turn after waiting in its queue this long (ms).
    PromptWaited(i64),
    /// A snapshot build ended.
    SnapshotBuilt { ok: bool },
    /// A snapshot was set aside after failing starts again and again (the breaker).
    BreakerTripped,
}

/// What [`EventBus::observe`] calls.
pub type Observer = Box<dyn Fn(Observation<'_>) + Send + Sync>;

impl Default for EventBus {
    fn default() -> Self {
        Self {
            sessions: Default::default(),
            control: broadcast::channel(CONTROL_QUEUE).0,
            stop: Mutex::new(None),
            observer: ObserverSlot::default(),
        }
    }
}

impl EventBus {
    /// Sets what is told of every event this process appends (once; later calls are ignored).
    pub fn observe(&self, f: Observer) {
        let _ = self.observer.0.set(f);
    }

    /// Tells the observer of an event appended (in a transaction that may still roll back:
    /// what it counts is what was attempted).
    pub fn observed(&self, what: Observation<'_>) {
        if let Some(f) = self.observer.0.get() {
            f(what);
        }
    }

    /// A watch of `session`'s newest committed sequence number (as far as this process knows).
    pub fn subscribe(&self, session: SessionId) -> watch::Receiver<i64> {
        let mut map = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        // Forget sessions nobody watches any more.
        map.retain(|_, tx| tx.receiver_count() > 0);
        map.entry(session)
            .or_insert_with(|| watch::channel(0).0)
            .subscribe()
    }

    /// `session` has committed events up to `seq`.
    pub fn publish(&self, session: SessionId, seq: i64) {
        let map = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(tx) = map.get(&session) {
            tx.send_if_modified(|cur| {
                let newer = seq > *cur;
                if newer {
                    *cur = seq;
                }
                newer
            });
        }
    }

    /// Control messages, this process's and (on PostgreSQL) every other's.
    pub fn control(&self) -> broadcast::Receiver<String> {
        self.control.subscribe()
    }

    /// Hands a control message to this process's receivers.
    pub fn deliver_control(&self, msg: String) {
        let _ = self.control.send(msg);
    }

    /// Ends the listener, if any.
    pub fn stop(&self) {
        self.stop.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    /// Listens to the other processes on PostgreSQL at `url` until the bus goes or stops.
    pub fn listen(self: &Arc<Self>, url: &str) {
        let (tx, rx) = oneshot::channel();
        *self.stop.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx);
        tokio::spawn(listen(url.to_string(), Arc::downgrade(self), rx));
    }
}

/// `<session>:<seq>`.
pub fn event_payload(session: SessionId, seq: i64) -> String {
    format!("{session}:{seq}")
}

fn parse_event(payload: &str) -> Option<(SessionId, i64)> {
    let (s, q) = payload.split_once(':')?;
    Some((s.parse().ok()?, q.parse().ok()?))
}

async fn listen(url: String, bus: Weak<EventBus>, mut stop: oneshot::Receiver<()>) {
    let mut delay = Duration::from_millis(200);
    loop {
        let mut listener = match sqlx::postgres::PgListener::connect(&url).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen to the other server processes; retrying");
                tokio::select! {
                    _ = &mut stop => return,
                    () = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(Duration::from_secs(10));
                continue;
            }
        };
        if let Err(e) = listener.listen_all([EVENTS_CHANNEL, CONTROL_CHANNEL]).await {
            tracing::warn!(error = %e, "LISTEN failed; retrying");
            tokio::select! {
                _ = &mut stop => return,
                () = tokio::time::sleep(delay) => {}
            }
            delay = (delay * 2).min(Duration::from_secs(10));
            continue;
        }
        delay = Duration::from_millis(200);
        loop {
            let n = tokio::select! {
                _ = &mut stop => return,
                n = listener.recv() => n,
            };
            let Some(bus) = bus.upgrade() else { return };
            match n {
                Ok(n) if n.channel() == EVENTS_CHANNEL => {
                    if let Some((session, seq)) = parse_event(n.payload()) {
                        bus.publish(session, seq);
                    }
                }
                Ok(n) => bus.deliver_control(n.payload().to_string()),
                // recv() reconnects by itself; an error here means it could not.
                Err(e) => {
                    tracing::warn!(error = %e, "listening to the other server processes failed; reconnecting");
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_payloads_round_trip_and_junk_is_ignored() {
        let id: SessionId = "0b8c2a52-3c1f-4c36-9a59-7d9d2a1e4f10".parse().unwrap();
        assert_eq!(parse_event(&event_payload(id, 42)), Some((id, 42)));
        assert_eq!(parse_event("nonsense"), None);
        assert_eq!(parse_event("0b8c2a52:x"), None);
    }
}
