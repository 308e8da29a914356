//! The router and the page frame.

use leptos::prelude::*;
use leptos_router::components::{Route, Router, Routes};
use leptos_router::path;

use crate::pages::{
    automations::AutomationsPage, dashboard::Dashboard, embed::Embed, extension::ExtensionPage,
    insights::InsightsPage, invite::InvitePage, join::Join, login::Login, not_found::NotFound,
    pair::PairPage, people::PeoplePage, session::SessionPage, settings::SettingsPage,
};

#[component]
pub fn App() -> impl IntoView {
    view! {
        <Router>
            <Routes fallback=NotFound>
                <Route path=path!("/") view=Dashboard />
                <Route path=path!("/login") view=Login />
                <Route path=path!("/sessions/:id") view=SessionPage />
                <Route path=path!("/join") view=Join />
                <Route path=path!("/invite") view=InvitePage />
                <Route path=path!("/people") view=PeoplePage />
                <Route path=path!("/pair") view=PairPage />
                <Route path=path!("/extension") view=ExtensionPage />
                <Route path=path!("/settings") view=SettingsPage />
                <Route path=path!("/automations") view=AutomationsPage />
                <Route path=path!("/insights") view=InsightsPage />
                <Route path=path!("/embed/sessions/:id") view=Embed />
            </Routes>
        </Router>
    }
}
