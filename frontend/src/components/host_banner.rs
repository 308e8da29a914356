//! Why sessions cannot start on this server (from `/api/health`), with what to do, and what is
//! unsafe in how it is set up (a same-site `code_url`): the banner on the dashboard and the list
//! on the settings page.

use leptos::prelude::*;
use tandem_protocol::{Health, Problem, ProblemKind};

/// Each problem with its fix; admins get a link to Settings for what is set there.
#[component]
pub fn Problems(
    problems: Vec<Problem>,
    /// Link model problems to the Settings page (not on that page itself).
    #[prop(optional)]
    no_settings_link: bool,
) -> impl IntoView {
    view! {
        <ul class="problems">
            {problems.into_iter().map(|p| {
                let settings = p.kind == ProblemKind::Model && !no_settings_link;
                view! {
                    <li class="problem" data-kind=format!("{:?}", p.kind).to_lowercase()>
                        <strong>{p.message}</strong>
                        <span class="fix">" — "{p.fix}</span>
                        {settings.then(|| view! { " " <a href="/settings" class="fix-link">"Open Settings"</a> })}
                    </li>
                }
            }).collect_view()}
        </ul>
    }
}

/// The dashboard's banner: shown while this server cannot start sessions or run the default
/// agent; re-read whenever `tick` changes.
#[component]
pub fn HostBanner(tick: ReadSignal<u32>) -> impl IntoView {
    let health = LocalResource::new(move || {
        tick.get();
        async move { crate::api::get::<Health>("/api/health").await.ok() }
    });
    move || {
        let h = health.get().flatten()?;
        if h.workspaces.ready && h.warnings.is_empty() {
            return None;
        }
        let blocks = h.workspaces.problems.iter().any(|p| p.kind.blocks_start());
        let not_ready = (!h.workspaces.ready).then(|| view! {
            <section class="banner warn host-banner" id="host-banner" role="alert">
                <p><strong>{if blocks { "Sessions cannot start on this server yet." } else { "Sessions start, but their agent cannot run yet." }}</strong>
                    " New and queued sessions wait and start by themselves once this is fixed."</p>
                <Problems problems=h.workspaces.problems.clone() />
            </section>
        });
        let unsafe_setup = (!h.warnings.is_empty()).then(|| {
            view! {
                <section class="banner warn host-banner" id="host-warnings" role="alert">
                    <p><strong>"This server is set up unsafely."</strong></p>
                    <Problems problems=h.warnings.clone() />
                </section>
            }
        });
        Some(view! { {not_ready} {unsafe_setup} })
    }
}
