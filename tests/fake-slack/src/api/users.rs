//! `auth.test` (who the bot token belongs to) and `users.info` (a person's profile).

use serde_json::{Value, json};

use super::Params;
use crate::error::{Error, Result};
use crate::shapes::{self, BOT_NAME, TEAM_NAME};
use crate::state::World;
use crate::{BOT_ID, BOT_USER_ID, TEAM_ID};

pub(super) fn auth_test(_base: &str, _world: &mut World, _p: &Params) -> Result<Value> {
    Ok(json!({
        "url": shapes::team_url(),
        "team": TEAM_NAME,
        "user": BOT_NAME,
        "team_id": TEAM_ID,
        "user_id": BOT_USER_ID,
        "bot_id": BOT_ID,
        "is_enterprise_install": false,
    }))
}

pub(super) fn info(_base: &str, world: &mut World, p: &Params) -> Result<Value> {
    let user = p
        .str("user")
        .and_then(|id| world.users.get(id))
        .ok_or(Error::UserNotFound)?;
    Ok(json!({ "user": shapes::user(user) }))
}
