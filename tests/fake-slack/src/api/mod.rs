//! The Web API under `/api/<method>`: arguments read from the query string and a JSON or
//! form-encoded body alike (as Slack reads them), the bot token checked, the method run against
//! the world and the call recorded — all under one lock, so a recorded call's effects are there.

use std::sync::Arc;
use std::time::SystemTime;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::state::{Call, Shared, World};

mod chat;
mod conversations;
mod reactions;
mod users;
mod views;

/// Form fields Slack reads as JSON when they come form-encoded.
const JSON_FIELDS: [&str; 4] = ["blocks", "attachments", "view", "metadata"];

pub(crate) fn router() -> Router<Arc<Shared>> {
    Router::new().route("/api/{method}", any(call))
}

/// A method: the fake's base URL, the world, the call's arguments → the answer without `ok`.
type Method = fn(&str, &mut World, &Params) -> Result<Value>;

fn method(name: &str) -> Option<Method> {
    Some(match name {
        "auth.test" => users::auth_test,
        "chat.postMessage" => chat::post_message,
        "chat.update" => chat::update,
        "chat.postEphemeral" => chat::post_ephemeral,
        "reactions.add" => reactions::add,
        "reactions.remove" => reactions::remove,
        "views.open" => views::open,
        "users.info" => users::info,
        "conversations.replies" => conversations::replies,
        _ => return None,
    })
}

async fn call(
    State(s): State<Arc<Shared>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    body: Bytes,
) -> Response {
    let (mut params, unreadable) = match read_params(&headers, query.as_deref(), &body) {
        Ok(params) => (params, None),
        Err(e) => (Map::new(), Some(e)),
    };
    // Slack takes the token from the header or, failing that, from a `token` argument.
    let argument_token = match params.remove("token") {
        Some(Value::String(t)) => Some(t),
        _ => None,
    };
    let token = bearer(&headers).map(str::to_string).or(argument_token);
    let answer = s.update(|world| {
        let answer = method(&name).ok_or(Error::UnknownMethod).and_then(|run| {
            if let Some(e) = unreadable.clone() {
                return Err(e);
            }
            match token.as_deref() {
                None => Err(Error::NotAuthed),
                Some(t) if t != s.bot_token => Err(Error::InvalidAuth),
                Some(_) => run(&s.url, world, &Params(&params)),
            }
        });
        world.calls.push(Call {
            method: name.clone(),
            params: Value::Object(params.clone()),
            at: SystemTime::now(),
            error: answer.as_ref().err().map(|e| e.code().to_string()),
        });
        answer
    });
    match answer {
        Ok(mut body) => {
            body["ok"] = Value::Bool(true);
            Json(body).into_response()
        }
        Err(e) => e.into_response(),
    }
}

/// The token of an `Authorization: Bearer …` header.
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
}

/// The query string's arguments, then the body's over them.
fn read_params(
    headers: &HeaderMap,
    query: Option<&str>,
    body: &[u8],
) -> Result<Map<String, Value>> {
    let mut params = Map::new();
    if let Some(query) = query {
        read_form(query.as_bytes(), &mut params);
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(params);
    }
    let content_type = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    match essence.as_str() {
        "application/json" => {
            let value: Value = serde_json::from_slice(body).map_err(|_| Error::InvalidJson)?;
            let Value::Object(fields) = value else {
                return Err(Error::JsonNotObject);
            };
            params.extend(fields);
        }
        "application/x-www-form-urlencoded" => read_form(body, &mut params),
        _ => return Err(Error::InvalidPostType),
    }
    Ok(params)
}

fn read_form(form: &[u8], params: &mut Map<String, Value>) {
    for (key, value) in url::form_urlencoded::parse(form) {
        let value = if JSON_FIELDS.contains(&key.as_ref()) {
            serde_json::from_str(&value).unwrap_or(Value::String(value.into_owned()))
        } else {
            Value::String(value.into_owned())
        };
        params.insert(key.into_owned(), value);
    }
}

/// A call's arguments.
pub(super) struct Params<'a>(&'a Map<String, Value>);

impl Params<'_> {
    /// A non-empty string argument.
    pub fn str(&self, key: &str) -> Option<&str> {
        self.0
            .get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    }

    /// A boolean argument (`true` in JSON, `"true"` or `"1"` in a form).
    pub fn flag(&self, key: &str) -> bool {
        match self.0.get(key) {
            Some(Value::Bool(b)) => *b,
            Some(Value::String(s)) => s == "true" || s == "1",
            _ => false,
        }
    }

    /// A JSON object argument.
    pub fn object(&self, key: &str) -> Option<&Map<String, Value>> {
        self.0.get(key).and_then(Value::as_object)
    }

    /// `blocks`, if given: it must be an array of objects.
    pub fn blocks(&self) -> Result<Option<Value>> {
        match self.0.get("blocks") {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(list)) if list.iter().all(Value::is_object) => {
                Ok(Some(Value::Array(list.clone())))
            }
            Some(_) => Err(Error::InvalidBlocksFormat),
        }
    }

    /// `channel`, which must be one the fake knows.
    pub fn channel(&self, world: &World) -> Result<String> {
        self.str("channel")
            .filter(|c| world.channels.contains_key(*c))
            .map(str::to_string)
            .ok_or(Error::ChannelNotFound)
    }
}
