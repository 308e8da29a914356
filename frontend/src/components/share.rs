//! The share dialog (owner): make a link with a role and a lifetime, copy it, revoke links.

use leptos::prelude::*;
use leptos::task::spawn_local;
use tandem_protocol::SessionId;
use tandem_protocol::live::{CreateLink, Role, ShareLink};

use crate::api;

#[component]
pub fn ShareDialog(session: SessionId) -> impl IntoView {
    let role = RwSignal::new("driver".to_string());
    let hours = RwSignal::new(24i64);
    let guests = RwSignal::new(true);
    let made = RwSignal::new(None::<String>);
    let links = RwSignal::new(Vec::<ShareLink>::new());
    let error = RwSignal::new(None::<String>);
    let reload = move || {
        spawn_local(async move {
            if let Ok(l) =
                api::get::<Vec<ShareLink>>(&format!("/api/sessions/{session}/links")).await
            {
                links.set(l);
            }
        })
    };
    reload();
    let create = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let req = CreateLink {
            role: if role.get_untracked() == "viewer" {
                Role::Viewer
            } else {
                Role::Driver
            },
            expires_in: Some(hours.get_untracked() * 3600),
            allow_guests: guests.get_untracked(),
        };
        spawn_local(async move {
            match api::post::<_, ShareLink>(&format!("/api/sessions/{session}/links"), &req).await {
                Ok(l) => {
                    made.set(l.url);
                    error.set(None);
                    reload();
                }
                Err(e) => error.set(Some(e.message)),
            }
        });
    };
    let copy = move |_| {
        if let (Some(u), Some(w)) = (made.get_untracked(), web_sys::window()) {
            let _ = w.navigator().clipboard().write_text(&u);
        }
    };
    view! {
        <section class="card share" id="share">
            <h2>"Share"</h2>
            <form class="row" on:submit=create>
                <label>"Role "<select id="share-role" on:change=move |ev| role.set(event_target_value(&ev))>
                    <option value="driver" selected>"driver (can type and prompt)"</option>
                    <option value="viewer">"viewer (watches)"</option>
                </select></label>
                <label>"Expires in "<select id="share-expiry" on:change=move |ev| hours.set(event_target_value(&ev).parse().unwrap_or(24))>
                    <option value="1">"1 hour"</option>
                    <option value="24" selected>"1 day"</option>
                    <option value="168">"1 week"</option>
                </select></label>
                <label><input type="checkbox" id="share-guests" prop:checked=move || guests.get() on:change=move |ev| guests.set(event_target_checked(&ev)) />" people without an account"</label>
                <button type="submit" id="share-create">"Create link"</button>
            </form>
            {move || error.get().map(|e| view! { <p class="error" role="alert">{e}</p> })}
            {move || made.get().map(|u| view! {
                <p class="row"><input id="share-url" readonly prop:value=u.clone() /><button on:click=copy>"Copy"</button></p>
            })}
            <ul class="links">
                <For each=move || links.get() key=|l| (l.jti.clone(), l.revoked_at) let:l>
                    {
                        let jti = l.jti.clone();
                        let revoke = move |_| {
                            let jti = jti.clone();
                            spawn_local(async move {
                                let _ = api::delete(&format!("/api/sessions/{session}/links/{jti}")).await;
                                reload();
                            });
                        };
                        let live = l.revoked_at.is_none();
                        view! {
                            <li class="link-row">{format!("{:?}", l.role).to_lowercase()}{l.allow_guests.then_some(", guests")}
                                {if live { view! { <button class="link revoke" on:click=revoke>"Revoke"</button> }.into_any() } else { view! { <span class="muted">" revoked"</span> }.into_any() }}
                            </li>
                        }
                    }
                </For>
            </ul>
        </section>
    }
}
