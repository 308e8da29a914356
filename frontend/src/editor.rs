//! Bindings to the shared editor (`frontend/editor`: CodeMirror 6, yjs and y-codemirror.next
//! bundled by esbuild, loaded by `index.html` as a global `TandemEditor`).

use wasm_bindgen::prelude::*;

#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(js_name = TandemEditor)]
    type Api;

    #[wasm_bindgen(static_method_of = Api, js_class = "TandemEditor", js_name = open)]
    fn open(parent: &web_sys::HtmlElement, options: &JsValue) -> Handle;

    /// One open editor.
    pub type Handle;

    #[wasm_bindgen(method, js_name = applyUpdate)]
    fn apply_update(this: &Handle, u: &js_sys::Uint8Array);

    #[wasm_bindgen(method, js_name = applyAwareness)]
    fn apply_awareness(this: &Handle, u: &js_sys::Uint8Array);

    #[wasm_bindgen(method, js_name = setReadOnly)]
    fn set_read_only(this: &Handle, read_only: bool);

    #[wasm_bindgen(method, js_name = gotoLine)]
    fn goto_line(this: &Handle, line: u32);

    #[wasm_bindgen(method, js_name = missingFrom)]
    fn missing_from(this: &Handle, u: &js_sys::Uint8Array) -> js_sys::Uint8Array;

    #[wasm_bindgen(method)]
    fn destroy(this: &Handle);
}

/// What the editor calls with an update or a cursor move.
type Callback = Closure<dyn FnMut(js_sys::Uint8Array)>;

/// An editor on one file, with the callbacks it sends through.
pub struct Editor {
    handle: Handle,
    _callbacks: (Callback, Callback),
}

impl Editor {
    /// Opens an editor of `path` in `parent`; local edits and cursor moves go to `on_update`
    /// and `on_awareness`.
    pub fn open(
        parent: &web_sys::HtmlElement,
        path: &str,
        name: &str,
        colour: &str,
        read_only: bool,
        on_update: impl FnMut(Vec<u8>) + 'static,
        on_awareness: impl FnMut(Vec<u8>) + 'static,
    ) -> Editor {
        let wrap = |mut f: Box<dyn FnMut(Vec<u8>)>| {
            Closure::<dyn FnMut(js_sys::Uint8Array)>::new(
                move |u: js_sys::Uint8Array| f(u.to_vec()),
            )
        };
        let update = wrap(Box::new(on_update));
        let awareness = wrap(Box::new(on_awareness));
        let o = js_sys::Object::new();
        let set = |k: &str, v: &JsValue| {
            let _ = js_sys::Reflect::set(&o, &k.into(), v);
        };
        set("path", &path.into());
        set("name", &name.into());
        set("colour", &colour.into());
        set("readOnly", &read_only.into());
        set("onUpdate", update.as_ref());
        set("onAwareness", awareness.as_ref());
        Editor {
            handle: Api::open(parent, &o),
            _callbacks: (update, awareness),
        }
    }

    pub fn apply_update(&self, u: &[u8]) {
        self.handle.apply_update(&js_sys::Uint8Array::from(u));
    }

    pub fn apply_awareness(&self, u: &[u8]) {
        self.handle.apply_awareness(&js_sys::Uint8Array::from(u));
    }

    pub fn set_read_only(&self, read_only: bool) {
        self.handle.set_read_only(read_only);
    }

    pub fn goto_line(&self, line: u32) {
        self.handle.goto_line(line);
    }

    /// What this editor has that the server's whole-document state `u` lacks.
    pub fn missing_from(&self, u: &[u8]) -> Vec<u8> {
        self.handle
            .missing_from(&js_sys::Uint8Array::from(u))
            .to_vec()
    }
}

impl Drop for Editor {
    fn drop(&mut self) {
        self.handle.destroy();
    }
}
