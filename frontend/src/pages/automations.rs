//! `/automations`: the automations (a prompt a repo runs on a schedule or when its webhook is
//! called) with their next run, who made them, their recent runs and a delete button, and the
//! form that makes one (`components/automation_form.rs`).

use std::collections::HashSet;

use leptos::prelude::*;
use leptos::task::spawn_local;
use tandem_protocol::automation::{Automation, Trigger};
use tandem_protocol::{ApiError, AutomationId, Repo};

use crate::api;
use crate::components::{
    automation_form::AutomationForm, automation_runs::AutomationRuns, error_box::ErrorBox,
    header::Header,
};
use crate::format::{local_time, until};
use crate::pages::require_user;

/// How many columns a row has (the runs row spans them all).
const COLUMNS: &str = "6";

#[component]
pub fn AutomationsPage() -> impl IntoView {
    let user = require_user();
    view! {
        <Header user=user.into() />
        <main class="page automations">
            <h1>"Automations"</h1>
            <p class="muted">
                "A prompt a repo runs on a schedule or when a webhook is called; every run is a session you can watch and stop."
            </p>
            {move || user.get().map(|_| view! { <Automations /> })}
        </main>
    }
}

/// "every: 0 3 * * * (UTC)", "webhook" or "CI failure (…)".
fn trigger_label(t: &Trigger) -> String {
    match t {
        Trigger::Schedule { cron } => format!("every: {cron} (UTC)"),
        Trigger::Webhook => "webhook".into(),
        Trigger::CiFailure { max_runs } => {
            format!("CI failure (at most {max_runs} runs per pull request)")
        }
    }
}

/// When it runs next: a local time (and how soon), or "when called".
fn next_label(a: &Automation) -> String {
    match (&a.trigger, a.next_at) {
        (Trigger::Webhook, _) => "when called".into(),
        (Trigger::CiFailure { .. }, _) => "when CI fails".into(),
        (Trigger::Schedule { .. }, Some(t)) => format!("{} ({})", local_time(t), until(t)),
        (Trigger::Schedule { .. }, None) => "not scheduled".into(),
    }
}

/// The list and the form, once the person is signed in.
#[component]
fn Automations() -> impl IntoView {
    let list = RwSignal::new(Vec::<Automation>::new());
    let loaded = RwSignal::new(false);
    let error = RwSignal::new(None::<ApiError>);
    let repos = RwSignal::new(None::<Vec<Repo>>);
    // The automations whose runs are shown.
    let open = RwSignal::new(HashSet::<AutomationId>::new());
    let busy = RwSignal::new(false);
    let load = move || {
        spawn_local(async move {
            match api::get::<Vec<Automation>>("/api/automations").await {
                Ok(a) => {
                    list.set(a);
                    loaded.set(true);
                }
                Err(e) => error.set(Some(api::failed(
                    "Loading the automations",
                    ApiError {
                        message: format!("{}; reload the page to try again", e.message),
                        ..e
                    },
                ))),
            }
        })
    };
    load();
    spawn_local(async move {
        match api::get::<Vec<Repo>>("/api/repos").await {
            Ok(r) => repos.set(Some(r)),
            Err(e) => error.set(Some(api::failed("Loading the repos", e))),
        }
    });
    let remove = move |a: Automation| {
        let asked = format!(
            "Delete the automation {}? It stops running; the sessions it started stay.",
            a.name
        );
        let yes =
            web_sys::window().is_some_and(|w| w.confirm_with_message(&asked).unwrap_or(false));
        if !yes {
            return;
        }
        busy.set(true);
        spawn_local(async move {
            match api::delete(&format!("/api/automations/{}", a.id)).await {
                Ok(()) => {
                    error.set(None);
                    open.update(|o| {
                        o.remove(&a.id);
                    });
                }
                Err(e) => {
                    let what = format!("Deleting the automation {}", a.name);
                    error.set(Some(api::failed(&what, e)));
                }
            }
            busy.set(false);
            load();
        });
    };
    let toggle = move |id: AutomationId| {
        open.update(|o| {
            if !o.remove(&id) {
                o.insert(id);
            }
        })
    };
    let row = move |a: Automation| {
        let id = a.id;
        let shown = move || open.with(|o| o.contains(&id));
        let kind = match a.trigger {
            Trigger::Schedule { .. } => "schedule",
            Trigger::Webhook => "webhook",
            Trigger::CiFailure { .. } => "ci_failure",
        };
        let it = a.clone();
        view! {
            <tr class="automation" data-id=id.to_string() data-name=a.name.clone() data-trigger=kind>
                <td class="automation-name">{a.name.clone()}</td>
                <td class="automation-repo">{a.repo_name.clone()}</td>
                <td class="automation-trigger">{trigger_label(&a.trigger)}</td>
                <td class="automation-next">{next_label(&a)}</td>
                <td class="automation-by">{a.created_by_name.clone()}</td>
                <td class="automation-actions">
                    <button type="button" class="link automation-runs" aria-expanded=move || shown().to_string()
                        on:click=move |_| toggle(id)>{move || if shown() { "Hide runs" } else { "Runs" }}</button>
                    " "
                    <button type="button" class="danger automation-delete" disabled=busy
                        on:click=move |_| remove(it.clone())>"Delete"</button>
                </td>
            </tr>
            {move || shown().then(|| view! {
                <tr class="automation-runs-row" data-id=id.to_string()>
                    <td colspan=COLUMNS><AutomationRuns id /></td>
                </tr>
            })}
        }
    };
    let repo_list = Signal::derive(move || repos.get().unwrap_or_default());
    view! {
        <section class="card" id="automations-section">
            <h2>"All automations"</h2>
            <ErrorBox error=error.read_only() />
            <Show when=move || loaded.get()>
                {move || if list.with(|l| l.is_empty()) {
                    view! { <p class="muted" id="automations-empty">"No automations yet."</p> }.into_any()
                } else {
                    view! {
                        <table class="list" id="automations">
                            <thead><tr><th>"Name"</th><th>"Repo"</th><th>"Trigger"</th><th>"Next run"</th><th>"Made by"</th><th></th></tr></thead>
                            <tbody>{list.get().into_iter().map(row).collect_view()}</tbody>
                        </table>
                    }.into_any()
                }}
            </Show>
        </section>
        <section class="card" id="automation-new">
            <h2>"New automation"</h2>
            {move || repos.get().is_some_and(|r| r.is_empty()).then(|| view! {
                <p class="muted" id="automation-no-repos">"Add a repo on the "<a href="/">"dashboard"</a>" first."</p>
            })}
            <AutomationForm repos=repo_list on_created=Callback::new(move |_| load()) />
        </section>
    }
}
