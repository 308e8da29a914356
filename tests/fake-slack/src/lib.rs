//! A stand-in for Slack in tests. On one loopback port it serves the Web API methods the Tandem
//! server calls (under `/api`, as slack-morphism's `with_slack_api_url` addresses them) and the
//! files people attach (`url_private`, bot token only); it builds the payloads Slack delivers to
//! an app — Events API envelopes, interactivity (`block_actions`, `view_submission`) and slash
//! commands — and POSTs them signed with the app's signing secret. It checks the bot token the
//! way Slack does and records every call, message, reaction and view, so a test can assert what
//! the production code did. The payloads are Slack's own shapes: slack-morphism's
//! `SlackPushEvent`, `SlackInteractionEvent` and `SlackCommandEvent` read them, and its client
//! reads the answers.
//!
//! The server runs on a thread and runtime of its own, so a test that blocks cannot stall it;
//! dropping the [`FakeSlack`] stops it.
//!
//! What it does not model: channel membership (the bot is in every channel the test adds),
//! pagination (a thread comes back whole), rate limits, trigger-id expiry (each is good once,
//! for ever), retries of deliveries the app did not acknowledge, and anything done through a
//! `response_url` or a slash command's reply (recorded or returned, never turned into messages).
#![forbid(unsafe_code)]

mod api;
mod commands;
mod delivery;
mod error;
mod events;
mod files;
mod hooks;
mod interactivity;
mod shapes;
mod state;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use serde_json::Value;

pub use state::{Call, Message};

use crate::error::Error;
use crate::interactivity::Act;
use crate::state::{Channel, File, Shared, Stored, User, World, now, random_text, slack_id};

/// The workspace's id.
pub const TEAM_ID: &str = "T0TANDEM";
/// The bot user's id: the `user` of the bot's messages and of `auth.test`.
pub const BOT_USER_ID: &str = "U0TANDEMBOT";
/// The bot's id: the `bot_id` of its messages.
pub const BOT_ID: &str = "B0TANDEM";
/// The app's id: `api_app_id` in every delivery.
pub const APP_ID: &str = "A0TANDEM";

/// How long [`FakeSlack::wait_for`] waits before it gives up.
const WAIT_TIMEOUT: Duration = Duration::from_secs(60);

/// A running fake Slack on `127.0.0.1`.
pub struct FakeSlack {
    shared: Arc<Shared>,
    /// Dropping it stops the server.
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl FakeSlack {
    /// Serves on `127.0.0.1:0`; the Web API is under `{url}/api`. Web API calls must carry
    /// `bot_token`; deliveries are signed with `signing_secret`.
    pub async fn start(signing_secret: &str, bot_token: &str) -> FakeSlack {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let url = format!("http://{}", listener.local_addr().expect("bound"));
        let mut world = World::default();
        world.users.insert(
            BOT_USER_ID.into(),
            User {
                id: BOT_USER_ID.into(),
                name: shapes::BOT_NAME.into(),
                email: None,
                is_bot: true,
                display_name: None,
            },
        );
        let shared = Arc::new(Shared {
            url,
            signing_secret: signing_secret.into(),
            bot_token: bot_token.into(),
            verification_token: random_text(24),
            world: Mutex::new(world),
            changes: tokio::sync::watch::Sender::new(0),
        });
        let app = app(shared.clone());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("fake-slack".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("a runtime");
                runtime.block_on(async move {
                    let listener =
                        tokio::net::TcpListener::from_std(listener).expect("adopt the listener");
                    tokio::select! {
                        _ = axum::serve(listener, app) => {}
                        _ = stopped => {}
                    }
                });
                runtime.shutdown_background();
            })
            .expect("spawn the server thread");
        FakeSlack {
            shared,
            _stop: stop,
        }
    }

    /// `http://127.0.0.1:PORT`: where files and `response_url`s are served.
    pub fn url(&self) -> String {
        self.shared.url.clone()
    }

    /// `{url}/api`: the Web API base to give slack-morphism's `with_slack_api_url`.
    pub fn api_url(&self) -> String {
        format!("{}/api", self.shared.url)
    }

    /// Adds a person to the workspace (`users.info` answers for them; without `email` their
    /// profile has none, as when the app lacks `users:read.email`).
    pub fn add_user(&self, id: &str, name: &str, email: Option<&str>) {
        let user = User {
            id: id.into(),
            name: name.into(),
            email: email.map(str::to_string),
            is_bot: false,
            display_name: None,
        };
        self.shared
            .update(|world| world.users.insert(id.into(), user));
    }

    /// Sets a person's display name, which anyone may set to anything in Slack.
    pub fn set_display_name(&self, id: &str, display_name: &str) {
        self.shared.update(|world| {
            if let Some(u) = world.users.get_mut(id) {
                u.display_name = Some(display_name.into());
            }
        });
    }

