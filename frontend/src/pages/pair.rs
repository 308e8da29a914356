//! `/pair#id=<pairing>`: a signed-in person approves a Chrome extension's pairing, which gives
//! that extension a token to start sessions, prompt and read as them. The page shows what asks
//! (its label, when it asked, from which address) and the person types the code their own
//! extension shows: a link never fills it in, so a link someone else sent approves nothing by a
//! click.

use leptos::prelude::*;
use leptos::task::spawn_local;
use tandem_protocol::extension::{ApprovePairing, PairingRequest};

use crate::api;
use crate::components::header::Header;
use crate::format::{ago, local_time};
use crate::pages::require_user;

/// The pairing id in the fragment, if the page was opened from the extension's link.
fn pairing_in_hash() -> Option<String> {
    web_sys::window()
        .and_then(|w| w.location().hash().ok())
        .and_then(|h| {
            h.trim_start_matches('#')
                .split('&')
                .find_map(|kv| kv.strip_prefix("id=").map(str::to_string))
        })
        .filter(|id| !id.is_empty() && id.len() <= 64)
}

#[component]
pub fn PairPage() -> impl IntoView {
    let user = require_user();
    let pairing_id = StoredValue::new(pairing_in_hash());
    let asking = RwSignal::new(None::<PairingRequest>);
    let code = RwSignal::new(String::new());
    let busy = RwSignal::new(false);
    let done = RwSignal::new(None::<String>);
    let error = RwSignal::new(None::<String>);
    if let Some(id) = pairing_id.get_value() {
        spawn_local(async move {
            match api::get::<PairingRequest>(&format!("/api/extension/pairings/{id}")).await {
                Ok(p) => asking.set(Some(p)),
                Err(e) => error.set(Some(e.message)),
            }
        });
    }
    let approve = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        busy.set(true);
        error.set(None);
        let req = ApprovePairing {
            user_code: code.get_untracked(),
            pairing_id: pairing_id.get_value(),
        };
        spawn_local(async move {
            match api::post::<_, serde_json::Value>("/api/extension/pairings/approve", &req).await {
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
                        {move || asking.get().map(|p| view! {
                            <dl class="pair-asking" id="pair-asking">
                                <dt>"What asks"</dt><dd id="pair-label">{p.label.clone()}</dd>
                                <dt>"When"</dt><dd id="pair-when">{format!("{} ({})", local_time(p.created_at), ago(p.created_at))}</dd>
                                <dt>"From"</dt><dd id="pair-address" class="mono">{p.address.clone().unwrap_or_else(|| "an unknown address".into())}</dd>
                            </dl>
                        })}
                        <p>"Approve only if this is your own extension, in this browser: type the code its panel shows you. If you did not just ask to pair, close this page."</p>
                        <form on:submit=approve>
                            <label>"Pairing code"
                                <input id="pair-code" class="mono" autocomplete="off" placeholder="ABCD-EFGH"
                                    prop:value=move || code.get()
                                    on:input=move |ev| code.set(event_target_value(&ev)) />
                            </label>
                            <button id="pair-approve" type="submit" disabled=move || busy.get() || code.with(|c| c.trim().is_empty())>"Approve"</button>
                        </form>
                        {move || error.get().map(|e| view! {
                            <p class="error" id="pair-error" role="alert">{format!("Not approved: {}.", e.trim_end_matches('.'))}</p>
                        })}
                    }.into_any(),
                }}
            </section>
        </main>
    }
}
