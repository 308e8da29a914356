//! `/invite#code=tiv_…`: an invite link. Redeems its one-time code for a browser session (the
//! person the invite names is created then), then opens the dashboard.

use leptos::prelude::*;
use leptos::task::spawn_local;
use tandem_protocol::User;
use tandem_protocol::people::AcceptInvite;

use crate::api;

/// The code in the fragment, dropped from the address bar (it works once).
fn code_in_hash() -> Option<String> {
    let w = web_sys::window()?;
    let hash = w.location().hash().ok()?;
    let code = hash
        .trim_start_matches('#')
        .split('&')
        .find_map(|kv| kv.strip_prefix("code="))
        .filter(|c| !c.is_empty())?
        .to_string();
    if let Ok(h) = w.history() {
        let _ = h.replace_state_with_url(&wasm_bindgen::JsValue::NULL, "", Some("/invite"));
    }
    Some(code)
}

fn accept(code: String, busy: RwSignal<bool>, error: RwSignal<Option<String>>) {
    busy.set(true);
    error.set(None);
    spawn_local(async move {
        match api::post::<_, User>("/api/auth/invite", &AcceptInvite { code }).await {
            Ok(_) => {
                // A full load, so every part of the app asks who is signed in anew.
                if let Some(w) = web_sys::window() {
                    let _ = w.location().set_href("/");
                }
            }
            Err(e) => {
                error.set(Some(e.message));
                busy.set(false);
            }
        }
    });
}

#[component]
pub fn InvitePage() -> impl IntoView {
    let busy = RwSignal::new(false);
    let error = RwSignal::new(None::<String>);
    match code_in_hash() {
        Some(code) => accept(code, busy, error),
        None => error.set(Some(
            "this invite link has no code in it (the part after #code=); open the whole link"
                .into(),
        )),
    }
    // Another invite link opened on this page changes only the fragment.
    let listener = window_event_listener(leptos::ev::hashchange, move |_| {
        if let Some(code) = code_in_hash() {
            accept(code, busy, error);
        }
    });
    on_cleanup(move || listener.remove());
    view! {
        <main class="login" id="invite">
            <h1>"Tandem"</h1>
            <Show when=move || busy.get()>
                <p class="muted" id="invite-status" role="status">"Accepting the invite…"</p>
            </Show>
            {move || error.get().map(|e| view! {
                <div id="invite-failed" role="alert">
                    <p class="error" id="invite-error">{format!("The invite could not be accepted: {}.", e.trim_end_matches('.'))}</p>
                    <p id="invite-help">"Ask the admin who invited you for a new invite."</p>
                    <p class="muted small">"Already have an account? "<a href="/login">"Sign in"</a>"."</p>
                </div>
            })}
        </main>
    }
}
