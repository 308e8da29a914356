//! Pages → repos (admins, on the settings page): URL patterns whose pages the Chrome extension
//! starts sessions on in a given repo. Adding or removing a rule saves the whole list.

use leptos::prelude::*;
use leptos::task::spawn_local;
use tandem_protocol::extension::{PageRule, SetPageRule};
use tandem_protocol::{ApiError, Repo, RepoId};

use crate::api;
use crate::components::error_box::ErrorBox;

fn invalid(message: &str) -> ApiError {
    ApiError {
        code: "invalid_input".into(),
        message: message.into(),
    }
}

fn as_set(rules: &[PageRule]) -> Vec<SetPageRule> {
    rules
        .iter()
        .map(|r| SetPageRule {
            pattern: r.pattern.clone(),
            repo_id: r.repo_id,
        })
        .collect()
}

#[component]
pub fn PageRules(repos: Signal<Vec<Repo>>) -> impl IntoView {
    let rules = RwSignal::new(Vec::<PageRule>::new());
    let error = RwSignal::new(None::<ApiError>);
    let busy = RwSignal::new(true);
    let saved = RwSignal::new(false);
    let pattern = RwSignal::new(String::new());
    let repo = RwSignal::new(String::new());
    spawn_local(async move {
        match api::get::<Vec<PageRule>>("/api/extension/rules").await {
            Ok(r) => rules.set(r),
            Err(e) => error.set(Some(api::failed("Loading the page rules", e))),
        }
        busy.set(false);
    });
    // Saves the whole list; `then` runs when the server took it.
    let save = move |list: Vec<SetPageRule>, what: &'static str, then: fn(RwSignal<String>)| {
        busy.set(true);
        saved.set(false);
        spawn_local(async move {
            match api::put::<_, Vec<PageRule>>("/api/extension/rules", &list).await {
                Ok(r) => {
                    error.set(None);
                    rules.set(r);
                    saved.set(true);
                    then(pattern);
                }
                Err(e) => error.set(Some(api::failed(what, e))),
            }
            busy.set(false);
        });
    };
    let add = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let p = pattern.get_untracked().trim().to_string();
        if p.is_empty() {
            error.set(Some(invalid(
                "Type the pages' URL pattern first, like https://app.acme.com/*.",
            )));
            return;
        }
        let Ok(repo_id) = repo.get_untracked().parse::<RepoId>() else {
            error.set(Some(invalid("Pick the repo for these pages first.")));
            return;
        };
        let mut list = rules.with_untracked(|r| as_set(r));
        list.push(SetPageRule {
            pattern: p,
            repo_id,
        });
        save(list, "Adding the page rule", |p| p.set(String::new()));
    };
    let remove = move |i: usize| {
        let mut list = rules.with_untracked(|r| as_set(r));
        if i < list.len() {
            list.remove(i);
            save(list, "Removing the page rule", |_| {});
        }
    };
    let row = move |(i, r): (usize, PageRule)| {
        view! {
            <li class="page-rule" data-repo=r.repo_id.to_string()>
                <code class="page-rule-pattern">{r.pattern}</code>
                " → "
                <span class="page-rule-repo">{r.repo_name}</span>
                <button type="button" class="link page-rule-remove" disabled=busy
                    on:click=move |_| remove(i)>"Remove"</button>
            </li>
        }
    };
    view! {
        <section class="card" id="page-rules">
            <h2>"Pages → repos"</h2>
            <p class="muted">
                "The Chrome extension picks this repo for pages that match; "<code>"*"</code>" matches anything. "
                <a href="/extension">"Install the extension"</a>
            </p>
            {move || if rules.with(|r| r.is_empty()) {
                view! { <p class="muted page-rules-empty">"No rules yet."</p> }.into_any()
            } else {
                view! { <ul class="page-rules-list">{rules.get().into_iter().enumerate().map(row).collect_view()}</ul> }.into_any()
            }}
            <form class="inline-form page-rule-form" on:submit=add>
                <input id="page-rule-pattern" placeholder="https://app.acme.com/*" aria-label="URL pattern"
                    prop:value=pattern on:input=move |ev| { saved.set(false); pattern.set(event_target_value(&ev)) } />
                <select id="page-rule-repo" aria-label="Repo" prop:value=repo
                    on:change=move |ev| repo.set(event_target_value(&ev))>
                    <option value="">"a repo…"</option>
                    {move || repos.get().into_iter().map(|r| {
                        let id = r.id.to_string();
                        let selected = id == repo.get_untracked();
                        view! { <option value=id prop:selected=selected>{r.name}</option> }
                    }).collect_view()}
                </select>
                <button type="submit" id="page-rule-add" disabled=busy>"Add"</button>
                {move || saved.get().then(|| view! { <span class="ok page-rules-saved">" Saved."</span> })}
            </form>
            <ErrorBox error=error.read_only() />
        </section>
    }
}
