//! The settings page's "Local repos" part: the directories under which an admin may add a repo
//! by its local path (for trying Tandem without a git host), with what allowing one means. A
//! list `tandem.toml` sets wins and is shown read-only.

use leptos::prelude::*;
use leptos::task::spawn_local;
use tandem_protocol::{ApiError, SettingSource, Settings, UpdateSettings};

use crate::api;
use crate::components::error_box::ErrorBox;

#[component]
pub fn LocalRepoDirs(
    s: Settings,
    current: ReadSignal<Option<Settings>>,
    on_saved: Callback<Settings>,
) -> impl IntoView {
    let locked = s.local_repo_dirs.source == SettingSource::File;
    let dirs = RwSignal::new(s.local_repo_dirs.value.join("\n"));
    let error = RwSignal::new(None::<ApiError>);
    let saved = RwSignal::new(false);
    let source = move || {
        let (class, text) = match current.with(|c| {
            c.as_ref()
                .map(|c| c.local_repo_dirs.source)
                .unwrap_or(SettingSource::Default)
        }) {
            SettingSource::File => ("source file", "from tandem.toml (change it there)"),
            SettingSource::Settings => ("source page", "set here"),
            SettingSource::Default => ("source default", "none allowed"),
        };
        view! { <span class=class id="local-dirs-source">{text}</span> }
    };
    let save = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        saved.set(false);
        let list: Vec<String> = dirs
            .get_untracked()
            .lines()
            .map(|l| l.trim().to_string())
            .filter(|l| !l.is_empty())
            .collect();
        let req = UpdateSettings {
            local_repo_dirs: Some(list),
            ..Default::default()
        };
        spawn_local(async move {
            match api::put::<_, Settings>("/api/settings", &req).await {
                Ok(n) => {
                    error.set(None);
                    dirs.set(n.local_repo_dirs.value.join("\n"));
                    saved.set(true);
                    on_saved.run(n);
                }
                Err(e) => error.set(Some(e)),
            }
        });
    };
    view! {
        <details class="local-dirs" id="local-dirs" open=!s.local_repo_dirs.value.is_empty()>
            <summary>"Local repos (for trying Tandem) " {source}</summary>
            <p class="muted">
                "A repo may be a path on this server (or a file:// URL) only under a directory listed here. "
                <strong>"The server's git reads these directories as root"</strong>
                ": any git repository under them can be added as a repo, and its sessions' agents read all of it. List only directories that hold repos you mean to share."
            </p>
            <form class="stacked-form" on:submit=save>
                <label>"Directories, one a line"
                    <textarea id="setting-local-dirs" rows="2" placeholder="/srv/repos" disabled=locked
                        prop:value=dirs on:input=move |ev| dirs.set(event_target_value(&ev))></textarea>
                </label>
                <div class="row">
                    <button type="submit" id="setting-local-dirs-save" disabled=locked>"Allow these directories"</button>
                    {move || saved.get().then(|| view! { <span class="ok" id="local-dirs-saved">"Saved."</span> })}
                </div>
            </form>
            <ErrorBox error=error.read_only() />
        </details>
    }
}
