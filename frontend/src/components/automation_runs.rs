//! An automation's recent runs (on the Automations page, when its row is opened): when each
//! ran, with a link to the session it started, or why it started none.

use leptos::prelude::*;
use leptos::task::spawn_local;
use tandem_protocol::automation::AutomationRun;
use tandem_protocol::{ApiError, AutomationId};

use crate::api;
use crate::components::error_box::ErrorBox;
use crate::format::{ago, local_time};

#[component]
pub fn AutomationRuns(id: AutomationId) -> impl IntoView {
    let runs = RwSignal::new(None::<Vec<AutomationRun>>);
    let error = RwSignal::new(None::<ApiError>);
    spawn_local(async move {
        match api::get::<Vec<AutomationRun>>(&format!("/api/automations/{id}/runs")).await {
            Ok(r) => runs.set(Some(r)),
            Err(e) => error.set(Some(api::failed("Loading the runs", e))),
        }
    });
    let row = |r: AutomationRun| {
        let what = match (r.session_id, r.error) {
            (Some(s), _) => view! {
                <a class="run-session" href=format!("/sessions/{s}")>"its session"</a>
            }
            .into_any(),
            (None, Some(e)) => view! { <span class="run-error">{e}</span> }.into_any(),
            (None, None) => view! { <span class="muted">"no session"</span> }.into_any(),
        };
        view! {
            <li class="automation-run">
                <span class="run-time" title=format!("ran {}", ago(r.created_at))>{local_time(r.period)}</span>
                " · "
                {what}
            </li>
        }
    };
    view! {
        <div class="automation-runs-list">
            <ErrorBox error=error.read_only() />
            {move || runs.get().map(|r| if r.is_empty() {
                view! { <p class="muted automation-runs-empty">"No runs yet."</p> }.into_any()
            } else {
                view! { <ul class="automation-run-list">{r.into_iter().map(row).collect_view()}</ul> }.into_any()
            })}
        </div>
    }
}
