//! What Slack sends: Events API callbacks, interactivity payloads and the slash command. Each is
//! checked against the signing secret and its timestamp's 5-minute window before it is parsed,
//! and handled once: an event by its id, a message by its channel and ts (a mention arrives as
//! both `app_mention` and `message`), an action or command by its trigger id. Slack wants an
//! answer within 3 seconds, so the work runs after the answer.

use axum::http::HeaderMap;
use serde_json::{Value, json};
use slack_morphism::prelude::*;
use slack_morphism::signature_verifier::SlackEventSignatureVerifier;

use super::conversation::{self, Incoming};
use crate::state::AppState;
use crate::{Error, Result, db, now_ms};

/// How long a delivery's key is remembered (well past Slack's retries).
const SEEN_FOR_MS: i64 = 24 * 3600 * 1000;

/// Checks `body`'s signature and timestamp; nothing is parsed before this passes.
pub async fn verify(app: &AppState, headers: &HeaderMap, body: &[u8]) -> Result<()> {
    let slack = super::slack(app)?;
    let secret = slack.signing_secret(app).await?;
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let refused = |why: &str| Error::Unauthorized(format!("not a delivery from Slack: {why}"));
    let (Some(ts), Some(sig)) = (
        header(SlackEventSignatureVerifier::SLACK_SIGNED_TIMESTAMP),
        header(SlackEventSignatureVerifier::SLACK_SIGNED_HASH_HEADER),
    ) else {
        return Err(refused("it is not signed"));
    };
    let body = std::str::from_utf8(body).map_err(|_| refused("its body is not UTF-8"))?;
    SlackEventSignatureVerifier::new(&SlackSigningSecret::new(secret))
        .verify(sig, body, ts)
        .map_err(|e| match e {
            slack_morphism::signature_verifier::SlackEventSignatureVerifierError::IncorrectOrExpiredTimestampError(_) => {
                refused("its timestamp is more than 5 minutes away")
            }
            _ => refused("its signature does not match the signing secret"),
        })
}

/// Records `key`; false when it was handled before.
async fn first(app: &AppState, key: &str) -> Result<bool> {
    let now = now_ms();
    if rand::random::<u8>() == 0 {
        db::slack::forget_seen(&app.db, now - SEEN_FOR_MS).await?;
        db::slack::forget_stale(&app.db, now, now - SEEN_FOR_MS).await?;
    }
    Ok(db::slack::first_sight(&app.db, key, now).await?)
}

/// An Events API delivery (already verified).
pub async fn event(app: &AppState, body: &[u8]) -> Result<Value> {
    let push: SlackPushEvent = serde_json::from_slice(body)
        .map_err(|e| Error::BadRequest(format!("not an Events API payload: {e}")))?;
    let cb = match push {
        SlackPushEvent::UrlVerification(v) => return Ok(json!({ "challenge": v.challenge })),
        SlackPushEvent::EventCallback(cb) => cb,
        SlackPushEvent::AppRateLimited(_) => return Ok(json!({ "ok": true })),
    };
    if !first(app, &format!("event:{}", cb.event_id.0)).await? {
        return Ok(json!({ "ok": true, "duplicate": true }));
    }
    let team = cb.team_id.0.clone();
    if !super::slack(app)?.team_allowed(app, &team).await? {
        tracing::info!(%team, "a Slack event from a workspace not allowed here");
        return Ok(json!({ "ok": true, "ignored": "this Slack workspace is not allowed here" }));
    }
    let bot = cb
        .authorizations
        .as_ref()
        .and_then(|a| a.first())
        .map(|a| a.user_id.0.clone());
    let incoming = match cb.event {
        SlackEventCallbackBody::AppMention(m) => Incoming {
            team,
            channel: m.channel.0,
            user: m.user.0,
            text: m.content.text.unwrap_or_default(),
            ts: m.origin.ts.0,
            thread_ts: m.origin.thread_ts.map(|t| t.0),
            files: m.content.files.unwrap_or_default(),
            mention: true,
            direct: false,
            bot,
        },
        SlackEventCallbackBody::Message(m)
            if matches!(m.subtype, None | Some(SlackMessageEventType::FileShare))
                && m.sender.bot_id.is_none()
                && m.sender.user.is_some() =>
        {
            let content = m.content.unwrap_or_else(SlackMessageContent::new);
            let text = content.text.unwrap_or_default();
            let direct = m.origin.channel_type.as_ref().is_some_and(|t| t.0 == "im");
            Incoming {
                team,
                mention: bot
                    .as_deref()
                    .is_some_and(|b| text.contains(&format!("<@{b}>"))),
                channel: m.origin.channel.map(|c| c.0).unwrap_or_default(),
                user: m.sender.user.map(|u| u.0).unwrap_or_default(),
                text,
                ts: m.origin.ts.0,
                thread_ts: m.origin.thread_ts.map(|t| t.0),
                files: content.files.unwrap_or_default(),
                direct,
                bot,
            }
        }
        _ => return Ok(json!({ "ok": true, "ignored": "event not handled" })),
    };
    // A mention comes as `app_mention` and as `message`: the message is handled once.
    if incoming.channel.is_empty()
        || !first(
            app,
            &format!("message:{}:{}", incoming.channel, incoming.ts),
        )
        .await?
    {
        return Ok(json!({ "ok": true, "duplicate": true }));
    }
    let app = app.clone();
    tokio::spawn(async move { conversation::message(&app, incoming).await });
    Ok(json!({ "ok": true }))
}

