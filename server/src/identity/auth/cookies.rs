//! Tandem's cookies, named, written and read in one place. On an https public URL every one is a
//! `__Host-` cookie (`Secure`, `Path=/`, no `Domain`): the browser then takes it only from this
//! very origin, so no other origin of the same site — a workspace's page on a sibling
//! subdomain, say — can set, shadow or fixate it; an unprefixed cookie of the same name is
//! ignored there. On http (loopback, tests) the plain name, without `Secure`. A cookie whose
//! name a request carries more than once is absent: a second one can only come from another
//! origin of the site (a parent domain's cookie, another path's), and which of the two the
//! browser lists first is not ours to trust.

use axum::http::HeaderMap;
use axum::http::header::COOKIE;

use crate::state::AppState;

/// How a cookie rides along on requests other sites start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SameSite {
    /// Never on another site's requests (the browser sign-in).
    Strict,
    /// On another site's top-level navigations too (a sign-in provider redirecting back).
    Lax,
}

/// One of Tandem's cookies.
#[derive(Clone, Copy, Debug)]
pub struct Cookie {
    base: &'static str,
    same_site: SameSite,
}

/// The browser sign-in: a short-lived JWT.
pub const SESSION: Cookie = Cookie {
    base: tandem_protocol::limits::SESSION_COOKIE,
    same_site: SameSite::Strict,
};

/// The browser's binding secret for sign-in and link flows ([`super::flow`]).
pub const FLOW: Cookie = Cookie {
    base: "tandem_flow",
    same_site: SameSite::Lax,
};

/// Whether the public URL is https (then cookies are `__Host-` and `Secure`).
pub fn https(app: &AppState) -> bool {
    app.public_url().starts_with("https://")
}

impl Cookie {
    /// Its name on a server whose public URL is https or not.
    pub fn name_for(self, https: bool) -> String {
        if https {
            format!("__Host-{}", self.base)
        } else {
            self.base.to_string()
        }
    }

    /// Its name on this server.
    pub fn name(self, app: &AppState) -> String {
        self.name_for(https(app))
    }

    /// The `Set-Cookie` line that sets it to `value` for `max_age_secs`.
    pub fn set(self, app: &AppState, value: &str, max_age_secs: i64) -> String {
        let https = https(app);
        format!(
            "{}={value}; HttpOnly; SameSite={:?}; Path=/; Max-Age={max_age_secs}{}",
            self.name_for(https),
            self.same_site,
            if https { "; Secure" } else { "" }
        )
    }

    /// The `Set-Cookie` line that removes it.
    pub fn clear(self, app: &AppState) -> String {
        self.set(app, "", 0)
    }

    /// Its value in a request's headers (only under this server's name for it).
    pub fn read(self, app: &AppState, headers: &HeaderMap) -> Option<String> {
        value(headers, &self.name(app))
    }

    /// Whether a request carries it (empty or not).
    pub fn present(self, app: &AppState, headers: &HeaderMap) -> bool {
        self.read(app, headers).is_some()
    }

    /// Whether a request carries it more than once (then it is absent: [`value`]).
    pub fn duplicated(self, app: &AppState, headers: &HeaderMap) -> bool {
        values(headers, &self.name(app)).nth(1).is_some()
    }
}

/// Every value cookie `name` has in a request's headers (all `Cookie` lines).
fn values<'h>(headers: &'h HeaderMap, name: &'h str) -> impl Iterator<Item = &'h str> + 'h {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .filter(move |(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// The value of cookie `name` in a request's headers; none when it is there more than once.
pub fn value(headers: &HeaderMap, name: &str) -> Option<String> {
    let mut all = values(headers, name);
    let first = all.next()?;
    all.next().is_none().then(|| first.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_host_prefixed_on_https_only() {
        assert_eq!(SESSION.name_for(true), "__Host-tandem_session");
        assert_eq!(SESSION.name_for(false), "tandem_session");
        let mut h = HeaderMap::new();
        h.insert(
            COOKIE,
            "tandem_session=plain; __Host-tandem_session=host"
                .parse()
                .unwrap(),
        );
        assert_eq!(value(&h, &SESSION.name_for(true)).as_deref(), Some("host"));
        assert_eq!(
            value(&h, &SESSION.name_for(false)).as_deref(),
            Some("plain")
        );
    }

    #[test]
    fn a_cookie_sent_twice_is_absent() {
        let mut h = HeaderMap::new();
        h.insert(COOKIE, "tandem_flow=mine; other=1".parse().unwrap());
        assert_eq!(value(&h, "tandem_flow").as_deref(), Some("mine"));
        // A parent domain's cookie of the same name, listed first or last, or on a second line.
        h.insert(
            COOKIE,
            "tandem_flow=planted; tandem_flow=mine".parse().unwrap(),
        );
        assert_eq!(value(&h, "tandem_flow"), None);
        h.insert(COOKIE, "tandem_flow=mine".parse().unwrap());
        h.append(COOKIE, "tandem_flow=planted".parse().unwrap());
        assert_eq!(value(&h, "tandem_flow"), None);
        assert_eq!(value(&h, "other"), None, "not there at all");
    }
}
