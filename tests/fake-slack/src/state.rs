//! The fake's world — users, channels, messages with their files and the bot's reactions, opened
//! views, handed-out trigger ids — and the records a test reads back. Plain data behind one mutex.
//!
//! Invariant: the mutex is never held across an `.await`; every change to the world is followed
//! by a bump of [`Shared::changes`], which is what `FakeSlack::wait_for` waits on.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};
use std::time::SystemTime;

use rand::Rng;
use serde_json::Value;

/// One request the fake answered: a Web API method, a file download or a `response_url` post.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    /// The Web API method (`chat.postMessage`), or `file_download` for a `url_private` fetch,
    /// or `response_url` for a post to a `response_url` the fake handed out.
    pub method: String,
    /// The arguments as one JSON object, however they came (query string, form or JSON body);
    /// JSON-valued form fields (`blocks`, `view`, …) are parsed. The token is left out.
    pub params: Value,
    /// When the fake answered it.
    pub at: SystemTime,
    /// The `error` the fake answered with, `None` for `"ok": true`.
    pub error: Option<String>,
}

/// A message as the fake holds it, in a channel's history or shown to one person only.
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    /// The channel (or DM) id it is in.
    pub channel: String,
    /// Its timestamp, which is its id within the channel (`1700000000.000100`).
    pub ts: String,
    /// The thread's parent `ts` for a reply (a parent's own `thread_ts` is left `None` here).
    pub thread_ts: Option<String>,
    /// Who posted it: a person's id, or [`crate::BOT_USER_ID`] for the bot.
    pub user: Option<String>,
    /// Posted by the bot through the Web API.
    pub bot: bool,
    /// The message's `text` (for a person's message, what they typed, mentions as `<@U…>`).
    pub text: String,
    /// The Block Kit blocks, with the `block_id`s and `action_id`s Slack fills in; `[]` for none.
    pub blocks: Value,
    /// How many times `chat.update` changed it.
    pub edits: u32,
    /// For an ephemeral message, the only person who sees it.
    pub ephemeral_to: Option<String>,
}

pub(crate) struct User {
    pub id: String,
    pub name: String,
    pub email: Option<String>,
    pub is_bot: bool,
    /// What they set as their display name (anything; their handle when unset).
    pub display_name: Option<String>,
}

pub(crate) struct Channel {
    pub name: String,
}

/// A file a person attached to a message (served at its `url_private`).
pub(crate) struct File {
    pub id: String,
    pub name: String,
    pub mimetype: String,
    pub user: String,
    pub created: u64,
    pub bytes: Vec<u8>,
}

pub(crate) struct Stored {
    pub record: Message,
    /// Ids into [`World::files`], in attachment order.
    pub files: Vec<String>,
    /// The bot's reactions, in the order added.
    pub reactions: Vec<String>,
    /// People's messages carry the id their client gave them.
    pub client_msg_id: Option<String>,
    /// The `ts` of the last edit.
    pub edited: Option<String>,
}

impl Stored {
    pub fn is_ephemeral(&self) -> bool {
        self.record.ephemeral_to.is_some()
    }
}

/// A view opened with `views.open`: the view as Slack answered it (with `id`, `hash`, `state`).
pub(crate) struct View {
    pub json: Value,
}

#[derive(Default)]
pub(crate) struct World {
    /// By id; holds the bot user too.
    pub users: BTreeMap<String, User>,
    /// By id.
    pub channels: BTreeMap<String, Channel>,
    /// Every message, ephemeral ones included, in the order posted.
    pub messages: Vec<Stored>,
    /// By id.
    pub files: BTreeMap<String, File>,
    pub views: Vec<View>,
    /// Trigger ids handed out in deliveries → whether `views.open` has used it (each is good once).
    pub triggers: HashMap<String, bool>,
    pub calls: Vec<Call>,
    /// Every `response_url` handed out in a delivery.
    pub response_urls: HashSet<String>,
    /// The last `ts` handed out, in microseconds since the epoch.
    last_ts: u128,
}

