//! Who may use a repo (admins, on the settings page): everyone, each person's GitHub
//! permission, or only its members — and grants to people and groups (read: watch its
//! sessions; write: also start them), saved together.

use leptos::prelude::*;
use leptos::task::spawn_local;
use tandem_protocol::people::{
    Grantee, Person, RepoAccess, RepoAccessSettings, RepoGrant, RepoRole,
};
use tandem_protocol::{ApiError, Repo, UserId};

use crate::api;
use crate::components::error_box::ErrorBox;
use crate::components::no_access::{Missing, NoAccess};

/// A mode in a few words.
fn short(mode: RepoAccess) -> &'static str {
    match mode {
        RepoAccess::Everyone => "everyone",
        RepoAccess::Github => "by GitHub permission",
        RepoAccess::Members => "only members",
    }
}

const MODES: [(RepoAccess, &str); 3] = [
    (
        RepoAccess::Everyone,
        "Everyone — every active person may watch and start sessions",
    ),
    (
        RepoAccess::Github,
        "GitHub permission — each person's own permission on the GitHub repository (read: watch; write: start); needs GitHub sign-in",
    ),
    (
        RepoAccess::Members,
        "Only members — the admins and the people and groups below",
    ),
];

fn invalid(message: &str) -> ApiError {
    ApiError {
        code: "invalid_input".into(),
        message: message.into(),
    }
}

/// Adds a grant, or changes the role of the one for the same person or group.
fn upsert(grants: &mut Vec<RepoGrant>, grant: RepoGrant) {
    match grants.iter_mut().find(|g| g.grantee == grant.grantee) {
        Some(g) => g.role = grant.role,
        None => grants.push(grant),
    }
}

#[component]
fn RoleSelect(class: &'static str, role: RwSignal<RepoRole>) -> impl IntoView {
    view! {
        <select class=class
            on:change=move |ev| role.set(RepoRole::parse(&event_target_value(&ev)).unwrap_or(RepoRole::Read))>
            <option value="read" prop:selected=move || role.get() == RepoRole::Read>"read (watch)"</option>
            <option value="write" prop:selected=move || role.get() == RepoRole::Write>"write (start sessions)"</option>
        </select>
    }
}

