//! Slash commands: the form Slack POSTs when a person runs `/command text`, with a fresh trigger
//! id (remembered for `views.open`) and a `response_url`.

use crate::shapes::{self, TEAM_DOMAIN};
use crate::state::World;
use crate::{APP_ID, TEAM_ID};

/// The form body for `who` running `command` (with or without its leading `/`) with `text` in
/// `channel`. Panics for a user or channel never added (a test's mistake).
pub(crate) fn form(
    base: &str,
    token: &str,
    world: &mut World,
    who: &str,
    channel: &str,
    command: &str,
    text: &str,
) -> String {
    let user_name = world
        .users
        .get(who)
        .unwrap_or_else(|| panic!("no user {who}: add_user first"))
        .name
        .clone();
    assert!(
        world.channels.contains_key(channel),
        "no channel {channel}: add_channel first"
    );
    let command = if command.starts_with('/') {
        command.to_string()
    } else {
        format!("/{command}")
    };
    let channel_name = shapes::channel_name(world, channel);
    let response_url = world.response_url(base, "commands");
    let trigger_id = world.trigger();
    url::form_urlencoded::Serializer::new(String::new())
        .append_pair("token", token)
        .append_pair("team_id", TEAM_ID)
        .append_pair("team_domain", TEAM_DOMAIN)
        .append_pair("channel_id", channel)
        .append_pair("channel_name", &channel_name)
        .append_pair("user_id", who)
        .append_pair("user_name", &user_name)
        .append_pair("command", &command)
        .append_pair("text", text)
        .append_pair("api_app_id", APP_ID)
        .append_pair("is_enterprise_install", "false")
        .append_pair("response_url", &response_url)
        .append_pair("trigger_id", &trigger_id)
        .finish()
}