impl World {
    /// A fresh message `ts` (`1700000000.000100`): the current time, always later than the last.
    pub fn next_ts(&mut self) -> String {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros());
        self.last_ts = now.max(self.last_ts + 1);
        format!(
            "{}.{:06}",
            self.last_ts / 1_000_000,
            self.last_ts % 1_000_000
        )
    }

    /// The message `ts` in `channel`'s history (ephemeral messages are not in it).
    pub fn message(&self, channel: &str, ts: &str) -> Option<usize> {
        self.messages
            .iter()
            .position(|m| !m.is_ephemeral() && m.record.channel == channel && m.record.ts == ts)
    }

    /// The message `ts` in `channel`, ephemeral or not.
    pub fn any_message(&self, channel: &str, ts: &str) -> Option<usize> {
        self.messages
            .iter()
            .position(|m| m.record.channel == channel && m.record.ts == ts)
    }

    /// A fresh trigger id, remembered so `views.open` accepts it once.
    pub fn trigger(&mut self) -> String {
        let id = format!(
            "{}.{}.{}",
            now(),
            rand::rng().random_range(100_000_000u64..1_000_000_000),
            random_from(HEX, 32)
        );
        self.triggers.insert(id.clone(), false);
        id
    }

    /// A fresh `response_url` under `base` (`kind` is `actions` or `commands`), remembered so
    /// the fake accepts posts to it.
    pub fn response_url(&mut self, base: &str, kind: &str) -> String {
        let url = format!(
            "{base}/{kind}/{}/{}/{}",
            crate::TEAM_ID,
            rand::rng().random_range(1_000_000_000_000u64..10_000_000_000_000),
            random_text(24)
        );
        self.response_urls.insert(url.clone());
        url
    }

    /// The replies to `root` in `channel`'s history, in the order posted.
    pub fn replies<'w>(
        &'w self,
        channel: &'w str,
        root: &'w str,
    ) -> impl Iterator<Item = usize> + 'w {
        self.messages
            .iter()
            .enumerate()
            .filter(move |(_, m)| {
                !m.is_ephemeral()
                    && m.record.channel == channel
                    && m.record.thread_ts.as_deref() == Some(root)
            })
            .map(|(i, _)| i)
    }
}

const UPPER: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ";
const HEX: &[u8] = b"0123456789abcdef";
const ALNUM: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

fn random_from(alphabet: &[u8], n: usize) -> String {
    let mut rng = rand::rng();
    (0..n)
        .map(|_| char::from(alphabet[rng.random_range(0..alphabet.len())]))
        .collect()
}

/// A Slack object id: `prefix` and ten upper-case letters and digits (`V0AB12CD3E4`).
pub(crate) fn slack_id(prefix: &str) -> String {
    format!("{prefix}{}", random_from(UPPER, 10))
}

/// The short id Slack gives a block or element that came without one (`qX8bV`).
pub(crate) fn short_id() -> String {
    random_from(ALNUM, 5)
}

/// `n` random letters and digits.
pub(crate) fn random_text(n: usize) -> String {
    random_from(ALNUM, n)
}

/// Seconds since the Unix epoch.
pub(crate) fn now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Orders message timestamps (`secs.micros`) by time.
pub(crate) fn ts_key(ts: &str) -> (u64, u64) {
    let (secs, micros) = ts.split_once('.').unwrap_or((ts, "0"));
    (secs.parse().unwrap_or(0), micros.parse().unwrap_or(0))
}

/// Everything the handlers and the test-facing handle share.
pub(crate) struct Shared {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    pub signing_secret: String,
    pub bot_token: String,
    /// The deprecated verification token Slack still puts in every delivery.
    pub verification_token: String,
    pub world: Mutex<World>,
    /// Bumped after every change to the world.
    pub changes: tokio::sync::watch::Sender<u64>,
}

impl Shared {
    pub fn world(&self) -> MutexGuard<'_, World> {
        // A panicking test thread must not wedge the server for the other tests' assertions.
        self.world.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Changes the world and wakes everyone waiting for a change.
    pub fn update<R>(&self, change: impl FnOnce(&mut World) -> R) -> R {
        let result = change(&mut self.world());
        self.changes.send_modify(|n| *n += 1);
        result
    }
}
