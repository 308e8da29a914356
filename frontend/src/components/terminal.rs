//! A session terminal: an xterm.js screen fed by the live channel; keys go back to it unless
//! the participant may not type (then the screen is read-only).

use leptos::html::Div;
use leptos::prelude::*;
use wasm_bindgen::prelude::*;

use tandem_protocol::live::WsClient;

use crate::live::Live;
use crate::xterm::XTerm;

#[component]
pub fn TerminalPane(
    live: Live,
    id: u32,
    cols: u16,
    rows: u16,
    read_only: Signal<bool>,
) -> impl IntoView {
    let host = NodeRef::<Div>::new();
    let l = live.clone();
    host.on_load(move |el| {
        let x = XTerm::create(cols, rows, read_only.get_untracked());
        x.open(&el);
        let typing = l.clone();
        let on_data =
            Closure::<dyn FnMut(String)>::new(move |s: String| typing.input(id, s.as_bytes()));
        x.on_data(&on_data);
        on_data.forget();
        l.attach(id, x);
    });
    let l = live.clone();
    Effect::new(move |_| {
        let ro = read_only.get();
        l.set_read_only(id, ro);
    });
    // The screen follows the size the server settled on (the smallest among drivers).
    let l = live.clone();
    let size = Memo::new(move |_| {
        l.state
            .terminals
            .with(|ts| ts.iter().find(|t| t.id == id).map(|t| (t.cols, t.rows)))
    });
    let l = live.clone();
    Effect::new(move |_| {
        if let Some((c, r)) = size.get() {
            l.resize_view(id, c, r);
        }
    });
    // A driver asks for as many columns as its pane holds, so the screen fits without a
    // scrollbar; again when the window changes size.
    let l = live.clone();
    let fit = move || {
        if read_only.get_untracked() {
            return;
        }
        let Some(el) = host.get_untracked() else {
            return;
        };
        let Some((cols, rows)) = size.get_untracked() else {
            return;
        };
        if let Some(fitted) = fitted_cols(&el, cols)
            && fitted != cols
        {
            l.send(&WsClient::Resize {
                terminal: id,
                cols: fitted,
                rows,
            });
        }
    };
    let first_fit = fit.clone();
    Effect::new(move |prev: Option<bool>| {
        // Once, as soon as the screen and its size are there.
        if prev == Some(true) {
            return true;
        }
        if size.get().is_some() && host.get().is_some() {
            first_fit();
            return true;
        }
        false
    });
    let on_resize = window_event_listener(leptos::ev::resize, move |_| fit());
    let l = live.clone();
    on_cleanup(move || {
        on_resize.remove();
        l.detach(id);
    });
    view! { <div class="terminal" node_ref=host data-terminal=id></div> }
}

/// The columns the pane `el` holds at the cell width xterm.js measured for `cols` columns;
/// `None` while the pane is hidden or not laid out.
fn fitted_cols(el: &web_sys::HtmlDivElement, cols: u16) -> Option<u16> {
    let screen: web_sys::HtmlElement = el
        .query_selector(".xterm-screen")
        .ok()
        .flatten()?
        .dyn_into()
        .ok()?;
    let cell = f64::from(screen.offset_width()) / f64::from(cols.max(1));
    // The pane's inner width less xterm's own scrollbar.
    let avail = f64::from(el.client_width()) - PADDING_PX - SCROLLBAR_PX;
    if cell <= 0.0 || avail <= 0.0 {
        return None;
    }
    Some(((avail / cell).floor() as u16).clamp(MIN_COLS, MAX_COLS))
}

/// `.terminal`'s horizontal padding (both sides), from `style.css`.
const PADDING_PX: f64 = 8.0;
/// Room for xterm.js's vertical scrollbar.
const SCROLLBAR_PX: f64 = 16.0;
const MIN_COLS: u16 = 20;
const MAX_COLS: u16 = 400;
