//! The first-run setup page, later Settings (admins): what stops sessions on this server, the
//! model (endpoint, name, key, with a connection test), the default agent, the GitHub App and
//! the repos (with who may use each: `components/repo_access.rs`) and which repo the Chrome
//! extension picks for which pages (`components/page_rules.rs`). Each value says where it comes
//! from; one `tandem.toml` sets is read-only here.

use leptos::prelude::*;
use leptos::task::spawn_local;
use tandem_protocol::{
    AgentSpec, ApiError, ModelTest, Repo, SettingSource, Settings, TestModel, UpdateSettings,
};

use crate::api;
use crate::components::{
    error_box::ErrorBox, header::Header, host_banner::Problems, local_repos::LocalRepoDirs,
    page_rules::PageRules, repo_access::RepoAccessEditor, repo_form::RepoForm,
    slack_settings::SlackSettingsCard,
};
use crate::pages::require_user;

fn source_label(s: SettingSource) -> &'static str {
    match s {
        SettingSource::File => "from tandem.toml (change it there)",
        SettingSource::Settings => "set here",
        SettingSource::Default => "default",
    }
}

#[component]
fn Source(source: Signal<SettingSource>) -> impl IntoView {
    let class = move || {
        format!(
            "source {}",
            match source.get() {
                SettingSource::File => "file",
                SettingSource::Settings => "page",
                SettingSource::Default => "default",
            }
        )
    };
    view! { <span class=class>{move || source_label(source.get())}</span> }
}

fn agent_kind(a: &AgentSpec) -> String {
    a.name().to_string()
}

#[component]
pub fn SettingsPage() -> impl IntoView {
    let user = require_user();
    let settings = RwSignal::new(None::<Settings>);
    let load_error = RwSignal::new(None::<ApiError>);
    let load = move || {
        spawn_local(async move {
            match api::get::<Settings>("/api/settings").await {
                Ok(s) => {
                    load_error.set(None);
                    settings.set(Some(s));
                }
                Err(e) => load_error.set(Some(e)),
            }
        })
    };
    load();
    let loaded = Memo::new(move |_| settings.with(|s| s.is_some()));
    let repos = LocalResource::new(move || async move {
        api::get::<Vec<Repo>>("/api/repos")
            .await
            .unwrap_or_default()
    });
    let on_added = Callback::new(move |_r: Repo| repos.refetch());
    // The people a repo may be granted to.
    let people = RwSignal::new(Vec::<tandem_protocol::people::Person>::new());
    let people_error = RwSignal::new(None::<ApiError>);
    spawn_local(async move {
        match api::get("/api/people").await {
            Ok(p) => people.set(p),
            Err(e) => people_error.set(Some(api::failed(
                "Loading the people to grant repos to",
                ApiError {
                    message: format!("{}; reload the page to try again", e.message),
                    ..e
                },
            ))),
        }
    });

    view! {
        <Header user=user.into() />
        <main class="page settings">
            <h1>"Settings"</h1>
            <ErrorBox error=load_error.read_only() />
            {move || settings.get().map(|s| view! {
                <section class="card" id="setup-status">
                    <h2>"This server"</h2>
                    {if s.workspaces.ready {
                        view! { <p class="ok" id="setup-ready">"Sessions can start here, and the default agent has what it needs."</p> }.into_any()
                    } else {
                        view! { <Problems problems=s.workspaces.problems.clone() no_settings_link=true /> }.into_any()
                    }}
                </section>
            })}
            // The forms are made once, from the first answer, so saving keeps what they show;
            // where each value comes from follows every answer.
            {move || loaded.get().then(|| {
                let s = settings.get_untracked().unwrap_or_else(|| unreachable!("loaded"));
                let on_saved = Callback::new(move |n: Settings| settings.set(Some(n)));
                view! {
                    <ModelSection s=s.clone() current=settings.read_only() on_saved />
                    <GithubSection s current=settings.read_only() on_saved />
                }
            })}
            <section class="card" id="setup-repo">
                <h2>"Repos"</h2>
                {move || {
                    let list = repos.get().unwrap_or_default();
                    if list.is_empty() {
                        view! { <p class="muted">"No repo yet: add the git remote (or, for trying Tandem, a local path under a directory allowed below) the agents should work on."</p> }.into_any()
                    } else {
                        view! { <ul class="repo-names">{list.into_iter().map(|r| view! {
                            <li>{r.name.clone()}<span class="muted mono">" "{r.url.clone()}</span>
                                <RepoAccessEditor repo=r people=people.into() />
                            </li>
                        }).collect_view()}</ul> }.into_any()
                    }
                }}
                <ErrorBox error=people_error.read_only() />
                <RepoForm on_added />
                {move || loaded.get().then(|| {
                    let s = settings.get_untracked().unwrap_or_else(|| unreachable!("loaded"));
                    let on_saved = Callback::new(move |n: Settings| settings.set(Some(n)));
                    view! { <LocalRepoDirs s current=settings.read_only() on_saved /> }
                })}
                <p><a href="/" id="setup-done">"Go to the dashboard and start a session →"</a></p>
            </section>
            {move || user.get().is_some_and(|u| u.is_admin).then(|| view! {
                <PageRules repos=Signal::derive(move || repos.get().unwrap_or_default()) />
                <SlackSettingsCard repos=Signal::derive(move || repos.get().unwrap_or_default()) />
                <crate::components::mcp_settings::McpSettingsCard />
                <crate::components::spend_settings::SpendSettingsCard />
            })}
        </main>
    }
}

