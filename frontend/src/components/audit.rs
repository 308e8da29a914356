//! Recent people-and-access activity from the audit log (admins): invites, sign-ins and their
//! refusals with the reason, role changes, deactivations, repo access and session visibility.
//! Everything in it is shown as text.

use leptos::prelude::*;
use leptos::task::spawn_local;
use tandem_protocol::{ApiError, AuditEntry};

use crate::api;
use crate::components::error_box::ErrorBox;
use crate::format::ago;

/// The audit actions this list shows.
fn about_people(action: &str) -> bool {
    action.starts_with("person.")
        || action.starts_with("auth.")
        || action == "repo.access"
        || action == "session.visibility"
}

/// One line about what happened, from the entry's detail.
fn what(e: &AuditEntry) -> String {
    let d = &e.detail;
    let text = |k: &str| d.get(k).and_then(|v| v.as_str()).unwrap_or("").to_string();
    match e.action.as_str() {
        "auth.login" => format!("signed in ({})", text("via")),
        "auth.refused" => format!("sign-in refused ({}): {}", text("via"), text("reason")),
        "person.invite" => format!("invited {}", text("name")),
        "person.join" => format!("joined (invited by {})", text("invited_by")),
        "person.invite_revoke" => "revoked an invite".into(),
        "person.role" => format!("made {} {}", text("name"), text("role")),
        "person.deactivate" => format!("deactivated {}", text("name")),
        "person.reactivate" => format!("reactivated {}", text("name")),
        "repo.access" => format!("set who may use {} ({})", text("repo"), text("access")),
        "session.visibility" => {
            let private = d.get("private").and_then(|v| v.as_bool()).unwrap_or(false);
            format!(
                "made session {} {}",
                e.target,
                if private { "private" } else { "visible" }
            )
        }
        other => other.to_string(),
    }
}

#[component]
pub fn PeopleActivity() -> impl IntoView {
    let entries = RwSignal::new(Vec::<AuditEntry>::new());
    let error = RwSignal::new(None::<ApiError>);
    spawn_local(async move {
        match api::get::<Vec<AuditEntry>>("/api/audit?limit=500").await {
            Ok(list) => entries.set(
                list.into_iter()
                    .filter(|e| about_people(&e.action))
                    .take(100)
                    .collect(),
            ),
            Err(e) => error.set(Some(api::failed("Loading the audit log", e))),
        }
    });
    view! {
        <section class="card" id="people-activity">
            <h2>"Recent activity"</h2>
            <ErrorBox error=error.read_only() />
            {move || if entries.with(|e| e.is_empty()) {
                view! { <p class="muted">"Nothing yet."</p> }.into_any()
            } else {
                view! {
                    <table class="list" id="activity">
                        <thead><tr><th>"When"</th><th>"Who"</th><th>"What"</th></tr></thead>
                        <tbody>{entries.get().into_iter().map(|e| view! {
                            <tr class="activity-row" data-action=e.action.clone()>
                                <td class="muted">{ago(e.at)}</td>
                                <td>{e.actor_name.clone()}</td>
                                <td>{what(&e)}</td>
                            </tr>
                        }).collect_view()}</tbody>
                    </table>
                }.into_any()
            }}
        </section>
    }
}
