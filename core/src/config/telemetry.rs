//! `[telemetry]`: Tandem's own health for the operators' tools.

use serde::Deserialize;

/// `[telemetry]` in `tandem.toml`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// The bearer token Prometheus sends to scrape `/metrics` (at least 16 characters). None:
    /// `/metrics` is not served.
    pub metrics_token: Option<String>,
    /// An OpenTelemetry collector's OTLP/HTTP endpoint (`http://collector:4318`): traces of
    /// every boot and turn are sent there. None: no traces are exported.
    pub otlp_endpoint: Option<String>,
}

impl TelemetryConfig {
    /// Why this configuration cannot be used, if it cannot.
    pub fn problem(&self) -> Option<String> {
        match &self.metrics_token {
            Some(t) if t.len() < 16 => Some(
                "[telemetry] metrics_token is shorter than 16 characters: make it a long random string"
                    .into(),
            ),
            _ => match &self.otlp_endpoint {
                Some(e) if url::Url::parse(e)
                    .map(|u| {
                        !matches!(u.scheme(), "http" | "https")
                            || u.host().is_none()
                            || !u.username().is_empty()
                            || u.password().is_some()
                            || u.query().is_some()
                    })
                    .unwrap_or(true) =>
                {
                    Some(
                        "[telemetry] otlp_endpoint is not a plain http(s) URL: give the collector's OTLP/HTTP address, such as http://collector:4318 (credentials go in OTEL_EXPORTER_OTLP_HEADERS, not the URL)".into(),
                    )
                }
                _ => None,
            },
        }
    }
}
