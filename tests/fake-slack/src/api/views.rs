//! `views.open`: a modal opened with a trigger id the fake handed out in a delivery (each good
//! once), answered with the view as Slack stores it — `id`, `hash`, an empty `state` and all.

use serde_json::{Value, json};

use super::Params;
use crate::error::{Error, Result};
use crate::shapes::fill_ids;
use crate::state::{View, World, now, random_text, slack_id};
use crate::{APP_ID, BOT_ID, TEAM_ID};

pub(super) fn open(_base: &str, world: &mut World, p: &Params) -> Result<Value> {
    let missing = |field: &str| Error::InvalidArguments(format!("missing required field: {field}"));
    let trigger = p.str("trigger_id").ok_or_else(|| missing("trigger_id"))?;
    let asked = p.object("view").ok_or_else(|| missing("view"))?;
    match world.triggers.get(trigger) {
        None => return Err(Error::InvalidTriggerId),
        Some(true) => return Err(Error::ExchangedTriggerId),
        Some(false) => {}
    }
    if asked.get("type").and_then(Value::as_str) != Some("modal") {
        return Err(Error::InvalidArguments(
            "must be a modal view [json-pointer:/view/type]".into(),
        ));
    }
    if !asked.get("title").is_some_and(Value::is_object) {
        return Err(missing("title"));
    }
    if !asked.get("blocks").is_some_and(Value::is_array) {
        return Err(missing("blocks"));
    }
    world.triggers.insert(trigger.to_string(), true);
    let mut view = Value::Object(asked.clone());
    fill_ids(&mut view["blocks"]);
    let id = slack_id("V");
    // What the app left out, as Slack fills it in.
    let defaults = [
        ("private_metadata", json!("")),
        ("callback_id", json!("")),
        ("external_id", json!("")),
        ("clear_on_close", json!(false)),
        ("notify_on_close", json!(false)),
        ("close", Value::Null),
        ("submit", Value::Null),
    ];
    for (key, value) in defaults {
        if view.get(key).is_none() {
            view[key] = value;
        }
    }
    let stored = json!({
        "id": id,
        "team_id": TEAM_ID,
        "state": { "values": {} },
        "hash": format!("{}.{}", now(), random_text(8)),
        "previous_view_id": null,
        "root_view_id": id,
        "app_id": APP_ID,
        "app_installed_team_id": TEAM_ID,
        "bot_id": BOT_ID,
    });
    for (key, value) in stored.as_object().into_iter().flatten() {
        view[key] = value.clone();
    }
    world.views.push(View { json: view.clone() });
    Ok(json!({ "view": view }))
}
