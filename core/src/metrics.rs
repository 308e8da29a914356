//! Tandem's own health for Prometheus: counters and histograms the core and the surfaces add
//! to as things happen, gauges read when `/metrics` is scraped, one registry per server (so
//! servers in one process, as in the tests, never mix their numbers).
//!
//! Adding to a metric is an atomic add on a label set found in a map under a read lock: a
//! few tens of nanoseconds, off every hot path's critical section.

use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModelLabels {
    pub model: String,
    pub status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TokenLabels {
    pub model: String,
    /// `prompt` or `completion`.
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    pub phase: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TurnLabels {
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ToolLabels {
    pub tool: String,
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub route: String,
    pub status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WorkspaceLabels {
    pub session: String,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn seconds() -> Histogram {
    // 1 ms to about 9 minutes.
    Histogram::new(exponential_buckets(0.001, 2.0, 20))
}

/// Most distinct tool names counted; past it, calls count as `other` (a workspace names its
/// own tools: it cannot grow the registry without bound).
const MAX_TOOL_NAMES: usize = 200;

pub struct Metrics {
    /// Counting at all: off where nothing reads the metrics (no `[telemetry] metrics_token`),
    /// so a server without Prometheus pays nothing for them.
    on: bool,
    registry: Mutex<Registry>,
    pub sessions: Family<StateLabels, Gauge>,
    pub prompts_queued: Gauge,
    pub boot_phase: Histograms<PhaseLabels>,
    pub turn: Histograms<TurnLabels>,
    pub prompt_claim: Histogram,
    pub model_requests: Family<ModelLabels, Counter>,
    pub model_latency: Histograms<ModelLabels>,
    pub model_first_byte: Histograms<ModelLabels>,
    pub model_tokens: Family<TokenLabels, Counter>,
    pub tool_calls: Family<ToolLabels, Counter>,
    tool_names: Mutex<std::collections::HashSet<String>>,
    pub live_members: Gauge,
    pub live_bytes: Counter,
    pub live_slow_closed: Counter,
    pub snapshot_builds: Family<OutcomeLabels, Counter>,
    pub breaker_trips: Counter,
    pub gateway_requests: Family<RouteLabels, Counter>,
    pub egress_blocked: Counter,
    pub workspace_memory: Family<WorkspaceLabels, Gauge>,
    pub workspace_cpu: Family<WorkspaceLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut r = Registry::with_prefix("tandem");
        let m = Self {
            on: true,
            registry: Mutex::new(Registry::default()),
            sessions: Family::default(),
            prompts_queued: Gauge::default(),
            boot_phase: Family::new_with_constructor(seconds),
            turn: Family::new_with_constructor(seconds),
            prompt_claim: seconds(),
            model_requests: Family::default(),
            model_latency: Family::new_with_constructor(seconds),
            model_first_byte: Family::new_with_constructor(seconds),
            model_tokens: Family::default(),
            tool_calls: Family::default(),
            tool_names: Mutex::default(),
            live_members: Gauge::default(),
            live_bytes: Counter::default(),
            live_slow_closed: Counter::default(),
            snapshot_builds: Family::default(),
            breaker_trips: Counter::default(),
            gateway_requests: Family::default(),
            egress_blocked: Counter::default(),
            workspace_memory: Family::default(),
            workspace_cpu: Family::default(),
        };
        r.register("sessions", "Sessions by state", m.sessions.clone());
        r.register(
            "prompts_queued",
            "Prompts waiting for a turn",
            m.prompts_queued.clone(),
        );
        r.register(
            "boot_phase_seconds",
            "Time from a boot's start to each of its phases",
            m.boot_phase.clone(),
        );
        r.register(
            "turn_seconds",
            "How long turns ran, by outcome",
            m.turn.clone(),
        );
        r.register(
            "prompt_claim_seconds",
            "How long a prompt waited in its queue before a turn claimed it",
            m.prompt_claim.clone(),
        );
        r.register(
            "model_requests",
            "Model requests relayed by the gateway, by model and answer status",
            m.model_requests.clone(),
        );
        r.register(
            "model_request_seconds",
            "Model requests from relay to the answer's end",
            m.model_latency.clone(),
        );
        r.register(
            "model_first_byte_seconds",
            "Model requests from relay to the answer's first bytes",
            m.model_first_byte.clone(),
        );
        r.register(
            "model_tokens",
            "Model tokens the provider reported, by model and kind",
            m.model_tokens.clone(),
        );
        r.register(
            "tool_calls",
            "Agents' tool calls by tool and outcome",
            m.tool_calls.clone(),
        );
        r.register(
            "live_members",
            "People connected to live sessions",
            m.live_members.clone(),
        );
        r.register(
            "live_sent_bytes",
            "Bytes fanned out to live sessions' members",
            m.live_bytes.clone(),
        );
        r.register(
            "live_slow_clients_closed",
            "Live connections closed for reading too slowly",
            m.live_slow_closed.clone(),
        );
        r.register(
            "snapshot_builds",
            "Snapshot builds by outcome",
            m.snapshot_builds.clone(),
        );
        r.register(
            "snapshot_breaker_trips",
            "Repos whose snapshot builds were paused after failing again and again",
            m.breaker_trips.clone(),
        );
        r.register(
            "gateway_requests",
            "Requests workspaces made to their gateway, by route and status",
            m.gateway_requests.clone(),
        );
        r.register(
            "egress_blocked",
            "Lookups of names off a workspace's allow-list, refused",
            m.egress_blocked.clone(),
        );
        r.register(
            "workspace_memory_bytes",
            "Each running workspace's memory, from its cgroup",
            m.workspace_memory.clone(),
        );
        r.register(
            "workspace_cpu_seconds",
            "Each running workspace's CPU time, from its cgroup",
            m.workspace_cpu.clone(),
        );
        *m.registry.lock().unwrap_or_else(|p| p.into_inner()) = r;
        m
    }
}

impl Metrics {
    /// Metrics that count nothing (a server nobody scrapes).
    pub fn off() -> Self {
        Self {
            on: false,
            ..Self::default()
        }
    }

    /// Whether anything is counted.
    pub fn on(&self) -> bool {
        self.on
    }

    /// `n` bytes sent to a live channel's member.
    pub fn live_sent(&self, n: usize) {
        if self.on {
            self.live_bytes.inc_by(n as u64);
        }
    }

    /// A live channel's member closed for falling behind.
    pub fn live_slow(&self) {
        if self.on {
            self.live_slow_closed.inc();
        }
    }

    /// A workspace's gateway answered `status` on `route`.
    pub fn gateway_request(&self, route: &str, status: u16) {
        if self.on {
            self.gateway_requests
                .get_or_create(&RouteLabels {
                    route: route.into(),
                    status: status.to_string(),
                })
                .inc();
        }
    }

    /// The registry in the OpenMetrics text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let r = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &r);
        out
    }

    /// A model answer ended.
    pub fn model_answer(
        &self,
        model: &str,
        status: u16,
        took: Duration,
        first_byte: Option<Duration>,
        prompt_tokens: i64,
        completion_tokens: i64,
    ) {
        if !self.on {
            return;
        }
        let l = ModelLabels {
            model: model.to_string(),
            status: status.to_string(),
        };
        self.model_requests.get_or_create(&l).inc();
        self.model_latency
            .get_or_create(&l)
            .observe(took.as_secs_f64());
        if let Some(f) = first_byte {
            self.model_first_byte
                .get_or_create(&l)
                .observe(f.as_secs_f64());
        }
        for (kind, n) in [("prompt", prompt_tokens), ("completion", completion_tokens)] {
            self.model_tokens
                .get_or_create(&TokenLabels {
                    model: model.to_string(),
                    kind: kind.into(),
                })
                .inc_by(n.max(0) as u64);
        }
    }

    /// An agent's tool call ended (`outcome`: `ok` or `error`).
    pub fn tool_call(&self, tool: &str, outcome: &str) {
        if !self.on {
            return;
        }
        let tool = {
            let mut names = self.tool_names.lock().unwrap_or_else(|p| p.into_inner());
            if names.contains(tool) || names.len() < MAX_TOOL_NAMES {
                names.insert(tool.to_string());
                tool.chars().take(100).collect()
            } else {
                "other".to_string()
            }
        };
        self.tool_calls
            .get_or_create(&ToolLabels {
                tool,
                outcome: outcome.into(),
            })
            .inc();
    }

    /// A boot reached `phase` `at` after it began.
    pub fn boot_phase(&self, phase: &str, at: Duration) {
        if !self.on {
            return;
        }
        self.boot_phase
            .get_or_create(&PhaseLabels {
                phase: phase.into(),
            })
            .observe(at.as_secs_f64());
    }

    /// What an event this process appended, or a measure it took, adds to the metrics.
    pub fn observe(&self, what: crate::db::bus::Observation<'_>) {
        if !self.on {
            return;
        }
        use crate::db::bus::Observation;
        use tandem_protocol::EventKind;
        let ms = |n: i64| Duration::from_millis(n.max(0) as u64);
        match what {
            Observation::PromptWaited(n) => self.prompt_claim.observe(ms(n).as_secs_f64()),
            Observation::SnapshotBuilt { ok } => {
                self.snapshot_build(if ok { "ok" } else { "failed" })
            }
            Observation::BreakerTripped => {
                self.breaker_trips.inc();
            }
            Observation::Event(_, kind) => match kind {
                EventKind::BootPhase {
                    phase, elapsed_ms, ..
                } => self.boot_phase(phase.as_str(), ms(*elapsed_ms)),
                EventKind::ToolResult {
                    name,
                    is_error,
                    exit_code,
                    ..
                } => {
                    let failed = *is_error || exit_code.is_some_and(|c| c != 0);
                    self.tool_call(name, if failed { "error" } else { "ok" });
                }
                EventKind::TurnEnded {
                    outcome,
                    duration_ms,
                    ..
                } => self
                    .turn
                    .get_or_create(&TurnLabels {
                        outcome: outcome.as_str().into(),
                    })
                    .observe(ms(*duration_ms).as_secs_f64()),
                EventKind::EgressBlocked { lookups, .. } => {
                    self.egress_blocked.inc_by(*lookups);
                }
                _ => {}
            },
        }
    }

    /// A snapshot build ended (`ok` or `failed`).
    pub fn snapshot_build(&self, outcome: &str) {
        if !self.on {
            return;
        }
        self.snapshot_builds
            .get_or_create(&OutcomeLabels {
                outcome: outcome.into(),
            })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_counted_is_what_is_encoded() {
        let m = Metrics::default();
        m.model_answer("m1", 200, Duration::from_millis(30), None, 10, 3);
        m.tool_call("run_command", "ok");
        let text = m.encode();
        assert!(
            text.contains("tandem_model_tokens_total{model=\"m1\",kind=\"prompt\"} 10"),
            "{text}"
        );
        assert!(
            text.contains("tandem_tool_calls_total{tool=\"run_command\",outcome=\"ok\"} 1"),
            "{text}"
        );
    }

    #[test]
    fn the_grafana_dashboard_asks_only_for_metrics_that_exist() {
        // One of each, so every family has a sample to show.
        let m = Metrics::default();
        let state = StateLabels {
            state: "ready".into(),
        };
        m.sessions.get_or_create(&state).set(1);
        m.prompts_queued.set(1);
        m.prompt_claim.observe(0.1);
        m.boot_phase("ready", Duration::from_millis(40));
        m.observe(crate::db::bus::Observation::Event(
            tandem_protocol::SessionId(uuid::Uuid::nil()),
            &tandem_protocol::EventKind::TurnEnded {
                prompt_id: tandem_protocol::PromptId(uuid::Uuid::nil()),
                outcome: tandem_protocol::TurnOutcome::Completed,
                usage: Default::default(),
                duration_ms: 5,
                error: None,
            },
        ));
        m.model_answer(
            "m",
            200,
            Duration::from_millis(9),
            Some(Duration::from_millis(3)),
            1,
            1,
        );
        m.tool_call("run_command", "ok");
        m.live_members.set(1);
        m.live_bytes.inc();
        m.live_slow_closed.inc();
        m.snapshot_build("ok");
        m.breaker_trips.inc();
        m.gateway_requests
            .get_or_create(&RouteLabels {
                route: "/v1/models".into(),
                status: "200".into(),
            })
            .inc();
        m.egress_blocked.inc();
        let ws = WorkspaceLabels {
            session: "s".into(),
        };
        m.workspace_memory.get_or_create(&ws).set(1);
        m.workspace_cpu.get_or_create(&ws).set(1.0);
        let text = m.encode();
        let dashboard = include_str!("../../docs/grafana-dashboard.json");
        let mut asked = 0;
        for (i, _) in dashboard.match_indices("tandem_") {
            let name: String = dashboard[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let base = ["_bucket", "_total", "_count", "_sum"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .unwrap_or(&name);
            asked += 1;
            assert!(
                text.contains(&format!("# TYPE {base} ")),
                "the dashboard asks for {name}, which /metrics does not have"
            );
        }
        assert!(asked > 15);
    }

    #[test]
    fn a_workspace_cannot_grow_the_tool_names_without_bound() {
        let m = Metrics::default();
        for i in 0..(MAX_TOOL_NAMES + 50) {
            m.tool_call(&format!("t{i}"), "ok");
        }
        let text = m.encode();
        assert!(text.contains("tool=\"other\",outcome=\"ok\"} 50"), "{text}");
    }
}
