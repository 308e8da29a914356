//! Shows an API error, or nothing.

use leptos::prelude::*;
use tandem_protocol::ApiError;

#[component]
pub fn ErrorBox(error: ReadSignal<Option<ApiError>>) -> impl IntoView {
    move || {
        error.get().map(|e| {
            view! { <p class="error" role="alert">{e.message}</p> }
        })
    }
}
