//! Interactivity payloads: `block_actions` for a button click or a `static_select` choice on a
//! message, and `view_submission` for the last modal opened. Each carries a fresh trigger id the
//! fake remembers for `views.open`. They are POSTed form-encoded as a single `payload` field.

use serde_json::{Map, Value, json};

use crate::shapes::{self, TEAM_DOMAIN};
use crate::state::World;
use crate::{APP_ID, TEAM_ID};

/// What the person does to an element.
pub(crate) enum Act<'a> {
    /// Clicks a button.
    Click,
    /// Picks the option with this value in a `static_select`.
    Choose(&'a str),
}

/// The form body Slack POSTs an interaction payload in.
pub(crate) fn form(payload: &Value) -> String {
    url::form_urlencoded::Serializer::new(String::new())
        .append_pair("payload", &payload.to_string())
        .finish()
}

/// `user` as interactivity payloads name them; panics for someone never added (a test's mistake).
fn user(world: &World, id: &str) -> Value {
    let u = world
        .users
        .get(id)
        .unwrap_or_else(|| panic!("no user {id}: add_user first"));
    json!({ "id": u.id, "username": u.name, "name": u.name, "team_id": TEAM_ID })
}

fn team() -> Value {
    json!({ "id": TEAM_ID, "domain": TEAM_DOMAIN })
}

/// An action's `action_ts`: now, in seconds with microseconds, as Slack writes it.
fn action_ts() -> String {
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros());
    format!("{}.{:06}", micros / 1_000_000, micros % 1_000_000)
}

/// The option with `value` among a select's `options` or `option_groups`.
fn option<'e>(element: &'e Map<String, Value>, value: &str) -> Option<&'e Value> {
    let direct = element.get("options").and_then(Value::as_array);
    let grouped = element
        .get("option_groups")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|g| g.get("options").and_then(Value::as_array));
    direct
        .into_iter()
        .chain(grouped)
        .flatten()
        .find(|o| o.get("value").and_then(Value::as_str) == Some(value))
}

fn selected(option: &Value) -> Value {
    json!({ "text": option["text"], "value": option["value"] })
}

/// The `block_actions` payload for `user` doing `act` to element `action_id` of message
/// `message_ts` in `channel`. Panics if there is no such message or element, or if the message
/// is ephemeral to someone else.
#[allow(clippy::too_many_arguments)]
pub(crate) fn block_actions(
    base: &str,
    token: &str,
    world: &mut World,
    who: &str,
    channel: &str,
    message_ts: &str,
    action_id: &str,
    act: Act,
) -> Value {
    let at = world
        .any_message(channel, message_ts)
        .unwrap_or_else(|| panic!("no message {message_ts} in {channel}"));
    let stored = &world.messages[at];
    if let Some(to) = &stored.record.ephemeral_to {
        assert_eq!(to, who, "message {message_ts} is shown to {to} only");
    }
    let kind = match act {
        Act::Click => "button",
        Act::Choose(_) => "static_select",
    };
    let (block_id, element) = shapes::elements(&stored.record.blocks)
        .into_iter()
        .find(|(_, e)| {
            e.get("action_id").and_then(Value::as_str) == Some(action_id)
                && e.get("type").and_then(Value::as_str) == Some(kind)
        })
        .unwrap_or_else(|| panic!("message {message_ts} has no {kind} {action_id}"));
    let (action, state) = match act {
        Act::Click => {
            let mut action = json!({
                "type": "button",
                "action_id": action_id,
                "block_id": block_id,
                "text": element.get("text").cloned().unwrap_or(Value::Null),
                "action_ts": action_ts(),
            });
            for key in ["value", "style"] {
                if let Some(v) = element.get(key) {
                    action[key] = v.clone();
                }
            }
            (action, json!({ "values": {} }))
        }
        Act::Choose(value) => {
            let picked = option(element, value).unwrap_or_else(|| {
                panic!("static_select {action_id} on {message_ts} has no option {value}")
            });
            let picked = selected(picked);
            let mut action = json!({
                "type": "static_select",
                "action_id": action_id,
                "block_id": block_id,
                "selected_option": picked,
                "action_ts": action_ts(),
            });
            if let Some(placeholder) = element.get("placeholder") {
                action["placeholder"] = placeholder.clone();
            }
            let state = json!({ "values": { block_id.clone(): { action_id: {
                "type": "static_select",
                "selected_option": picked,
            } } } });
            (action, state)
        }
    };
    let ephemeral = stored.is_ephemeral();
    // Slack keeps no copy of an ephemeral message, so it cannot send one back.
    let message = (!ephemeral).then(|| shapes::message(base, world, at));
    let person = user(world, who);
    let channel_name = shapes::channel_name(world, channel);
    let trigger_id = world.trigger();
    let response_url = world.response_url(base, "actions");
    let mut payload = json!({
        "type": "block_actions",
        "user": person,
        "api_app_id": APP_ID,
        "token": token,
        "container": {
            "type": "message",
            "message_ts": message_ts,
            "channel_id": channel,
            "is_ephemeral": ephemeral,
        },
        "trigger_id": trigger_id,
        "team": team(),
        "enterprise": null,
        "is_enterprise_install": false,
        "channel": { "id": channel, "name": channel_name },
        "state": state,
        "response_url": response_url,
        "actions": [action],
    });
    if let Some(message) = message {
        payload["message"] = message;
    }
    payload
}

