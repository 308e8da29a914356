//! The VS Code pane: the server says where this session's VS Code opens for this person — its
//! own origin, with a ticket for this person and session in the URL — and the pane frames it.

use leptos::prelude::*;
use leptos::task::spawn_local;
use tandem_protocol::{CodeLink, SessionId};

use crate::api;

#[component]
pub fn CodePane(session: SessionId) -> impl IntoView {
    let link = RwSignal::new(None::<Result<CodeLink, String>>);
    // A guest asks with the share link they joined through, as on the live channel.
    let guest = crate::pages::session::guest_for(session);
    let mut query = Vec::new();
    if let Some(s) = &guest.share {
        query.push(format!("share={}", js_sys::encode_uri_component(s)));
    }
    if let Some(n) = &guest.name {
        query.push(format!("name={}", js_sys::encode_uri_component(n)));
    }
    let path = if query.is_empty() {
        format!("/api/sessions/{session}/code")
    } else {
        format!("/api/sessions/{session}/code?{}", query.join("&"))
    };
    spawn_local(async move {
        link.set(Some(
            api::post::<_, CodeLink>(&path, &())
                .await
                .map_err(|e| e.message),
        ));
    });
    move || match link.get() {
        None => view! { <p class="muted">"Opening VS Code…"</p> }.into_any(),
        Some(Err(e)) => view! { <p class="muted" id="code-error">{e}</p> }.into_any(),
        Some(Ok(l)) => view! {
            <iframe class="code" id="code-frame" title="VS Code" src=l.url
                allow="clipboard-read; clipboard-write"
                data-isolated=l.isolated.to_string()></iframe>
        }
        .into_any(),
    }
}
