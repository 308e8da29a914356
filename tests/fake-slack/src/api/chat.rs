//! `chat.postMessage`, `chat.update` and `chat.postEphemeral`: the bot's messages, with Slack's
//! refusals (`channel_not_found`, `no_text`, `message_not_found`, `cant_update_message`, …).

use serde_json::{Value, json};

use super::Params;
use crate::BOT_USER_ID;
use crate::error::{Error, Result};
use crate::shapes::{self, fill_ids};
use crate::state::{Message, Stored, World};

/// `text` and `blocks` of a post; at least one must be there.
fn content(p: &Params) -> Result<(String, Value)> {
    let text = p.str("text").unwrap_or_default().to_string();
    let mut blocks = p.blocks()?.unwrap_or_else(|| json!([]));
    let no_blocks = blocks.as_array().is_none_or(Vec::is_empty);
    if text.is_empty() && no_blocks {
        return Err(Error::NoText);
    }
    fill_ids(&mut blocks);
    Ok((text, blocks))
}

/// The thread a post with `thread_ts` lands in: a reply to a reply joins its parent's thread.
fn thread_root(world: &World, channel: &str, thread_ts: &str) -> Option<String> {
    let at = world.message(channel, thread_ts)?;
    let root = &world.messages[at].record.thread_ts;
    Some(root.clone().unwrap_or_else(|| thread_ts.to_string()))
}

fn bot_message(
    channel: String,
    ts: String,
    thread_ts: Option<String>,
    text: String,
    blocks: Value,
) -> Stored {
    Stored {
        record: Message {
            channel,
            ts,
            thread_ts,
            user: Some(BOT_USER_ID.into()),
            bot: true,
            text,
            blocks,
            edits: 0,
            ephemeral_to: None,
        },
        files: Vec::new(),
        reactions: Vec::new(),
        client_msg_id: None,
        edited: None,
    }
}

pub(super) fn post_message(base: &str, world: &mut World, p: &Params) -> Result<Value> {
    let channel = p.channel(world)?;
    let (text, blocks) = content(p)?;
    let thread_ts = match p.str("thread_ts") {
        None => None,
        Some(ts) => Some(thread_root(world, &channel, ts).ok_or(Error::InvalidThreadTs)?),
    };
    let ts = world.next_ts();
    world.messages.push(bot_message(
        channel.clone(),
        ts.clone(),
        thread_ts,
        text,
        blocks,
    ));
    let message = shapes::message(base, world, world.messages.len() - 1);
    Ok(json!({ "channel": channel, "ts": ts, "message": message }))
}

pub(super) fn update(_base: &str, world: &mut World, p: &Params) -> Result<Value> {
    let channel = p.channel(world)?;
    let ts = p.str("ts").ok_or(Error::MessageNotFound)?;
    let at = world.message(&channel, ts).ok_or(Error::MessageNotFound)?;
    if !world.messages[at].record.bot {
        return Err(Error::CantUpdateMessage);
    }
    let text = p.str("text");
    let blocks = p.blocks()?;
    if text.is_none() && blocks.is_none() {
        return Err(Error::NoText);
    }
    let edited = world.next_ts();
    let stored = &mut world.messages[at];
    // What is left out stays as it was; `blocks: []` removes the blocks.
    if let Some(text) = text {
        stored.record.text = text.into();
    }
    if let Some(mut blocks) = blocks {
        fill_ids(&mut blocks);
        stored.record.blocks = blocks;
    }
    stored.record.edits += 1;
    stored.edited = Some(edited.clone());
    let r = &stored.record;
    let mut message = json!({
        "type": "message",
        "user": BOT_USER_ID,
        "text": r.text,
        "team": crate::TEAM_ID,
        "edited": { "user": BOT_USER_ID, "ts": edited },
    });
    shapes::sender(&mut message, stored);
    if r.blocks.as_array().is_some_and(|b| !b.is_empty()) {
        message["blocks"] = r.blocks.clone();
    }
    let mut answer = json!({ "channel": channel, "ts": ts, "text": r.text, "message": message });
    if let Some(root) = &r.thread_ts {
        answer["thread_ts"] = json!(root);
    }
    Ok(answer)
}

pub(super) fn post_ephemeral(_base: &str, world: &mut World, p: &Params) -> Result<Value> {
    let channel = p.channel(world)?;
    let user = p
        .str("user")
        .filter(|u| world.users.get(*u).is_some_and(|u| !u.is_bot))
        .ok_or(Error::UserNotInChannel)?
        .to_string();
    let (text, blocks) = content(p)?;
    let thread_ts = p
        .str("thread_ts")
        .map(|ts| thread_root(world, &channel, ts).unwrap_or_else(|| ts.to_string()));
    let ts = world.next_ts();
    let mut stored = bot_message(channel, ts.clone(), thread_ts, text, blocks);
    stored.record.ephemeral_to = Some(user);
    world.messages.push(stored);
    Ok(json!({ "message_ts": ts }))
}
