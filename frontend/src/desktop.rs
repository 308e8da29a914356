//! Bindings to `static/desktop.js` (the desktop pane's WebRTC client, a global `TandemDesktop`).

use wasm_bindgen::prelude::*;

#[wasm_bindgen]
extern "C" {
    /// A running desktop view.
    pub type DesktopView;

    #[wasm_bindgen(js_namespace = TandemDesktop, js_name = start)]
    pub fn start_desktop(
        video: &web_sys::HtmlVideoElement,
        send: &Closure<dyn FnMut(String)>,
    ) -> DesktopView;

    #[wasm_bindgen(method)]
    pub fn answer(this: &DesktopView, sdp: &str);

    #[wasm_bindgen(method)]
    pub fn close(this: &DesktopView);
}

#[wasm_bindgen]
extern "C" {
    /// A running VNC view (noVNC).
    pub type VncView;

    #[wasm_bindgen(js_namespace = TandemVnc, js_name = start)]
    pub fn start_vnc(el: &web_sys::HtmlElement, url: &str, view_only: bool) -> VncView;

    #[wasm_bindgen(method)]
    pub fn close(this: &VncView);
}
