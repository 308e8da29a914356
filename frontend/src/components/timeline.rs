//! The agent timeline: prompts (with the page they are about: `prompt_context.rs`), streamed
//! replies rendered as markdown, tool calls with their output folded, commands with exit codes,
//! file changes, turns with usage, child sessions, boot phases and errors.

use leptos::prelude::*;
use tandem_protocol::links::{self, Target, safe_url};
use tandem_protocol::{Event, EventKind, TurnOutcome};

use crate::api;
use crate::components::approval::ApprovalCard;
use crate::components::prompt_context::PromptContextBlock;

/// Markdown to HTML, with raw HTML shown as text (never interpreted), links only to safe
/// targets, and images only from Tandem itself: a remote image is a plain link the reader may
/// open (`links::without_remote_images`), so no one's browser fetches what an agent or a guest
/// pointed it at. Whoever wrote the text is untrusted, and whoever reads it may be an admin.
pub fn markdown(src: &str) -> String {
    use pulldown_cmark::{Event as Md, Parser, Tag, TagEnd, html};
    let src = links::without_remote_images(src, "");
    // Links cannot nest, nor images: one flag each says "dropping the current one".
    let (mut in_bad_link, mut in_bad_image) = (false, false);
    let parser = Parser::new_ext(&src, links::markdown_options()).filter_map(move |e| match e {
        Md::Html(t) | Md::InlineHtml(t) => Some(Md::Text(t)),
        Md::Start(Tag::Link { ref dest_url, .. }) if !safe_url(dest_url, Target::Link) => {
            in_bad_link = true;
            None
        }
        Md::End(TagEnd::Link) if in_bad_link => {
            in_bad_link = false;
            None
        }
        // After the rewrite only Tandem's own images are left; anything else is dropped.
        Md::Start(Tag::Image { ref dest_url, .. }) if !links::own_image(dest_url, "") => {
            in_bad_image = true;
            None
        }
        Md::End(TagEnd::Image) if in_bad_image => {
            in_bad_image = false;
            None
        }
        e => Some(e),
    });
    let mut out = String::new();
    html::push_html(&mut out, parser);
    out
}

/// What lets a timeline answer approvals: the live channel's send, and whether this person
/// drives.
#[derive(Clone, Copy)]
pub struct Answers {
    pub send: Callback<tandem_protocol::live::WsClient>,
    pub can_drive: Signal<bool>,
    /// Opens a file the timeline names in the Files pane (the session page has one).
    pub open_file: Option<Callback<String>>,
}

