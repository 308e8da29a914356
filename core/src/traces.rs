//! Tandem's own work as OpenTelemetry traces, exported over OTLP/HTTP to
//! `[telemetry] otlp_endpoint`: one trace per session boot (a span per boot phase) and one per
//! turn (a span per model request and tool call), every span carrying `session.id`.
//!
//! The spans are made from the events the timeline shows (through the store's observer, as the
//! metrics are) and from the gateway's model answers, each with the times they report: a trace
//! follows the timeline (events are seen as they are appended, so a span can describe one
//! whose transaction then rolled back), with no second path through the boot and turn code to
//! keep true. Only what this server appends is seen: with several servers, a turn that moves
//! to another server mid-way is cut in two. Exporting happens on the exporter's own thread; an unreachable collector loses spans,
//! never slows a session.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use opentelemetry::trace::{Span, SpanKind, Status, TraceContextExt, Tracer, TracerProvider};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracer, SdkTracerProvider,
};
use tandem_protocol::{EventKind, SessionId, SessionState, TurnOutcome};

use crate::{Error, Result};

/// Most sessions with a boot or a turn open at once; past it, the one open longest is closed
/// (a bound on what a flood of sessions, or boots that never end, can make this hold).
const MAX_OPEN: usize = 10_000;

/// The attribute every span carries (OpenTelemetry's general `session.id`).
pub const SESSION_ID: &str = "session.id";

/// The open boot and turn of one session.
struct Open {
    /// When this entry was made (the oldest goes first past [`MAX_OPEN`]).
    since: Instant,
    /// The boot's trace and its phase under way.
    boot: Option<(Context, Option<Context>)>,
    /// The turn's trace and when it started.
    turn: Option<(Context, SystemTime)>,
}

struct Exporting {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    open: Mutex<HashMap<SessionId, Open>>,
}

/// One server's traces; does nothing without an endpoint.
#[derive(Default)]
pub struct Traces {
    exporting: Option<Exporting>,
}

/// Where a span made later belongs: the turn under way when its work began.
#[derive(Clone, Default)]
pub struct Parent(Context);

/// A model answer the gateway relayed, as the trace shows it.
pub struct ModelRequest<'a> {
    pub model: &'a str,
    pub status: u16,
    /// From the request to the answer's end.
    pub took: Duration,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
}

impl Traces {
    /// Traces sent to the OTLP/HTTP collector at `endpoint` (`http://collector:4318`), or none.
    pub fn new(endpoint: Option<&str>) -> Result<Self> {
        let Some(endpoint) = endpoint else {
            return Ok(Self::default());
        };
        let provider = provider(endpoint)?;
        let tracer = provider.tracer("tandem");
        Ok(Self {
            exporting: Some(Exporting {
                provider,
                tracer,
                open: Mutex::default(),
            }),
        })
    }

    /// The provider spans go out through (for the process's own `tracing` spans), if any.
    pub fn provider(&self) -> Option<&SdkTracerProvider> {
        self.exporting.as_ref().map(|e| &e.provider)
    }

    /// Sends what is waiting (at shutdown; blocks until the collector answers or times out).
    pub fn flush(&self) {
        if let Some(e) = &self.exporting {
            let _ = e.provider.force_flush();
        }
    }

    /// An event of `session`'s, as it was appended.
    pub fn event(&self, session: SessionId, kind: &EventKind) {
        let Some(e) = &self.exporting else { return };
        // Most events (each piece of a reply) say nothing a trace shows: no lock for them.
        if matches!(
            kind,
            EventKind::BootPhase { .. }
                | EventKind::TurnStarted { .. }
                | EventKind::ToolResult { .. }
                | EventKind::TurnEnded { .. }
                | EventKind::StateChanged { .. }
        ) {
            e.event(session, kind, SystemTime::now());
        }
    }

    /// What a model request for `session` made now belongs under (its turn under way).
    pub fn parent(&self, session: SessionId) -> Parent {
        let Some(e) = &self.exporting else {
            return Parent::default();
        };
        let open = e.open.lock().unwrap_or_else(|e| e.into_inner());
        Parent(
            open.get(&session)
                .and_then(|o| o.turn.as_ref().map(|(cx, _)| cx.clone()))
                .unwrap_or_default(),
        )
    }

