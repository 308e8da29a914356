//! A session terminal: an xterm.js screen fed by the live channel; keys go back to it unless
//! the participant may not type (then the screen is read-only).

use leptos::html::Div;
use leptos::prelude::*;
use wasm_bindgen::prelude::*;

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
    let l = live.clone();
    on_cleanup(move || l.detach(id));
    view! { <div class="terminal" node_ref=host data-terminal=id></div> }
}
