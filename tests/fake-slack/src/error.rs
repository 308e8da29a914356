//! The fake's refusals, each answered the way Slack does: a Web API error is HTTP 200 with
//! `{"ok": false, "error": "<code>"}`; a file download without the bot token is a plain 403.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Error {
    /// No token was sent.
    NotAuthed,
    /// A token was sent and is not the bot's.
    InvalidAuth,
    /// `/api/<method>` names no method the fake serves.
    UnknownMethod,
    ChannelNotFound,
    MessageNotFound,
    /// `chat.update` on a message the bot did not post.
    CantUpdateMessage,
    /// Neither `text` nor `blocks`.
    NoText,
    /// `blocks` is not an array of objects.
    InvalidBlocksFormat,
    /// `thread_ts` names no message in the channel.
    InvalidThreadTs,
    AlreadyReacted,
    NoReaction,
    InvalidName,
    /// `reactions.*` without a `timestamp`.
    NoItemSpecified,
    /// A trigger id the fake never handed out.
    InvalidTriggerId,
    /// A trigger id `views.open` has used already.
    ExchangedTriggerId,
    UserNotFound,
    /// `chat.postEphemeral` to someone who is not in the workspace.
    UserNotInChannel,
    ThreadNotFound,
    /// A JSON body that does not parse.
    InvalidJson,
    /// A JSON body that is not an object.
    JsonNotObject,
    /// A POST body of a type Slack does not take.
    InvalidPostType,
    /// A required argument is missing or malformed; the message says which.
    InvalidArguments(String),
    /// A `url_private` fetched without the bot token.
    FileForbidden,
    /// A `response_url` post whose body is not a JSON object.
    InvalidPayload,
    /// A path that is no file (or no page) the fake serves.
    NotFound,
}

impl Error {
    /// Slack's error code.
    pub fn code(&self) -> &'static str {
        match self {
            Error::NotAuthed => "not_authed",
            Error::InvalidAuth => "invalid_auth",
            Error::UnknownMethod => "unknown_method",
            Error::ChannelNotFound => "channel_not_found",
            Error::MessageNotFound => "message_not_found",
            Error::CantUpdateMessage => "cant_update_message",
            Error::NoText => "no_text",
            Error::InvalidBlocksFormat => "invalid_blocks_format",
            Error::InvalidThreadTs => "invalid_thread_ts",
            Error::AlreadyReacted => "already_reacted",
            Error::NoReaction => "no_reaction",
            Error::InvalidName => "invalid_name",
            Error::NoItemSpecified => "no_item_specified",
            Error::InvalidTriggerId => "invalid_trigger_id",
            Error::ExchangedTriggerId => "exchanged_trigger_id",
            Error::UserNotFound => "user_not_found",
            Error::UserNotInChannel => "user_not_in_channel",
            Error::ThreadNotFound => "thread_not_found",
            Error::InvalidJson => "invalid_json",
            Error::JsonNotObject => "json_not_object",
            Error::InvalidPostType => "invalid_post_type",
            Error::InvalidArguments(_) => "invalid_arguments",
            Error::FileForbidden => "forbidden",
            Error::InvalidPayload => "invalid_payload",
            Error::NotFound => "not_found",
        }
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        match self {
            Error::FileForbidden => (StatusCode::FORBIDDEN, "Forbidden").into_response(),
            Error::NotFound => (StatusCode::NOT_FOUND, "Not Found").into_response(),
            Error::InvalidPayload => (StatusCode::BAD_REQUEST, "invalid_payload").into_response(),
            Error::InvalidArguments(message) => Json(json!({
                "ok": false,
                "error": "invalid_arguments",
                "response_metadata": { "messages": [format!("[ERROR] {message}")] },
            }))
            .into_response(),
            // Slack answers every Web API refusal with a 200.
            other => Json(json!({ "ok": false, "error": other.code() })).into_response(),
        }
    }
}
