//! The desktop pane: the workspace's screen (Chromium on a virtual display) streamed over
//! WebRTC; the participant in control uses it with mouse and keyboard, others watch (the
//! server refuses their input). Shows what the browser is on and lets drivers open a URL.

use leptos::html::Video;
use leptos::prelude::*;
use leptos::task::spawn_local;
use send_wrapper::SendWrapper;
use tandem_protocol::SessionId;
use tandem_protocol::agent::{DesktopOpen, DesktopPage};
use wasm_bindgen::prelude::*;

use crate::api;
use crate::desktop::{DesktopView, VncView, start_desktop, start_vnc};
use crate::live::Live;

/// The desktop over VNC (noVNC through the server's WebSocket), for networks where WebRTC's UDP
/// cannot reach this browser.
#[component]
fn VncPane(session: SessionId, can_control: Signal<bool>) -> impl IntoView {
    let host = NodeRef::<leptos::html::Div>::new();
    let view = StoredValue::new(None::<SendWrapper<VncView>>);
    host.on_load(move |el| {
        let loc = web_sys::window().map(|w| w.location());
        let h = loc.as_ref().and_then(|l| l.host().ok()).unwrap_or_default();
        let scheme = if loc.and_then(|l| l.protocol().ok()).as_deref() == Some("https:") {
            "wss"
        } else {
            "ws"
        };
        let url = format!("{scheme}://{h}/api/sessions/{session}/vnc");
        view.set_value(Some(SendWrapper::new(start_vnc(
            &el,
            &url,
            !can_control.get_untracked(),
        ))));
    });
    on_cleanup(move || {
        view.with_value(|v| {
            if let Some(v) = v {
                v.close();
            }
        })
    });
    view! { <div class="vnc" id="desktop-vnc" node_ref=host></div> }
}

#[component]
pub fn DesktopPane(live: Live, session: SessionId, can_control: Signal<bool>) -> impl IntoView {
    let vnc = RwSignal::new(false);
    let video = NodeRef::<Video>::new();
    let view_handle = StoredValue::new(None::<SendWrapper<DesktopView>>);
    let page = RwSignal::new(None::<DesktopPage>);
    let url = RwSignal::new(String::new());
    let error = RwSignal::new(None::<String>);
    // The stream plays: the desktop is up even if the page it shows is not known yet.
    let playing = RwSignal::new(false);
    let l = live.clone();
    video.on_load(move |el| {
        let sender = l.clone();
        let send = Closure::<dyn FnMut(String)>::new(move |text: String| sender.send_json(&text));
        let handle = start_desktop(&el, &send);
        send.forget();
        view_handle.set_value(Some(SendWrapper::new(handle)));
    });
    // The server's answer reaches the view.
    let answers = live.state.desktop_answer;
    Effect::new(move |_| {
        if let Some(sdp) = answers.get() {
            view_handle.with_value(|h| {
                if let Some(h) = h {
                    h.answer(&sdp);
                }
            });
        }
    });
    on_cleanup(move || {
        view_handle.with_value(|h| {
            if let Some(h) = h {
                h.close();
            }
        });
        answers.set(None);
    });
    let reload = move || {
        spawn_local(async move {
            if let Ok(p) =
                api::get::<DesktopPage>(&format!("/api/sessions/{session}/desktop")).await
            {
                page.set(Some(p));
            }
        })
    };
    reload();
    let open = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let req = DesktopOpen {
            url: url.get_untracked(),
        };
        spawn_local(async move {
            match api::post::<_, DesktopPage>(
                &format!("/api/sessions/{session}/desktop/open"),
                &req,
            )
            .await
            {
                Ok(p) => {
                    page.set(Some(p));
                    error.set(None);
                }
                Err(e) => error.set(Some(e.message)),
            }
        });
    };
    view! {
        <div class="desktop" id="desktop">
            <div class="row desktop-bar">
                <span class="muted" id="desktop-page">{move || match page.get().and_then(|p| p.title.zip(p.url)) {
                    Some((t, u)) => format!("{t} — {u}"),
                    None if playing.get() => "the desktop is live".into(),
                    None => "starting the desktop…".into(),
                }}</span>
                <label class="small"><input type="checkbox" id="desktop-use-vnc" prop:checked=move || vnc.get() on:change=move |ev| vnc.set(event_target_checked(&ev)) />" VNC (no UDP)"</label>
                {move || can_control.get().then(|| view! {
                    <form class="row" on:submit=open>
                        <input id="desktop-url" placeholder="http://127.0.0.1:3000/" prop:value=move || url.get() on:input=move |ev| url.set(event_target_value(&ev)) />
                        <button type="submit">"Open"</button>
                        <button type="button" class="link" on:click=move |_| reload()>"Refresh"</button>
                    </form>
                })}
            </div>
            {move || error.get().map(|e| view! { <p class="error" role="alert">{e}</p> })}
            <video node_ref=video id="desktop-video" tabindex="0" autoplay muted playsinline
                // What the browser shows is read again once the stream is up.
                on:playing=move |_| { playing.set(true); reload(); }
                class:hidden=move || vnc.get()
                class:controllable=move || can_control.get()></video>
            // Connected again whenever control comes or goes: the server decides at connection
            // whether it takes input (and closes an input-taking one when control moves).
            {move || vnc.get().then(|| {
                let _ = can_control.get();
                view! { <VncPane session can_control /> }
            })}
            {move || (!can_control.get()).then(|| view! { <p class="muted small">"You are watching; the participant in control uses the desktop."</p> })}
        </div>
    }
}