#[component]
pub fn RepoAccessEditor(repo: Repo, people: Signal<Vec<Person>>) -> impl IntoView {
    let id = repo.id;
    let repo_name = repo.name.clone();
    let access = RwSignal::new(repo.access);
    let grants = RwSignal::new(Vec::<RepoGrant>::new());
    let missing = RwSignal::new(false);
    let error = RwSignal::new(None::<ApiError>);
    let saved = RwSignal::new(false);
    let busy = RwSignal::new(true);
    let loading = format!("Loading who may use {repo_name}");
    spawn_local(async move {
        match api::get::<RepoAccessSettings>(&format!("/api/repos/{id}/access")).await {
            Ok(s) => {
                access.set(s.access);
                grants.set(s.grants);
            }
            Err(e) if api::is_not_found(&e) => missing.set(true),
            Err(e) => error.set(Some(api::failed(&loading, e))),
        }
        busy.set(false);
    });
    let edit = move |f: &dyn Fn(&mut Vec<RepoGrant>)| {
        saved.set(false);
        error.set(None);
        grants.update(|g| f(g));
    };
    let person = RwSignal::new(String::new());
    let person_role = RwSignal::new(RepoRole::Write);
    let group = RwSignal::new(String::new());
    let group_role = RwSignal::new(RepoRole::Write);
    let add_person = move |_| {
        let Ok(who) = person.get_untracked().parse::<UserId>() else {
            error.set(Some(invalid(
                "Pick a person from the list first, then add them.",
            )));
            return;
        };
        let grant = RepoGrant {
            grantee: Grantee::User(who),
            role: person_role.get_untracked(),
        };
        edit(&|g| upsert(g, grant.clone()));
        person.set(String::new());
    };
    let add_group = move |_| {
        let name = group.get_untracked().trim().to_string();
        if name.is_empty() {
            error.set(Some(invalid(
                "Type the group first, as <provider>:<group>: the [[oidc]] id, then the name its group claim sends.",
            )));
            return;
        }
        let grant = RepoGrant {
            grantee: Grantee::Group(name),
            role: group_role.get_untracked(),
        };
        edit(&|g| upsert(g, grant.clone()));
        group.set(String::new());
    };
    let saving = format!("Saving who may use {repo_name}");
    let save = move |_| {
        let req = RepoAccessSettings {
            access: access.get_untracked(),
            grants: grants.get_untracked(),
        };
        let saving = saving.clone();
        busy.set(true);
        saved.set(false);
        spawn_local(async move {
            match api::put::<_, RepoAccessSettings>(&format!("/api/repos/{id}/access"), &req).await
            {
                Ok(s) => {
                    error.set(None);
                    access.set(s.access);
                    grants.set(s.grants);
                    saved.set(true);
                }
                Err(e) if api::is_not_found(&e) => missing.set(true),
                Err(e) => error.set(Some(api::failed(&saving, e))),
            }
            busy.set(false);
        });
    };
    let name_of = move |u: UserId| {
        people.with(|p| {
            p.iter()
                .find(|p| p.user.id == u)
                .map(|p| p.user.name.clone())
                .unwrap_or_else(|| format!("person {u}"))
        })
    };
    let group_name = format!("access-{id}");
    let grant_row = move |(i, g): (usize, RepoGrant)| {
        let (kind, who, label) = match &g.grantee {
            Grantee::User(u) => ("user", u.to_string(), name_of(*u)),
            Grantee::Group(n) => ("group", n.clone(), format!("group {n}")),
        };
        view! {
            <li class="grant" data-kind=kind data-who=who>
                <span class="grant-who">{label}</span>" "
                <select class="grant-role" on:change=move |ev| {
                    let role = RepoRole::parse(&event_target_value(&ev)).unwrap_or(RepoRole::Read);
                    edit(&|gs| if let Some(x) = gs.get_mut(i) { x.role = role });
                }>
                    <option value="read" prop:selected=g.role == RepoRole::Read>"read"</option>
                    <option value="write" prop:selected=g.role == RepoRole::Write>"write"</option>
                </select>" "
                <button type="button" class="link remove-grant" on:click=move |_| edit(&|gs| { if i < gs.len() { gs.remove(i); } })>"Remove"</button>
            </li>
        }
    };
    view! {
        <details class="repo-access" data-repo=id.to_string()>
            <summary>"Who may use it: "<span class="access-mode-now">{move || short(access.get())}</span></summary>
            {move || if missing.get() {
                view! { <NoAccess what=Missing::Repo /> }.into_any()
            } else {
                let group_name = group_name.clone();
                view! {
                    <fieldset class="access-modes" disabled=busy>
                        {MODES.iter().map(|(mode, label)| {
                            let mode = *mode;
                            view! {
                                <label class="access-mode-option">
                                    <input type="radio" class="access-mode" name=group_name.clone() value=mode.as_str()
                                        prop:checked=move || access.get() == mode
                                        on:change=move |_| { saved.set(false); access.set(mode); } />
                                    " "{*label}
                                </label>
                            }
                        }).collect_view()}
                    </fieldset>
                    <p class="muted small">"Admins may always use it. Grants add to the mode above."</p>
                    {move || if grants.with(|g| g.is_empty()) {
                        view! { <p class="muted grants-empty">"No grants."</p> }.into_any()
                    } else {
                        view! { <ul class="grants">{grants.get().into_iter().enumerate().map(grant_row).collect_view()}</ul> }.into_any()
                    }}
                    <div class="inline-form add-grant">
                        <select class="grant-person" prop:value=person on:change=move |ev| person.set(event_target_value(&ev))>
                            <option value="">"a person…"</option>
                            {move || {
                                let mut active: Vec<_> = people.get().into_iter().filter(|p| p.user.deactivated_at.is_none()).collect();
                                active.sort_by(|a, b| a.user.name.cmp(&b.user.name));
                                active.into_iter().map(|p| view! { <option value=p.user.id.to_string()>{p.user.name}</option> }).collect_view()
                            }}
                        </select>
                        <RoleSelect class="grant-person-role" role=person_role />
                        <button type="button" class="add-person" on:click=add_person>"Add person"</button>
                    </div>
                    <div class="inline-form add-grant">
                        <input class="grant-group" placeholder="provider:group (e.g. okta:engineering)"
                            prop:value=group on:input=move |ev| group.set(event_target_value(&ev)) />
                        <RoleSelect class="grant-group-role" role=group_role />
                        <button type="button" class="add-group" on:click=add_group>"Add group"</button>
                    </div>
                    <p class="row">
                        <button type="button" class="primary save-access" disabled=busy on:click=save.clone()>"Save access"</button>
                        {move || saved.get().then(|| view! { <span class="ok access-saved">" Saved."</span> })}
                    </p>
                    <ErrorBox error=error.read_only() />
                }.into_any()
            }}
        </details>
    }
}
