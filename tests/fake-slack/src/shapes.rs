//! Slack's JSON shapes: messages as history and interactivity show them, files, users, the bot's
//! profile, and the rich-text blocks a person's client makes of what they type.
//!
//! Invariant: these functions only read the world; they never change it (but `fill_ids`, which
//! completes blocks before they are stored).

use serde_json::{Map, Value, json};

use crate::state::{File, Stored, User, World, short_id};
use crate::{APP_ID, BOT_ID, BOT_USER_ID, TEAM_ID};

/// The workspace's subdomain (`tandem-test.slack.com`).
pub(crate) const TEAM_DOMAIN: &str = "tandem-test";
/// The workspace's name.
pub(crate) const TEAM_NAME: &str = "Tandem Test";
/// The bot user's name.
pub(crate) const BOT_NAME: &str = "tandem";
/// When the bot's profile was last changed (a fixed time: it never is).
const BOT_UPDATED: u64 = 1_700_000_000;

/// `https://tandem-test.slack.com/`, the workspace URL `auth.test` answers.
pub(crate) fn team_url() -> String {
    format!("https://{TEAM_DOMAIN}.slack.com/")
}

/// `C…`/`G…` ids are channels, `D…` ids direct messages.
pub(crate) fn channel_type(channel: &str) -> &'static str {
    if channel.starts_with('D') {
        "im"
    } else {
        "channel"
    }
}

/// What interactivity and slash commands call a channel: its name, `directmessage` for a DM.
pub(crate) fn channel_name(world: &World, channel: &str) -> String {
    if channel_type(channel) == "im" {
        return "directmessage".into();
    }
    world
        .channels
        .get(channel)
        .map_or_else(|| channel.to_string(), |c| c.name.clone())
}

fn avatar(id: &str, size: u32) -> String {
    format!("https://avatars.slack-edge.com/{TEAM_ID}/{id}_{size}.png")
}

/// The bot's `bot_profile`, as Slack attaches it to the bot's messages.
pub(crate) fn bot_profile() -> Value {
    json!({
        "id": BOT_ID,
        "deleted": false,
        "name": BOT_NAME,
        "updated": BOT_UPDATED,
        "app_id": APP_ID,
        "user_id": BOT_USER_ID,
        "icons": {
            "image_36": avatar(BOT_ID, 36),
            "image_48": avatar(BOT_ID, 48),
            "image_72": avatar(BOT_ID, 72),
        },
        "team_id": TEAM_ID,
    })
}

/// A person or the bot as `users.info` answers.
pub(crate) fn user(u: &User) -> Value {
    let mut profile = json!({
        "title": "",
        "phone": "",
        "skype": "",
        "real_name": u.name,
        "real_name_normalized": u.name,
        "display_name": u.display_name.as_deref().unwrap_or(&u.name),
        "display_name_normalized": u.display_name.as_deref().unwrap_or(&u.name),
        "fields": null,
        "status_text": "",
        "status_emoji": "",
        "status_expiration": 0,
        "avatar_hash": "g0a1b2c3d4e5",
        "first_name": u.name,
        "last_name": "",
        "image_24": avatar(&u.id, 24),
        "image_32": avatar(&u.id, 32),
        "image_48": avatar(&u.id, 48),
        "image_72": avatar(&u.id, 72),
        "image_192": avatar(&u.id, 192),
        "image_512": avatar(&u.id, 512),
        "team": TEAM_ID,
    });
    if let Some(email) = &u.email {
        profile["email"] = json!(email);
    }
    if u.is_bot {
        profile["bot_id"] = json!(BOT_ID);
        profile["api_app_id"] = json!(APP_ID);
        profile["always_active"] = json!(true);
    }
    json!({
        "id": u.id,
        "team_id": TEAM_ID,
        "name": u.name,
        "deleted": false,
        "color": "9f69e7",
        "real_name": u.name,
        "tz": "Europe/London",
        "tz_label": "Greenwich Mean Time",
        "tz_offset": 0,
        "profile": profile,
        "is_admin": false,
        "is_owner": false,
        "is_primary_owner": false,
        "is_restricted": false,
        "is_ultra_restricted": false,
        "is_bot": u.is_bot,
        "is_app_user": false,
        "updated": BOT_UPDATED,
        "is_email_confirmed": u.email.is_some(),
        "who_can_share_contact_card": "EVERYONE",
    })
}

