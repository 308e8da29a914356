//! A session's use against its limits, under its title (the session page and the extension's
//! side panel): what it cost, its tokens and sandbox minutes, and each budget it draws on, the
//! ones near or at their limit marked. Read again after each turn.

use leptos::prelude::*;
use leptos::task::spawn_local;
use tandem_protocol::spend::{LimitScope, SessionSpend, dollars};
use tandem_protocol::{Event, EventKind, SessionId};

use crate::api;

/// "12,345".
pub fn thousands(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}

#[component]
pub fn SpendLine(session: SessionId, events: RwSignal<Vec<Event>>) -> impl IntoView {
    let spend = RwSignal::new(None::<SessionSpend>);
    let turns = Memo::new(move |_| {
        events.with(|e| {
            e.iter()
                .filter(|e| {
                    matches!(
                        e.kind,
                        EventKind::TurnEnded { .. } | EventKind::LimitReached { .. }
                    )
                })
                .count()
        })
    });
    Effect::new(move |_| {
        turns.track();
        spawn_local(async move {
            // A viewer without the right to read it, or an older server: nothing is shown.
            if let Ok(s) = api::get::<SessionSpend>(&format!("/api/sessions/{session}/spend")).await
            {
                spend.set(Some(s));
            }
        });
    });
    move || {
        spend.get().filter(|s| s.tokens > 0 || s.sandbox_minutes > 0).map(|s| {
            let limits: Vec<_> = s
                .limits
                .iter()
                .filter(|l| l.scope != LimitScope::Requests && l.limit > 0)
                .cloned()
                .collect();
            view! {
                <p class="meta spend" id="session-spend">
                    <span>{format!("{} · {} tokens · {} sandbox min", dollars(s.cost_micros), thousands(s.tokens), s.sandbox_minutes)}</span>
                    {limits.into_iter().map(|l| {
                        let share = l.used as f64 / l.limit as f64;
                        let class = if share >= 1.0 { "limit bad" } else if share >= 0.8 { "limit warn" } else { "limit" };
                        view! { <span class=class title=l.which()>{format!(" · {}: {}", short_scope(&l), l.amount())}</span> }
                    }).collect_view()}
                </p>
            }
        })
    }
}

fn short_scope(l: &tandem_protocol::spend::LimitUse) -> String {
    match l.scope {
        LimitScope::Tree => "tree budget".into(),
        LimitScope::Automation => "run budget".into(),
        LimitScope::PersonDaily => format!("{}'s day", l.whose),
        LimitScope::RepoDaily => "repo's day".into(),
        LimitScope::Requests => "requests".into(),
    }
}
