//! `/pair#code=ABCD-EFGH`: a signed-in person approves the Chrome extension's pairing code,
//! which gives that extension a token to start sessions, prompt and read as them.

use leptos::prelude::*;
use leptos::task::spawn_local;
use tandem_protocol::extension::ApprovePairing;

use crate::api;
use crate::components::header::Header;
use crate::pages::require_user;

/// The code in the fragment (or typed).
fn code_in_hash() -> String {
    web_sys::window()
        .and_then(|w| w.location().hash().ok())
        .and_then(|h| {
            h.trim_start_matches('#')
                .split('&')
                .find_map(|kv| kv.strip_prefix("code=").map(str::to_string))
        })
        .unwrap_or_default()
}

#[component]
pub fn PairPage() -> impl IntoView {
    let user = require_user();
    let code = RwSignal::new(code_in_hash());
    let busy = RwSignal::new(false);
    let done = RwSignal::new(None::<String>);
    let error = RwSignal::new(None::<String>);
    let approve = move |_| {
        busy.set(true);
        error.set(None);
        let user_code = code.get_untracked();
        spawn_local(async move {
            match api::post::<_, serde_json::Value>(
                "/api/extension/pairings/approve",
                &ApprovePairing { user_code },
            )
            .await
            {
                Ok(v) => done.set(Some(
                    v["label"].as_str().unwrap_or("The extension").to_string(),
                )),
                Err(e) => error.set(Some(e.message)),
            }
            busy.set(false);
        });
    };
    view! {
        <Header user=user.into() />
        <main class="page" id="pair">
            <h1>"Connect the Chrome extension"</h1>
            <section class="card">
                {move || match done.get() {
                    Some(label) => view! {
                        <p class="ok" id="pair-done" role="status">
                            {format!("{label} is connected: it can start sessions, send prompts and read what you may see. You can close this tab; revoke it any time under your tokens.")}
                        </p>
                    }.into_any(),
                    None => view! {
                        <p>"Approve only the code your own extension shows you, in this browser."</p>
                        <label>"Pairing code"
                            <input id="pair-code" class="mono" prop:value=move || code.get()
                                on:input=move |ev| code.set(event_target_value(&ev)) />
                        </label>
                        <button id="pair-approve" disabled=move || busy.get() || code.with(|c| c.trim().is_empty())
                            on:click=approve>"Approve"</button>
                        {move || error.get().map(|e| view! {
                            <p class="error" id="pair-error" role="alert">{format!("Not approved: {}.", e.trim_end_matches('.'))}</p>
                        })}
                    }.into_any(),
                }}
            </section>
        </main>
    }
}