/// The `url_private` of a file: `{base}/files/{id}/{name}`, the name percent-encoded.
pub(crate) fn file_url(base: &str, id: &str, name: &str) -> String {
    let mut url = url::Url::parse(base).expect("the fake's base URL parses");
    url.path_segments_mut()
        .expect("an http URL has a path")
        .extend(["files", id, name]);
    url.to_string()
}

/// Slack's short `filetype` for a file (`png`, `jpg`): by MIME type, else by extension.
fn filetype(f: &File) -> String {
    match f.mimetype.as_str() {
        "image/png" => "png".into(),
        "image/jpeg" => "jpg".into(),
        "image/gif" => "gif".into(),
        "image/webp" => "webp".into(),
        _ => f
            .name
            .rsplit_once('.')
            .map_or_else(|| "binary".into(), |(_, ext)| ext.to_ascii_lowercase()),
    }
}

/// A file as messages carry it.
pub(crate) fn file(base: &str, f: &File) -> Value {
    let kind = filetype(f);
    let url = file_url(base, &f.id, &f.name);
    json!({
        "id": f.id,
        "created": f.created,
        "timestamp": f.created,
        "name": f.name,
        "title": f.name,
        "mimetype": f.mimetype,
        "filetype": kind,
        "pretty_type": kind.to_ascii_uppercase(),
        "user": f.user,
        "user_team": TEAM_ID,
        "editable": false,
        "size": f.bytes.len(),
        "mode": "hosted",
        "is_external": false,
        "external_type": "",
        "is_public": true,
        "public_url_shared": false,
        "display_as_bot": false,
        "username": "",
        "url_private": url,
        "url_private_download": url,
        "permalink": format!("{}files/{}/{}/{}", team_url(), f.user, f.id, f.name),
        "has_rich_preview": false,
    })
}

/// What a person's client sends for `text`: one rich-text section, `<@U…>` mentions as user
/// elements and the rest as text runs.
pub(crate) fn rich_text(text: &str) -> Value {
    let mut elements = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("<@") {
        let Some(len) = rest[start..].find('>') else {
            break;
        };
        let inner = &rest[start + 2..start + len];
        let user = inner.split('|').next().unwrap_or(inner);
        if start > 0 {
            elements.push(json!({ "type": "text", "text": &rest[..start] }));
        }
        elements.push(json!({ "type": "user", "user_id": user }));
        rest = &rest[start + len + 1..];
    }
    if !rest.is_empty() {
        elements.push(json!({ "type": "text", "text": rest }));
    }
    json!([{
        "type": "rich_text",
        "block_id": short_id(),
        "elements": [{ "type": "rich_text_section", "elements": elements }],
    }])
}

/// Gives every block and interactive element that came without one the `block_id` /
/// `action_id` Slack makes up, as Slack does before it stores a message or a view.
pub(crate) fn fill_ids(blocks: &mut Value) {
    let Some(blocks) = blocks.as_array_mut() else {
        return;
    };
    for block in blocks.iter_mut().filter_map(Value::as_object_mut) {
        block
            .entry("block_id")
            .or_insert_with(|| Value::String(short_id()));
        for element in elements_mut(block) {
            let interactive = element
                .get("type")
                .and_then(Value::as_str)
                .is_some_and(|t| !matches!(t, "image" | "mrkdwn" | "plain_text"));
            if interactive {
                element
                    .entry("action_id")
                    .or_insert_with(|| Value::String(short_id()));
            }
        }
    }
}

fn elements_mut(block: &mut Map<String, Value>) -> Vec<&mut Map<String, Value>> {
    let is_actions = block.get("type").and_then(Value::as_str) == Some("actions");
    let mut found = Vec::new();
    for (key, value) in block.iter_mut() {
        let wanted = match key.as_str() {
            "elements" => is_actions,
            "accessory" | "element" => true,
            _ => false,
        };
        match value {
            Value::Array(list) if wanted => {
                found.extend(list.iter_mut().filter_map(Value::as_object_mut));
            }
            Value::Object(element) if wanted => found.push(element),
            _ => {}
        }
    }
    found
}

