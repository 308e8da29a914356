//! `/insights`: what the agents got merged and what it cost, for a period, by repo, person,
//! agent, model, surface or day: totals, cost and merges per day as charts, the rows as a
//! table, and the same numbers as CSV. Admins see every session; anyone else their own.

use leptos::prelude::*;
use leptos::task::spawn_local;
use tandem_protocol::ApiError;
use tandem_protocol::spend::{GroupBy, Insights, InsightsRow, dollars};

use crate::api;
use crate::components::bar_chart::BarChart;
use crate::components::error_box::ErrorBox;
use crate::components::header::Header;
use crate::components::spend::thousands;
use crate::pages::require_user;

const GROUPS: [(GroupBy, &str); 6] = [
    (GroupBy::Repo, "repo"),
    (GroupBy::Person, "person"),
    (GroupBy::Agent, "agent"),
    (GroupBy::Model, "model"),
    (GroupBy::Surface, "surface"),
    (GroupBy::Day, "day"),
];

fn group_name(g: GroupBy) -> &'static str {
    GROUPS
        .iter()
        .find(|(x, _)| *x == g)
        .map_or("repo", |(_, n)| n)
}

/// "3h 5m", "12m", "40s".
fn duration(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m", s / 60),
        3600..=86_399 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86_400, s % 86_400 / 3600),
    }
}

fn pct(x: Option<f64>) -> String {
    x.map_or("—".into(), |x| format!("{:.0}%", x * 100.0))
}

fn money(v: f64) -> String {
    dollars(v.round() as i64)
}

fn count(v: f64) -> String {
    thousands(v.round() as i64)
}

#[component]
pub fn InsightsPage() -> impl IntoView {
    let user = require_user();
    view! {
        <Header user=user.into() />
        <main class="page insights">
            <h1>"Insights"</h1>
            <p class="muted">"What the agents got merged, how long review took, and what it cost. Counted by when each session started."</p>
            {move || user.get().map(|_| view! { <Numbers /> })}
        </main>
    }
}

#[component]
fn Numbers() -> impl IntoView {
    let days = RwSignal::new(30_i64);
    let group = RwSignal::new(GroupBy::Repo);
    let data = RwSignal::new(None::<Insights>);
    let error = RwSignal::new(None::<ApiError>);
    let query = move || {
        let to = js_sys::Date::now() as i64;
        let from = to - days.get() * 86_400_000;
        format!("from={from}&to={to}&group_by={}", group_name(group.get()))
    };
    Effect::new(move |_| {
        let q = query();
        spawn_local(async move {
            match api::get::<Insights>(&format!("/api/insights?{q}")).await {
                Ok(i) => {
                    error.set(None);
                    data.set(Some(i));
                }
                Err(e) => error.set(Some(api::failed("Loading the insights", e))),
            }
        });
    });
    view! {
        <section class="card controls">
            <label>"Period "
                <select id="insights-period" on:change=move |ev| days.set(event_target_value(&ev).parse().unwrap_or(30))>
                    <option value="7">"7 days"</option>
                    <option value="30" selected>"30 days"</option>
                    <option value="90">"90 days"</option>
                    <option value="365">"a year"</option>
                </select>
            </label>
            <label>" by "
                <select id="insights-group" on:change=move |ev| {
                    let v = event_target_value(&ev);
                    group.set(GROUPS.iter().find(|(_, n)| *n == v).map_or(GroupBy::Repo, |(g, _)| *g));
                }>
                    {GROUPS.iter().map(|(_, n)| view! { <option value=*n>{*n}</option> }).collect_view()}
                </select>
            </label>
            <a class="button" id="insights-csv" href=move || format!("/api/insights/csv?{}", query()) download="tandem-insights.csv">"Download CSV"</a>
        </section>
        <ErrorBox error=error.read_only() />
        {move || data.get().map(|i| view! { <Report i /> })}
    }
}

