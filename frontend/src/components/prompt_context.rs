//! The page a prompt is about, as the Chrome extension sent it, under the prompt in the
//! timeline: a screenshot thumbnail, the page's URL and title, the picked element (selector,
//! components, outer HTML) and the console errors. All of it comes from a web page: text
//! nodes only, and the image only from the session's own artifact URL.

use leptos::prelude::*;
use tandem_protocol::SessionId;
use tandem_protocol::extension::{ContextImage, ElementContext, PromptContext, ScreenshotKind};

use crate::api;

/// The screenshot to show: the element's, else the whole view's.
fn thumbnail(shots: &[ContextImage]) -> Option<&ContextImage> {
    shots
        .iter()
        .find(|s| s.kind == ScreenshotKind::Element)
        .or_else(|| shots.iter().find(|s| s.kind == ScreenshotKind::View))
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[component]
fn Thumb(session: SessionId, shot: ContextImage) -> impl IntoView {
    let src = api::artifact_url(session, shot.artifact);
    let href = src.clone();
    let alt = match shot.kind {
        ScreenshotKind::Element => "a screenshot of the picked element",
        ScreenshotKind::View => "a screenshot of the page",
    };
    view! {
        <a class="context-shot" href=href target="_blank" rel="noopener" title="Open the whole screenshot">
            <img class="context-thumb" src=src alt=alt loading="lazy"
                width=shot.width.to_string() height=shot.height.to_string()
                data-kind=shot.kind.as_str() />
        </a>
    }
}

#[component]
fn Picked(element: ElementContext) -> impl IntoView {
    let cut = element.outer_html_cut.then(|| {
        view! {
            <p class="context-cut muted">
                {format!("HTML cut ({} of {} bytes)", element.outer_html.len(), element.outer_html_bytes)}
            </p>
        }
    });
    let components = (!element.components.is_empty()).then(|| {
        view! {
            <p class="context-components">"components: "<span class="mono">{element.components.join(" › ")}</span></p>
        }
    });
    view! {
        <p class="context-element">"element: "<code class="context-selector">{element.selector}</code></p>
        {components}
        {cut}
        <details class="context-html">
            <summary>"Outer HTML"</summary>
            <pre>{element.outer_html}</pre>
        </details>
    }
}

#[component]
fn ConsoleErrors(errors: Vec<String>) -> impl IntoView {
    (!errors.is_empty()).then(|| {
        view! {
            <details class="context-console">
                <summary>{plural(errors.len(), "console error", "console errors")}</summary>
                <ul>{errors.into_iter().map(|e| view! { <li><pre>{e}</pre></li> }).collect_view()}</ul>
            </details>
        }
    })
}

#[component]
pub fn PromptContextBlock(session: SessionId, context: PromptContext) -> impl IntoView {
    let PromptContext {
        url,
        title,
        element,
        screenshots,
        console_errors,
    } = context;
    let thumb = thumbnail(&screenshots)
        .cloned()
        .map(|shot| view! { <Thumb session shot /> });
    let title =
        (!title.trim().is_empty()).then(|| view! { <span class="context-title">{title}</span>" " });
    view! {
        <div class="prompt-context">
            {thumb}
            <div class="context-facts">
                <p class="context-page">"page: "{title}<span class="context-url mono">{url}</span></p>
                {element.map(|element| view! { <Picked element /> })}
                <ConsoleErrors errors=console_errors />
            </div>
        </div>
    }
}