fn item(e: &Event, events: RwSignal<Vec<Event>>, answers: Option<Answers>) -> Option<AnyView> {
    let seq = e.seq;
    let v = match &e.kind {
        EventKind::AgentDelta { .. } => return None,
        EventKind::ApprovalAsked { approval } => view! {
            <ApprovalCard approval=approval.clone() seq=seq events answer=answers.map(|a| a.send)
                can_drive=answers.map_or(Signal::stored(false), |a| a.can_drive) />
        }
        .into_any(),
        EventKind::PromptQueued { author, text, mode, context, .. } => view! {
            <li class="ev prompt" data-seq=seq><span class="who">{author.name.clone()}</span>
                {matches!(mode, tandem_protocol::PromptMode::Steer).then(|| view! { <span class="badge badge-run">"steer"</span> })}
                <div class="md" inner_html=markdown(text)></div>
                {context.clone().map(|context| view! { <PromptContextBlock session=e.session_id context=*context /> })}</li>
        }
        .into_any(),
        EventKind::AgentMessage { text, .. } => view! {
            <li class="ev agent" data-seq=seq><span class="who">"agent"</span><div class="md" inner_html=markdown(text)></div></li>
        }
        .into_any(),
        EventKind::ToolCall { name, arguments, .. } => {
            let args = match arguments.get("command").and_then(|c| c.as_str()) {
                Some(c) => format!("$ {c}"),
                None => arguments.to_string(),
            };
            view! { <li class="ev tool" data-seq=seq><span class="tool-name">{name.clone()}</span>" "<code>{args}</code></li> }.into_any()
        }
        EventKind::ToolResult { name, output, exit_code, is_error, duration_ms, truncated, .. } => {
            let status = match exit_code {
                Some(c) => format!("exit {c}"),
                None if *is_error => "failed".into(),
                None => "done".into(),
            };
            let class = if *is_error { "ev result bad" } else { "ev result" };
            view! {
                <li class=class data-seq=seq>
                    <details><summary>{name.clone()}" → "{status}" in "{*duration_ms}" ms"{truncated.then_some(" (cut; whole output kept)")}</summary>
                    <pre>{output.clone()}</pre></details>
                </li>
            }
            .into_any()
        }
        EventKind::CommandRun { author, command, exit_code, output, .. } => view! {
            <li class="ev command" data-seq=seq>
                <details><summary>{author.name.clone()}" ran "<code>{command.clone()}</code>" → "{exit_code.map_or("killed".to_string(), |c| format!("exit {c}"))}</summary>
                <pre>{output.clone()}</pre></details>
            </li>
        }
        .into_any(),
        EventKind::TurnEnded { outcome, .. } => {
            let class = match outcome {
                TurnOutcome::Completed => "ev turn ok",
                TurnOutcome::Stopped => "ev turn off",
                _ => "ev turn bad",
            };
            view! { <li class=class data-seq=seq>{e.kind.summary()}</li> }.into_any()
        }
        EventKind::ChildSpawned { child_id, title, .. } => view! {
            <li class="ev child" data-seq=seq>"child session: "<a href=format!("/sessions/{child_id}")>{title.clone()}</a></li>
        }
        .into_any(),
        EventKind::Attachment { artifact, name, content_type, .. } if content_type.starts_with("image/") => {
            let src = api::artifact_url(e.session_id, *artifact);
            let href = src.clone();
            view! {
                <li class="ev attachment" data-seq=seq>
                    <a href=href target="_blank"><img src=src alt=name.clone() loading="lazy" /></a>
                    <span class="muted">{name.clone()}</span>
                </li>
            }
            .into_any()
        }
        EventKind::PrOpened { number, url, opened_by, .. } => view! {
            <li class="ev pr" data-seq=seq>"pull request "<a href=url.clone() target="_blank" rel="noopener">{format!("#{number}")}</a>" opened by "{opened_by.clone()}</li>
        }
        .into_any(),
        EventKind::Waiting { problem } => view! {
            <li class="ev warn waiting" data-seq=seq role="status">
                <strong>"Waiting: "</strong>{problem.message.clone()}
                <span class="fix">" — "{problem.fix.clone()}</span>
            </li>
        }.into_any(),
        EventKind::Error { message } => view! { <li class="ev bad" data-seq=seq role="alert">{message.clone()}</li> }.into_any(),
        EventKind::LimitReached { limit } => view! {
            <li class="ev bad limit" data-seq=seq role="alert">
                {format!("Stopped at {}: {} used. ", limit.which(), limit.amount())}
                <span class="muted">"An admin raises budgets on the settings page; daily budgets start again at midnight UTC."</span>
            </li>
        }.into_any(),
        EventKind::FileChanged { path, .. } if answers.is_some_and(|a| a.open_file.is_some()) => {
            let open = answers.and_then(|a| a.open_file);
            let p = path.clone();
            view! {
                <li class="ev meta" data-seq=seq>{e.kind.summary()}" "
                    <button class="link" data-open=path.clone() on:click=move |_| if let Some(o) = open { o.run(p.clone()) }>"open"</button>
                </li>
            }.into_any()
        }
        _ => view! { <li class="ev meta" data-seq=seq>{e.kind.summary()}</li> }.into_any(),
    };
    Some(v)
}

/// The text streaming in right now (deltas after the last whole message or turn end).
fn streaming(events: &[Event]) -> String {
    let mut text = String::new();
    for e in events {
        match &e.kind {
            EventKind::AgentDelta { text: t, .. } => text.push_str(t),
            EventKind::AgentMessage { .. }
            | EventKind::TurnEnded { .. }
            | EventKind::ToolCall { .. } => text.clear(),
            _ => {}
        }
    }
    text
}

#[component]
pub fn Timeline(
    events: RwSignal<Vec<Event>>,
    #[prop(optional)] compact: bool,
    /// Approval cards answer through this; without it they only show.
    #[prop(optional)]
    answers: Option<Answers>,
) -> impl IntoView {
    let list = NodeRef::<leptos::html::Ol>::new();
    // Follow the newest event.
    Effect::new(move |_| {
        events.track();
        if let Some(el) = list.get() {
            request_animation_frame(move || el.set_scroll_top(el.scroll_height()));
        }
    });
    view! {
        <ol class=if compact { "timeline compact" } else { "timeline" } id="timeline" aria-live="polite" node_ref=list>
            <For each=move || events.get() key=|e| e.seq let:e>
                {item(&e, events, answers)}
            </For>
            {move || {
                let t = events.with(|e| streaming(e));
                (!t.is_empty()).then(|| view! { <li class="ev agent streaming"><span class="who">"agent"</span><div class="md">{t}</div></li> })
            }}
        </ol>
    }
}