#[component]
fn ModelSection(
    s: Settings,
    current: ReadSignal<Option<Settings>>,
    on_saved: Callback<Settings>,
) -> impl IntoView {
    let src = move |f: fn(&Settings) -> SettingSource| {
        Signal::derive(move || {
            current.with(|c| c.as_ref().map(f).unwrap_or(SettingSource::Default))
        })
    };
    let key_note = move || {
        current.with(|c| match c {
            Some(c) if c.model_api_key_set => {
                format!("stored in the secret store as {}", c.api_key_secret)
            }
            _ => "not set (some local endpoints need none)".to_string(),
        })
    };
    let url_locked = s.model_base_url.source == SettingSource::File;
    let model_locked = s.model.source == SettingSource::File;
    let agent_locked = s.default_agent.source == SettingSource::File;
    let base_url = RwSignal::new(s.model_base_url.value.clone().unwrap_or_default());
    // The built-in default is the placeholder, not the value: typing a name replaces nothing.
    let model_default = s.model.value.clone();
    let model = RwSignal::new(if s.model.source == SettingSource::Default {
        String::new()
    } else {
        s.model.value.clone()
    });
    let key = RwSignal::new(String::new());
    let agent = RwSignal::new(agent_kind(&s.default_agent.value));
    let template = RwSignal::new(match &s.default_agent.value {
        AgentSpec::Command { template } => template.clone(),
        _ => String::new(),
    });
    let test = RwSignal::new(None::<ModelTest>);
    let error = RwSignal::new(None::<ApiError>);
    let saved = RwSignal::new(false);
    let busy = RwSignal::new(false);
    let run_test = move |_| {
        busy.set(true);
        test.set(None);
        let req = TestModel {
            model_base_url: (!url_locked).then(|| base_url.get_untracked()),
            model: Some(model.get_untracked()),
            model_api_key: Some(key.get_untracked()),
        };
        spawn_local(async move {
            match api::post::<_, ModelTest>("/api/settings/model/test", &req).await {
                Ok(t) => {
                    error.set(None);
                    test.set(Some(t));
                }
                Err(e) => error.set(Some(e)),
            }
            busy.set(false);
        });
    };
    let save = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        busy.set(true);
        saved.set(false);
        let agent_spec = match agent.get_untracked().as_str() {
            "opencode" => AgentSpec::Opencode,
            "command" => AgentSpec::Command {
                template: template.get_untracked(),
            },
            "none" => AgentSpec::None,
            _ => AgentSpec::Builtin,
        };
        let k = key.get_untracked();
        let req = UpdateSettings {
            model_base_url: (!url_locked).then(|| base_url.get_untracked()),
            model: (!model_locked).then(|| model.get_untracked()),
            model_api_key: (!k.trim().is_empty()).then_some(k),
            default_agent: (!agent_locked).then_some(agent_spec),
            ..Default::default()
        };
        spawn_local(async move {
            match api::put::<_, Settings>("/api/settings", &req).await {
                Ok(n) => {
                    error.set(None);
                    key.set(String::new());
                    saved.set(true);
                    on_saved.run(n);
                }
                Err(e) => error.set(Some(e)),
            }
            busy.set(false);
        });
    };
    view! {
        <section class="card" id="setup-model">
            <h2>"Model"</h2>
            <p class="muted">"Any OpenAI-compatible chat-completions API. The key stays on this server: workspaces reach the model through it and never see the key."</p>
            <form class="stacked-form" on:submit=save>
                <label>"Endpoint " <Source source=src(|c| c.model_base_url.source) />
                    <input id="setting-model-url" placeholder="https://api.openai.com/v1" disabled=url_locked
                        prop:value=base_url on:input=move |ev| base_url.set(event_target_value(&ev)) />
                </label>
                <label>"Model " <Source source=src(|c| c.model.source) />
                    <input id="setting-model" placeholder=model_default disabled=model_locked
                        prop:value=model on:input=move |ev| model.set(event_target_value(&ev)) />
                </label>
                <label>"API key "
                    <span class="source" id="setting-key-state">{key_note}</span>
                    <input id="setting-model-key" type="password" autocomplete="off"
                        placeholder=if s.model_api_key_set { "leave empty to keep the stored key" } else { "sk-…" }
                        prop:value=key on:input=move |ev| key.set(event_target_value(&ev)) />
                </label>
                <label>"Default agent " <Source source=src(|c| c.default_agent.source) />
                    <select id="setting-agent" disabled=agent_locked on:change=move |ev| agent.set(event_target_value(&ev)) prop:value=agent>
                        <option value="builtin">"builtin — Tandem's tool-calling agent"</option>
                        <option value="opencode">"opencode"</option>
                        <option value="command">"command — any CLI agent"</option>
                        <option value="none">"none — a shared workspace"</option>
                    </select>
                </label>
                {move || (agent.get() == "command").then(|| view! {
                    <label>"Command template"
                        <input id="setting-agent-template" placeholder="claude -p {prompt}"
                            prop:value=template on:input=move |ev| template.set(event_target_value(&ev)) />
                    </label>
                })}
                <div class="row">
                    <button type="button" id="setting-model-test" disabled=busy on:click=run_test>"Test connection"</button>
                    <button type="submit" id="setting-model-save" disabled=busy>"Save"</button>
                    {move || saved.get().then(|| view! { <span class="ok" id="setting-saved">"Saved."</span> })}
                </div>
            </form>
            {move || test.get().map(|t| view! {
                <p id="model-test-result" class=if t.ok { "ok" } else { "error" } role="status">
                    {if t.ok { "✓ " } else { "✗ " }}{t.message}
                </p>
            })}
            <ErrorBox error=error.read_only() />
        </section>
    }
}