    /// A model answer relayed for `session` that ended now, its request made under `parent`.
    pub fn model_request(&self, session: SessionId, parent: &Parent, m: ModelRequest<'_>) {
        let Some(e) = &self.exporting else { return };
        let end = SystemTime::now();
        let mut span = e
            .tracer
            .span_builder(format!("chat {}", m.model))
            .with_kind(SpanKind::Client)
            .with_start_time(end.checked_sub(m.took).unwrap_or(end))
            .with_attributes([
                KeyValue::new(SESSION_ID, session.to_string()),
                KeyValue::new("gen_ai.operation.name", "chat"),
                KeyValue::new("gen_ai.request.model", m.model.to_string()),
                KeyValue::new("gen_ai.usage.input_tokens", m.prompt_tokens),
                KeyValue::new("gen_ai.usage.output_tokens", m.completion_tokens),
                KeyValue::new("http.response.status_code", i64::from(m.status)),
            ])
            .start_with_context(&e.tracer, &parent.0);
        if m.status >= 400 {
            span.set_status(Status::error(format!("the model answered {}", m.status)));
        }
        span.end_with_timestamp(end);
    }
}

/// The OTLP/HTTP traces URL for `endpoint`: `/v1/traces` under it, unless it names it.
fn traces_url(endpoint: &str) -> String {
    let base = endpoint.trim_end_matches('/');
    if base.ends_with("/v1/traces") {
        base.to_string()
    } else {
        format!("{base}/v1/traces")
    }
}

/// An OTLP/HTTP exporter batching on its own thread, sending every second. A collector that
/// wants credentials gets them from `OTEL_EXPORTER_OTLP_HEADERS` in the server's environment.
fn provider(endpoint: &str) -> Result<SdkTracerProvider> {
    use opentelemetry_otlp::WithExportConfig;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(traces_url(endpoint))
        .with_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| Error::Config(format!("[telemetry] otlp_endpoint: {e}")))?;
    let batches = BatchSpanProcessor::builder(exporter)
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_scheduled_delay(Duration::from_secs(1))
                .with_max_queue_size(8_192)
                .build(),
        )
        .build();
    Ok(SdkTracerProvider::builder()
        .with_span_processor(batches)
        .with_resource(
            Resource::builder()
                .with_service_name("tandem")
                .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
                .build(),
        )
        .build())
}

/// Ends what `open` has open at `now`, saying `why` where it did not end well.
fn close(open: Open, now: SystemTime, why: &'static str) {
    if let Some((root, phase)) = open.boot {
        for cx in phase.iter().chain([&root]) {
            cx.span().set_status(Status::error(why));
            cx.span().end_with_timestamp(now);
        }
    }
    if let Some((turn, _)) = open.turn {
        turn.span().set_status(Status::error(why));
        turn.span().end_with_timestamp(now);
    }
}

impl Exporting {
    fn root(&self, name: &'static str, session: SessionId, start: SystemTime) -> Context {
        let span = self
            .tracer
            .span_builder(name)
            .with_start_time(start)
            .with_attributes([KeyValue::new(SESSION_ID, session.to_string())])
            .start_with_context(&self.tracer, &Context::new());
        Context::new().with_span(span)
    }

    fn child(
        &self,
        parent: &Context,
        name: String,
        session: SessionId,
        start: SystemTime,
        attributes: Vec<KeyValue>,
    ) -> opentelemetry_sdk::trace::Span {
        let mut all = vec![KeyValue::new(SESSION_ID, session.to_string())];
        all.extend(attributes);
        self.tracer
            .span_builder(name)
            .with_start_time(start)
            .with_attributes(all)
            .start_with_context(&self.tracer, parent)
    }

