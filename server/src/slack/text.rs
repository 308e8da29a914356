//! Slack's message text: escaping what we post, and reading what people wrote.

/// The most characters of one message we post (Slack cuts at 40,000; a reply longer than this
/// is cut with a pointer to the session).
pub const MAX_POST_CHARS: usize = 3_500;

/// `s` as literal text in Slack's markup: `&`, `<` and `>` escaped, so it cannot mention
/// `@channel` or a person, or show a link under other words.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// `s` escaped and cut to `max` characters (with `…`).
pub fn escape_cut(s: &str, max: usize) -> String {
    let cut: String = s.chars().take(max).collect();
    let mut out = escape(&cut);
    if s.chars().count() > max {
        out.push('…');
    }
    out
}

/// What a person typed, back from Slack's markup: the app's own mention dropped, other
/// mentions and links as their plain form, entities decoded.
pub fn plain(text: &str, bot_user: Option<&str>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find('<') {
        out.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        let Some(end) = after.find('>') else {
            out.push_str(&rest[start..]);
            rest = "";
            break;
        };
        let inner = &after[..end];
        let (target, label) = inner.split_once('|').unwrap_or((inner, ""));
        if let Some(user) = target.strip_prefix('@') {
            if Some(user) != bot_user {
                out.push('@');
                out.push_str(if label.is_empty() { user } else { label });
            }
        } else if let Some(special) = target.strip_prefix('!') {
            out.push('@');
            out.push_str(special.split('^').next().unwrap_or(special));
        } else if let Some(channel) = target.strip_prefix('#') {
            out.push('#');
            out.push_str(if label.is_empty() { channel } else { label });
        } else {
            out.push_str(target);
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
        .trim()
        .to_string()
}

/// The `repo=name` word of a message, and the message without it.
pub fn repo_word(text: &str) -> (Option<String>, String) {
    let mut repo = None;
    let mut words = Vec::new();
    for w in text.split(' ') {
        match w.strip_prefix("repo=") {
            Some(name) if repo.is_none() && !name.is_empty() => repo = Some(name.to_string()),
            _ => words.push(w),
        }
    }
    (repo, words.join(" ").trim().to_string())
}

/// A follow-up's text and whether it steers the running turn (`steer:` in front).
pub fn steer(text: &str) -> (bool, String) {
    let t = text.trim_start();
    match t.get(..6) {
        Some(p) if p.eq_ignore_ascii_case("steer:") => (true, t[6..].trim().to_string()),
        _ => (false, text.trim().to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn posted_text_cannot_ping_or_dress_up_links() {
        assert_eq!(
            escape("<!channel> see <https://evil.example|docs> & <@U1>"),
            "&lt;!channel&gt; see &lt;https://evil.example|docs&gt; &amp; &lt;@U1&gt;"
        );
        assert_eq!(escape_cut("abcdef", 3), "abc…");
    }

    #[test]
    fn a_message_reads_back_as_what_was_typed() {
        assert_eq!(
            plain(
                "<@UBOT> fix <https://x.example/a?b=1&amp;c=2|the page> for <@U2|bob> in <#C1|web> &lt;b&gt; <!here>",
                Some("UBOT")
            ),
            "fix https://x.example/a?b=1&c=2 for @bob in #web <b> @here"
        );
        assert_eq!(
            repo_word("fix it repo=web now"),
            (Some("web".into()), "fix it now".into())
        );
        assert_eq!(steer("  STEER: use rg"), (true, "use rg".into()));
        assert_eq!(steer("steering wheel"), (false, "steering wheel".into()));
    }
}
