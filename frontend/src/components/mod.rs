//! Reusable pieces of pages.

pub mod audit;
pub mod automation_form;
pub mod automation_runs;
pub mod code;
pub mod desktop;
pub mod diff;
pub mod error_box;
pub mod header;
pub mod host_banner;
pub mod invites;
pub mod local_repos;
pub mod new_session;
pub mod no_access;
pub mod page_rules;
pub mod participants;
pub mod prompt_box;
pub mod prompt_context;
pub mod pull_request;
pub mod repo_access;
pub mod repo_form;
pub mod share;
pub mod slack_settings;
pub mod terminal;
pub mod timeline;
pub mod visibility;
