//! Tools for agents (admins, on the settings page): the remote MCP servers the gateway reaches
//! for workspaces, their credential (stored, never shown) and their rules, one per line
//! (`glob = allow|ask|deny`). Each change saves at once and shows what the server kept.

use leptos::prelude::*;
use leptos::task::spawn_local;
use tandem_protocol::ApiError;
use tandem_protocol::approval::{McpServer, PutMcpServer, ToolAction, ToolRule};

use crate::api;
use crate::components::error_box::ErrorBox;

/// Rules from lines `glob = action`; the first bad line says what is wrong.
pub fn parse_rules(text: &str) -> Result<Vec<ToolRule>, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (tool, action) = l.rsplit_once('=').ok_or_else(|| {
                format!("{l:?}: write a rule as `tool-glob = allow`, `ask` or `deny`")
            })?;
            let action = match action.trim() {
                "allow" => ToolAction::Allow,
                "ask" => ToolAction::Ask,
                "deny" => ToolAction::Deny,
                other => return Err(format!("{l:?}: {other:?} is not allow, ask or deny")),
            };
            Ok(ToolRule {
                tool: tool.trim().to_string(),
                action,
            })
        })
        .collect()
}

fn rules_text(rules: &[ToolRule]) -> String {
    rules
        .iter()
        .map(|r| format!("{} = {}", r.tool, r.action.as_str()))
        .collect::<Vec<_>>()
        .join("\n")
}

fn invalid(message: String) -> ApiError {
    ApiError {
        code: "invalid_input".into(),
        message,
    }
}

#[component]
pub fn McpSettingsCard() -> impl IntoView {
    let servers = RwSignal::new(Vec::<McpServer>::new());
    let error = RwSignal::new(None::<ApiError>);
    let busy = RwSignal::new(true);
    let (name, url, secret, value, repos, rules) = (
        RwSignal::new(String::new()),
        RwSignal::new(String::new()),
        RwSignal::new(String::new()),
        RwSignal::new(String::new()),
        RwSignal::new(String::new()),
        RwSignal::new(String::new()),
    );
    let reload = move || {
        spawn_local(async move {
            match api::get::<Vec<McpServer>>("/api/mcp/servers").await {
                Ok(s) => {
                    servers.set(s);
                    error.set(None);
                }
                Err(e) => error.set(Some(api::failed("Loading the MCP servers", e))),
            }
            busy.set(false);
        })
    };
    reload();
    let edit = move |s: McpServer| {
        name.set(s.name);
        url.set(s.url);
        secret.set(s.secret.unwrap_or_default());
        value.set(String::new());
        repos.set(s.repos.join(", "));
        rules.set(rules_text(&s.rules));
    };
    let save = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let n = name.get_untracked().trim().to_string();
        let parsed = match parse_rules(&rules.get_untracked()) {
            Ok(r) => r,
            Err(e) => return error.set(Some(invalid(e))),
        };
        let keep = servers.with_untracked(|all| {
            all.iter()
                .find(|s| s.name == n)
                .map(|s| s.repo_rules.clone())
                .unwrap_or_default()
        });
        let opt = |s: String| Some(s.trim().to_string()).filter(|s| !s.is_empty());
        let req = PutMcpServer {
            url: url.get_untracked().trim().to_string(),
            secret: opt(secret.get_untracked()),
            secret_value: opt(value.get_untracked()),
            repos: repos
                .get_untracked()
                .split(',')
                .map(str::trim)
                .filter(|r| !r.is_empty())
                .map(String::from)
                .collect(),
            rules: parsed,
            repo_rules: keep,
        };
        busy.set(true);
        spawn_local(async move {
            match api::put::<_, McpServer>(&format!("/api/mcp/servers/{n}"), &req).await {
                Ok(_) => {
                    value.set(String::new());
                    reload();
                }
                Err(e) => {
                    error.set(Some(api::failed("Saving the MCP server", e)));
                    busy.set(false);
                }
            }
        });
    };
    let remove = move |n: String| {
        busy.set(true);
        spawn_local(async move {
            match api::delete(&format!("/api/mcp/servers/{n}")).await {
                Ok(()) => reload(),
                Err(e) => {
                    error.set(Some(api::failed("Removing the MCP server", e)));
                    busy.set(false);
                }
            }
        });
    };
    view! {
        <section class="card" id="mcp-settings">
            <h2>"Tools for agents (MCP)"</h2>
            <p class="muted">"Remote MCP servers the agent reaches through Tandem's gateway: the credential stays here, each call follows the rules (then the tool's own hints: read-only is allowed, destructive or open-world asks a driver)."</p>
            {move || if servers.with(Vec::is_empty) {
                view! { <p class="muted" id="mcp-empty">"No MCP server yet."</p> }.into_any()
            } else {
                view! { <ul id="mcp-servers">{servers.get().into_iter().map(|s| {
                    let (n, again) = (s.name.clone(), s.clone());
                    let key = match (&s.secret, s.secret_set) {
                        (Some(k), true) => format!("credential {k} set"),
                        (Some(k), false) => format!("credential {k} NOT set"),
                        (None, _) => "no credential".into(),
                    };
                    let scope = if s.repos.is_empty() { "every repo".to_string() } else { s.repos.join(", ") };
                    view! {
                        <li class="mcp-server">
                            <strong>{s.name.clone()}</strong>" "<code class="small">{s.url.clone()}</code>
                            <span class="muted small">{format!(" · {key} · {scope} · {} rules", s.rules.len())}</span>" "
                            <button type="button" class="link" on:click=move |_| edit(again.clone())>"Edit"</button>
                            <button type="button" class="link" disabled=busy on:click=move |_| remove(n.clone())>"Remove"</button>
                        </li>
                    }
                }).collect_view()}</ul> }.into_any()
            }}
            <form class="stack-form" id="mcp-form" on:submit=save>
                <input id="mcp-name" placeholder="sentry" aria-label="Name" prop:value=name on:input=move |ev| name.set(event_target_value(&ev)) />
                <input id="mcp-url" placeholder="https://mcp.sentry.example/mcp" aria-label="URL" prop:value=url on:input=move |ev| url.set(event_target_value(&ev)) />
                <input id="mcp-secret" placeholder="secret name (sentry_mcp_token)" aria-label="Secret name" prop:value=secret on:input=move |ev| secret.set(event_target_value(&ev)) />
                <input id="mcp-secret-value" type="password" autocomplete="off" placeholder="credential (stored, never shown)" aria-label="Credential" prop:value=value on:input=move |ev| value.set(event_target_value(&ev)) />
                <input id="mcp-repos" placeholder="repos, comma-separated (empty: every repo)" aria-label="Repos" prop:value=repos on:input=move |ev| repos.set(event_target_value(&ev)) />
                <textarea id="mcp-rules" rows="4" placeholder="search_* = allow\ndelete_* = deny" aria-label="Rules" prop:value=rules on:input=move |ev| rules.set(event_target_value(&ev))></textarea>
                <button type="submit" id="mcp-save" disabled=busy>"Save server"</button>
            </form>
            <ErrorBox error=error.read_only() />
        </section>
    }
}
