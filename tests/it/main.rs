//! Integration tests through the real HTTP boundary: the router in-process (`tower::oneshot`)
//! and a real server on a loopback socket, against SQLite and PostgreSQL.
//!
//! PostgreSQL variants need `TANDEM_TEST_POSTGRES_URL` (an admin URL; each test makes its own
//! database). `cargo xtask test` starts a local server and sets it. Without it they print SKIP,
//! unless `TANDEM_TEST_REQUIRE_POSTGRES=1`, when they fail.

mod harness;
mod hostile;
mod live;
mod mcp_servers;

mod access;
mod agent_runs;
mod api_auth;
mod api_input;
mod api_repos;
mod api_sessions;
mod approvals;
mod automations;
mod bounds;
mod cli;
mod code;
mod coediting;
mod desktop;
mod egress;
mod extension;
mod first_run;
mod gateway;
mod github;
mod github_issues;
mod insights;
mod oidc;
mod oidc_provider;
mod on_kubernetes;
mod openapi;
mod page_context;
mod people;
mod rate_limits;
mod remote_images;
mod restart;
mod session_workspaces;
mod signin_forgery;
mod slack;
mod snapshots;
mod store;
mod surfaces;
mod traces;
mod workspaces;
