//! The dashboard: repos, a "new session" form and the session list, refreshed live.

use leptos::prelude::*;
use leptos_router::hooks::use_navigate;
use tandem_protocol::{Repo, Session, SessionDetail, SessionState, Snapshot, SnapshotState};

use crate::api;
use crate::components::{
    header::Header, host_banner::HostBanner, new_session::NewSession, repo_form::RepoForm,
};
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
        async move {
            api::get::<Vec<Repo>>("/api/repos")
                .await
                .unwrap_or_default()
        }
    });
    let sessions = LocalResource::new(move || {
        tick.get();
        async move {
            api::get::<Vec<Session>>("/api/sessions")
                .await
                .unwrap_or_default()
        }
    });
    let repo_list = Signal::derive(move || repos.get().unwrap_or_default());
    // Each repo's newest snapshot, re-read with the lists.
    let snapshots = LocalResource::new(move || {
        let list = repo_list.get();
        async move {
            let mut out = std::collections::HashMap::new();
            for r in list {
                if let Ok(s) =
                    api::get::<Vec<Snapshot>>(&format!("/api/repos/{}/snapshots", r.id)).await
                    && let Some(newest) = s.into_iter().next()
                {
                    out.insert(r.id, newest);
                }
            }
            out
        }
    });
    let state_filter = RwSignal::new(String::from("all"));
    let repo_filter = RwSignal::new(String::from("all"));
    let rebuild = move |id: tandem_protocol::RepoId| {
        leptos::task::spawn_local(async move {
            let _ = api::post::<_, Snapshot>(
                &format!("/api/repos/{id}/snapshots"),
                &serde_json::json!({}),
            )
            .await;
            set_tick.update(|t| *t += 1);
        });
    };
    let navigate = use_navigate();
    let on_created = Callback::new(move |d: SessionDetail| {
        set_tick.update(|t| *t += 1);
        navigate(&format!("/sessions/{}", d.session.id), Default::default());
    });
    let on_added = Callback::new(move |_r: Repo| set_tick.update(|t| *t += 1));

    view! {
        <Header user=user.into() />
        <main class="page dashboard">
            <HostBanner tick />
            {move || {
                let admin = user.get().is_some_and(|u| u.is_admin);
                let no_repos = repos.get().is_some_and(|r| r.is_empty());
                (admin && no_repos).then(|| view! {
                    <section class="card first-run" id="first-run">
                        <h2>"Set up Tandem"</h2>
                        <p>"Pick the model your agents use, then add the first repo — all on one page, no config file needed."</p>
                        <a class="button" href="/settings" id="first-run-setup">"Open the setup page"</a>
                    </section>
                })
            }}
            <section class="card">
                <h2>"New session"</h2>
                <NewSession repos=repo_list on_created />
            </section>
            <section class="card">
                <h2>"Sessions"</h2>
                <div class="row filters">
                    <label>"State "<select id="filter-state" on:change=move |ev| state_filter.set(event_target_value(&ev))>
                        <option value="all">"all"</option>
                        <option value="active">"active"</option>
                        <option value="running">"running"</option>
                        <option value="ended">"ended"</option>
                    </select></label>
                    <label>"Repo "<select id="filter-repo" on:change=move |ev| repo_filter.set(event_target_value(&ev))>
                        <option value="all">"all"</option>
                        {move || repo_list.get().into_iter().map(|r| view! { <option value=r.id.to_string()>{r.name.clone()}</option> }).collect_view()}
                    </select></label>
                </div>
                {move || {
                    let (sf, rf) = (state_filter.get(), repo_filter.get());
                    let list: Vec<Session> = sessions
                        .get()
                        .unwrap_or_default()
                        .into_iter()
                        .filter(|s| rf == "all" || s.repo_id.to_string() == rf)
                        .filter(|s| match sf.as_str() {
                            "active" => !matches!(s.state, SessionState::Stopped | SessionState::Failed),
                            "running" => s.state == SessionState::Running,
                            "ended" => matches!(s.state, SessionState::Stopped | SessionState::Failed),
                            _ => true,
                        })
                        .collect();
                    if list.is_empty() {
                        view! { <p class="muted">"No sessions yet. Start one above."</p> }.into_any()
                    } else {
                        view! {
                            <table class="list" id="sessions">
                                <thead><tr><th>"Session"</th><th>"Repo"</th><th>"State"</th><th>"Agent"</th><th>"People"</th><th>"Author"</th><th>"Started"</th></tr></thead>
                                <tbody>
                                    {list.into_iter().map(|s| view! {
                                        <tr class="session-row" data-id=s.id.to_string()>
                                            <td><a href=format!("/sessions/{}", s.id)>{s.title.clone()}</a></td>
                                            <td>{s.repo_name.clone()}<span class="muted">" · "{s.branch.clone()}</span></td>
                                            <td><span class=state_class(s.state)>{s.state.as_str()}</span>{(s.state == SessionState::Running).then_some(" turn running")}</td>
                                            <td>{s.agent.name()}</td>
                                            <td class="people">{(s.participants > 0).then(|| format!("{} here", s.participants))}</td>
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
                                <thead><tr><th>"Name"</th><th>"Remote"</th><th>"Branch"</th><th>"Snapshot"</th><th></th></tr></thead>
                                <tbody>
                                    {list.into_iter().map(|r| {
                                        let snap = snapshots.get().and_then(|m| m.get(&r.id).cloned());
                                        let id = r.id;
                                        view! {
                                            <tr class="repo-row">
                                                <td>{r.name.clone()}</td><td class="mono">{r.url.clone()}</td><td>{r.default_branch.clone()}</td>
                                                <td class="snapshot">{match snap {
                                                    None => view! { <span class="muted">"none yet"</span> }.into_any(),
                                                    Some(s) => {
                                                        let label = match s.state {
                                                            SnapshotState::Building => "building…".to_string(),
                                                            SnapshotState::Ready if s.quarantined_at.is_some() => format!("set aside after {} failed starts · {}", s.boot_failures, s.commit.as_deref().map(|c| &c[..c.len().min(8)]).unwrap_or("?")),
                                                            SnapshotState::Ready => format!("ready · {} · {}", s.commit.as_deref().map(|c| &c[..c.len().min(8)]).unwrap_or("?"), ago(s.finished_at.unwrap_or(s.created_at))),
                                                            SnapshotState::Failed => format!("failed: {}", s.error.clone().unwrap_or_default()),
                                                            SnapshotState::Collected => "collected".to_string(),
                                                        };
                                                        view! { <details><summary>{label}</summary><pre class="log">{s.log.clone()}</pre></details> }.into_any()
                                                    }
                                                }}</td>
                                                <td><button class="link" on:click=move |_| rebuild(id)>"Rebuild"</button></td>
                                            </tr>
                                        }
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
