//! Where VS Code is served: `<scheme>://<session><suffix>`, parsed once from `code_url`
//! (`https://{session}.code.example.com`) or, where Tandem is on loopback, `*.localhost` beside
//! it. Used by the code proxy, the CSP and cluster forwarding (the server's `vscode::origin`).

use tandem_protocol::SessionId;

use crate::{Error, Result};

/// What the template names the session by.
const SESSION: &str = "{session}";

/// Where VS Code is served: `<scheme>://<session><suffix>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeOrigin {
    /// `http://` or `https://`.
    scheme: String,
    /// What follows the session's label: `.localhost:8080`, `.code.example.com`.
    suffix: String,
}

impl CodeOrigin {
    /// From a template such as `https://{session}.code.example.com` (the session must be the
    /// first label; no path).
    pub fn parse(template: &str) -> Result<Self> {
        let t = template.trim_end_matches('/');
        let bad = || {
            Error::Config(format!(
                "code_url {template:?}: expected http(s)://{{session}}.<domain>[:port], nothing after"
            ))
        };
        let (scheme, rest) = t.split_once("://").ok_or_else(bad)?;
        if scheme != "http" && scheme != "https" {
            return Err(bad());
        }
        let suffix = rest.strip_prefix(SESSION).ok_or_else(bad)?;
        if !suffix.starts_with('.')
            || suffix.len() < 2
            || suffix.contains(['/', '?', '#', '{', '}', '@'])
        {
            return Err(bad());
        }
        Ok(Self {
            scheme: format!("{scheme}://"),
            suffix: suffix.to_string(),
        })
    }

    /// `http://{session}.localhost:<port>` if `public_url` is on loopback.
    pub fn beside(public_url: &str) -> Option<Self> {
        let rest = public_url.strip_prefix("http://")?;
        let authority = rest.split('/').next()?;
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(':') && p.chars().all(|c| c.is_ascii_digit()) => {
                (h, Some(p))
            }
            _ => (authority, None),
        };
        let loopback = host == "localhost"
            || host.ends_with(".localhost")
            || host
                .trim_matches(['[', ']'])
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        if !loopback {
            return None;
        }
        Some(Self {
            scheme: "http://".into(),
            suffix: match port {
                Some(p) => format!(".localhost:{p}"),
                None => ".localhost".into(),
            },
        })
    }

    /// Every session's VS Code origin as a CSP source (`http://*.localhost:7878`).
    pub fn wildcard(&self) -> String {
        format!("{}*{}", self.scheme, self.suffix)
    }

    /// The origin of session `id`'s VS Code.
    pub fn base(&self, id: SessionId) -> String {
        format!("{}{id}{}", self.scheme, self.suffix)
    }

    /// The site (registrable domain) a session's VS Code origin is on: `example.com` for
    /// `https://{session}.code.example.com`.
    pub fn site(&self) -> String {
        let suffix = self.suffix.to_ascii_lowercase();
        let host = match suffix.rsplit_once(':') {
            Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) => h.to_string(),
            _ => suffix,
        };
        site(&format!("session{host}"))
    }

    /// Whether sessions' VS Code origins are on the same site as Tandem at `public_url`: then a
    /// page a workspace serves may set cookies Tandem's origin receives (a parent domain's),
    /// and its requests count as same-site (they carry `SameSite` cookies).
    pub fn same_site_as(&self, public_url: &str) -> bool {
        host_of(public_url).is_some_and(|h| site(&h) == self.site())
    }

    /// The session whose code origin `host` (a `Host` header) is, if it is one.
    pub fn session_for_host(&self, host: &str) -> Option<SessionId> {
        let host = host.to_ascii_lowercase();
        let (label, rest) = host.split_once('.')?;
        let strip_port = |s: &str| match s.rsplit_once(':') {
            Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) => h.to_string(),
            _ => s.to_string(),
        };
        if strip_port(&format!(".{rest}")) != strip_port(&self.suffix.to_ascii_lowercase()) {
            return None;
        }
        label.parse().ok()
    }
}

