//! One module per route.

pub mod automations;
pub mod dashboard;
pub mod embed;
pub mod extension;
pub mod insights;
pub mod invite;
pub mod join;
pub mod login;
pub mod not_found;
pub mod pair;
pub mod people;
pub mod session;
pub mod settings;

use leptos::prelude::*;
use tandem_protocol::User;

use crate::api;

/// Loads the signed-in user; sends the browser to `/login` when there is none.
pub fn require_user() -> ReadSignal<Option<User>> {
    let (user, set_user) = signal(None::<User>);
    leptos::task::spawn_local(async move {
        match api::get::<User>("/api/me").await {
            Ok(u) => set_user.set(Some(u)),
            Err(e) if api::is_unauthorized(&e) => {
                if let Some(w) = web_sys::window() {
                    let _ = w.location().set_href("/login");
                }
            }
            Err(e) => leptos::logging::error!("loading the signed-in user: {}", e.message),
        }
    });
    user
}

/// Loads the signed-in user, if there is one (for pages anyone may see).
pub fn maybe_user() -> ReadSignal<Option<User>> {
    let (user, set_user) = signal(None::<User>);
    leptos::task::spawn_local(async move {
        if let Ok(u) = api::get::<User>("/api/me").await {
            set_user.set(Some(u));
        }
    });
    user
}

/// Calls `tick` every `ms` milliseconds while the page is shown.
pub fn every(ms: u64, tick: impl Fn() + 'static) {
    if let Ok(handle) = set_interval_with_handle(tick, std::time::Duration::from_millis(ms)) {
        on_cleanup(move || handle.clear());
    }
}
