//! One session: its prompts and its event log, following new events as they are appended.

use leptos::prelude::*;
use leptos::task::spawn_local;
use leptos_router::hooks::use_params_map;
use tandem_protocol::{ApiError, Event, EventsPage, SessionDetail, SessionId};

use crate::api;
use crate::components::{error_box::ErrorBox, header::Header};
use crate::format::{ago, state_class};
use crate::pages::{every, require_user};

/// How often the page asks for new events (the live channel replaces this later).
const POLL_MS: u64 = 2000;

fn describe(e: &Event) -> String {
    e.kind.summary()
}

#[component]
pub fn SessionPage() -> impl IntoView {
    let user = require_user();
    let params = use_params_map();
    let id = move || params.read().get("id").and_then(|s| s.parse::<SessionId>().ok());
    let (detail, set_detail) = signal(None::<SessionDetail>);
    let (events, set_events) = signal(Vec::<Event>::new());
    let (error, set_error) = signal(None::<ApiError>);

    let load = move || {
        let Some(id) = id() else {
            set_error.set(Some(ApiError { code: "not_found".into(), message: "that is not a session address".into() }));
            return;
        };
        let after = events.with_untracked(|ev| ev.last().map_or(0, |e| e.seq));
        spawn_local(async move {
            match api::get::<SessionDetail>(&format!("/api/sessions/{id}")).await {
                Ok(d) => set_detail.set(Some(d)),
                Err(e) => return set_error.set(Some(e)),
            }
            match api::get::<EventsPage>(&format!("/api/sessions/{id}/events?after={after}")).await {
                Ok(page) => {
                    if !page.events.is_empty() {
                        // Only append what follows what we have: a late answer never duplicates.
                        set_events.update(|ev| {
                            let last = ev.last().map_or(0, |e| e.seq);
                            ev.extend(page.events.into_iter().filter(|e| e.seq > last));
                        });
                    }
                    set_error.set(None);
                }
                Err(e) => set_error.set(Some(e)),
            }
        });
    };
    load();
    every(POLL_MS, load);

    view! {
        <Header user=user.into() />
        <main class="page session">
            <ErrorBox error />
            {move || detail.get().map(|d| {
                let s = d.session;
                view! {
                    <section class="card">
                        <h1 id="session-title">{s.title.clone()}</h1>
                        <p class="meta">
                            <span class=state_class(s.state) id="session-state">{s.state.as_str()}</span>
                            " " {s.repo_name.clone()} " · " {s.branch.clone()} " · by " {s.author.name.clone()} " · " {ago(s.created_at)}
                        </p>
                    </section>
                    <section class="card">
                        <h2>"Prompts"</h2>
                        <ol class="prompts">
                            {d.prompts.into_iter().map(|p| view! {
                                <li><span class="muted">{p.author.name.clone()} " · " {format!("{:?}", p.state).to_lowercase()}</span><pre>{p.text.clone()}</pre></li>
                            }).collect_view()}
                        </ol>
                    </section>
                }
            })}
            <section class="card">
                <h2>"Timeline"</h2>
                <ol class="timeline" id="timeline">
                    <For each=move || events.get() key=|e| e.seq let:e>
                        <li class="event" data-seq=e.seq><span class="seq">"#"{e.seq}</span>" "{describe(&e)}</li>
                    </For>
                </ol>
            </section>
            <section class="card placeholder">
                <h2>"Workspace"</h2>
                <p class="muted">"Terminal, VS Code and the desktop appear here once the session's workspace is running."</p>
            </section>
        </main>
    }
}
