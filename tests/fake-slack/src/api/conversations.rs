//! `conversations.replies`: a thread's messages, parent first then replies oldest first, in one
//! page (`has_more` is always false), narrowed by `oldest` / `latest` / `inclusive` as Slack does.

use serde_json::{Value, json};

use super::Params;
use crate::error::{Error, Result};
use crate::shapes;
use crate::state::{World, ts_key};

pub(super) fn replies(base: &str, world: &mut World, p: &Params) -> Result<Value> {
    let channel = p.channel(world)?;
    let ts = p.str("ts").ok_or(Error::ThreadNotFound)?;
    let at = world.message(&channel, ts).ok_or(Error::ThreadNotFound)?;
    // The ts of a reply names its whole thread.
    let root = world.messages[at]
        .record
        .thread_ts
        .clone()
        .unwrap_or_else(|| ts.to_string());
    let parent = world
        .message(&channel, &root)
        .ok_or(Error::ThreadNotFound)?;
    let mut thread: Vec<usize> = vec![parent];
    thread.extend(world.replies(&channel, &root));
    thread[1..].sort_by_key(|i| ts_key(&world.messages[*i].record.ts));
    let inclusive = p.flag("inclusive");
    let oldest = p.str("oldest").map(ts_key);
    let latest = p.str("latest").map(ts_key);
    let messages: Vec<Value> = thread
        .into_iter()
        .filter(|i| {
            let key = ts_key(&world.messages[*i].record.ts);
            let after = oldest.is_none_or(|o| key > o || (inclusive && key == o));
            let before = latest.is_none_or(|l| key < l || (inclusive && key == l));
            after && before
        })
        .map(|i| shapes::message(base, world, i))
        .collect();
    Ok(json!({
        "messages": messages,
        "has_more": false,
        "response_metadata": { "next_cursor": "" },
    }))
}
