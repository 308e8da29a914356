//! The live session page: the agent timeline with the prompt box and queue, the workspace panes
//! (terminals as tabs, the diff, VS Code and the desktop), people and control, sharing, boot
//! phases and clear error states. Everything live comes through the session's live channel.

use leptos::prelude::*;
use leptos::task::spawn_local;
use leptos_router::hooks::use_params_map;
use tandem_protocol::live::{Role, WsClient};
use tandem_protocol::{EventKind, SessionDetail, SessionId, SessionState, User};

use crate::api;
use crate::components::code::CodePane;
use crate::components::desktop::DesktopPane;
use crate::components::diff::DiffView;
use crate::components::files::FilesPane;
use crate::components::header::Header;
use crate::components::no_access::{Missing, NoAccess};
use crate::components::participants::Participants;
use crate::components::prompt_box::{PromptBox, Queue};
use crate::components::pull_request::PullRequestBar;
use crate::components::share::ShareDialog;
use crate::components::spend::SpendLine;
use crate::components::terminal::TerminalPane;
use crate::components::timeline::Timeline;
use crate::components::visibility::{PrivateBadge, PrivateToggle};
use crate::format::state_class;
use crate::live::{Guest, Live, Status};

/// The share token and display name a guest joined with (kept for this tab only).
pub fn guest_for(session: SessionId) -> Guest {
    let store = web_sys::window().and_then(|w| w.session_storage().ok().flatten());
    let get = |k: &str| {
        store
            .as_ref()
            .and_then(|s| s.get_item(&format!("tandem.{k}.{session}")).ok().flatten())
    };
    Guest {
        share: get("share"),
        name: get("name"),
    }
}

/// The signed-in user, if any (a guest is not signed in; no redirect).
fn maybe_user() -> RwSignal<Option<User>> {
    let user = RwSignal::new(None::<User>);
    spawn_local(async move {
        if let Ok(u) = api::get::<User>("/api/me").await {
            user.set(Some(u));
        }
    });
    user
}

