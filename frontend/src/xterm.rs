//! Bindings to xterm.js (npm `@xterm/xterm`, loaded by `index.html` as a global `Terminal`).

use wasm_bindgen::prelude::*;

#[wasm_bindgen]
extern "C" {
    /// An xterm.js terminal.
    #[wasm_bindgen(js_name = Terminal)]
    pub type XTerm;

    #[wasm_bindgen(constructor, js_class = "Terminal")]
    pub fn new(options: &JsValue) -> XTerm;

    #[wasm_bindgen(method)]
    pub fn open(this: &XTerm, parent: &web_sys::HtmlElement);

    #[wasm_bindgen(method)]
    pub fn write(this: &XTerm, data: &js_sys::Uint8Array);

    #[wasm_bindgen(method)]
    pub fn reset(this: &XTerm);

    #[wasm_bindgen(method)]
    pub fn resize(this: &XTerm, cols: u16, rows: u16);

    #[wasm_bindgen(method)]
    pub fn dispose(this: &XTerm);

    #[wasm_bindgen(method, js_name = onData)]
    pub fn on_data(this: &XTerm, cb: &Closure<dyn FnMut(String)>) -> JsValue;

    #[wasm_bindgen(method, getter)]
    pub fn options(this: &XTerm) -> JsValue;
}

impl XTerm {
    /// A terminal of `cols`×`rows`; `read_only` ignores the keyboard.
    pub fn create(cols: u16, rows: u16, read_only: bool) -> XTerm {
        let o = js_sys::Object::new();
        let set = |k: &str, v: JsValue| {
            let _ = js_sys::Reflect::set(&o, &k.into(), &v);
        };
        set("cols", cols.into());
        set("rows", rows.into());
        set("disableStdin", read_only.into());
        set("convertEol", false.into());
        set("fontSize", 13.into());
        set("scrollback", 5000.into());
        XTerm::new(&o)
    }

    /// Writes raw terminal bytes.
    pub fn write_bytes(&self, bytes: &[u8]) {
        self.write(&js_sys::Uint8Array::from(bytes));
    }

    /// Turns keyboard input off (viewers) or on.
    pub fn set_read_only(&self, read_only: bool) {
        let _ = js_sys::Reflect::set(&self.options(), &"disableStdin".into(), &read_only.into());
    }
}
