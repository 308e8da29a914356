//! `/people` (admins): everyone with their email, role, how they sign in and whether they are
//! active — make admin or member, deactivate (after a confirm step), reactivate — and the
//! invites (`components/invites.rs`). Others see that only admins manage people, and whom to ask.

use leptos::prelude::*;
use leptos::task::spawn_local;
use tandem_protocol::people::{Person, UpdatePerson};
use tandem_protocol::{ApiError, User, UserId};

use crate::api;
use crate::components::{
    audit::PeopleActivity, error_box::ErrorBox, header::Header, invites::Invites,
    no_access::admin_names,
};
use crate::format::{ago, ask_an_admin};
use crate::pages::require_user;

#[component]
pub fn PeoplePage() -> impl IntoView {
    let user = require_user();
    view! {
        <Header user=user.into() />
        <main class="page people">
            <h1>"People"</h1>
            {move || user.get().map(|u| if u.is_admin {
                view! { <PeopleTable me=u.id /> <Invites /> <PeopleActivity /> }.into_any()
            } else {
                view! { <NotAdmin /> }.into_any()
            })}
        </main>
    }
}

/// What a non-admin sees.
#[component]
fn NotAdmin() -> impl IntoView {
    let admins = admin_names();
    view! {
        <section class="card" id="people-not-admin" role="alert">
            <p><strong>"Only admins manage people."</strong></p>
            <p id="people-ask">{move || admins.with(|a| format!(
                "{} to invite someone, change a role or deactivate an account.",
                ask_an_admin(a.as_deref())
            ))}</p>
        </section>
    }
}

/// "GitHub", "okta (OpenID)", …; nothing recorded means a login link or an API token.
fn sign_in_label(methods: &[String]) -> String {
    if methods.is_empty() {
        return "login link or API token".into();
    }
    methods
        .iter()
        .map(|m| match m.strip_prefix("oidc:") {
            Some(p) => format!("{p} (OpenID)"),
            None if m == "github" => "GitHub".into(),
            None => m.clone(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[component]
fn PeopleTable(me: UserId) -> impl IntoView {
    let people = RwSignal::new(Vec::<Person>::new());
    let loaded = RwSignal::new(false);
    let error = RwSignal::new(None::<ApiError>);
    // The person whose deactivation waits for a second click.
    let confirming = RwSignal::new(None::<UserId>);
    let busy = RwSignal::new(false);
    // A failed change, shown in its person's row.
    let row_error = RwSignal::new(None::<(UserId, String)>);
    let load = move || {
        spawn_local(async move {
            match api::get::<Vec<Person>>("/api/people").await {
                Ok(p) => {
                    people.set(p);
                    loaded.set(true);
                }
                Err(e) => error.set(Some(api::failed(
                    "Loading the people",
                    ApiError {
                        message: format!("{}; reload the page to try again", e.message),
                        ..e
                    },
                ))),
            }
        })
    };
    load();
    let change = move |u: &User, req: UpdatePerson| {
        let what = match (req.is_admin, req.deactivated) {
            (Some(true), _) => format!("Making {} an admin", u.name),
            (Some(false), _) => format!("Making {} a member", u.name),
            (_, Some(true)) => format!("Deactivating {}", u.name),
            _ => format!("Reactivating {}", u.name),
        };
        let id = u.id;
        busy.set(true);
        spawn_local(async move {
            match api::patch::<_, User>(&format!("/api/people/{id}"), &req).await {
                // Made a member oneself: this page is no longer one's to see.
                Ok(_) if id == me && req.is_admin == Some(false) => {
                    if let Some(w) = web_sys::window() {
                        let _ = w.location().reload();
                    }
                }
                Ok(_) => {
                    row_error.set(None);
                    confirming.set(None);
                    load();
                }
                Err(e) => row_error.set(Some((id, api::failed(&what, e).message))),
            }
            busy.set(false);
        });
    };
    let row = move |p: Person| {
        let u = p.user;
        let id = u.id;
        let active = u.deactivated_at.is_none();
        let role = if u.is_admin { "admin" } else { "member" };
        let (r, d, a) = (u.clone(), u.clone(), u.clone());
        let role_button = if u.is_admin {
            view! { <button class="make-member" disabled=busy
                on:click=move |_| change(&r, UpdatePerson { is_admin: Some(false), ..Default::default() })>"Make member"</button> }
            .into_any()
        } else {
            view! { <button class="make-admin" disabled=busy
                on:click=move |_| change(&r, UpdatePerson { is_admin: Some(true), ..Default::default() })>"Make admin"</button> }
            .into_any()
        };
        let name = u.name.clone();
        // One's own account is not deactivated from here (it would sign one out at once).
        let active_buttons = move || {
            if id == me {
                None
            } else if !active {
                let a = a.clone();
                Some(view! { <button class="reactivate" disabled=busy
                    on:click=move |_| change(&a, UpdatePerson { deactivated: Some(false), ..Default::default() })>"Reactivate"</button> }.into_any())
            } else if confirming.get() == Some(id) {
                let d = d.clone();
                Some(view! {
                    <span class="confirm" role="alert">{format!("Deactivate {name}? Their sign-ins, API tokens and share links stop working at once. ")}</span>
                    <button class="danger confirm-deactivate" disabled=busy
                        on:click=move |_| change(&d, UpdatePerson { deactivated: Some(true), ..Default::default() })>"Yes, deactivate"</button>
                    <button class="cancel-deactivate" on:click=move |_| confirming.set(None)>"Cancel"</button>
                }.into_any())
            } else {
                Some(
                    view! { <button class="danger deactivate" disabled=busy
                    on:click=move |_| confirming.set(Some(id))>"Deactivate"</button> }
                    .into_any(),
                )
            }
        };
        view! {
            <tr class="person-row" data-id=id.to_string() data-name=u.name.clone() data-role=role
                data-status=if active { "active" } else { "deactivated" }>
                <td class="person-name">{u.name.clone()}{(id == me).then_some(" (you)")}</td>
                <td class="person-email">{u.email.clone().unwrap_or_default()}</td>
                <td class="person-role">{role}</td>
                <td class="person-sign-in">{sign_in_label(&p.sign_in)}</td>
                <td class="person-status">{match u.deactivated_at {
                    None => view! { <span class="badge badge-ok">"active"</span> }.into_any(),
                    Some(t) => view! { <span class="badge badge-off">{format!("deactivated {}", ago(t))}</span> }.into_any(),
                }}</td>
                <td class="person-actions">{role_button}" "{active_buttons}
                    {move || row_error.get().filter(|(who, _)| *who == id).map(|(_, e)| view! {
                        <p class="error person-error" role="alert">{e}</p>
                    })}
                </td>
            </tr>
        }
    };
    view! {
        <section class="card" id="people-section">
            <h2>"Everyone"</h2>
            <ErrorBox error=error.read_only() />
            <Show when=move || loaded.get()>
                <table class="list" id="people">
                    <thead><tr><th>"Name"</th><th>"Email"</th><th>"Role"</th><th>"Signs in with"</th><th>"Status"</th><th></th></tr></thead>
                    <tbody>{move || people.get().into_iter().map(row).collect_view()}</tbody>
                </table>
            </Show>
        </section>
    }
}
