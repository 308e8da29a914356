//! Sign in with a one-time login code (from a login link: `/login#code=tlc_…`), an API token,
//! GitHub (when the server has a GitHub App) or an OpenID Connect provider (`[[oidc]]`).

use leptos::prelude::*;
use leptos::task::spawn_local;
use serde::Deserialize;
use tandem_protocol::people::SignInProvider;
use tandem_protocol::{ApiError, LoginRequest, User};

use crate::api;
use crate::components::error_box::ErrorBox;

/// `GET /api/auth/providers`.
#[derive(Clone, Debug, Default, Deserialize)]
struct Providers {
    #[serde(default)]
    github: bool,
    #[serde(default)]
    oidc: Vec<SignInProvider>,
}

async fn sign_in(credential: String, set_error: WriteSignal<Option<ApiError>>) {
    match api::post::<_, User>("/api/auth/login", &LoginRequest { credential }).await {
        Ok(_) => {
            if let Some(w) = web_sys::window() {
                let _ = w.location().set_href("/");
            }
        }
        Err(e) => set_error.set(Some(e)),
    }
}

fn redeem_code_in_hash(set_error: WriteSignal<Option<ApiError>>) {
    let Some(w) = web_sys::window() else { return };
    let hash = w.location().hash().unwrap_or_default();
    if let Some(code) = hash.strip_prefix("#code=").filter(|c| !c.is_empty()) {
        let code = code.to_string();
        if let Ok(h) = w.history() {
            let _ = h.replace_state_with_url(&wasm_bindgen::JsValue::NULL, "", Some("/login"));
        }
        spawn_local(sign_in(code, set_error));
    }
}

#[component]
pub fn Login() -> impl IntoView {
    let (credential, set_credential) = signal(String::new());
    let (error, set_error) = signal(None::<ApiError>);
    // A login link carries its code in the fragment; use it once and drop it from the address
    // bar. Also when the link is opened on an already open login page (only the hash changes).
    redeem_code_in_hash(set_error);
    let listener = window_event_listener(leptos::ev::hashchange, move |_| {
        redeem_code_in_hash(set_error)
    });
    on_cleanup(move || listener.remove());
    // "Sign in with GitHub" when the server has a GitHub App with OAuth, and one button per
    // OpenID provider. Each is a full page load: the provider sends the browser back to `/`.
    let providers = RwSignal::new(Providers::default());
    let providers_error = RwSignal::new(None::<ApiError>);
    spawn_local(async move {
        match api::get::<Providers>("/api/auth/providers").await {
            Ok(p) => providers.set(p),
            Err(e) => providers_error.set(Some(ApiError {
                message: format!(
                    "Loading the other ways to sign in failed: {}; reload the page to try again.",
                    e.message
                ),
                ..e
            })),
        }
    });
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        spawn_local(sign_in(
            credential.get_untracked().trim().to_string(),
            set_error,
        ));
    };
    view! {
        <main class="login">
            <h1>"Tandem"</h1>
            <p class="muted">"Background coding agents you can watch and co-drive."</p>
            <form on:submit=submit>
                <label>"Login code or API token"
                    <input id="login-credential" type="password" autocomplete="off" required
                        placeholder="tlc_… or tdm_…"
                        prop:value=credential on:input=move |ev| set_credential.set(event_target_value(&ev)) />
                </label>
                <button id="login-submit" class="primary" type="submit">"Sign in"</button>
                <ErrorBox error />
            </form>
            <div class="sign-in-providers" id="login-providers">
                {move || providers.with(|p| p.github).then(|| view! {
                    <p><a class="button" id="login-github" href="/api/auth/github" rel="external">"Sign in with GitHub"</a></p>
                })}
                {move || providers.with(|p| p.oidc.clone()).into_iter().map(|p| view! {
                    <p><a class="button login-oidc" id=format!("login-oidc-{}", p.id) data-provider=p.id.clone()
                        href=p.url rel="external">{format!("Sign in with {}", p.label)}</a></p>
                }).collect_view()}
            </div>
            <ErrorBox error=providers_error.read_only() />
            <p class="muted small">"No link? Run " <code>"tandem login-link"</code> " on the server."</p>
        </main>
    }
}