/// The host of a URL, lower-cased, without port or brackets.
fn host_of(url: &str) -> Option<String> {
    let parsed = url::Url::parse(url).ok()?;
    Some(
        parsed
            .host_str()?
            .trim_matches(['[', ']'])
            .to_ascii_lowercase(),
    )
}

/// A host's site: its registrable domain by the public suffix list (`example.com` for
/// `a.b.example.com`, `example.co.uk` for `x.example.co.uk`), or the host itself for an IP
/// address or a host that is a public suffix (`localhost`, `github.io`).
pub fn site(host: &str) -> String {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    if host.parse::<std::net::IpAddr>().is_ok() {
        return host;
    }
    psl::domain_str(&host).map_or(host.clone(), str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_hosts_and_loopback_defaults() {
        let o = CodeOrigin::parse("https://{session}.code.example.com/").unwrap();
        let id: SessionId = "0b8c2a52-3c1f-4c36-9a59-7d9d2a1e4f10".parse().unwrap();
        assert_eq!(
            o.base(id),
            "https://0b8c2a52-3c1f-4c36-9a59-7d9d2a1e4f10.code.example.com"
        );
        assert_eq!(o.session_for_host(&o.base(id)[8..]), Some(id));
        assert_eq!(
            o.session_for_host(&format!("{id}.code.example.com:443")),
            Some(id)
        );
        assert_eq!(o.session_for_host("code.example.com"), None);
        assert_eq!(o.session_for_host(&format!("{id}.evil.example.com")), None);
        assert_eq!(o.session_for_host("not-a-session.code.example.com"), None);
        for bad in [
            "https://code.example.com",
            "ftp://{session}.x",
            "https://x.{session}.y",
            "https://{session}.x/path",
            "https://{session}",
        ] {
            assert!(CodeOrigin::parse(bad).is_err(), "{bad}");
        }
        let local = CodeOrigin::beside("http://127.0.0.1:8080").unwrap();
        assert_eq!(local.base(id), format!("http://{id}.localhost:8080"));
        assert_eq!(
            local.session_for_host(&format!("{id}.localhost:8080")),
            Some(id)
        );
        assert_eq!(local.session_for_host("127.0.0.1:8080"), None);
        assert!(CodeOrigin::beside("http://[::1]:9").is_some());
        assert!(CodeOrigin::beside("http://localhost").is_some());
        assert!(CodeOrigin::beside("http://10.0.0.5:8080").is_none());
        assert!(CodeOrigin::beside("https://tandem.example").is_none());
    }

    #[test]
    fn same_site_is_the_registrable_domain() {
        let same = CodeOrigin::parse("https://{session}.code.tandem.example.com").unwrap();
        assert!(same.same_site_as("https://tandem.example.com"));
        assert!(same.same_site_as("https://example.com:8443"));
        let other = CodeOrigin::parse("https://{session}.tandem-usercontent.com").unwrap();
        assert!(!other.same_site_as("https://tandem.example.com"));
        // Another registrable domain under a multi-label public suffix.
        let uk = CodeOrigin::parse("https://{session}.code.acme.co.uk").unwrap();
        assert!(uk.same_site_as("https://tandem.acme.co.uk"));
        assert!(!uk.same_site_as("https://tandem.other.co.uk"));
        // A public suffix's subdomains are sites of their own.
        let pages = CodeOrigin::parse("https://{session}.github.io").unwrap();
        assert!(!pages.same_site_as("https://tandem.github.io"));
        // Loopback: `*.localhost` is not the site of 127.0.0.1 or of localhost itself.
        let local = CodeOrigin::beside("http://127.0.0.1:8080").unwrap();
        assert!(!local.same_site_as("http://127.0.0.1:8080"));
        assert!(
            !CodeOrigin::beside("http://localhost:8080")
                .unwrap()
                .same_site_as("http://localhost:8080")
        );
        assert_eq!(site("A.B.Example.COM."), "example.com");
    }
}
