//! `/join#token=…`: a share link. Signed in, it joins with the link's role; otherwise (when the
//! link allows guests) it asks for a display name. Then the session opens.

use leptos::prelude::*;
use leptos::task::spawn_local;
use tandem_protocol::live::{JoinLink, Joined};
use tandem_protocol::{SessionId, User};

use crate::api;

fn token_from_fragment() -> Option<String> {
    let hash = web_sys::window()?.location().hash().ok()?;
    hash.trim_start_matches('#')
        .split('&')
        .find_map(|kv| kv.strip_prefix("token="))
        .map(String::from)
}

/// The session a share token is for (read, not verified: the server verifies it).
fn session_of(token: &str) -> Option<SessionId> {
    use base64::Engine;
    let claims = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(claims)
        .ok()?;
    let v: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    v["sub"].as_str()?.parse().ok()
}

fn go(path: &str) {
    if let Some(w) = web_sys::window() {
        let _ = w.location().set_href(path);
    }
}

#[component]
pub fn Join() -> impl IntoView {
    let token = token_from_fragment();
    let session = token.as_deref().and_then(session_of);
    let error = RwSignal::new(None::<String>);
    let ask_name = RwSignal::new(false);
    let name = RwSignal::new(String::new());
    if let (Some(t), Some(_)) = (token.clone(), session) {
        spawn_local(async move {
            match api::get::<User>("/api/me").await {
                Ok(_) => {
                    match api::post::<_, Joined>("/api/links/join", &JoinLink { token: t }).await {
                        Ok(j) => go(&format!("/sessions/{}", j.session_id)),
                        Err(e) => error.set(Some(e.message)),
                    }
                }
                Err(_) => ask_name.set(true),
            }
        });
    } else {
        error.set(Some("This link is incomplete: ask for a new one.".into()));
    }
    let enter = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let (Some(t), Some(id)) = (token.clone(), session) else {
            return;
        };
        let n = name.get_untracked();
        if n.trim().is_empty() {
            error.set(Some("Enter a name the others will see.".into()));
            return;
        }
        if let Some(store) = web_sys::window().and_then(|w| w.session_storage().ok().flatten()) {
            let _ = store.set_item(&format!("tandem.share.{id}"), &t);
            let _ = store.set_item(&format!("tandem.name.{id}"), n.trim());
        }
        go(&format!("/sessions/{id}"));
    };
    view! {
        <main class="page narrow">
            <section class="card">
                <h1>"Join a session"</h1>
                {move || error.get().map(|e| view! { <p class="error" role="alert">{e}</p> })}
                {move || ask_name.get().then(|| view! {
                    <form on:submit=enter.clone()>
                        <label>"Your name "<input id="guest-name" autofocus prop:value=move || name.get() on:input=move |ev| name.set(event_target_value(&ev)) /></label>
                        <button type="submit" id="guest-join">"Join"</button>
                        <p class="muted">"Or "<a href="/login">"sign in"</a>" first."</p>
                    </form>
                })}
            </section>
        </main>
    }
}