    fn event(&self, session: SessionId, kind: &EventKind, now: SystemTime) {
        let mut all = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if !all.contains_key(&session)
            && all.len() >= MAX_OPEN
            && let Some(oldest) = all.iter().min_by_key(|(_, o)| o.since).map(|(id, _)| *id)
            && let Some(o) = all.remove(&oldest)
        {
            close(o, now, "no longer followed");
        }
        let open = all.entry(session).or_insert_with(|| Open {
            since: Instant::now(),
            boot: None,
            turn: None,
        });
        // Durations the workspace reports start no earlier than what they are part of.
        let ago = |ms: i64, floor: SystemTime| {
            now.checked_sub(Duration::from_millis(ms.max(0) as u64))
                .unwrap_or(floor)
                .max(floor)
        };
        match kind {
            EventKind::BootPhase {
                phase, elapsed_ms, ..
            } => {
                let (root, under_way) = open.boot.get_or_insert_with(|| {
                    let start = ago(*elapsed_ms, SystemTime::UNIX_EPOCH);
                    (self.root("session boot", session, start), None)
                });
                if let Some(p) = under_way.take() {
                    p.span().end_with_timestamp(now);
                }
                if *phase == tandem_protocol::BootPhase::Ready {
                    root.span().end_with_timestamp(now);
                    open.boot = None;
                } else {
                    let name = format!("boot {}", phase.as_str());
                    let span = self.child(root, name, session, now, vec![]);
                    *under_way = Some(Context::new().with_span(span));
                }
            }
            EventKind::TurnStarted {
                prompt_id, agent, ..
            } => {
                if let Some((stale, _)) = open.turn.take() {
                    stale.span().end_with_timestamp(now);
                }
                let turn = self.root("turn", session, now);
                turn.span().set_attributes([
                    KeyValue::new("tandem.prompt.id", prompt_id.to_string()),
                    KeyValue::new("tandem.agent", agent.chars().take(100).collect::<String>()),
                ]);
                open.turn = Some((turn, now));
            }
            EventKind::ToolResult {
                name,
                call_id,
                is_error,
                exit_code,
                duration_ms,
                ..
            } => {
                let (parent, started) = open
                    .turn
                    .clone()
                    .unwrap_or((Context::new(), SystemTime::UNIX_EPOCH));
                // Names and ids come from the workspace: bounded.
                let name: String = name.chars().take(100).collect();
                let mut attributes = vec![
                    KeyValue::new("gen_ai.tool.name", name.clone()),
                    KeyValue::new(
                        "gen_ai.tool.call.id",
                        call_id.chars().take(100).collect::<String>(),
                    ),
                ];
                if let Some(code) = exit_code {
                    attributes.push(KeyValue::new("process.exit.code", i64::from(*code)));
                }
                let start = ago(*duration_ms, started);
                let mut span =
                    self.child(&parent, format!("tool {name}"), session, start, attributes);
                if *is_error || exit_code.is_some_and(|c| c != 0) {
                    span.set_status(Status::error("the tool call failed"));
                }
                span.end_with_timestamp(now);
            }
            EventKind::TurnEnded {
                outcome,
                duration_ms,
                ..
            } => {
                let (turn, _) = open.turn.take().unwrap_or_else(|| {
                    let start = ago(*duration_ms, SystemTime::UNIX_EPOCH);
                    (self.root("turn", session, start), start)
                });
                let span = turn.span();
                span.set_attribute(KeyValue::new("tandem.turn.outcome", outcome.as_str()));
                // The outcome, not the turn's error text: that comes from the workspace.
                if *outcome != TurnOutcome::Completed {
                    span.set_status(Status::error(outcome.as_str()));
                }
                span.end_with_timestamp(now);
            }
            EventKind::StateChanged { to, .. } => {
                // A boot ends at ready; any other way out of starting ends it unfinished, and
                // a session that stops, fails or is put away ends its turn too.
                let boot_over = !matches!(to, SessionState::Starting | SessionState::Ready);
                let turn_over = matches!(
                    to,
                    SessionState::Queued
                        | SessionState::Suspended
                        | SessionState::Stopped
                        | SessionState::Failed
                );
                let ended = Open {
                    since: open.since,
                    boot: if boot_over { open.boot.take() } else { None },
                    turn: if turn_over { open.turn.take() } else { None },
                };
                close(ended, now, to.as_str());
            }
            _ => {}
        }
        if open.boot.is_none() && open.turn.is_none() {
            all.remove(&session);
        }
    }
}
