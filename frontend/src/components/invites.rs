//! Invites (admins, on the People page): the form that makes one and shows its one-time link
//! once, with a copy button, and the list of invites (pending, used, revoked, expired) with a
//! revoke button for the pending ones.

use leptos::html::Input;
use leptos::prelude::*;
use leptos::task::spawn_local;
use tandem_protocol::ApiError;
use tandem_protocol::limits::INVITE_TTL_SECS;
use tandem_protocol::people::{CreateInvite, CreatedInvite, Invite};
use wasm_bindgen::JsValue;

use crate::api;
use crate::components::error_box::ErrorBox;
use crate::format::{ago, until};

/// Where an invite is.
fn state_of(i: &Invite) -> &'static str {
    if i.revoked_at.is_some() {
        "revoked"
    } else if i.used_at.is_some() {
        "used"
    } else if i.expires_at.0 <= js_sys::Date::now() as i64 {
        "expired"
    } else {
        "pending"
    }
}

fn badge(state: &str) -> &'static str {
    match state {
        "pending" => "badge badge-wait",
        "used" => "badge badge-ok",
        _ => "badge badge-off",
    }
}

/// Copies `text`; false where the browser has no clipboard here (only https and localhost do)
/// or refused.
async fn copy_text(text: &str) -> bool {
    let Some(w) = web_sys::window() else {
        return false;
    };
    let nav = w.navigator();
    let has = js_sys::Reflect::get(&nav, &JsValue::from_str("clipboard"))
        .is_ok_and(|c| !c.is_undefined() && !c.is_null());
    has && wasm_bindgen_futures::JsFuture::from(nav.clipboard().write_text(text))
        .await
        .is_ok()
}

#[component]
pub fn Invites() -> impl IntoView {
    let list = RwSignal::new(Vec::<Invite>::new());
    let error = RwSignal::new(None::<ApiError>);
    let reload = move || {
        spawn_local(async move {
            match api::get::<Vec<Invite>>("/api/people/invites").await {
                Ok(l) => {
                    error.set(None);
                    list.set(l);
                }
                Err(e) => error.set(Some(api::failed(
                    "Loading the invites",
                    ApiError {
                        message: format!("{}; reload the page to try again", e.message),
                        ..e
                    },
                ))),
            }
        })
    };
    reload();
    let revoke = move |i: Invite| {
        spawn_local(async move {
            match api::delete(&format!("/api/people/invites/{}", i.id)).await {
                Ok(()) => reload(),
                Err(e) => {
                    let what = format!("Revoking the invite for {}", i.name);
                    error.set(Some(api::failed(&what, e)));
                    reload();
                }
            }
        })
    };
    let row = move |i: Invite| {
        let state = state_of(&i);
        let when = match state {
            "used" => format!("used {}", i.used_at.map(ago).unwrap_or_default()),
            "revoked" => format!("revoked {}", i.revoked_at.map(ago).unwrap_or_default()),
            "expired" => format!("expired {}", ago(i.expires_at)),
            _ => format!("expires {}", until(i.expires_at)),
        };
        let pending = state == "pending";
        let it = i.clone();
        view! {
            <tr class="invite-row" data-id=i.id.clone() data-name=i.name.clone() data-state=state>
                <td>{i.name.clone()}</td>
                <td>{i.email.clone().unwrap_or_default()}</td>
                <td>{if i.is_admin { "admin" } else { "member" }}</td>
                <td><span class=badge(state)>{state}</span></td>
                <td class="muted">{format!("by {} {} · {when}", i.created_by, ago(i.created_at))}</td>
                <td>{pending.then(|| view! {
                    <button class="link revoke-invite" on:click=move |_| revoke(it.clone())>"Revoke"</button>
                })}</td>
            </tr>
        }
    };
    view! {
        <section class="card" id="invite-section">
            <h2>"Invite someone"</h2>
            <InviteForm on_created=Callback::new(move |_| reload()) />
        </section>
        <section class="card" id="invites-section">
            <h2>"Invites"</h2>
            <ErrorBox error=error.read_only() />
            {move || if list.with(|l| l.is_empty()) {
                view! { <p class="muted" id="invites-empty">"No invites yet."</p> }.into_any()
            } else {
                view! {
                    <table class="list" id="invites">
                        <thead><tr><th>"Name"</th><th>"Email"</th><th>"Role"</th><th>"State"</th><th>"When"</th><th></th></tr></thead>
                        <tbody>{list.get().into_iter().map(row).collect_view()}</tbody>
                    </table>
                }.into_any()
            }}
        </section>
    }
}

