//! An approval card in the timeline: the tool the agent wants to call, its arguments and who
//! started the turn; a driver approves once, for the rest of the session, or denies with a
//! reason; everyone sees who answered (or that nobody did in time). Everything on it came from
//! an agent or a tool: it is shown as text, never as markup.

use leptos::prelude::*;
use tandem_protocol::approval::{Approval, ApprovalState};
use tandem_protocol::live::WsClient;
use tandem_protocol::{Event, EventKind};

/// How an approval ended, from the events after it.
fn answered(events: &[Event], approval: tandem_protocol::ApprovalId) -> Option<String> {
    events.iter().rev().find_map(|e| match &e.kind {
        EventKind::ApprovalAnswered { approval_id, .. } if *approval_id == approval => {
            Some(e.kind.summary())
        }
        _ => None,
    })
}

fn state_of(events: &[Event], approval: tandem_protocol::ApprovalId) -> Option<ApprovalState> {
    events.iter().rev().find_map(|e| match &e.kind {
        EventKind::ApprovalAnswered {
            approval_id, state, ..
        } if *approval_id == approval => Some(*state),
        _ => None,
    })
}

#[component]
pub fn ApprovalCard(
    approval: Approval,
    seq: i64,
    events: RwSignal<Vec<Event>>,
    /// Sends an answer over the live channel; none where the timeline cannot answer.
    answer: Option<Callback<WsClient>>,
    can_drive: Signal<bool>,
) -> impl IntoView {
    let id = approval.id;
    let args = serde_json::to_string_pretty(&approval.arguments).unwrap_or_default();
    let asked_for = approval
        .asked_for
        .as_ref()
        .map(|a| format!("Asked during {}'s turn", a.name));
    let outcome = Memo::new(move |_| events.with(|e| answered(e, id)));
    let state = Memo::new(move |_| events.with(|e| state_of(e, id)));
    let reason = RwSignal::new(String::new());
    let send = move |approve: bool, for_session: bool| {
        if let Some(cb) = answer {
            let text = reason.get_untracked();
            let reason = (!approve && !text.trim().is_empty()).then_some(text);
            cb.run(WsClient::AnswerApproval {
                approval: id,
                approve,
                for_session,
                reason,
            });
        }
    };
    let class = move || match state.get() {
        None => "ev approval pending",
        Some(ApprovalState::Approved) => "ev approval approved",
        Some(_) => "ev approval denied",
    };
    view! {
        <li class=class data-seq=seq data-approval=id.to_string() role="group" aria-label="Approval">
            <div class="approval-head">
                <strong>"Approval: "</strong>"the agent wants to "{approval.subject.describe()}
            </div>
            {asked_for.map(|t| view! { <div class="muted approval-for">{t}</div> })}
            <pre class="approval-args">{args}</pre>
            {move || match outcome.get() {
                Some(text) => view! { <p class="approval-outcome" role="status">{text}</p> }.into_any(),
                None if can_drive.get() && answer.is_some() => view! {
                    <div class="approval-actions">
                        <button class="primary approval-approve" on:click=move |_| send(true, false)>"Approve"</button>
                        <button class="approval-approve-session" on:click=move |_| send(true, true)>"Approve for this session"</button>
                        <input class="approval-reason" type="text" maxlength="1000" placeholder="Reason (the agent sees it)"
                            prop:value=move || reason.get() on:input=move |ev| reason.set(event_target_value(&ev)) />
                        <button class="danger approval-deny" on:click=move |_| send(false, false)>"Deny"</button>
                    </div>
                }.into_any(),
                None => view! { <p class="muted approval-waiting" role="status">"Waiting for a driver to answer."</p> }.into_any(),
            }}
        </li>
    }
}