#[component]
fn GithubSection(
    s: Settings,
    current: ReadSignal<Option<Settings>>,
    on_saved: Callback<Settings>,
) -> impl IntoView {
    let g = s.github.clone();
    let src = move |f: fn(&Settings) -> SettingSource| {
        Signal::derive(move || {
            current.with(|c| c.as_ref().map(f).unwrap_or(SettingSource::Default))
        })
    };
    let stored = move |f: fn(&Settings) -> bool| {
        move || {
            if current.with(|c| c.as_ref().is_some_and(f)) {
                "stored"
            } else {
                "not set"
            }
        }
    };
    let locked = g.app_id.source == SettingSource::File;
    let app_id = RwSignal::new(g.app_id.value.map(|v| v.to_string()).unwrap_or_default());
    let slug = RwSignal::new(g.app_slug.value.clone().unwrap_or_default());
    let client_id = RwSignal::new(g.client_id.value.clone().unwrap_or_default());
    let private_key = RwSignal::new(String::new());
    let webhook = RwSignal::new(String::new());
    let client_secret = RwSignal::new(String::new());
    let error = RwSignal::new(None::<ApiError>);
    let saved = RwSignal::new(false);
    let origin = web_sys::window()
        .and_then(|w| w.location().origin().ok())
        .unwrap_or_default();
    let save = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        saved.set(false);
        let id = app_id.get_untracked();
        let id = match id.trim() {
            "" => Some(0),
            t => match t.parse::<u64>() {
                Ok(n) => Some(n),
                Err(_) => {
                    error.set(Some(ApiError {
                        code: "invalid_input".into(),
                        message: "the App ID is a number (the App's settings page, \"App ID\")"
                            .into(),
                    }));
                    return;
                }
            },
        };
        let opt = |s: RwSignal<String>| {
            let v = s.get_untracked();
            (!v.trim().is_empty()).then_some(v)
        };
        let req = UpdateSettings {
            github_app_id: id,
            github_app_slug: Some(slug.get_untracked()),
            github_client_id: Some(client_id.get_untracked()),
            github_private_key: opt(private_key),
            github_webhook_secret: opt(webhook),
            github_client_secret: opt(client_secret),
            ..Default::default()
        };
        spawn_local(async move {
            match api::put::<_, Settings>("/api/settings", &req).await {
                Ok(n) => {
                    error.set(None);
                    private_key.set(String::new());
                    webhook.set(String::new());
                    client_secret.set(String::new());
                    saved.set(true);
                    on_saved.run(n);
                }
                Err(e) => error.set(Some(e)),
            }
        });
    };
    view! {
        <section class="card" id="setup-github">
            <h2>"GitHub App (optional)"</h2>
            <p class="muted">
                "Without it Tandem works on any git remote; with it, sessions open pull requests and people sign in with GitHub. Create the App under GitHub → Settings → Developer settings → GitHub Apps with:"
            </p>
            <ul class="mono small">
                <li>"Callback URL: "{format!("{origin}/api/auth/github/callback")}</li>
                <li>"Webhook URL: "{format!("{origin}/api/github/webhook")}" (with a webhook secret)"</li>
                <li>"Repository permissions: Contents, Pull requests: read & write; Metadata: read"</li>
            </ul>
            <p class="muted">{if g.active { "The running server has the App." } else { "Changes here apply when the server next starts." }}</p>
            <form class="stacked-form" on:submit=save>
                <label>"App ID " <Source source=src(|c| c.github.app_id.source) />
                    <input id="setting-gh-app-id" disabled=locked prop:value=app_id on:input=move |ev| app_id.set(event_target_value(&ev)) />
                </label>
                <label>"App slug (github.com/apps/<slug>) " <Source source=src(|c| c.github.app_slug.source) />
                    <input id="setting-gh-slug" disabled=locked prop:value=slug on:input=move |ev| slug.set(event_target_value(&ev)) />
                </label>
                <label>"OAuth client ID (for sign-in) " <Source source=src(|c| c.github.client_id.source) />
                    <input id="setting-gh-client-id" disabled=locked prop:value=client_id on:input=move |ev| client_id.set(event_target_value(&ev)) />
                </label>
                <label>"Private key (PEM) " <span class="source">{stored(|c| c.github.private_key_set)}</span>
                    <textarea id="setting-gh-key" rows="3" placeholder="-----BEGIN RSA PRIVATE KEY-----" prop:value=private_key on:input=move |ev| private_key.set(event_target_value(&ev))></textarea>
                </label>
                <label>"Webhook secret " <span class="source">{stored(|c| c.github.webhook_secret_set)}</span>
                    <input id="setting-gh-webhook" type="password" autocomplete="off" prop:value=webhook on:input=move |ev| webhook.set(event_target_value(&ev)) />
                </label>
                <label>"OAuth client secret " <span class="source">{stored(|c| c.github.client_secret_set)}</span>
                    <input id="setting-gh-client-secret" type="password" autocomplete="off" prop:value=client_secret on:input=move |ev| client_secret.set(event_target_value(&ev)) />
                </label>
                <div class="row">
                    <button type="submit" id="setting-gh-save" disabled=locked>"Save GitHub App"</button>
                    {move || saved.get().then(|| view! { <span class="ok">"Saved; restart the server to use it."</span> })}
                </div>
            </form>
            <ErrorBox error=error.read_only() />
        </section>
    }
}