/// The interactive elements of `blocks`, each with its block's id: actions blocks' elements,
/// section accessories and input elements.
pub(crate) fn elements(blocks: &Value) -> Vec<(String, &Map<String, Value>)> {
    let mut found = Vec::new();
    for block in blocks.as_array().into_iter().flatten() {
        let Some(block) = block.as_object() else {
            continue;
        };
        let block_id = block
            .get("block_id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let is_actions = block.get("type").and_then(Value::as_str) == Some("actions");
        if is_actions {
            for element in block
                .get("elements")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_object)
            {
                found.push((block_id.clone(), element));
            }
        }
        for key in ["accessory", "element"] {
            if let Some(element) = block.get(key).and_then(Value::as_object) {
                found.push((block_id.clone(), element));
            }
        }
    }
    found
}

/// A message as `conversations.replies`, `chat.postMessage` and interactivity show it.
pub(crate) fn message(base: &str, world: &World, at: usize) -> Value {
    let stored = &world.messages[at];
    let r = &stored.record;
    let mut m = json!({
        "type": "message",
        "text": r.text,
        "ts": r.ts,
        "team": TEAM_ID,
    });
    if let Some(user) = &r.user {
        m["user"] = json!(user);
    }
    sender(&mut m, stored);
    if r.blocks.as_array().is_some_and(|b| !b.is_empty()) {
        m["blocks"] = r.blocks.clone();
    }
    thread(&mut m, world, stored);
    if !stored.files.is_empty() {
        m["files"] = files(base, world, stored);
        m["upload"] = json!(false);
        m["display_as_bot"] = json!(false);
    }
    if let Some(edited) = &stored.edited {
        m["edited"] = json!({ "user": r.user, "ts": edited });
    }
    if !stored.reactions.is_empty() {
        m["reactions"] = stored
            .reactions
            .iter()
            .map(|name| json!({ "name": name, "users": [BOT_USER_ID], "count": 1 }))
            .collect();
    }
    m
}

/// The bot's marks on its own messages, or a person's client message id.
pub(crate) fn sender(m: &mut Value, stored: &Stored) {
    if stored.record.bot {
        m["bot_id"] = json!(BOT_ID);
        m["app_id"] = json!(APP_ID);
        m["bot_profile"] = bot_profile();
    } else if let Some(id) = &stored.client_msg_id {
        m["client_msg_id"] = json!(id);
    }
}

/// `thread_ts` and `parent_user_id` on a reply; the reply summary on a parent with replies.
pub(crate) fn thread(m: &mut Value, world: &World, stored: &Stored) {
    let r = &stored.record;
    if let Some(root) = &r.thread_ts {
        m["thread_ts"] = json!(root);
        let parent = world.message(&r.channel, root);
        if let Some(user) = parent.and_then(|p| world.messages[p].record.user.clone()) {
            m["parent_user_id"] = json!(user);
        }
        return;
    }
    let replies: Vec<&Stored> = world
        .replies(&r.channel, &r.ts)
        .map(|i| &world.messages[i])
        .collect();
    if let Some(latest) = replies.last() {
        let mut users: Vec<&str> = Vec::new();
        for reply in &replies {
            if let Some(u) = reply.record.user.as_deref()
                && !users.contains(&u)
            {
                users.push(u);
            }
        }
        m["thread_ts"] = json!(r.ts);
        m["reply_count"] = json!(replies.len());
        m["reply_users_count"] = json!(users.len());
        m["latest_reply"] = json!(latest.record.ts);
        m["reply_users"] = json!(users);
        m["is_locked"] = json!(false);
        m["subscribed"] = json!(false);
    }
}

pub(crate) fn files(base: &str, world: &World, stored: &Stored) -> Value {
    stored
        .files
        .iter()
        .filter_map(|id| world.files.get(id))
        .map(|f| file(base, f))
        .collect()
}
