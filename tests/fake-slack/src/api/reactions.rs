//! `reactions.add` and `reactions.remove`: the bot's own reactions on messages in history, with
//! Slack's `already_reacted`, `no_reaction` and `message_not_found`.

use serde_json::{Value, json};

use super::Params;
use crate::error::{Error, Result};
use crate::state::World;

/// The message and the reaction name a call is about.
fn target(world: &World, p: &Params) -> Result<(usize, String)> {
    let channel = p.channel(world)?;
    let ts = p.str("timestamp").ok_or(Error::NoItemSpecified)?;
    let name = p.str("name").ok_or(Error::InvalidName)?.to_string();
    let at = world.message(&channel, ts).ok_or(Error::MessageNotFound)?;
    Ok((at, name))
}

pub(super) fn add(_base: &str, world: &mut World, p: &Params) -> Result<Value> {
    let (at, name) = target(world, p)?;
    let reactions = &mut world.messages[at].reactions;
    if reactions.contains(&name) {
        return Err(Error::AlreadyReacted);
    }
    reactions.push(name);
    Ok(json!({}))
}

pub(super) fn remove(_base: &str, world: &mut World, p: &Params) -> Result<Value> {
    let (at, name) = target(world, p)?;
    let reactions = &mut world.messages[at].reactions;
    let Some(i) = reactions.iter().position(|r| *r == name) else {
        return Err(Error::NoReaction);
    };
    reactions.remove(i);
    Ok(json!({}))
}
