//! `/embed/sessions/:id`: one session's timeline and prompt box in a narrow layout (the Chrome
//! extension's side panel).

use leptos::prelude::*;
use leptos_router::hooks::use_params_map;
use tandem_protocol::SessionId;
use tandem_protocol::live::Role;

use crate::components::no_access::{Missing, NoAccess};
use crate::components::prompt_box::PromptBox;
use crate::components::spend::SpendLine;
use crate::components::timeline::Timeline;
use crate::live::{Live, Status};
use crate::pages::session::guest_for;

#[component]
pub fn Embed() -> impl IntoView {
    let params = use_params_map();
    let Some(id) = params
        .read_untracked()
        .get("id")
        .and_then(|s| s.parse::<SessionId>().ok())
    else {
        return view! { <p class="error">"That is not a session address."</p> }.into_any();
    };
    let live = Live::open(id, guest_for(id));
    let l = live.clone();
    on_cleanup(move || l.close());
    let s = live.state;
    let can_drive = Signal::derive(move || s.me.get().is_some_and(|m| m.role >= Role::Driver));
    let for_answers = live.clone();
    let answers = crate::components::timeline::Answers {
        send: Callback::new(move |m: tandem_protocol::live::WsClient| for_answers.send(&m)),
        can_drive,
        open_file: None,
    };
    view! {
        <main class="embed">
            <header class="embed-head">
                <a href=format!("/sessions/{id}") target="_blank">{move || s.session.get().map(|x| x.title).unwrap_or_else(|| "Session".into())}</a>
                {move || matches!(s.status.get(), Status::Reconnecting).then(|| view! { <span class="muted">" reconnecting…"</span> })}
            </header>
            <SpendLine session=id events=s.events />
            <Show when=move || s.status.get() == Status::NotFound>
                <NoAccess what=Missing::Session />
            </Show>
            <Timeline events=s.events compact=true answers />
            <PromptBox live=live.clone() session=id can_drive signed_in=Signal::derive(|| true) />
        </main>
    }
    .into_any()
}
