//! The top bar: product name, the automations, the insights, the Chrome extension's page, the admins' pages, who is signed in, sign out.

use leptos::prelude::*;
use leptos::task::spawn_local;
use tandem_protocol::User;

use crate::api;

#[component]
pub fn Header(user: Signal<Option<User>>) -> impl IntoView {
    let sign_out = move |_| {
        spawn_local(async move {
            let _ =
                api::post::<_, serde_json::Value>("/api/auth/logout", &serde_json::json!({})).await;
            if let Some(w) = web_sys::window() {
                let _ = w.location().set_href("/login");
            }
        });
    };
    view! {
        <header class="topbar">
            <a class="brand" href="/">"Tandem"</a>
            <span class="spacer"></span>
            {move || user.get().map(|u| view! {
                <a class="link" id="nav-automations" href="/automations">"Automations"</a>
                <a class="link" id="nav-insights" href="/insights">"Insights"</a>
                <a class="link" id="nav-extension" href="/extension">"Chrome extension"</a>
                {u.is_admin.then(|| view! {
                    <a class="link" id="nav-people" href="/people">"People"</a>
                    <a class="link" id="nav-settings" href="/settings">"Settings"</a>
                })}
                <span class="who" id="user-name">{u.name}</span>
                <button class="link" on:click=sign_out>"Sign out"</button>
            })}
        </header>
    }
}
