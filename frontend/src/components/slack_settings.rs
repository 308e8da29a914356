//! Slack (admins, on the settings page): channels' default repos and the keyword rules that pick
//! a repo for a message that names none. Each change saves at once and shows what the server
//! kept.

use leptos::prelude::*;
use leptos::task::spawn_local;
use tandem_protocol::slack::{SetSlackChannel, SetSlackRule, SlackSettings};
use tandem_protocol::{ApiError, Repo, RepoId};

use crate::api;
use crate::components::error_box::ErrorBox;

fn invalid(message: &str) -> ApiError {
    ApiError {
        code: "invalid_input".into(),
        message: message.into(),
    }
}

/// A repo menu bound to `value`.
fn repo_select(
    id: &'static str,
    repos: Signal<Vec<Repo>>,
    value: RwSignal<String>,
) -> impl IntoView {
    view! {
        <select id=id aria-label="Repo" prop:value=value
            on:change=move |ev| value.set(event_target_value(&ev))>
            <option value="">"a repo…"</option>
            {move || repos.get().into_iter().map(|r| {
                let id = r.id.to_string();
                let selected = id == value.get_untracked();
                view! { <option value=id prop:selected=selected>{r.name}</option> }
            }).collect_view()}
        </select>
    }
}

#[component]
pub fn SlackSettingsCard(repos: Signal<Vec<Repo>>) -> impl IntoView {
    let current = RwSignal::new(None::<SlackSettings>);
    let error = RwSignal::new(None::<ApiError>);
    let busy = RwSignal::new(true);
    let channel = RwSignal::new(String::new());
    let channel_repo = RwSignal::new(String::new());
    let keyword = RwSignal::new(String::new());
    let keyword_repo = RwSignal::new(String::new());
    spawn_local(async move {
        match api::get::<SlackSettings>("/api/slack/settings").await {
            Ok(s) => current.set(Some(s)),
            Err(e) => error.set(Some(api::failed("Loading the Slack settings", e))),
        }
        busy.set(false);
    });
    let done = move |r: Result<SlackSettings, ApiError>, what: &str| {
        match r {
            Ok(s) => {
                error.set(None);
                current.set(Some(s));
            }
            Err(e) => error.set(Some(api::failed(what, e))),
        }
        busy.set(false);
    };
    let rules_now = move || {
        current.with_untracked(|c| {
            c.as_ref()
                .map(|c| {
                    c.rules
                        .iter()
                        .map(|r| SetSlackRule {
                            keyword: r.keyword.clone(),
                            repo_id: r.repo_id,
                        })
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        })
    };
    let save_rules = move |list: Vec<SetSlackRule>, what: &'static str| {
        busy.set(true);
        spawn_local(async move {
            let r = api::put::<_, SlackSettings>("/api/slack/settings", &list).await;
            if r.is_ok() {
                keyword.set(String::new());
            }
            done(r, what);
        });
    };
    let add_channel = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let c = channel.get_untracked().trim().to_string();
        if c.is_empty() {
            error.set(Some(invalid(
                "Type the channel's id first (its details in Slack show it, like C0123ABCD).",
            )));
            return;
        }
        let Ok(repo_id) = channel_repo.get_untracked().parse::<RepoId>() else {
            error.set(Some(invalid("Pick the channel's repo first.")));
            return;
        };
        busy.set(true);
        spawn_local(async move {
            let r = api::put::<_, SlackSettings>(
                &format!("/api/slack/channels/{}", urlencoding_path(&c)),
                &SetSlackChannel { repo_id },
            )
            .await;
            if r.is_ok() {
                channel.set(String::new());
            }
            done(r, "Setting the channel's repo");
        });
    };
    let remove_channel = move |c: String| {
        busy.set(true);
        spawn_local(async move {
            let r =
                match api::delete(&format!("/api/slack/channels/{}", urlencoding_path(&c))).await {
                    Ok(()) => api::get::<SlackSettings>("/api/slack/settings").await,
                    Err(e) => Err(e),
                };
            done(r, "Clearing the channel's repo");
        });
    };
    let add_rule = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let k = keyword.get_untracked().trim().to_string();
        if k.is_empty() {
            error.set(Some(invalid(
                "Type the keyword first: a word, or a piece of a URL, like billing or app.acme.com/shop.",
            )));
            return;
        }
        let Ok(repo_id) = keyword_repo.get_untracked().parse::<RepoId>() else {
            error.set(Some(invalid("Pick the keyword's repo first.")));
            return;
        };
        let mut list = rules_now();
        list.push(SetSlackRule {
            keyword: k,
            repo_id,
        });
        save_rules(list, "Adding the keyword rule");
    };
    let remove_rule = move |i: usize| {
        let mut list = rules_now();
        if i < list.len() {
            list.remove(i);
            save_rules(list, "Removing the keyword rule");
        }
    };
    view! {
        <section class="card" id="slack-settings">
            <h2>"Slack"</h2>
            {move || current.get().map(|c| if c.configured {
                view! { <p class="muted">"Mention the app with a task; a message without "<code>"repo="</code>" uses its channel's repo, else the first keyword it holds, else the app asks."</p> }.into_any()
            } else {
                view! { <p class="muted" id="slack-off">"Slack is not configured on this server: see the Slack chapter of the book (docs/book/src/slack.md) for the app manifest and "<code>"[slack]"</code>"."</p> }.into_any()
            })}
            <p class="slack-heading"><strong>"Channels"</strong></p>
            {move || current.get().map(|c| if c.channels.is_empty() {
                view! { <p class="muted" id="slack-channels-empty">"No channel has a repo yet."</p> }.into_any()
            } else {
                view! { <ul id="slack-channels">{c.channels.into_iter().map(|ch| {
                    let id = ch.channel_id.clone();
                    view! {
                        <li class="slack-channel">
                            <code>{format!("#{}", ch.channel_id)}</code>" → "{ch.repo_name}
                            {(ch.team_id != "*").then(|| view! { <span class="muted small">" (set in Slack)"</span> })}
                            " "
                            <button type="button" class="link" disabled=busy
                                on:click=move |_| remove_channel(id.clone())>"Remove"</button>
                        </li>
                    }
                }).collect_view()}</ul> }.into_any()
            })}
            <form class="inline-form" on:submit=add_channel>
                <input id="slack-channel-id" class="mono" placeholder="C0123ABCD" aria-label="Channel id"
                    prop:value=channel on:input=move |ev| channel.set(event_target_value(&ev)) />
                {repo_select("slack-channel-repo", repos, channel_repo)}
                <button type="submit" id="slack-channel-add" disabled=busy>"Set"</button>
            </form>
            <p class="slack-heading"><strong>"Keywords"</strong></p>
            {move || current.get().map(|c| if c.rules.is_empty() {
                view! { <p class="muted" id="slack-rules-empty">"No keyword rules yet."</p> }.into_any()
            } else {
                view! { <ul id="slack-rules">{c.rules.into_iter().enumerate().map(|(i, r)| view! {
                    <li class="slack-rule"><code>{r.keyword}</code>" → "{r.repo_name}" "
                        <button type="button" class="link" disabled=busy
                            on:click=move |_| remove_rule(i)>"Remove"</button>
                    </li>
                }).collect_view()}</ul> }.into_any()
            })}
            <form class="inline-form" on:submit=add_rule>
                <input id="slack-keyword" placeholder="billing" aria-label="Keyword"
                    prop:value=keyword on:input=move |ev| keyword.set(event_target_value(&ev)) />
                {repo_select("slack-keyword-repo", repos, keyword_repo)}
                <button type="submit" id="slack-keyword-add" disabled=busy>"Add"</button>
            </form>
            <ErrorBox error=error.read_only() />
        </section>
    }
}

/// `s` safe as one path segment (channel ids are letters and digits; anything else is escaped).
fn urlencoding_path(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}
