//! The Tandem web app: a Leptos client-side-rendered single-page app compiled to wasm32. All
//! wire types come from `tandem-protocol`; all data comes from the server's REST API.
#![forbid(unsafe_code)]

mod api;
mod app;
mod components;
mod desktop;
mod editor;
mod format;
mod live;
mod pages;
mod xterm;

use wasm_bindgen::prelude::wasm_bindgen;

/// Entry point, called by the generated JS loader.
#[wasm_bindgen(start)]
pub fn start() {
    console_error_panic_hook::set_once();
    leptos::mount::mount_to_body(app::App);
}
