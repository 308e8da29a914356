//! Events API payloads: the `event_callback` envelope around `app_mention` and `message` events
//! for messages in the fake's history, and the `url_verification` handshake.

use serde_json::{Value, json};

use crate::shapes::{self, channel_type};
use crate::state::{World, now, random_text, slack_id};
use crate::{APP_ID, BOT_USER_ID, TEAM_ID};

/// The event Slack sends for message `at`: `app_mention` if `mention`, else `message` (with
/// `subtype: file_share` when files came with it, as Slack marks those).
pub(crate) fn message_event(base: &str, world: &World, at: usize, mention: bool) -> Value {
    let stored = &world.messages[at];
    let r = &stored.record;
    let mut event = json!({
        "type": if mention { "app_mention" } else { "message" },
        "text": r.text,
        "ts": r.ts,
        "channel": r.channel,
        "event_ts": r.ts,
        "team": TEAM_ID,
    });
    if let Some(user) = &r.user {
        event["user"] = json!(user);
    }
    shapes::sender(&mut event, stored);
    if r.blocks.as_array().is_some_and(|b| !b.is_empty()) {
        event["blocks"] = r.blocks.clone();
    }
    if let Some(root) = &r.thread_ts {
        event["thread_ts"] = json!(root);
        let parent = world.message(&r.channel, root);
        if let Some(user) = parent.and_then(|p| world.messages[p].record.user.clone()) {
            event["parent_user_id"] = json!(user);
        }
    }
    if !stored.files.is_empty() {
        event["files"] = shapes::files(base, world, stored);
        event["upload"] = json!(false);
        event["display_as_bot"] = json!(false);
        if !mention {
            event["subtype"] = json!("file_share");
        }
    }
    if !mention {
        event["channel_type"] = json!(channel_type(&r.channel));
    }
    event
}

/// `event` in the envelope Slack POSTs it in, with a fresh `event_id`.
pub(crate) fn envelope(verification_token: &str, event: Value) -> Value {
    json!({
        "token": verification_token,
        "team_id": TEAM_ID,
        "context_team_id": TEAM_ID,
        "context_enterprise_id": null,
        "api_app_id": APP_ID,
        "event": event,
        "type": "event_callback",
        "event_id": slack_id("Ev"),
        "event_time": now(),
        "authorizations": [{
            "enterprise_id": null,
            "team_id": TEAM_ID,
            "user_id": BOT_USER_ID,
            "is_bot": true,
            "is_enterprise_install": false,
        }],
        "is_ext_shared_channel": false,
        "event_context": format!("4-{}", random_text(40)),
    })
}

/// The handshake Slack sends when the Request URL is set: the app must answer the challenge.
pub(crate) fn url_verification(verification_token: &str) -> Value {
    json!({
        "token": verification_token,
        "challenge": random_text(48),
        "type": "url_verification",
    })
}