/// The `view_submission` payload for `who` submitting the last view `views.open` opened, with
/// `values` as (block_id, action_id, value): text inputs take the value as typed, selects the
/// option with that value. Inputs not named are submitted empty. Panics if no view was opened or
/// a named element is not in it.
pub(crate) fn view_submission(
    token: &str,
    world: &mut World,
    who: &str,
    values: &[(&str, &str, &str)],
) -> Value {
    let mut view = world
        .views
        .last()
        .unwrap_or_else(|| panic!("submit_view: no view was opened with views.open"))
        .json
        .clone();
    let mut state: Map<String, Value> = Map::new();
    let elements = shapes::elements(&view["blocks"]);
    let input_blocks: Vec<&str> = view["blocks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("input"))
        .filter_map(|b| b.get("block_id").and_then(Value::as_str))
        .collect();
    for (block_id, element) in &elements {
        if !input_blocks.contains(&block_id.as_str()) {
            continue;
        }
        let kind = element
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let action_id = element
            .get("action_id")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let empty = match kind {
            "static_select" => json!({ "type": kind, "selected_option": null }),
            _ => json!({ "type": kind, "value": null }),
        };
        entry(&mut state, block_id, action_id, empty);
    }
    for (block_id, action_id, value) in values {
        let (_, element) = elements
            .iter()
            .find(|(b, e)| {
                b == block_id && e.get("action_id").and_then(Value::as_str) == Some(*action_id)
            })
            .unwrap_or_else(|| {
                panic!("submit_view: the view has no element {block_id}/{action_id}")
            });
        let kind = element
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let filled = match kind {
            "plain_text_input" | "email_text_input" | "url_text_input" | "number_input" => {
                json!({ "type": kind, "value": value })
            }
            "static_select" => {
                let picked = option(element, value).unwrap_or_else(|| {
                    panic!(
                        "submit_view: static_select {block_id}/{action_id} has no option {value}"
                    )
                });
                json!({ "type": kind, "selected_option": selected(picked) })
            }
            other => panic!("submit_view: cannot fill a {other} ({block_id}/{action_id})"),
        };
        entry(&mut state, block_id, action_id, filled);
    }
    view["state"] = json!({ "values": state });
    let person = user(world, who);
    let trigger_id = world.trigger();
    json!({
        "type": "view_submission",
        "team": team(),
        "user": person,
        "api_app_id": APP_ID,
        "token": token,
        "trigger_id": trigger_id,
        "view": view,
        "response_urls": [],
        "is_enterprise_install": false,
        "enterprise": null,
    })
}

fn entry(state: &mut Map<String, Value>, block_id: &str, action_id: &str, value: Value) {
    let block = state
        .entry(block_id.to_string())
        .or_insert_with(|| Value::Object(Map::new()));
    block[action_id] = value;
}
