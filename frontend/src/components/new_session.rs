//! "New session" form: repo, optional branch, first prompt.

use leptos::prelude::*;
use leptos::task::spawn_local;
use tandem_protocol::{AgentSpec, ApiError, CreateSession, Repo, RepoId, SessionDetail};

use crate::api;
use crate::components::error_box::ErrorBox;

#[component]
pub fn NewSession(repos: Signal<Vec<Repo>>, on_created: Callback<SessionDetail>) -> impl IntoView {
    let (repo, set_repo) = signal(String::new());
    let (branch, set_branch) = signal(String::new());
    let (prompt, set_prompt) = signal(String::new());
    let (error, set_error) = signal(None::<ApiError>);
    let (busy, set_busy) = signal(false);
    let (agent, set_agent) = signal(String::from("default"));
    let (template, set_template) = signal(String::new());
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        // An untouched select means the first repo.
        let chosen = Some(repo.get_untracked())
            .filter(|r| !r.is_empty())
            .or_else(|| repos.get_untracked().first().map(|r| r.id.to_string()));
        let Some(repo_id) = chosen.and_then(|r| r.parse::<RepoId>().ok()) else {
            set_error.set(Some(ApiError {
                code: "invalid_input".into(),
                message: "add a repo first".into(),
            }));
            return;
        };
        let branch = Some(branch.get_untracked()).filter(|b| !b.trim().is_empty());
        let agent = match agent.get_untracked().as_str() {
            "builtin" => Some(AgentSpec::Builtin),
            "opencode" => Some(AgentSpec::Opencode),
            "none" => Some(AgentSpec::None),
            "command" => Some(AgentSpec::Command {
                template: template.get_untracked(),
            }),
            _ => None,
        };
        let req = CreateSession {
            repo_id,
            prompt: prompt.get_untracked(),
            branch,
            agent,
            context: None,
        };
        set_busy.set(true);
        spawn_local(async move {
            match api::post::<_, SessionDetail>("/api/sessions", &req).await {
                Ok(detail) => {
                    set_error.set(None);
                    set_prompt.set(String::new());
                    on_created.run(detail);
                }
                Err(e) => set_error.set(Some(e)),
            }
            set_busy.set(false);
        });
    };
    view! {
        <form class="new-session" on:submit=submit>
            <div class="row">
                <label>"Repo"
                    <select id="new-session-repo" on:change=move |ev| set_repo.set(event_target_value(&ev))>
                        <For each=move || repos.get() key=|r| r.id let:r>
                            <option value=r.id.to_string()>{r.name.clone()}</option>
                        </For>
                    </select>
                </label>
                <label>"Branch"
                    <input id="new-session-branch" placeholder="default branch"
                        prop:value=branch on:input=move |ev| set_branch.set(event_target_value(&ev)) />
                </label>
                <label>"Agent"
                    <select id="new-session-agent" on:change=move |ev| set_agent.set(event_target_value(&ev))>
                        <option value="default" selected>"default (the server's)"</option>
                        <option value="builtin">"builtin"</option>
                        <option value="opencode">"OpenCode"</option>
                        <option value="command">"a CLI command…"</option>
                        <option value="none">"none (shared workspace)"</option>
                    </select>
                </label>
                {move || (agent.get() == "command").then(|| view! {
                    <label class="grow">"Command template"
                        <input id="new-session-template" placeholder="aider --yes --message {prompt}"
                            prop:value=template on:input=move |ev| set_template.set(event_target_value(&ev)) />
                    </label>
                })}
            </div>
            <label>"Prompt"
                <textarea id="new-session-prompt" rows="3" required=move || agent.get() != "none" disabled=move || agent.get() == "none"
                    placeholder="What should the agent do? e.g. Fix the flaky login test and open a PR"
                    prop:value=prompt on:input=move |ev| set_prompt.set(event_target_value(&ev))></textarea>
            </label>
            <button id="new-session-submit" type="submit" class="primary"
                disabled=move || busy.get() || repos.get().is_empty()>"Start session"</button>
            <ErrorBox error />
        </form>
    }
}
