//! Browser tests: real headless Chromium (through ChromeDriver and fantoccini) against a real
//! server serving the built web app.
//!
//! Needs `TANDEM_E2E_WEB_DIR` (the built site, `cargo xtask site`) and `chromedriver` + `chromium`
//! on PATH. `cargo xtask test` provides all three and sets `TANDEM_E2E_REQUIRE=1`, which turns a
//! missing piece into a failure instead of a printed SKIP. Screenshots go to
//! `target/tmp/e2e/<test>/`.

#[path = "../tests/it/harness.rs"]
#[allow(dead_code)]
mod harness;
#[path = "../tests/it/mcp_servers.rs"]
#[allow(dead_code)]
mod mcp_servers;
#[path = "../tests/it/oidc_provider.rs"]
#[allow(dead_code)]
mod oidc_provider;

mod approvals;
mod automations;
mod browser;
mod code;
mod coediting;
mod dashboard;
mod desktop;
mod extension;
mod first_run;
mod fixtures;
mod hostile;
mod insights;
mod people;
mod reconnect;
mod session;
mod slack;