    /// Adds a channel; `D…` ids are direct messages (`channel_type: "im"`), others channels.
    pub fn add_channel(&self, id: &str, name: &str) {
        let channel = Channel { name: name.into() };
        self.shared
            .update(|world| world.channels.insert(id.into(), channel));
    }

    /// `user` posts `text` in `channel` (in the thread of `thread_ts` when given); returns its
    /// `ts`. It is in the channel's history, so `conversations.replies` sees it.
    pub fn post_as(
        &self,
        user: &str,
        channel: &str,
        thread_ts: Option<&str>,
        text: &str,
    ) -> String {
        self.post(user, channel, thread_ts, text, None)
    }

    /// Like [`Self::post_as`], with an image attached; its bytes are served at the file's
    /// `url_private` (to the bot token only).
    #[allow(clippy::too_many_arguments)]
    pub fn post_with_image(
        &self,
        user: &str,
        channel: &str,
        thread_ts: Option<&str>,
        text: &str,
        name: &str,
        mimetype: &str,
        bytes: Vec<u8>,
    ) -> String {
        let file = File {
            id: slack_id("F"),
            name: name.into(),
            mimetype: mimetype.into(),
            user: user.into(),
            created: now(),
            bytes,
        };
        self.post(user, channel, thread_ts, text, Some(file))
    }

    fn post(
        &self,
        user: &str,
        channel: &str,
        thread_ts: Option<&str>,
        text: &str,
        file: Option<File>,
    ) -> String {
        self.shared.update(|world| {
            assert!(
                world.users.get(user).is_some_and(|u| !u.is_bot),
                "post_as: no user {user}: add_user first"
            );
            assert!(
                world.channels.contains_key(channel),
                "post_as: no channel {channel}: add_channel first"
            );
            // A reply to a reply lands in the parent's thread, as in Slack's clients.
            let thread_ts = thread_ts.map(|ts| {
                let at = world
                    .message(channel, ts)
                    .unwrap_or_else(|| panic!("post_as: no message {ts} in {channel}"));
                let root = &world.messages[at].record.thread_ts;
                root.clone().unwrap_or_else(|| ts.to_string())
            });
            let ts = world.next_ts();
            let mut files = Vec::new();
            if let Some(file) = file {
                files.push(file.id.clone());
                world.files.insert(file.id.clone(), file);
            }
            world.messages.push(Stored {
                record: Message {
                    channel: channel.into(),
                    ts: ts.clone(),
                    thread_ts,
                    user: Some(user.into()),
                    bot: false,
                    text: text.into(),
                    blocks: shapes::rich_text(text),
                    edits: 0,
                    ephemeral_to: None,
                },
                files,
                reactions: Vec::new(),
                client_msg_id: Some(uuid::Uuid::new_v4().to_string()),
                edited: None,
            });
            ts
        })
    }

    /// The `event_callback` envelope Slack sends for message `ts` in `channel`: an
    /// `app_mention` if `mention`, else a `message`; each with a fresh `event_id`.
    pub fn event_for(&self, channel: &str, ts: &str, mention: bool) -> Value {
        let world = self.shared.world();
        let at = world
            .message(channel, ts)
            .unwrap_or_else(|| panic!("event_for: no message {ts} in {channel}"));
        let event = events::message_event(&self.shared.url, &world, at, mention);
        events::envelope(&self.shared.verification_token, event)
    }

    /// The `url_verification` handshake Slack sends when the Request URL is saved; the app
    /// must answer with its `challenge`.
    pub fn url_verification(&self) -> Value {
        events::url_verification(&self.shared.verification_token)
    }

    /// The verification token Slack (deprecatedly) puts in every delivery's `token`.
    pub fn verification_token(&self) -> String {
        self.shared.verification_token.clone()
    }

    /// Signs `body` now with the signing secret and POSTs it to `url` as `content_type`;
    /// returns the status and the response body. Panics if the app does not answer within the
    /// three seconds Slack waits.
    pub async fn deliver(&self, url: &str, content_type: &str, body: &str) -> (u16, String) {
        let timestamp = now().to_string();
        let signature = Self::sign(&self.shared.signing_secret, &timestamp, body);
        delivery::post(url, content_type, body, Some(&timestamp), Some(&signature)).await
    }

    /// POSTs `body` with these `X-Slack-Request-Timestamp` and `X-Slack-Signature` values as
    /// they are (`None` leaves the header out): for forged and stale deliveries.
    pub async fn deliver_raw(
        url: &str,
        content_type: &str,
        body: &str,
        timestamp: Option<&str>,
        signature: Option<&str>,
    ) -> (u16, String) {
        delivery::post(url, content_type, body, timestamp, signature).await
    }

    /// `v0=<hex>`: the `X-Slack-Signature` of `body` sent at `timestamp` under `secret`.
    pub fn sign(secret: &str, timestamp: &str, body: &str) -> String {
        delivery::signature(secret, timestamp, body)
    }

