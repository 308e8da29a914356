//! "This session does not exist, or you do not have access to it": the one answer for what is
//! missing and what is hidden (the server answers 404 for both, so the page cannot tell them
//! apart either), with the admins' names to ask.

use leptos::prelude::*;
use leptos::task::spawn_local;

use crate::api;
use crate::format::ask_an_admin;

/// What could not be found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Missing {
    Session,
    Repo,
}

/// The admins' names, once read (none while loading, or when the server would not say: a
/// guest is not signed in).
pub fn admin_names() -> RwSignal<Option<Vec<String>>> {
    let admins = RwSignal::new(None::<Vec<String>>);
    spawn_local(async move {
        match api::get::<Vec<String>>("/api/people/admins").await {
            Ok(a) => admins.set(Some(a)),
            Err(e) => leptos::logging::warn!("reading the admins' names: {}", e.message),
        }
    });
    admins
}

/// The sentence, whole, so it is one text node.
fn sentence(what: Missing, admins: Option<&[String]>) -> String {
    let ask = ask_an_admin(admins);
    match what {
        Missing::Session => format!(
            "This session does not exist, or you do not have access to it. {ask} or the person who shared it with you."
        ),
        Missing::Repo => {
            format!("This repo does not exist, or you do not have access to it. {ask} for access.")
        }
    }
}

#[component]
pub fn NoAccess(what: Missing) -> impl IntoView {
    let admins = admin_names();
    view! {
        <div class="no-access" role="alert">
            <p class="no-access-message">{move || admins.with(|a| sentence(what, a.as_deref()))}</p>
        </div>
    }
}
