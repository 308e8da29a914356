//! `/extension`: how to install the Chrome extension made for this server (load the package
//! unpacked, then pair it at `/pair`), and the policy that installs it for a whole company.

use leptos::prelude::*;

use tandem_protocol::extension::Hello;

use crate::components::header::Header;
use crate::pages::maybe_user;

/// This server's address, as the browser sees it.
fn origin() -> String {
    web_sys::window()
        .and_then(|w| w.location().origin().ok())
        .unwrap_or_default()
}

/// The Chrome policy that force-installs the extension (`id`) from this server's update manifest.
fn policy(id: &str, origin: &str) -> String {
    let entry = format!("{id};{origin}/extension/updates.xml");
    serde_json::to_string_pretty(&serde_json::json!({ "ExtensionInstallForcelist": [entry] }))
        .unwrap_or_default()
}

#[component]
pub fn ExtensionPage() -> impl IntoView {
    let user = maybe_user();
    let origin = origin();
    // The id this server's signing key gives its extension (the same across updates).
    let (id, set_id) = signal(String::from("<EXTENSION_ID>"));
    leptos::task::spawn_local(async move {
        if let Ok(hello) = crate::api::get::<Hello>("/api/extension/hello").await
            && !hello.extension_id.is_empty()
        {
            set_id.set(hello.extension_id);
        }
    });
    let policy = {
        let origin = origin.clone();
        move || policy(&id.get(), &origin)
    };
    view! {
        <Header user=user.into() />
        <main class="page extension" id="extension">
            <h1>"The Chrome extension"</h1>
            <p class="muted">
                "Prompt an agent from any page: pick an element, and the extension sends the page's URL, the element's HTML and a screenshot with your prompt."
            </p>
            <section class="card" id="extension-install">
                <h2>"Install it"</h2>
                <ol class="steps">
                    <li>
                        "Download "<a id="extension-download" href="/extension/tandem.zip" download>"tandem.zip"</a>
                        " (made for this server) and unzip it."
                    </li>
                    <li>
                        "Open "<code>"chrome://extensions"</code>", turn on "<strong>"Developer mode"</strong>
                        " (top right), click "<strong>"Load unpacked"</strong>" and pick the unzipped folder."
                    </li>
                    <li>
                        "Click the Tandem button in the toolbar (pin it from the puzzle-piece menu) to open the side panel. The server address is filled in: "
                        <code id="extension-server">{origin}</code>
                        ". Connect, and the panel shows a code: approve it at "<a href="/pair">"/pair"</a>
                        ", signed in, in this browser."
                    </li>
                </ol>
            </section>
            <section class="card" id="extension-company">
                <h2>"For your whole company"</h2>
                <p>
                    "Chrome can install it for everyone, with the "<code>"ExtensionInstallForcelist"</code>
                    " policy (Google Admin console, group policy or managed preferences):"
                </p>
                <pre id="extension-policy" class="policy">{policy}</pre>
                <p class="muted small">
                    "The id comes from this server's own signing key (kept in its data directory), so updates keep it. A policy install asks for this server only; the picker and screenshots work on a page once the person clicks the Tandem button there."
                </p>
            </section>
        </main>
    }
}
