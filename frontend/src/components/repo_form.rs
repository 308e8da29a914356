//! "Add a repo" form.

use leptos::prelude::*;
use leptos::task::spawn_local;
use tandem_protocol::{ApiError, CreateRepo, Repo};

use crate::api;
use crate::components::error_box::ErrorBox;

#[component]
pub fn RepoForm(on_added: Callback<Repo>) -> impl IntoView {
    let (name, set_name) = signal(String::new());
    let (url, set_url) = signal(String::new());
    let (error, set_error) = signal(None::<ApiError>);
    let (busy, set_busy) = signal(false);
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        set_busy.set(true);
        let req = CreateRepo {
            name: name.get_untracked(),
            url: url.get_untracked(),
            default_branch: None,
            warm_pool: None,
        };
        spawn_local(async move {
            match api::post::<_, Repo>("/api/repos", &req).await {
                Ok(repo) => {
                    set_error.set(None);
                    set_name.set(String::new());
                    set_url.set(String::new());
                    on_added.run(repo);
                }
                Err(e) => set_error.set(Some(e)),
            }
            set_busy.set(false);
        });
    };
    view! {
        <form class="inline-form" on:submit=submit>
            <label>"Name"
                <input id="repo-name" placeholder="acme/web" required
                    prop:value=name on:input=move |ev| set_name.set(event_target_value(&ev)) />
            </label>
            <label class="grow">"Git URL"
                <input id="repo-url" placeholder="https://github.com/acme/web.git" required
                    prop:value=url on:input=move |ev| set_url.set(event_target_value(&ev)) />
            </label>
            <button id="repo-submit" type="submit" disabled=busy>"Add repo"</button>
        </form>
        <ErrorBox error />
    }
}
