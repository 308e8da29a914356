//! The Files pane: the workspace's tree (what git tracks plus new files; binary and large files
//! marked, not opened) and a shared editor on the file picked, where everyone in it types
//! together and sees the others' cursors. Viewers read.

use leptos::html::Div;
use leptos::prelude::*;
use tandem_protocol::agent::TreeEntry;
use tandem_protocol::live::{MAX_DOC_BYTES, WsClient};

use crate::live::Live;

/// Files listed at once; a filter finds the rest.
const SHOWN: usize = 400;

/// Why a file does not open here, if it does not.
fn closed_reason(f: &TreeEntry) -> Option<String> {
    if f.binary {
        Some("binary".into())
    } else if f.size > MAX_DOC_BYTES as u64 {
        Some(format!("{} KiB: too large to open here", f.size / 1024))
    } else {
        None
    }
}

#[component]
pub fn FilesPane(live: Live, open_at: RwSignal<Option<(String, u32)>>) -> impl IntoView {
    let s = live.state;
    let host = NodeRef::<Div>::new();
    let filter = RwSignal::new(String::new());
    // Asked for whenever the channel is open (a message sent before it opens is dropped).
    let ask = live.clone();
    Effect::new(move |_| {
        if s.status.get() == crate::live::Status::Open {
            ask.send(&WsClient::ListFiles);
        }
    });
    let l = live.clone();
    let open = move |path: String, line: Option<u32>| {
        if let Some(el) = host.get_untracked() {
            l.open_file(&el, &path, line);
        }
    };
    // Opened from elsewhere (the diff, a file named in the timeline): at its line.
    let from_elsewhere = open.clone();
    Effect::new(move |_| {
        if let (Some((path, line)), Some(_)) = (open_at.get(), host.get()) {
            open_at.set(None);
            from_elsewhere(path, Some(line));
        }
    });
    let shown = Memo::new(move |_| {
        let f = filter.get().to_lowercase();
        s.files.with(|t| {
            t.as_ref().map(|(files, truncated)| {
                let matching: Vec<TreeEntry> = files
                    .iter()
                    .filter(|e| f.is_empty() || e.path.to_lowercase().contains(&f))
                    .cloned()
                    .collect();
                (matching, *truncated)
            })
        })
    });
    let refresh = live.clone();
    let l = live.clone();
    on_cleanup(move || l.close_file());
    view! {
        <div class="files-pane" id="files">
            <div class="files-tree">
                <div class="files-tools">
                    <input type="search" id="files-filter" placeholder="Filter files"
                        on:input=move |e| filter.set(event_target_value(&e)) />
                    <button class="link" id="files-refresh" title="List the files again"
                        on:click=move |_| refresh.send(&WsClient::ListFiles)>"↻"</button>
                </div>
                {move || match shown.get() {
                    None => view! { <p class="muted">"Listing the workspace's files…"</p> }.into_any(),
                    Some((files, truncated)) => {
                        let more = files.len().saturating_sub(SHOWN);
                        let open = open.clone();
                        view! {
                            <ul class="files-list" id="files-list">
                                {files.into_iter().take(SHOWN).map(|f| {
                                    let path = f.path.clone();
                                    let why = closed_reason(&f);
                                    let open = open.clone();
                                    let current = {
                                        let p = path.clone();
                                        move || s.file.with(|o| o.as_ref().is_some_and(|o| o.path == p))
                                    };
                                    view! {
                                        <li>
                                            <button class="file" class:current=current data-path=path.clone()
                                                disabled=why.is_some() title=why.clone().unwrap_or_default()
                                                on:click=move |_| open(path.clone(), None)>
                                                {f.path.clone()}
                                            </button>
                                            {f.new.then(|| view! { <span class="badge">"new"</span> })}
                                            {why.map(|w| view! { <span class="muted">" "{w}</span> })}
                                        </li>
                                    }
                                }).collect_view()}
                            </ul>
                            {(more > 0).then(|| view! { <p class="muted">{format!("{more} more; filter to find them")}</p> })}
                            {truncated.then(|| view! { <p class="muted">"The workspace has more files than are listed here."</p> })}
                        }
                        .into_any()
                    }
                }}
            </div>
            <div class="files-editor">
                {move || s.file.get().map(|f| view! {
                    <p class="files-head">
                        <strong id="file-path">{f.path.clone()}</strong>
                        {(f.opened && f.read_only && f.gone.is_none()).then(|| view! { <span class="badge" id="file-read-only">" read-only"</span> })}
                        {(!f.opened).then(|| view! { <span class="muted">" opening…"</span> })}
                    </p>
                    {f.gone.map(|g| view! { <p class="banner warn" id="file-gone" role="status">{g}" — pick it again in the list once it is back."</p> })}
                })}
                {move || s.file.with(|f| f.is_none()).then(|| view! {
                    <p class="muted placeholder" id="files-none">"Pick a file: everyone in it edits together, and the agent's changes appear as it makes them."</p>
                })}
                <div class="editor" id="editor" node_ref=host></div>
            </div>
        </div>
    }
}
