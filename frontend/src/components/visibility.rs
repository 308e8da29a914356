//! A session's visibility: the owner's "private" switch (only the owner and the people they
//! share it with see a private session), and the badge everyone who sees it gets.

use leptos::html::Input;
use leptos::prelude::*;
use leptos::task::spawn_local;
use tandem_protocol::people::SessionVisibility;
use tandem_protocol::{ApiError, Session, SessionId};

use crate::api;
use crate::components::error_box::ErrorBox;

/// "private", shown to everyone who sees the session.
#[component]
pub fn PrivateBadge(private: Signal<bool>) -> impl IntoView {
    move || {
        private.get().then(|| view! {
            <span class="badge badge-off" id="session-private-badge"
                title="Only its owner and the people they shared it with see this session">"private"</span>
        })
    }
}

/// The owner's switch.
#[component]
pub fn PrivateToggle(
    session: SessionId,
    private: Signal<bool>,
    on_changed: Callback<Session>,
) -> impl IntoView {
    let error = RwSignal::new(None::<ApiError>);
    let busy = RwSignal::new(false);
    let input = NodeRef::<Input>::new();
    let toggle = move |ev: leptos::ev::Event| {
        let want = event_target_checked(&ev);
        busy.set(true);
        spawn_local(async move {
            let req = SessionVisibility { private: want };
            match api::put::<_, Session>(&format!("/api/sessions/{session}/visibility"), &req).await
            {
                Ok(s) => {
                    error.set(None);
                    on_changed.run(s);
                }
                Err(e) => {
                    // The switch shows what is, not what was asked for.
                    if let Some(i) = input.get_untracked() {
                        i.set_checked(!want);
                    }
                    let what = if want {
                        "Making the session private"
                    } else {
                        "Making the session visible to everyone who may use its repo"
                    };
                    error.set(Some(api::failed(what, e)));
                }
            }
            busy.set(false);
        });
    };
    view! {
        <div class="visibility" id="visibility">
            <label>
                <input type="checkbox" id="session-private" node_ref=input disabled=busy
                    prop:checked=move || private.get() on:change=toggle />
                " Private — only you and the people you share it with"
            </label>
            {move || (!private.get()).then(|| view! {
                <span class="muted small">" (now everyone who may use its repo sees it)"</span>
            })}
            <ErrorBox error=error.read_only() />
        </div>
    }
}
