//! Prices and budgets (admins, on the settings page): each model's price in dollars per
//! million tokens, and the budgets in tokens, dollars and sandbox minutes, one per line. Each
//! save shows what the server kept.

use leptos::prelude::*;
use leptos::task::spawn_local;
use tandem_protocol::ApiError;
use tandem_protocol::spend::{Budgets, Prices};

use crate::api;
use crate::components::error_box::ErrorBox;

fn invalid(message: String) -> ApiError {
    ApiError {
        code: "invalid_input".into(),
        message,
    }
}

#[component]
pub fn SpendSettingsCard() -> impl IntoView {
    let prices = RwSignal::new(String::new());
    let budgets = RwSignal::new(String::new());
    let error = RwSignal::new(None::<ApiError>);
    let saved = RwSignal::new(None::<&'static str>);
    let busy = RwSignal::new(true);
    spawn_local(async move {
        match api::get::<Prices>("/api/spend/prices").await {
            Ok(p) => prices.set(p.to_lines()),
            Err(e) => error.set(Some(api::failed("Loading the prices", e))),
        }
        match api::get::<Budgets>("/api/spend/budgets").await {
            Ok(b) => budgets.set(b.to_lines()),
            Err(e) => error.set(Some(api::failed("Loading the budgets", e))),
        }
        busy.set(false);
    });
    let save = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let p = match Prices::from_lines(&prices.get_untracked()) {
            Ok(p) => p,
            Err(e) => return error.set(Some(invalid(e))),
        };
        let b = match Budgets::from_lines(&budgets.get_untracked()) {
            Ok(b) => b,
            Err(e) => return error.set(Some(invalid(e))),
        };
        busy.set(true);
        saved.set(None);
        spawn_local(async move {
            let r = match api::put::<_, Prices>("/api/spend/prices", &p).await {
                Ok(p) => {
                    prices.set(p.to_lines());
                    api::put::<_, Budgets>("/api/spend/budgets", &b).await
                }
                Err(e) => Err(e),
            };
            match r {
                Ok(b) => {
                    budgets.set(b.to_lines());
                    error.set(None);
                    saved.set(Some("Saved."));
                }
                Err(e) => error.set(Some(api::failed("Saving prices and budgets", e))),
            }
            busy.set(false);
        });
    };
    view! {
        <section class="card" id="spend-settings">
            <h2>"Prices and budgets"</h2>
            <p class="muted">"What each model costs, and the most a session tree, a person in a day and a repo in a day may use. A turn that reaches a limit stops and says which. See "<a href="/insights">"Insights"</a>" for what was used."</p>
            <form class="stack-form" id="spend-form" on:submit=save>
                <label for="spend-prices">"Prices: model = input output (dollars per million tokens)"</label>
                <textarea id="spend-prices" rows="3" placeholder="gpt-5 = 1.25 10" prop:value=prices on:input=move |ev| prices.set(event_target_value(&ev))></textarea>
                <label for="spend-budgets">"Budgets: tree, person_daily or repo_daily . tokens, cost_usd or sandbox_minutes (a repo's own first)"</label>
                <textarea id="spend-budgets" rows="5" placeholder="tree.cost_usd = 5\nperson_daily.cost_usd = 50\nacme/web tree.sandbox_minutes = 240" prop:value=budgets on:input=move |ev| budgets.set(event_target_value(&ev))></textarea>
                <button type="submit" id="spend-save" disabled=busy>"Save prices and budgets"</button>
                {move || saved.get().map(|s| view! { <span class="muted" id="spend-saved">{s}</span> })}
            </form>
            <ErrorBox error=error.read_only() />
        </section>
    }
}
