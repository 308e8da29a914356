//! The dashboard: repos, a "new session" form and the session list, refreshed live.

use leptos::prelude::*;
use leptos_router::hooks::use_navigate;
use tandem_protocol::{Repo, Session, SessionDetail};

use crate::api;
use crate::components::{header::Header, new_session::NewSession, repo_form::RepoForm};
use crate::format::{ago, state_class};
use crate::pages::{every, require_user};

/// How often the lists refresh while the dashboard is open.
const REFRESH_MS: u64 = 3000;

#[component]
pub fn Dashboard() -> impl IntoView {
    let user = require_user();
    let (tick, set_tick) = signal(0u32);
    every(REFRESH_MS, move || set_tick.update(|t| *t += 1));
    let repos = LocalResource::new(move || {
        tick.get();
        async move { api::get::<Vec<Repo>>("/api/repos").await.unwrap_or_default() }
    });
    let sessions = LocalResource::new(move || {
        tick.get();
        async move { api::get::<Vec<Session>>("/api/sessions").await.unwrap_or_default() }
    });
    let repo_list = Signal::derive(move || repos.get().unwrap_or_default());
    let navigate = use_navigate();
    let on_created = Callback::new(move |d: SessionDetail| {
        set_tick.update(|t| *t += 1);
        navigate(&format!("/sessions/{}", d.session.id), Default::default());
    });
    let on_added = Callback::new(move |_r: Repo| set_tick.update(|t| *t += 1));

    view! {
        <Header user=user.into() />
        <main class="page dashboard">
            <section class="card">
                <h2>"New session"</h2>
                <NewSession repos=repo_list on_created />
            </section>
            <section class="card">
                <h2>"Sessions"</h2>
                {move || {
                    let list = sessions.get().unwrap_or_default();
                    if list.is_empty() {
                        view! { <p class="muted">"No sessions yet. Start one above."</p> }.into_any()
                    } else {
                        view! {
                            <table class="list" id="sessions">
                                <thead><tr><th>"Session"</th><th>"Repo"</th><th>"State"</th><th>"Author"</th><th>"Started"</th></tr></thead>
                                <tbody>
                                    {list.into_iter().map(|s| view! {
                                        <tr class="session-row" data-id=s.id.to_string()>
                                            <td><a href=format!("/sessions/{}", s.id)>{s.title.clone()}</a></td>
                                            <td>{s.repo_name.clone()}<span class="muted">" · "{s.branch.clone()}</span></td>
                                            <td><span class=state_class(s.state)>{s.state.as_str()}</span></td>
                                            <td>{s.author.name.clone()}</td>
                                            <td class="muted">{ago(s.created_at)}</td>
                                        </tr>
                                    }).collect_view()}
                                </tbody>
                            </table>
                        }.into_any()
                    }
                }}
            </section>
            <section class="card">
                <h2>"Repos"</h2>
                {move || {
                    let list = repo_list.get();
                    if list.is_empty() {
                        view! { <p class="muted">"No repos yet. Add the git remote the agents should work on."</p> }.into_any()
                    } else {
                        view! {
                            <table class="list" id="repos">
                                <thead><tr><th>"Name"</th><th>"Remote"</th><th>"Branch"</th></tr></thead>
                                <tbody>
                                    {list.into_iter().map(|r| view! {
                                        <tr class="repo-row"><td>{r.name.clone()}</td><td class="mono">{r.url.clone()}</td><td>{r.default_branch.clone()}</td></tr>
                                    }).collect_view()}
                                </tbody>
                            </table>
                        }.into_any()
                    }
                }}
                <RepoForm on_added />
            </section>
        </main>
    }
}
