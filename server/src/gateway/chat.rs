//! The model relay's handlers: a chat-completions request checked, counted against the
//! session's budgets and relayed, its answer streamed back while its tokens are counted; the
//! model list relayed as it is.

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use tandem_protocol::*;

use super::{Gw, model_relay, usage};
use crate::state::AppState;
use crate::{Result, db, sessions};

/// An answer's status and content type, as relayed.
fn head(res: &reqwest::Response) -> (StatusCode, String) {
    let status = StatusCode::from_u16(res.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let content_type = res
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_string();
    (status, content_type)
}

/// The model's answer, streamed to the workspace; `slot` is held until its body ends.
fn answer(res: reqwest::Response, slot: tokio::sync::OwnedSemaphorePermit) -> Response {
    let (status, content_type) = head(&res);
    let stream = futures::StreamExt::map(res.bytes_stream(), move |r| {
        let _held = &slot;
        r.map_err(std::io::Error::other)
    });
    (
        status,
        [("content-type", content_type)],
        Body::from_stream(stream),
    )
        .into_response()
}

/// A request relayed as it is (the model list).
pub(super) async fn upstream(g: &Gw, path: &str) -> Result<Response> {
    g.session().await?;
    let endpoint = g.endpoint().await?;
    // Taken before the model is asked, given back when its answer's body ends.
    let slot = g.slot().await?;
    let res = endpoint
        .send(g, path, None)
        .await
        .map_err(|e| endpoint.unreachable(e))?;
    Ok(answer(res, slot))
}

/// A model request: read within the server's bound on bytes being parsed, checked against the
/// admin's policy (the model pinned, one answer, bounded length, content inline, no
/// provider-side tools, the tree's identity), then — with the endpoint configured — checked
/// against every budget the session draws on, counted against the tree's request budget, then
/// relayed and its answer's tokens counted. A refused request costs no budget, nor one that
/// never reached the endpoint (it could not be connected to); one the provider answered, even
/// with an error, counts.
pub(super) async fn chat(
    State(g): State<Gw>,
    headers: axum::http::HeaderMap,
    body: Body,
) -> Result<Response> {
    let session = g.session().await?;
    let root = db::trees::root_of(&g.app.db, session)
        .await?
        .unwrap_or(session);
    let agents = &g.app.config.agents;
    let relayed = {
        // The shares are held until the parsed request is dropped.
        let (body, _shares) = g.read_model_request(&headers, body).await?;
        let model = g.app.settings.model();
        model_relay::relayable(
            &body,
            &model_relay::Policy {
                model: &model.model,
                allowed_models: &agents.allowed_models,
                max_output_tokens: agents.max_output_tokens,
                provider_tools: &agents.provider_tools,
                identity: &model_relay::identity(root),
            },
        )?
    };
    let endpoint = g.endpoint().await?;
    let slot = g.slot().await?;
    let prompt = db::prompts::running(&g.app.db, session).await?;
    let person = prompt
        .as_ref()
        .and_then(|p| p.author.user_id.map(|u| (u, p.author.name.clone())));
    let whose = crate::spend::Whose {
        session,
        person: person.as_ref().map(|(u, n)| (*u, n.as_str())),
    };
    let cap = agents.max_model_requests_per_session;
    let prompt_id = prompt.as_ref().map(|p| p.id);
    crate::spend::check(&g.app.db, &whose, cap, prompt_id).await?;
    if let Err(e) = sessions::budget::take_model_request(&g.app.db, cap, session).await {
        if matches!(e, tandem_core::Error::TooMany(_)) {
            let b = sessions::budget::model_budget(&g.app.db, cap, session).await?;
            let limit = tandem_protocol::spend::LimitUse {
                scope: tandem_protocol::spend::LimitScope::Requests,
                kind: tandem_protocol::spend::LimitKind::ModelRequests,
                whose: b.root.to_string(),
                used: b.used,
                limit: b.limit,
            };
            crate::spend::tell_once(&g.app.db, session, prompt_id, &limit).await?;
        }
        return Err(e.into());
    }
    let meter = Meter {
        session,
        person: person.map(|(u, _)| u),
        request_bytes: relayed.body.len(),
        model: relayed.model,
        asked: std::time::Instant::now(),
        // The turn under way now: its answer may end after the turn does.
        trace: g.app.traces.parent(session),
    };
    match endpoint
        .send(&g, "chat/completions", Some(relayed.body.into()))
        .await
    {
        Ok(res) => Ok(metered(g.app.clone(), res, slot, meter)),
        Err(e) => {
            // Never sent: the provider did not see it, so the tree did not spend it.
            if e.is_connect()
                && let Err(back) =
                    sessions::budget::give_back_model_request(&g.app.db, session).await
            {
                tracing::warn!(%session, error = %back, "a model request not sent was not given back");
            }
            Err(endpoint.unreachable(e))
        }
    }
}

/// What a relayed model request is counted as, once its answer ends.
struct Meter {
    session: SessionId,
    person: Option<tandem_protocol::UserId>,
    model: String,
    request_bytes: usize,
    asked: std::time::Instant,
    trace: tandem_core::traces::Parent,
}

/// The model's answer, streamed to the workspace while its usage is read; `slot` is held until
/// the answer ends. The answer is read to its end even when the workspace stops reading (the
/// provider bills it whole), then its tokens are counted, and only then does the workspace's
/// copy end.
fn metered(
    app: AppState,
    res: reqwest::Response,
    slot: tokio::sync::OwnedSemaphorePermit,
    meter: Meter,
) -> Response {
    let (status, content_type) = head(&res);
    let mut tap = usage::UsageTap::new(&content_type, meter.request_bytes);
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(8);
    tokio::spawn(async move {
        let _held = slot;
        let mut upstream = res.bytes_stream();
        let mut client = Some(tx);
        let mut first = None;
        // A streamed answer's end marker (`data: [DONE]`, Anthropic's `message_stop`) and what
        // follows it reach the workspace only once the answer is counted: an agent sends its
        // next request when it reads the marker, and that request's budget check must see this
        // answer's spend.
        let mut held: Vec<Bytes> = Vec::new();
        while let Some(r) = futures::StreamExt::next(&mut upstream).await {
            match r {
                Ok(b) => {
                    first.get_or_insert_with(|| meter.asked.elapsed());
                    tap.feed(&b);
                    if !held.is_empty() || ends_answer(&b) {
                        held.push(b);
                        continue;
                    }
                    if let Some(c) = &client
                        && c.send(Ok(b)).await.is_err()
                    {
                        client = None;
                    }
                }
                Err(e) => {
                    if let Some(c) = client.take() {
                        let _ = c.send(Err(std::io::Error::other(e))).await;
                    }
                    break;
                }
            }
        }
        let tokens = tap.finish();
        // Counted before the answer ends for the workspace (its end marker, the body's end).
        if let Err(e) = crate::spend::record(
            &app.db,
            meter.session,
            meter.person,
            &meter.model,
            tokens.prompt,
            tokens.completion,
        )
        .await
        {
            tracing::warn!(session = %meter.session, error = %e, "a model answer's tokens were not counted");
        }
        if let Some(c) = &client {
            for b in held {
                if c.send(Ok(b)).await.is_err() {
                    break;
                }
            }
        }
        drop(client);
        app.traces.model_request(
            meter.session,
            &meter.trace,
            tandem_core::traces::ModelRequest {
                model: &meter.model,
                status: status.as_u16(),
                took: meter.asked.elapsed(),
                prompt_tokens: tokens.prompt,
                completion_tokens: tokens.completion,
            },
        );
        app.metrics.model_answer(
            &meter.model,
            status.as_u16(),
            meter.asked.elapsed(),
            first,
            tokens.prompt,
            tokens.completion,
        );
    });
    let body = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    (
        status,
        [("content-type", content_type)],
        Body::from_stream(body),
    )
        .into_response()
}

/// Whether a piece of a streamed answer holds its end marker (OpenAI's `data: [DONE]`,
/// Anthropic's `message_stop` event).
fn ends_answer(b: &[u8]) -> bool {
    let has = |needle: &[u8]| b.windows(needle.len()).any(|w| w == needle);
    has(b"data: [DONE]") || has(b"message_stop")
}

pub(super) async fn models(State(g): State<Gw>) -> Result<Response> {
    upstream(&g, "models").await
}