    /// Delivers an Events API payload (JSON), signed.
    pub async fn send_event(&self, url: &str, payload: &Value) -> (u16, String) {
        self.deliver(url, "application/json", &payload.to_string())
            .await
    }

    /// `user` clicks the button `action_id` on message `message_ts` in `channel`; the block id,
    /// text and value come from the stored message. Panics if the message has no such button.
    pub async fn click(
        &self,
        url: &str,
        user: &str,
        channel: &str,
        message_ts: &str,
        action_id: &str,
    ) -> (u16, String) {
        self.act(url, user, channel, message_ts, action_id, Act::Click)
            .await
    }

    /// `user` picks the option whose value is `value` in the `static_select` `action_id` on
    /// message `message_ts` (an ephemeral one too: then `container.is_ephemeral` is true and,
    /// as from Slack, the payload carries no `message`). Panics if there is no such option.
    pub async fn choose(
        &self,
        url: &str,
        user: &str,
        channel: &str,
        message_ts: &str,
        action_id: &str,
        value: &str,
    ) -> (u16, String) {
        self.act(
            url,
            user,
            channel,
            message_ts,
            action_id,
            Act::Choose(value),
        )
        .await
    }

    async fn act(
        &self,
        url: &str,
        user: &str,
        channel: &str,
        message_ts: &str,
        action_id: &str,
        act: Act<'_>,
    ) -> (u16, String) {
        let s = &self.shared;
        let payload = s.update(|world| {
            interactivity::block_actions(
                &s.url,
                &s.verification_token,
                world,
                user,
                channel,
                message_ts,
                action_id,
                act,
            )
        });
        let body = interactivity::form(&payload);
        self.deliver(url, "application/x-www-form-urlencoded", &body)
            .await
    }

    /// `user` runs `/command text` in `channel`; returns the status and the body, which is the
    /// command's immediate reply.
    pub async fn slash(
        &self,
        url: &str,
        user: &str,
        channel: &str,
        command: &str,
        text: &str,
    ) -> (u16, String) {
        let s = &self.shared;
        let body = s.update(|world| {
            commands::form(
                &s.url,
                &s.verification_token,
                world,
                user,
                channel,
                command,
                text,
            )
        });
        self.deliver(url, "application/x-www-form-urlencoded", &body)
            .await
    }

    /// `user` submits the last view opened with `views.open`, with `values` as
    /// (block_id, action_id, value): text inputs take the value as typed, `static_select`s the
    /// option with that value; inputs not named are submitted empty.
    pub async fn submit_view(
        &self,
        url: &str,
        user: &str,
        values: &[(&str, &str, &str)],
    ) -> (u16, String) {
        let s = &self.shared;
        let payload = s.update(|world| {
            interactivity::view_submission(&s.verification_token, world, user, values)
        });
        let body = interactivity::form(&payload);
        self.deliver(url, "application/x-www-form-urlencoded", &body)
            .await
    }

    /// Every call so far (Web API, file downloads, `response_url` posts), in the order answered.
    pub fn calls(&self) -> Vec<Call> {
        self.shared.world().calls.clone()
    }

    /// Every message, in the order posted; ephemeral ones have `ephemeral_to` set.
    pub fn messages(&self) -> Vec<Message> {
        self.shared
            .world()
            .messages
            .iter()
            .map(|m| m.record.clone())
            .collect()
    }

    /// The bot's current reactions on message `ts` in `channel`, in the order added (none for
    /// a message the fake does not have).
    pub fn reactions(&self, channel: &str, ts: &str) -> Vec<String> {
        let world = self.shared.world();
        world
            .message(channel, ts)
            .map(|at| world.messages[at].reactions.clone())
            .unwrap_or_default()
    }

    /// Every view opened with `views.open`, as the fake answered it, in order.
    pub fn views(&self) -> Vec<Value> {
        self.shared
            .world()
            .views
            .iter()
            .map(|v| v.json.clone())
            .collect()
    }

    /// Waits until `f` returns `Some`, checking again after every change the fake records (a
    /// call, a message, …); panics naming `what` after a minute.
    pub async fn wait_for<T>(&self, what: &str, mut f: impl FnMut(&FakeSlack) -> Option<T>) -> T {
        // Subscribed before the first look, so no change falls in between.
        let mut changes = self.shared.changes.subscribe();
        let wait = async {
            loop {
                changes.mark_unchanged();
                if let Some(found) = f(self) {
                    return found;
                }
                changes
                    .changed()
                    .await
                    .expect("the fake outlives its waiters");
            }
        };
        tokio::time::timeout(WAIT_TIMEOUT, wait)
            .await
            .unwrap_or_else(|_| panic!("wait_for: {what} did not happen within {WAIT_TIMEOUT:?}"))
    }
}

/// Every route; anything else is a 404.
fn app(shared: Arc<Shared>) -> Router {
    Router::new()
        .merge(api::router())
        .merge(files::router())
        .merge(hooks::router())
        .fallback(|| async { Error::NotFound })
        .with_state(shared)
}
