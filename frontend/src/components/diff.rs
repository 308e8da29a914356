//! The diff view: files changed, then the patch, unified or side by side.

use leptos::prelude::*;
use leptos::task::spawn_local;
use tandem_protocol::{Diff, SessionId};

use crate::api;

fn line_class(l: &str) -> &'static str {
    if l.starts_with("+++")
        || l.starts_with("---")
        || l.starts_with("diff ")
        || l.starts_with("index ")
    {
        "dl meta"
    } else if l.starts_with('+') {
        "dl add"
    } else if l.starts_with('-') {
        "dl del"
    } else if l.starts_with("@@") {
        "dl hunk"
    } else {
        "dl"
    }
}

/// Pairs removed and added lines of each hunk for a side-by-side view.
fn side_by_side(patch: &str) -> Vec<(String, String, &'static str)> {
    let mut rows = Vec::new();
    let (mut dels, mut adds): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
    let flush = |rows: &mut Vec<(String, String, &'static str)>,
                 dels: &mut Vec<String>,
                 adds: &mut Vec<String>| {
        for i in 0..dels.len().max(adds.len()) {
            rows.push((
                dels.get(i).cloned().unwrap_or_default(),
                adds.get(i).cloned().unwrap_or_default(),
                "change",
            ));
        }
        dels.clear();
        adds.clear();
    };
    for l in patch.lines() {
        if l.starts_with("+++") || l.starts_with("---") {
            continue;
        } else if let Some(a) = l.strip_prefix('+') {
            adds.push(a.to_string());
        } else if let Some(d) = l.strip_prefix('-') {
            dels.push(d.to_string());
        } else {
            flush(&mut rows, &mut dels, &mut adds);
            let kind = if l.starts_with("diff ") || l.starts_with("@@") {
                "meta"
            } else {
                "same"
            };
            let text = l.strip_prefix(' ').unwrap_or(l).to_string();
            rows.push((text.clone(), text, kind));
        }
    }
    flush(&mut rows, &mut dels, &mut adds);
    rows
}

/// The first changed line of `file` in the new version, from the patch's hunk headers.
fn first_line(patch: &str, file: &str) -> u32 {
    let mut inside = false;
    for l in patch.lines() {
        if let Some(p) = l.strip_prefix("+++ ") {
            inside = p.strip_prefix("b/").unwrap_or(p) == file;
        } else if inside && let Some(h) = l.strip_prefix("@@ ") {
            let plus = h.split(' ').find_map(|w| w.strip_prefix('+'));
            if let Some(n) = plus.and_then(|w| w.split(',').next()?.parse().ok()) {
                return n;
            }
        }
    }
    1
}

#[component]
pub fn DiffView(
    session: SessionId,
    refresh: Signal<usize>,
    /// Where "open" sends a changed file (the Files pane, at its first change).
    open_at: RwSignal<Option<(String, u32)>>,
) -> impl IntoView {
    let diff = RwSignal::new(None::<Result<Diff, String>>);
    let split = RwSignal::new(false);
    Effect::new(move |_| {
        refresh.get();
        spawn_local(async move {
            diff.set(Some(
                api::get::<Diff>(&format!("/api/sessions/{session}/diff"))
                    .await
                    .map_err(|e| e.message),
            ));
        });
    });
    view! {
        <div class="diff" id="diff">
            <p class="row">
                <button class="link" on:click=move |_| split.set(false)>"Unified"</button>
                <button class="link" on:click=move |_| split.set(true)>"Side by side"</button>
            </p>
            {move || match diff.get() {
                None => view! { <p class="muted">"Loading the diff…"</p> }.into_any(),
                Some(Err(e)) => view! { <p class="muted">{e}</p> }.into_any(),
                Some(Ok(d)) if d.files.is_empty() => view! { <p class="muted" id="diff-empty">"No changes yet."</p> }.into_any(),
                Some(Ok(d)) => {
                    let files = d.files.clone();
                    let body = if split.get() {
                        view! {
                            <table class="split">{side_by_side(&d.patch).into_iter().map(|(a, b, k)| view! { <tr class=k><td>{a}</td><td>{b}</td></tr> }).collect_view()}</table>
                        }.into_any()
                    } else {
                        view! { <pre class="patch">{d.patch.lines().map(|l| view! { <div class=line_class(l)>{l.to_string()}</div> }).collect_view()}</pre> }.into_any()
                    };
                    view! {
                        <ul class="files" id="diff-files">{files.into_iter().map(|f| {
                            let line = first_line(&d.patch, &f);
                            let path = f.clone();
                            view! { <li>{f}" "<button class="link" data-open=path.clone() on:click=move |_| open_at.set(Some((path.clone(), line)))>"open"</button></li> }
                        }).collect_view()}</ul>
                        {body}
                    }.into_any()
                }
            }}
        </div>
    }
}
