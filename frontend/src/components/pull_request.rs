//! The session's pull request: a link with its state once there is one; for drivers, a button
//! that opens it (offering a rebase when the base moved). Hidden for repos not on GitHub.

use leptos::prelude::*;
use leptos::task::spawn_local;
use tandem_protocol::github::{CreatePr, PullRequest};
use tandem_protocol::{Event, EventKind, SessionId};

use crate::api;

#[derive(Clone, PartialEq)]
enum Pr {
    Loading,
    NotGithub,
    None,
    Open(PullRequest),
}

#[component]
pub fn PullRequestBar(
    session: SessionId,
    events: RwSignal<Vec<Event>>,
    #[prop(into)] can_drive: Signal<bool>,
) -> impl IntoView {
    let pr = RwSignal::new(Pr::Loading);
    let busy = RwSignal::new(false);
    let error = RwSignal::new(None::<String>);
    let stale = RwSignal::new(false);
    let draft = RwSignal::new(false);
    // Reload whenever GitHub news arrives in the timeline.
    let news = Memo::new(move |_| {
        events.with(|e| {
            e.iter()
                .filter(|e| {
                    matches!(
                        e.kind,
                        EventKind::PrOpened { .. }
                            | EventKind::PrUpdated { .. }
                            | EventKind::PrState { .. }
                    )
                })
                .count()
        })
    });
    Effect::new(move |_| {
        news.track();
        spawn_local(async move {
            let next = match api::get::<PullRequest>(&format!("/api/sessions/{session}/pr")).await {
                Ok(p) => Pr::Open(p),
                Err(e) if e.code == "not_found" => Pr::None,
                Err(_) => Pr::NotGithub,
            };
            pr.set(next);
        });
    });
    let open = move |rebase: Option<bool>| {
        busy.set(true);
        error.set(None);
        let req = CreatePr {
            title: None,
            draft: draft.get_untracked(),
            rebase,
        };
        spawn_local(async move {
            match api::post::<_, PullRequest>(&format!("/api/sessions/{session}/pr"), &req).await {
                Ok(p) => {
                    stale.set(false);
                    pr.set(Pr::Open(p));
                }
                Err(e) => {
                    stale.set(e.code == "stale_base");
                    error.set(Some(e.message));
                }
            }
            busy.set(false);
        });
    };
    view! {
        {move || match pr.get() {
            Pr::Loading | Pr::NotGithub => None,
            Pr::Open(p) => Some(view! {
                <p class="pr" id="pull-request">
                    <span class=format!("badge pr-{}", p.state.as_str())>{p.state.as_str()}</span>" "
                    <a href=p.url.clone() target="_blank" rel="noopener">{format!("#{} {}", p.number, p.branch)}</a>
                    <span class="muted">{format!(" · opened by {}", p.opened_by)}</span>
                </p>
            }.into_any()),
            Pr::None => can_drive.get().then(|| view! {
                <div class="pr row" id="pull-request">
                    <button id="pr-open" disabled=move || busy.get() on:click=move |_| open(None)>"Open pull request"</button>
                    <label><input type="checkbox" prop:checked=move || draft.get() on:change=move |ev| draft.set(event_target_checked(&ev)) />" draft"</label>
                    {move || stale.get().then(|| view! {
                        <button id="pr-rebase" disabled=move || busy.get() on:click=move |_| open(Some(true))>"Rebase and open"</button>
                        <button class="link" disabled=move || busy.get() on:click=move |_| open(Some(false))>"Open as is"</button>
                    })}
                </div>
            }.into_any()),
        }}
        {move || error.get().map(|e| view! { <p class="error" role="alert" id="pr-error">{e}</p> })}
    }
}
