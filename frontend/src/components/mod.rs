//! Reusable pieces of pages.

pub mod error_box;
pub mod header;
pub mod new_session;
pub mod repo_form;
