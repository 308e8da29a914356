//! Unknown routes.

use leptos::prelude::*;

#[component]
pub fn NotFound() -> impl IntoView {
    view! { <main class="page"><h1>"Not found"</h1><p><a href="/">"Back to the dashboard"</a></p></main> }
}
