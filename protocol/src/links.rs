//! Which URLs text written by someone may link to or embed: the rule the web app applies when
//! it renders markdown (an agent's reply, a guest's prompt, a pull request comment).

/// What a URL is for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Link,
    Image,
}

/// `http(s)` (and `mailto:` for links), or a path on Tandem's own origin (`/…`, `#…`, a
/// relative path): never `javascript:`, `data:`, `vbscript:` or any other scheme, however it
/// is spelled (browsers drop tabs and newlines and ignore case).
pub fn safe_url(url: &str, target: Target) -> bool {
    let u: String = url
        .chars()
        .filter(|c| !c.is_ascii_whitespace() && !c.is_control())
        .collect::<String>()
        .to_ascii_lowercase();
    if u.starts_with("https://") || u.starts_with("http://") {
        return true;
    }
    if target == Target::Link && u.starts_with("mailto:") {
        return true;
    }
    if u.starts_with("//") || u.starts_with("\\\\") || u.starts_with("/\\") {
        // Another host, scheme-relative.
        return false;
    }
    // No scheme at all: a path here. A scheme is what precedes the first ':' before any of
    // `/?#`.
    let end = u.find(['/', '?', '#']).unwrap_or(u.len());
    !u[..end].contains(':')
}

#[cfg(test)]
mod tests {
    use super::{Target, safe_url};

    #[test]
    fn script_urls_never_become_links_or_images() {
        for bad in [
            "javascript:alert(1)",
            "JaVaScRiPt:alert(1)",
            " javascript:alert(1)",
            "java\tscript:alert(1)",
            "java\nscript:alert(1)",
            "data:text/html,<script>alert(1)</script>",
            "vbscript:msgbox",
            "//evil.example/x",
            "\\\\evil.example\\x",
        ] {
            assert!(!safe_url(bad, Target::Link), "{bad:?}");
            assert!(!safe_url(bad, Target::Image), "{bad:?}");
        }
        for good in [
            "https://github.com/acme/web/pull/1",
            "http://127.0.0.1:3000/",
            "/sessions/x",
            "#top",
            "docs/README.md",
        ] {
            assert!(safe_url(good, Target::Link), "{good:?}");
        }
        assert!(safe_url("mailto:a@b.c", Target::Link));
        assert!(!safe_url("mailto:a@b.c", Target::Image));
    }
}
