//! Display helpers.

use tandem_protocol::{SessionState, Timestamp};

/// "12s ago", "5m ago", "3h ago", "2d ago".
pub fn ago(t: Timestamp) -> String {
    let now = js_sys::Date::now() as i64;
    let s = ((now - t.0) / 1000).max(0);
    match s {
        0..=59 => format!("{s}s ago"),
        60..=3599 => format!("{}m ago", s / 60),
        3600..=86_399 => format!("{}h ago", s / 3600),
        _ => format!("{}d ago", s / 86_400),
    }
}

/// "in 5m", "in 3h", "in 2d" for a time ahead; as [`ago`] once it is past.
pub fn until(t: Timestamp) -> String {
    let now = js_sys::Date::now() as i64;
    let s = (t.0 - now) / 1000;
    match s {
        ..=0 => ago(t),
        1..=59 => format!("in {s}s"),
        60..=3599 => format!("in {}m", s / 60),
        3600..=86_399 => format!("in {}h", s / 3600),
        _ => format!("in {}d", s / 86_400),
    }
}

/// "2025-01-31 04:00" in the browser's time zone.
pub fn local_time(t: Timestamp) -> String {
    let d = js_sys::Date::new(&wasm_bindgen::JsValue::from_f64(t.0 as f64));
    format!(
        "{}-{:02}-{:02} {:02}:{:02}",
        d.get_full_year(),
        d.get_month() + 1,
        d.get_date(),
        d.get_hours(),
        d.get_minutes()
    )
}

/// Whom to ask, as "Ask an admin (ana, bo)"; without names when none could be read.
pub fn ask_an_admin(admins: Option<&[String]>) -> String {
    match admins {
        Some(a) if !a.is_empty() => format!("Ask an admin ({})", a.join(", ")),
        _ => "Ask an admin".to_string(),
    }
}

/// The CSS class of a state badge.
pub fn state_class(s: SessionState) -> &'static str {
    match s {
        SessionState::Queued | SessionState::Starting => "badge badge-wait",
        SessionState::Ready | SessionState::Idle => "badge badge-ok",
        SessionState::Running => "badge badge-run",
        SessionState::Suspended | SessionState::Stopped => "badge badge-off",
        SessionState::Failed => "badge badge-bad",
    }
}
