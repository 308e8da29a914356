//! The form that makes an automation (on the Automations page): name, repo, trigger (a cron
//! schedule or a webhook) and prompt. A webhook's URL holds its secret and is shown once, here.

use leptos::prelude::*;
use leptos::task::spawn_local;
use tandem_protocol::automation::{CreateAutomation, CreatedAutomation, Trigger};
use tandem_protocol::{ApiError, Repo, RepoId};

use crate::api;
use crate::components::error_box::ErrorBox;

fn invalid(message: &str) -> ApiError {
    ApiError {
        code: "invalid_input".into(),
        message: message.into(),
    }
}

/// A webhook's URL, with the name of the automation it calls.
#[derive(Clone)]
struct MadeWebhook {
    name: String,
    url: String,
}

#[component]
pub fn AutomationForm(repos: Signal<Vec<Repo>>, on_created: Callback<()>) -> impl IntoView {
    let name = RwSignal::new(String::new());
    let repo = RwSignal::new(String::new());
    let trigger = RwSignal::new(String::from("schedule"));
    let cron = RwSignal::new(String::new());
    let max_runs = RwSignal::new(String::from("2"));
    let prompt = RwSignal::new(String::new());
    let budget = RwSignal::new(String::new());
    let max_tokens = RwSignal::new(String::new());
    let max_cost = RwSignal::new(String::new());
    let error = RwSignal::new(None::<ApiError>);
    let busy = RwSignal::new(false);
    let made = RwSignal::new(None::<MadeWebhook>);
    let is_schedule = move || trigger.get() == "schedule";
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let n = name.get_untracked().trim().to_string();
        if n.is_empty() {
            error.set(Some(invalid("Name the automation first.")));
            return;
        }
        let Ok(repo_id) = repo.get_untracked().parse::<RepoId>() else {
            error.set(Some(invalid("Pick the repo it runs in first.")));
            return;
        };
        let t = if trigger.get_untracked() == "schedule" {
            let c = cron.get_untracked().trim().to_string();
            if c.is_empty() {
                error.set(Some(invalid(
                    "Type when it runs first, in cron syntax: 0 3 * * * is 03:00 UTC every day.",
                )));
                return;
            }
            Trigger::Schedule { cron: c }
        } else if trigger.get_untracked() == "ci_failure" {
            let Ok(max_runs) = max_runs.get_untracked().trim().parse::<u32>() else {
                error.set(Some(invalid(
                    "Say how many follow-ups one pull request may get (1 to 10).",
                )));
                return;
            };
            Trigger::CiFailure { max_runs }
        } else {
            Trigger::Webhook
        };
        let p = prompt.get_untracked();
        if p.trim().is_empty() {
            error.set(Some(invalid("Type the prompt it runs first.")));
            return;
        }
        let b = budget.get_untracked().trim().to_string();
        let max_model_requests = if b.is_empty() {
            None
        } else if let Ok(n) = b.parse::<u32>() {
            Some(n)
        } else {
            error.set(Some(invalid(
                "The budget is a whole number of model requests, or empty for the server's limit.",
            )));
            return;
        };
        let t_text = max_tokens.get_untracked().trim().replace(',', "");
        let max_tokens_n = if t_text.is_empty() {
            None
        } else if let Ok(n) = t_text.parse::<i64>()
            && n > 0
        {
            Some(n)
        } else {
            error.set(Some(invalid(
                "The token limit is a whole number of tokens, or empty for none.",
            )));
            return;
        };
        let c_text = max_cost
            .get_untracked()
            .trim()
            .trim_start_matches('$')
            .to_string();
        let max_cost_usd = if c_text.is_empty() {
            None
        } else if let Ok(d) = c_text.parse::<f64>()
            && d.is_finite()
            && d > 0.0
        {
            Some(d)
        } else {
            error.set(Some(invalid(
                "The dollar limit is an amount such as 2 or 0.50, or empty for none.",
            )));
            return;
        };
        let what = format!("Making the automation {n}");
        let req = CreateAutomation {
            repo_id,
            name: n,
            prompt: p,
            trigger: t,
            agent: None,
            max_model_requests,
            max_tokens: max_tokens_n,
            max_cost_usd,
        };
        busy.set(true);
        spawn_local(async move {
            match api::post::<_, CreatedAutomation>("/api/automations", &req).await {
                Ok(c) => {
                    error.set(None);
                    made.set(c.webhook_url.map(|url| MadeWebhook {
                        name: c.automation.name,
                        url,
                    }));
                    name.set(String::new());
                    cron.set(String::new());
                    prompt.set(String::new());
                    budget.set(String::new());
                    max_tokens.set(String::new());
                    max_cost.set(String::new());
                    on_created.run(());
                }
                Err(e) => error.set(Some(api::failed(&what, e))),
            }
            busy.set(false);
        });
    };
    view! {
        <form class="stacked-form" id="automation-form" on:submit=submit>
            <label>"Name"
                <input id="automation-name" required placeholder="nightly dependency update"
                    prop:value=name on:input=move |ev| name.set(event_target_value(&ev)) />
            </label>
            <label>"Repo"
                <select id="automation-repo" prop:value=repo
                    on:change=move |ev| repo.set(event_target_value(&ev))>
                    <option value="">"a repo…"</option>
                    {move || repos.get().into_iter().map(|r| {
                        let id = r.id.to_string();
                        let selected = id == repo.get_untracked();
                        view! { <option value=id prop:selected=selected>{r.name}</option> }
                    }).collect_view()}
                </select>
            </label>
            <label>"Runs"
                <select id="automation-trigger" prop:value=trigger
                    on:change=move |ev| trigger.set(event_target_value(&ev))>
                    <option value="schedule">"on a schedule"</option>
                    <option value="webhook">"when its webhook is called"</option>
                    <option value="ci_failure">"when CI fails on a session's pull request"</option>
                </select>
            </label>
            {move || (trigger.get() == "ci_failure").then(|| view! {
                <label>"At most, per pull request"
                    <input id="automation-max-runs" type="number" min="1" max="10"
                        prop:value=max_runs on:input=move |ev| max_runs.set(event_target_value(&ev)) />
                    <span class="muted small">"follow-ups into the session, then it stops"</span>
                </label>
            })}
            {move || is_schedule().then(|| view! {
                <label>"When (cron)"
                    <input id="automation-cron" class="mono" placeholder="0 3 * * *"
                        prop:value=cron on:input=move |ev| cron.set(event_target_value(&ev)) />
                    <span class="muted small" id="automation-cron-hint">
                        "minute hour day month weekday, UTC; a seconds field may lead"
                    </span>
                </label>
            })}
            <label>"Prompt"
                <textarea id="automation-prompt" rows="4" required
                    placeholder="What should the agent do each run? e.g. Update the dependencies and open a PR"
                    prop:value=prompt on:input=move |ev| prompt.set(event_target_value(&ev))></textarea>
                {move || (!is_schedule()).then(|| view! {
                    <span class="muted small" id="automation-prompt-hint">
                        <code>"{{body}}"</code>" is the call's JSON, "
                        <code>"{{body.error.title}}"</code>" one of its values"
                    </span>
                })}
            </label>
            <label>"Budget per run (optional)"
                <input id="automation-budget" type="number" min="1" placeholder="the server's limit"
                    prop:value=budget on:input=move |ev| budget.set(event_target_value(&ev)) />
                <span class="muted small">"the most model requests one run's session may make"</span>
            </label>
            <label>"Tokens per run (optional)"
                <input id="automation-max-tokens" inputmode="numeric" placeholder="no limit of its own"
                    prop:value=max_tokens on:input=move |ev| max_tokens.set(event_target_value(&ev)) />
                <span class="muted small">"prompt and completion tokens of the run and its child sessions"</span>
            </label>
            <label>"Dollars per run (optional)"
                <input id="automation-max-cost" inputmode="decimal" placeholder="no limit of its own"
                    prop:value=max_cost on:input=move |ev| max_cost.set(event_target_value(&ev)) />
                <span class="muted small">"priced from the settings' price table; the run's turn stops there"</span>
            </label>
            <div class="row">
                <button type="submit" class="primary" id="automation-create"
                    disabled=move || busy.get() || repos.with(|r| r.is_empty())>"Make automation"</button>
            </div>
        </form>
        <ErrorBox error=error.read_only() />
        {move || made.get().map(|m| view! {
            <div id="automation-webhook" role="status">
                <p>{format!("Call {} with POST and a JSON body at:", m.name)}</p>
                <code id="automation-webhook-url">{m.url}</code>
                <p class="muted small" id="automation-webhook-note">"Copy it now: it is not shown again."</p>
            </div>
        })}
    }
}