/// An interactivity delivery (already verified): `payload=<json>`.
pub async fn interaction(app: &AppState, body: &[u8]) -> Result<()> {
    let payload = url::form_urlencoded::parse(body)
        .find(|(k, _)| k == "payload")
        .map(|(_, v)| v.into_owned())
        .ok_or_else(|| Error::BadRequest("an interactivity delivery without `payload`".into()))?;
    let event: SlackInteractionEvent = serde_json::from_str(&payload)
        .map_err(|e| Error::BadRequest(format!("not an interactivity payload: {e}")))?;
    let SlackInteractionEvent::BlockActions(a) = event else {
        return Ok(());
    };
    if !first(app, &format!("action:{}", a.trigger_id.0)).await? {
        return Ok(());
    }
    let Some(user) = a.user.as_ref().map(|u| u.id.0.clone()) else {
        return Ok(());
    };
    let channel = match &a.container {
        SlackInteractionActionContainer::Message(m) => m.channel_id.as_ref().map(|c| c.0.clone()),
        _ => None,
    }
    .or_else(|| a.channel.as_ref().map(|c| c.id.0.clone()))
    .unwrap_or_default();
    let team = a.team.id.0.clone();
    if !super::slack(app)?.team_allowed(app, &team).await? {
        return Ok(());
    }
    for action in a.actions.unwrap_or_default() {
        let app = app.clone();
        let (team, user, channel) = (team.clone(), user.clone(), channel.clone());
        tokio::spawn(async move {
            conversation::action(&app, &team, &user, &channel, action).await;
        });
    }
    Ok(())
}

/// The slash command (already verified); its answer is shown to the person who ran it.
pub async fn command(app: &AppState, body: &[u8]) -> Result<Value> {
    let fields: serde_json::Map<String, Value> = url::form_urlencoded::parse(body)
        .map(|(k, v)| (k.into_owned(), Value::String(v.into_owned())))
        .collect();
    let cmd: SlackCommandEvent = serde_json::from_value(Value::Object(fields))
        .map_err(|e| Error::BadRequest(format!("not a slash command: {e}")))?;
    if !first(app, &format!("command:{}", cmd.trigger_id.0)).await? {
        return Ok(json!({ "response_type": "ephemeral", "text": "Already handled." }));
    }
    if !super::slack(app)?.team_allowed(app, &cmd.team_id.0).await? {
        return Ok(
            json!({ "response_type": "ephemeral", "text": "This Slack workspace may not use this Tandem server (allowed_teams under [slack])." }),
        );
    }
    let text = super::command::command(app, &cmd).await;
    Ok(json!({ "response_type": "ephemeral", "text": text }))
}
