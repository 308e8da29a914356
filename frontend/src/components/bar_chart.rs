//! A bar chart drawn as SVG by the web app itself: no chart library to load, nothing that runs
//! script from elsewhere, and it scales with the page. Each bar has its label and value as a
//! tooltip; the axis says the largest value and the first and last labels.

use leptos::prelude::*;

const WIDTH: f64 = 600.0;
const HEIGHT: f64 = 160.0;
const LEFT: f64 = 56.0;
const BOTTOM: f64 = 22.0;

/// `points` (label, value) as bars; `format` says a value for people.
#[component]
pub fn BarChart(
    id: &'static str,
    title: &'static str,
    points: Vec<(String, f64)>,
    format: fn(f64) -> String,
) -> impl IntoView {
    let max = points.iter().map(|p| p.1).fold(0.0_f64, f64::max);
    let n = points.len().max(1) as f64;
    let plot_w = WIDTH - LEFT;
    let plot_h = HEIGHT - BOTTOM;
    let slot = plot_w / n;
    let bar = (slot * 0.8).max(1.0);
    let first = points.first().map(|p| p.0.clone()).unwrap_or_default();
    let last = points.last().map(|p| p.0.clone()).unwrap_or_default();
    let bars = points
        .into_iter()
        .enumerate()
        .map(|(i, (label, v))| {
            let h = if max > 0.0 { v / max * plot_h } else { 0.0 };
            let x = LEFT + i as f64 * slot + (slot - bar) / 2.0;
            let tip = format!("{label}: {}", format(v));
            view! {
                <rect class="bar" x=format!("{x:.1}") y=format!("{:.1}", plot_h - h) width=format!("{bar:.1}") height=format!("{h:.1}")>
                    <title>{tip}</title>
                </rect>
            }
        })
        .collect_view();
    view! {
        <figure class="chart" id=id>
            <figcaption>{title}</figcaption>
            <svg viewBox=format!("0 0 {WIDTH} {HEIGHT}") role="img" aria-label=title>
                <line class="axis" x1=LEFT y1="0" x2=LEFT y2=plot_h />
                <line class="axis" x1=LEFT y1=plot_h x2=WIDTH y2=plot_h />
                <text class="tick" x=LEFT - 4.0 y="10" text-anchor="end">{format(max)}</text>
                <text class="tick" x=LEFT - 4.0 y=plot_h text-anchor="end">{format(0.0)}</text>
                <text class="tick" x=LEFT y=HEIGHT - 4.0>{first}</text>
                <text class="tick" x=WIDTH y=HEIGHT - 4.0 text-anchor="end">{last}</text>
                {bars}
            </svg>
        </figure>
    }
}
