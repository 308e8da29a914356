//! One read of a session's new events for all of its live channels. Each channel's pump asks
//! the feed for the events after the last one it sent; the feed keeps the session's newest
//! events and reads the store only when a channel wants what was committed after the feed's
//! last read began. So one append woken in N viewers costs one query and one encoded frame,
//! not N of each (2,000 viewers each reading the store themselves waited seconds on the pool).
//! A channel replaying history older than what the feed keeps reads the store itself.

use std::collections::VecDeque;
use std::time::Instant;

use tandem_protocol::SessionId;
use tandem_protocol::live::{MAX_EVENTS_PER_FRAME, WsServer};

use crate::{Result, db};

/// Events a feed keeps (the newest).
pub const KEPT: usize = 1024;

/// A page of events for one channel, encoded once for every channel that asks for it.
#[derive(Clone)]
pub struct Page {
    /// The sequence number of its last event.
    pub through: i64,
    /// The `events` message, as JSON.
    pub frame: bytes::Bytes,
}

/// What a channel knows was committed: events up to `through` (a notification's sequence
/// number), or whatever was committed before `since`. A read that has either is enough.
#[derive(Clone, Copy, Debug)]
pub struct Known {
    pub through: i64,
    pub since: Instant,
}

impl Known {
    /// Everything committed before now, whatever its number.
    pub fn now() -> Self {
        Self {
            through: i64::MAX,
            since: Instant::now(),
        }
    }
}

/// One session's shared reader.
pub struct Feed {
    session: SessionId,
    tail: tokio::sync::Mutex<Tail>,
    /// Reads of the store for new events (not a replay's own), for tests and metrics.
    reads: std::sync::atomic::AtomicU64,
}

#[derive(Default)]
struct Tail {
    /// Every event after `floor` up to `through`, in order. Empty before the first read.
    events: VecDeque<tandem_protocol::Event>,
    /// `None` until the first channel asks: the feed holds nothing yet.
    floor: Option<i64>,
    through: i64,
    /// When the last full read of the store began: it saw everything committed before.
    read_at: Option<Instant>,
    /// The last page encoded, by what it follows.
    page: Option<(i64, Page)>,
}

impl Tail {
    /// The feed holds every event after `last` that it has read.
    fn covers(&self, last: i64) -> bool {
        self.floor.is_some_and(|f| last >= f)
    }

    /// The events after `last` it holds, at most a frame's worth, encoded (once per page).
    fn page_after(&mut self, last: i64) -> Option<Page> {
        if last >= self.through {
            return None;
        }
        if let Some((after, p)) = &self.page
            && *after == last
        {
            return Some(p.clone());
        }
        let start = self.events.partition_point(|e| e.seq <= last);
        let events: Vec<_> = self
            .events
            .range(start..)
            .take(MAX_EVENTS_PER_FRAME)
            .cloned()
            .collect();
        let page = encode(events)?;
        self.page = Some((last, page.clone()));
        Some(page)
    }
}

fn encode(events: Vec<tandem_protocol::Event>) -> Option<Page> {
    let through = events.last()?.seq;
    let frame = serde_json::to_vec(&WsServer::Events { events }).unwrap_or_default();
    Some(Page {
        through,
        frame: frame.into(),
    })
}

impl Feed {
    pub fn new(session: SessionId) -> Self {
        Self {
            session,
            tail: tokio::sync::Mutex::new(Tail::default()),
            reads: Default::default(),
        }
    }

    /// How many times the feed read the store for new events.
    pub fn reads(&self) -> u64 {
        self.reads.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The next page after `last` for a channel that knows what [`Known`] says was committed:
    /// `None` when it has it all.
    pub async fn next(&self, db: &db::Db, last: i64, known: Known) -> Result<Option<Page>> {
        let mut t = self.tail.lock().await;
        if t.floor.is_none() {
            // It starts at the session's head, whoever asks first: channels replaying older
            // history read it themselves, and none can move where the feed starts.
            let head = db::events::last(db, self.session)
                .await?
                .map_or(0, |e| e.seq);
            t.floor = Some(head);
            t.through = head;
        }
        if t.covers(last) {
            let fresh =
                t.through >= known.through.max(last) || t.read_at.is_some_and(|r| r > known.since);
            if !fresh {
                self.read(&mut t, db, last).await?;
            }
            if t.covers(last) {
                return Ok(t.page_after(last));
            }
        }
        drop(t);
        // Behind what the feed keeps: its own read of the history.
        let read =
            db::events::list_after(db, self.session, last, MAX_EVENTS_PER_FRAME as i64).await?;
        Ok(encode(read))
    }
}

impl Feed {
    /// Reads what was committed after what the feed holds: a page, or more while they come
    /// full and the asking channel is past them.
    async fn read(&self, t: &mut Tail, db: &db::Db, last: i64) -> Result<()> {
        loop {
            let began = Instant::now();
            self.reads
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let read =
                db::events::list_after(db, self.session, t.through, MAX_EVENTS_PER_FRAME as i64)
                    .await?;
            let full = read.len() == MAX_EVENTS_PER_FRAME;
            // A full page may have more behind it: the next ask reads again.
            if !full {
                t.read_at = Some(began);
            }
            if let Some(newest) = read.last().map(|e| e.seq) {
                t.through = newest;
                t.events.extend(read);
                while t.events.len() > KEPT {
                    if let Some(e) = t.events.pop_front() {
                        t.floor = Some(e.seq);
                    }
                }
            }
            if !full || t.through >= last {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: i64) -> tandem_protocol::Event {
        tandem_protocol::Event {
            session_id: "4b7a2f3e-0c5d-4e8f-9a1b-2c3d4e5f6a7b".parse().unwrap(),
            seq,
            at: tandem_protocol::Timestamp(0),
            kind: tandem_protocol::EventKind::Error {
                message: format!("event {seq}"),
            },
        }
    }

    #[test]
    fn a_page_is_encoded_once_for_every_channel_at_the_same_place() {
        let mut t = Tail {
            events: (1..=5).map(event).collect(),
            floor: Some(0),
            through: 5,
            ..Tail::default()
        };
        let a = t.page_after(2).unwrap();
        let b = t.page_after(2).unwrap();
        assert_eq!(a.through, 5);
        // The same bytes, not an equal copy.
        assert_eq!(a.frame.as_ptr(), b.frame.as_ptr());
        let WsServer::Events { events } = serde_json::from_slice(&a.frame).unwrap() else {
            panic!("an events message")
        };
        assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), [3, 4, 5]);
        assert!(t.page_after(5).is_none());
        assert!(!t.covers(-1) && t.covers(0));
    }
}