#[component]
fn InviteForm(on_created: Callback<()>) -> impl IntoView {
    let name = RwSignal::new(String::new());
    let email = RwSignal::new(String::new());
    let admin = RwSignal::new(false);
    let days = RwSignal::new(INVITE_TTL_SECS / 86_400);
    let error = RwSignal::new(None::<ApiError>);
    let busy = RwSignal::new(false);
    let made = RwSignal::new(None::<CreatedInvite>);
    // None: not tried; Some(false): the browser would not copy.
    let copied = RwSignal::new(None::<bool>);
    let url_input = NodeRef::<Input>::new();
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let e = email.get_untracked();
        let req = CreateInvite {
            name: name.get_untracked().trim().to_string(),
            email: Some(e.trim().to_string()).filter(|e| !e.is_empty()),
            is_admin: admin.get_untracked(),
            expires_in_secs: Some(days.get_untracked() * 86_400),
        };
        let what = format!("Inviting {}", req.name);
        busy.set(true);
        spawn_local(async move {
            match api::post::<_, CreatedInvite>("/api/people/invites", &req).await {
                Ok(c) => {
                    error.set(None);
                    copied.set(None);
                    made.set(Some(c));
                    name.set(String::new());
                    email.set(String::new());
                    admin.set(false);
                    on_created.run(());
                }
                Err(e) => error.set(Some(api::failed(&what, e))),
            }
            busy.set(false);
        });
    };
    let copy = move |_| {
        let Some(url) = made.with_untracked(|m| m.as_ref().map(|m| m.url.clone())) else {
            return;
        };
        spawn_local(async move {
            let ok = copy_text(&url).await;
            if !ok && let Some(input) = url_input.get_untracked() {
                // Selected, so copying it by hand is one keystroke.
                input.select();
            }
            copied.set(Some(ok));
        });
    };
    view! {
        <form class="inline-form" id="invite-form" on:submit=submit>
            <label>"Name"
                <input id="invite-name" required placeholder="their login name, e.g. ana"
                    prop:value=name on:input=move |ev| name.set(event_target_value(&ev)) />
            </label>
            <label>"Email (optional)"
                <input id="invite-email" type="email" placeholder="ana@example.com"
                    prop:value=email on:input=move |ev| email.set(event_target_value(&ev)) />
            </label>
            <label>"Expires in "
                <select id="invite-expiry" on:change=move |ev| days.set(event_target_value(&ev).parse().unwrap_or(7))>
                    <option value="1">"1 day"</option>
                    <option value="7" selected>"7 days"</option>
                    <option value="30">"30 days"</option>
                </select>
            </label>
            <label><input type="checkbox" id="invite-admin" prop:checked=move || admin.get()
                on:change=move |ev| admin.set(event_target_checked(&ev)) />" admin"</label>
            <button type="submit" id="invite-submit" disabled=busy>"Make invite link"</button>
        </form>
        <ErrorBox error=error.read_only() />
        {move || made.get().map(|m| view! {
            <div id="invite-made" role="status">
                <p id="invite-made-note">{format!(
                    "The invite link for {} is shown once, now: copy it and send it to them. If it is lost, revoke the invite and make a new one.",
                    m.invite.name
                )}</p>
                <p class="row">
                    <input id="invite-url" readonly node_ref=url_input prop:value=m.url.clone() />
                    <button type="button" id="invite-copy" on:click=copy>"Copy"</button>
                    {move || copied.get().map(|ok| if ok {
                        view! { <span class="ok" id="invite-copied">"Copied."</span> }.into_any()
                    } else {
                        view! { <span class="error" id="invite-copy-failed" role="alert">"The browser would not copy it (it allows that on https and localhost only): the link is selected, copy it by hand."</span> }.into_any()
                    })}
                </p>
            </div>
        })}
    }
}