#[component]
fn Report(i: Insights) -> impl IntoView {
    let t = i.total.clone();
    let cost_days: Vec<(String, f64)> = i
        .days
        .iter()
        .map(|d| (d.key.clone(), d.cost_micros as f64))
        .collect();
    let merged_days: Vec<(String, f64)> = i
        .days
        .iter()
        .map(|d| (d.key.clone(), d.pull_requests_merged as f64))
        .collect();
    let sessions_days: Vec<(String, f64)> = i
        .days
        .iter()
        .map(|d| (d.key.clone(), d.sessions as f64))
        .collect();
    let tiles = [
        ("Sessions", thousands(t.sessions)),
        (
            "Pull requests merged",
            format!(
                "{} of {} ({})",
                t.pull_requests_merged,
                t.pull_requests_opened,
                pct(t.merge_rate)
            ),
        ),
        (
            "Median review time",
            t.median_review_ms.map_or("—".into(), duration),
        ),
        (
            "Median prompt → pull request",
            t.median_prompt_to_pr_ms.map_or("—".into(), duration),
        ),
        ("Cost", dollars(t.cost_micros)),
        (
            "Cost per merged pull request",
            t.cost_per_merged_micros.map_or("—".into(), dollars),
        ),
        ("Tokens", thousands(t.prompt_tokens + t.completion_tokens)),
        (
            "Sandbox hours",
            format!(
                "{:.1} running, {:.1} suspended",
                t.sandbox_running_minutes / 60.0,
                t.sandbox_suspended_minutes / 60.0
            ),
        ),
        (
            "Tests the agents ran",
            format!("{} ({} passed)", t.tests_run, t.tests_passed),
        ),
        (
            "Interrupted turns, retries",
            format!("{}, {}", t.interrupted_turns, t.retries),
        ),
        (
            "Approvals asked",
            format!(
                "{} (median answer {})",
                t.approvals_asked,
                t.median_approval_answer_ms.map_or("—".into(), duration)
            ),
        ),
        (
            "Follow-ups per merge",
            t.follow_ups_per_merged
                .map_or("—".into(), |x| format!("{x:.1}")),
        ),
    ];
    view! {
        {i.own_only.then(|| view! { <p class="notice" id="insights-own">"Your own sessions only: admins see everyone's."</p> })}
        <section class="tiles" id="insights-tiles">
            {tiles.into_iter().map(|(k, v)| view! { <div class="tile"><span class="muted">{k}</span><strong>{v}</strong></div> }).collect_view()}
        </section>
        <section class="card charts">
            <BarChart id="chart-cost" title="Cost per day" points=cost_days format=money />
            <BarChart id="chart-merged" title="Pull requests merged per day" points=merged_days format=count />
            <BarChart id="chart-sessions" title="Sessions per day" points=sessions_days format=count />
        </section>
        <section class="card">
            <h2>{format!("By {}", group_name(i.group_by))}</h2>
            <div class="table-wrap">
            <table class="insights-table" id="insights-table">
                <thead><tr>
                    <th>{group_name(i.group_by)}</th><th>"sessions"</th><th>"PRs opened"</th><th>"merged"</th><th>"merge rate"</th>
                    <th>"median review"</th><th>"cost"</th><th>"per merge"</th><th>"tokens"</th><th>"sandbox h"</th><th>"tests (passed)"</th><th>"approvals"</th>
                </tr></thead>
                <tbody>
                    {i.rows.iter().map(row).collect_view()}
                </tbody>
            </table>
            </div>
            {i.rows.is_empty().then(|| view! { <p class="muted">"No sessions in this period."</p> })}
        </section>
    }
}

fn row(r: &InsightsRow) -> impl IntoView + use<> {
    view! {
        <tr>
            <td>{r.key.clone()}</td>
            <td>{thousands(r.sessions)}</td>
            <td>{r.pull_requests_opened}</td>
            <td>{r.pull_requests_merged}</td>
            <td>{pct(r.merge_rate)}</td>
            <td>{r.median_review_ms.map_or("—".into(), duration)}</td>
            <td>{dollars(r.cost_micros)}</td>
            <td>{r.cost_per_merged_micros.map_or("—".into(), dollars)}</td>
            <td>{thousands(r.prompt_tokens + r.completion_tokens)}</td>
            <td>{format!("{:.1}", r.sandbox_running_minutes / 60.0)}</td>
            <td>{format!("{} ({})", r.tests_run, r.tests_passed)}</td>
            <td>{r.approvals_asked}</td>
        </tr>
    }
}