#[component]
pub fn SessionPage() -> impl IntoView {
    let params = use_params_map();
    let id = params
        .read_untracked()
        .get("id")
        .and_then(|s| s.parse::<SessionId>().ok());
    let Some(id) = id else {
        return view! { <main class="page"><p class="error">"That is not a session address."</p></main> }.into_any();
    };
    let user = maybe_user();
    let guest = guest_for(id);
    let live = Live::open(id, guest);
    let l = live.clone();
    on_cleanup(move || l.close());
    let s = live.state;
    let detail = RwSignal::new(None::<SessionDetail>);
    // No such session, or hidden from this person: the server answers both alike, and so does
    // the page.
    let missing = RwSignal::new(false);
    let reload = Callback::new(move |_| {
        spawn_local(async move {
            match api::get::<SessionDetail>(&format!("/api/sessions/{id}")).await {
                Ok(d) => detail.set(Some(d)),
                Err(e) if api::is_not_found(&e) => missing.set(true),
                Err(_) => {}
            }
        })
    });
    let gone = Signal::derive(move || missing.get() || s.status.get() == Status::NotFound);
    // Prompts and state change with events: re-read the session when they do.
    let prompt_events = Memo::new(move |_| {
        s.events.with(|e| {
            e.iter()
                .filter(|e| {
                    matches!(
                        e.kind,
                        EventKind::PromptQueued { .. }
                            | EventKind::PromptEdited { .. }
                            | EventKind::PromptWithdrawn { .. }
                            | EventKind::TurnStarted { .. }
                            | EventKind::TurnEnded { .. }
                            | EventKind::SteerDelivered { .. }
                            | EventKind::StateChanged { .. }
                    )
                })
                .count()
        })
    });
    Effect::new(move |_| {
        prompt_events.get();
        reload.run(());
    });
    let file_changes = Memo::new(move |_| {
        s.events.with(|e| {
            e.iter()
                .filter(|e| {
                    matches!(
                        e.kind,
                        EventKind::FileChanged { .. } | EventKind::TurnEnded { .. }
                    )
                })
                .count()
        })
    });
    let role = Signal::derive(move || s.me.get().map(|m| m.role).unwrap_or(Role::Viewer));
    let can_drive = Signal::derive(move || role.get().can_drive());
    let signed_in = Signal::derive(move || user.get().is_some());
    // Typing is allowed to drivers while no one else holds control.
    let read_only = Signal::derive(move || {
        !can_drive.get()
            || s.controller
                .get()
                .is_some_and(|c| Some(c) != s.me.get().map(|m| m.id))
    });
    let can_control = Signal::derive(move || !read_only.get());
    let tab = RwSignal::new(String::from("terminal"));
    let active_terminal = RwSignal::new(None::<u32>);
    Effect::new(move |_| {
        let ts = s.terminals.get();
        if active_terminal
            .get_untracked()
            .is_none_or(|a| !ts.iter().any(|t| t.id == a))
        {
            active_terminal.set(ts.first().map(|t| t.id));
        }
    });
    let state = Signal::derive(move || {
        s.session
            .get()
            .map(|x| x.state)
            .or(detail.get().map(|d| d.session.state))
    });
    let last_boot = Memo::new(move |_| {
        s.events.with(|e| {
            e.iter().rev().find_map(|e| match &e.kind {
                EventKind::BootPhase {
                    phase, elapsed_ms, ..
                } => Some(format!("{} at {elapsed_ms} ms", phase.as_str())),
                _ => None,
            })
        })
    });
    let last_error = Memo::new(move |_| {
        s.events.with(|e| {
            e.iter().rev().find_map(|e| match &e.kind {
                EventKind::Error { message } => Some(message.clone()),
                _ => None,
            })
        })
    });
    // What the session (or its next turn) waits for, until something happens after it.
    let waiting = Memo::new(move |_| {
        s.events.with(|e| {
            for ev in e.iter().rev() {
                match &ev.kind {
                    EventKind::Waiting { problem } => return Some(problem.clone()),
                    EventKind::BootPhase { .. }
                    | EventKind::TurnStarted { .. }
                    | EventKind::StateChanged { .. } => return None,
                    _ => {}
                }
            }
            None
        })
    });
    let look = live.clone();
    Effect::new(move |_| {
        let t = tab.get();
        let what = if t == "terminal" {
            active_terminal.get().map(|a| format!("terminal {a}"))
        } else if t == "files" {
            Some(
                s.file
                    .with(|f| f.as_ref().map(|f| format!("file {}", f.path)))
                    .unwrap_or(t),
            )
        } else {
            Some(t)
        };
        look.send(&WsClient::Presence { looking_at: what });
    });
    let private = Signal::derive(move || {
        s.session
            .get()
            .map(|x| x.private)
            .or(detail.with(|d| d.as_ref().map(|d| d.session.private)))
            .unwrap_or(false)
    });
    let on_visibility = Callback::new(move |n: tandem_protocol::Session| {
        detail.update(|d| {
            if let Some(d) = d {
                d.session = n.clone();
            }
        });
        s.session.set(Some(n));
    });
    let live_for_panes = live.clone();
    let live_for_prompt = live.clone();
    let live_for_people = live.clone();
    let new_terminal = live.clone();
    let live_for_desktop = live.clone();
    let live_for_files = live.clone();
    // A file to open in the Files pane at a line (from the diff).
    let open_at = RwSignal::new(None::<(String, u32)>);
    Effect::new(move |_| {
        // Setting the same tab again would make the pane (and its open editor) anew.
        if open_at.get().is_some() && tab.get_untracked() != "files" {
            tab.set("files".into());
        }
    });
    let live_for_answers = live.clone();
    let answers = crate::components::timeline::Answers {
        send: Callback::new(move |m: WsClient| live_for_answers.send(&m)),
        can_drive,
        open_file: Some(Callback::new(move |path: String| {
            open_at.set(Some((path, 1)))
        })),
    };

    view! {
        <Header user=Signal::derive(move || user.get()) />
        <Show when=move || gone.get()>
            <main class="page narrow" id="no-access">
                <section class="card">
                    <h1>"No session here"</h1>
                    <NoAccess what=Missing::Session />
                    <p><a href="/">"Back to the dashboard"</a></p>
                </section>
            </main>
        </Show>
        <main class="page session-live" class:hidden=move || gone.get()>
            {move || match s.status.get() {
                Status::Reconnecting => Some(view! { <p class="banner warn" id="conn-status" role="status">"Reconnecting…"</p> }.into_any()),
                Status::Connecting => Some(view! { <p class="banner" id="conn-status" role="status">"Connecting…"</p> }.into_any()),
                Status::Closed(why) => Some(view! { <p class="banner bad" id="conn-status" role="alert">{why}</p> }.into_any()),
                Status::Open | Status::NotFound => None,
            }}
            <section class="card head">
                <h1 id="session-title">{move || s.session.get().map(|x| x.title).unwrap_or_default()}</h1>
                <p class="meta">
                    {move || state.get().map(|st| view! { <span class=state_class(st) id="session-state">{st.as_str()}</span> })}
                    {move || s.session.get().map(|x| format!(" {} · {} · by {} · agent {}", x.repo_name, x.branch, x.author.name, x.agent.name()))}
                    {move || (matches!(state.get(), Some(SessionState::Queued | SessionState::Starting))).then(|| last_boot.get().map(|b| view! { <span class="muted" id="boot-phase">" · booting: "{b}</span> }))}
                    " "<PrivateBadge private />
                    {move || (role.get() == Role::Viewer).then(|| view! { <span class="badge" id="viewer-badge">" watching (viewer)"</span> })}
                    {move || detail.get().filter(|d| d.model_requests > 0).map(|d| view! {
                        <span class="muted" id="model-budget">{match d.model_request_limit {
                            Some(limit) => format!(" · model requests {} of {limit}", d.model_requests),
                            None => format!(" · model requests {}", d.model_requests),
                        }}</span>
                    })}
                </p>
                {move || (state.get() == Some(SessionState::Failed)).then(|| view! {
                    <p class="banner bad" role="alert">"The session failed: "{last_error.get().unwrap_or_else(|| "see the timeline".into())}</p>
                })}
                {move || waiting.get().map(|p| view! {
                    <p class="banner warn" id="session-waiting" role="status">
                        <strong>"Waiting: "</strong>{p.message}" — "{p.fix}
                        <span class="muted">" It goes on by itself once that is fixed."</span>
                    </p>
                })}
                {move || s.refused.get().map(|r| view! { <p class="notice" id="refused">{r}</p> })}
                {move || (role.get() == Role::Owner).then(|| view! { <PrivateToggle session=id private on_changed=on_visibility /> })}
                <SpendLine session=id events=s.events />
                <PullRequestBar session=id events=s.events can_drive=can_drive />
            </section>
            <div class="columns">
                <div class="col-main">
                    <section class="card">
                        <h2>"Timeline"</h2>
                        <Timeline events=s.events answers />
                        <Queue session=id detail user=Signal::derive(move || user.get()) reload />
                        {move || {
                            let no_agent = s.session.get().is_some_and(|x| x.agent == tandem_protocol::AgentSpec::None);
                            if no_agent {
                                view! { <p class="muted" id="no-agent">"No agent works in this session: it is a shared workspace for people."</p> }.into_any()
                            } else {
                                view! { <PromptBox live=live_for_prompt.clone() session=id can_drive signed_in /> }.into_any()
                            }
                        }}
                    </section>
                </div>
                <div class="col-side">
                    <section class="card panes">
                        <nav class="tabs" role="tablist">
                            <For each=move || s.terminals.get() key=|t| t.id let:t>
                                {
                                    let tid = t.id;
                                    view! { <button role="tab" class:active=move || tab.get() == "terminal" && active_terminal.get() == Some(tid)
                                        on:click=move |_| { tab.set("terminal".into()); active_terminal.set(Some(tid)); }>{format!("Terminal {tid}")}</button> }
                                }
                            </For>
                            {move || can_drive.get().then(|| { let nt = new_terminal.clone(); view! { <button class="link" id="terminal-new" on:click=move |_| nt.send(&WsClient::OpenTerminal { cols: 120, rows: 32 })>"+"</button> } })}
                            <button role="tab" id="tab-files" class:active=move || tab.get() == "files" on:click=move |_| tab.set("files".into())>"Files"</button>
                            <button role="tab" id="tab-diff" class:active=move || tab.get() == "diff" on:click=move |_| tab.set("diff".into())>"Diff"</button>
                            <button role="tab" id="tab-code" class:active=move || tab.get() == "code" on:click=move |_| tab.set("code".into())>"VS Code"</button>
                            <button role="tab" id="tab-desktop" class:active=move || tab.get() == "desktop" on:click=move |_| tab.set("desktop".into())>"Desktop"</button>
                        </nav>
                        <For each=move || s.terminals.get() key=|t| t.id let:t>
                            {
                                let tid = t.id;
                                view! {
                                    <div class="pane" class:hidden=move || !(tab.get() == "terminal" && active_terminal.get() == Some(tid))>
                                        <TerminalPane live=live_for_panes.clone() id=tid cols=t.cols rows=t.rows read_only />
                                    </div>
                                }
                            }
                        </For>
                        {move || (tab.get() == "terminal" && s.terminals.with(|t| t.is_empty())).then(|| view! {
                            <p class="muted">"The terminal appears once the session's workspace is running."</p>
                        })}
                        {move || (tab.get() == "files").then(|| view! { <FilesPane live=live_for_files.clone() open_at /> })}
                        {move || (tab.get() == "diff").then(|| view! { <DiffView session=id refresh=Signal::derive(move || file_changes.get()) open_at /> })}
                        {move || (tab.get() == "code").then(|| if can_drive.get() {
                            view! { <CodePane session=id /> }.into_any()
                        } else {
                            view! { <p class="muted placeholder" id="code-viewer">"VS Code is for the owner and drivers; viewers watch the terminal and the desktop."</p> }.into_any()
                        })}
                        {move || (tab.get() == "desktop").then(|| view! { <DesktopPane live=live_for_desktop.clone() session=id can_control=can_control /> })}
                    </section>
                    <Participants live=live_for_people />
                    {move || (role.get() == Role::Owner).then(|| view! { <ShareDialog session=id /> })}
                </div>
            </div>
        </main>
    }
    .into_any()
}
