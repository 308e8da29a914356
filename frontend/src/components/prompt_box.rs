//! The prompt box: queue a prompt, steer the running turn, stop it; and the queue itself, each
//! prompt with its author, editable or withdrawable by that author until it starts.

use leptos::prelude::*;
use leptos::task::spawn_local;
use tandem_protocol::live::WsClient;
use tandem_protocol::{Prompt, PromptMode, PromptState, SessionDetail, SessionId, User};

use crate::api;
use crate::live::Live;

#[component]
pub fn PromptBox(
    live: Live,
    session: SessionId,
    can_drive: Signal<bool>,
    signed_in: Signal<bool>,
) -> impl IntoView {
    let text = RwSignal::new(String::new());
    let send = {
        let live = live.clone();
        move |mode: PromptMode| {
            let t = text.get_untracked();
            if t.trim().is_empty() {
                return;
            }
            live.send(&WsClient::Prompt { text: t, mode });
            text.set(String::new());
        }
    };
    let (queue, steer) = (send.clone(), send);
    let stop = move |_| {
        spawn_local(async move {
            if let Err(e) = api::post::<_, serde_json::Value>(
                &format!("/api/sessions/{session}/turn/stop"),
                &serde_json::json!({}),
            )
            .await
                && e.code != "decode"
            {
                leptos::logging::warn!("stop: {}", e.message);
            }
        });
    };
    let disabled = move || !can_drive.get();
    view! {
        <form class="prompt-box" on:submit=move |ev| { ev.prevent_default(); queue(PromptMode::Queue) }>
            <textarea id="prompt-text" rows="3" aria-label="Prompt" placeholder=move || if can_drive.get() { "Ask the agent…" } else { "You are watching: viewers cannot prompt" }
                prop:value=move || text.get() on:input=move |ev| text.set(event_target_value(&ev)) disabled=disabled></textarea>
            <div class="actions">
                <button type="submit" id="prompt-queue" disabled=disabled>"Queue"</button>
                <button type="button" id="prompt-steer" disabled=disabled on:click=move |_| steer(PromptMode::Steer)>"Steer"</button>
                <button type="button" id="turn-stop" class="danger" disabled=move || !can_drive.get() || !signed_in.get() on:click=stop>"Stop"</button>
            </div>
        </form>
    }
}

/// The session's prompts still waiting, with edit and withdraw for their author.
#[component]
pub fn Queue(
    session: SessionId,
    detail: RwSignal<Option<SessionDetail>>,
    user: Signal<Option<User>>,
    reload: Callback<()>,
) -> impl IntoView {
    let queued = move || {
        detail
            .get()
            .map(|d| {
                d.prompts
                    .into_iter()
                    .filter(|p| p.state == PromptState::Queued)
                    .collect::<Vec<Prompt>>()
            })
            .unwrap_or_default()
    };
    view! {
        <ol class="queue" id="queue">
            <For each=queued key=|p| (p.id, p.text.clone()) let:p>
                {
                    let mine = user.get_untracked().is_some_and(|u| p.author.user_id == Some(u.id));
                    let id = p.id;
                    let edit = move |_| {
                        let Some(w) = web_sys::window() else { return };
                        let Ok(Some(t)) = w.prompt_with_message("Edit the prompt") else { return };
                        spawn_local(async move {
                            let _ = api::patch::<_, Prompt>(&format!("/api/sessions/{session}/prompts/{id}"), &serde_json::json!({ "text": t })).await;
                            reload.run(());
                        });
                    };
                    let withdraw = move |_| spawn_local(async move {
                        let _ = api::delete(&format!("/api/sessions/{session}/prompts/{id}")).await;
                        reload.run(());
                    });
                    view! {
                        <li class="queued"><span class="who">{p.author.name.clone()}</span>" "<span>{p.text.clone()}</span>
                            {mine.then(|| view! { <button class="link" on:click=edit>"Edit"</button><button class="link" on:click=withdraw>"Withdraw"</button> })}
                        </li>
                    }
                }
            </For>
        </ol>
    }
}
