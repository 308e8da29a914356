//! `cargo xtask docs`: builds the book (`docs/book`, mdBook) into `target/book` and checks the
//! documentation's links: every relative link and image in the book, `README.md`,
//! `ARCHITECTURE.md` and `docs/*.md` must name a file of the repository, and a `#fragment` a
//! heading of the markdown file it points into. External links are not fetched.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use pulldown_cmark::{Event, LinkType, Options, Parser, Tag, TagEnd};

use crate::run::{self, cmd, output};

#[cfg(test)]
mod tests;

/// The mdBook release the book is built with (`cargo install`ed when another one is found).
pub const MDBOOK_VERSION: &str = "0.4.52";

/// Where the book's sources are, from the repository root.
const BOOK: &str = "docs/book";

/// Includes nest at most this deep (a file that includes itself stops here).
const MAX_INCLUDE_DEPTH: usize = 8;

/// Builds the book into `target/book` and fails on any broken link. `install`: install mdBook
/// when it is missing or another version.
pub fn run(install: bool) -> Result<()> {
    let t = run::step("the book (mdBook) and the documentation's links");
    mdbook(install)?;
    let root = run::root();
    let out = run::target_dir().join("book");
    cmd(Command::new("mdbook")
        .arg("build")
        .arg(root.join(BOOK))
        .arg("-d")
        .arg(&out)
        // mdBook logs every step at `info`; only its warnings and errors matter here.
        .env("RUST_LOG", "warn"))?;
    complete_output(&root, &root.join(BOOK).join("src"), &out)?;
    let broken = check(&root, &markdown_files(&root)?)?;
    for line in &broken {
        eprintln!("{line}");
    }
    if !broken.is_empty() {
        bail!("{} broken links in the documentation", broken.len());
    }
    eprintln!("    the book is in {}", out.display());
    run::done(t);
    Ok(())
}

/// mdBook at [`MDBOOK_VERSION`], installed the way `deps` installs wasm-bindgen-cli.
fn mdbook(install: bool) -> Result<()> {
    let have = output(Command::new("mdbook").arg("--version")).unwrap_or_default();
    if have.trim() == format!("mdbook v{MDBOOK_VERSION}") {
        return Ok(());
    }
    if !install {
        bail!("mdBook {MDBOOK_VERSION} is not installed (`cargo xtask docs` installs it)");
    }
    eprintln!("    installing mdBook {MDBOOK_VERSION} (a few minutes, once)");
    // Without default features: `build` only, no `serve` and `watch` (a web server and a file
    // watcher, most of its dependencies) and no search index.
    cmd(run::cargo().args([
        "install",
        "mdbook",
        "--version",
        MDBOOK_VERSION,
        "--locked",
        "--no-default-features",
    ]))
}

/// The markdown files whose links are checked: the book's sources, `README.md`,
/// `ARCHITECTURE.md` and `docs/*.md`.
pub fn markdown_files(root: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    walk(&root.join(BOOK).join("src"), &mut files)?;
    for top in ["README.md", "ARCHITECTURE.md"] {
        if root.join(top).is_file() {
            files.push(root.join(top));
        }
    }
    if let Ok(dir) = std::fs::read_dir(root.join("docs")) {
        for e in dir {
            let p = e?.path();
            if p.is_file() && p.extension().is_some_and(|x| x == "md") {
                files.push(p);
            }
        }
    }
    files.sort();
    Ok(files)
}

fn walk(dir: &Path, files: &mut Vec<PathBuf>) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for e in entries {
        let p = e?.path();
        if p.is_dir() {
            walk(&p, files)?;
        } else if p.extension().is_some_and(|x| x == "md") {
            files.push(p);
        }
    }
    Ok(())
}

/// The parser options mdBook renders with, so headings and links are read as it reads them.
fn options() -> Options {
    Options::ENABLE_TABLES
        | Options::ENABLE_FOOTNOTES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_HEADING_ATTRIBUTES
}

/// A markdown file with mdBook's `{{#include path}}` lines replaced by the files they name, and
/// where each of its lines came from.
struct Expanded {
    text: String,
    /// For each line of `text`: the file and the 1-based line it came from.
    origin: Vec<(PathBuf, usize)>,
    /// Include lines whose file does not exist: (the line's origin, the path as written).
    missing: Vec<((PathBuf, usize), String)>,
}

fn expand(path: &Path) -> Result<Expanded> {
    let mut e = Expanded {
        text: String::new(),
        origin: Vec::new(),
        missing: Vec::new(),
    };
    expand_into(path, 0, &mut e)?;
    Ok(e)
}

fn expand_into(path: &Path, depth: usize, e: &mut Expanded) -> Result<()> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    for (i, line) in text.lines().enumerate() {
        let include = line
            .trim()
            .strip_prefix("{{#include ")
            .and_then(|r| r.strip_suffix("}}"))
            .map(str::trim);
        match include {
            Some(inc) if depth < MAX_INCLUDE_DEPTH => {
                let target = dir.join(inc);
                let target = lexical(&target).unwrap_or(target);
                if target.is_file() {
                    expand_into(&target, depth + 1, e)?;
                    continue;
                }
                e.missing
                    .push(((path.to_path_buf(), i + 1), inc.to_string()));
            }
            _ => {}
        }
        e.text.push_str(line);
        e.text.push('\n');
        e.origin.push((path.to_path_buf(), i + 1));
    }
    Ok(())
}

/// GitHub's anchor for a heading: lowercase, spaces to `-`, punctuation other than `-` and `_`
/// dropped. (mdBook makes the same ids.)
pub fn slug(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .flat_map(char::to_lowercase)
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The id of each heading of `events` (the index of its start, the id): an explicit `{#id}` as
/// written, else [`slug`], a repeated one numbered `-1`, `-2`… as GitHub and mdBook do.
fn heading_ids(events: &[Event]) -> Vec<(usize, String)> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = Vec::new();
    for (i, ev) in events.iter().enumerate() {
        let Event::Start(Tag::Heading { id, .. }) = ev else {
            continue;
        };
        if let Some(id) = id {
            out.push((i, id.to_string()));
            continue;
        }
        let text: String = events[i + 1..]
            .iter()
            .take_while(|e| !matches!(e, Event::End(TagEnd::Heading(_))))
            .filter_map(|e| match e {
                Event::Text(t) | Event::Code(t) => Some(t.as_ref()),
                _ => None,
            })
            .collect();
        let base = slug(&text);
        let n = seen.entry(base.clone()).or_insert(0);
        out.push((i, if *n == 0 { base } else { format!("{base}-{n}") }));
        *n += 1;
    }
    out
}

/// The anchors of a markdown text's headings.
fn anchors(text: &str) -> BTreeSet<String> {
    let events: Vec<Event> = Parser::new_ext(text, options()).collect();
    heading_ids(&events).into_iter().map(|(_, id)| id).collect()
}

/// True for a link with a scheme (`https:`, `mailto:`, `chrome:`…) or protocol-relative.
fn external(dest: &str) -> bool {
    if dest.starts_with("//") {
        return true;
    }
    dest.split_once(':').is_some_and(|(scheme, _)| {
        scheme
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    })
}

/// `%20` and the like, as a browser decodes a path.
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let Some(v) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `base/../x` without touching the filesystem; `None` when it climbs out of `root`.
fn normalize(root: &Path, p: &Path) -> Option<PathBuf> {
    lexical(p).filter(|p| p.starts_with(root))
}

/// `a/./b/../c` as `a/c`; `None` when `..` climbs above the start.
fn lexical(p: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    Some(out)
}

fn rel(root: &Path, p: &Path) -> String {
    p.strip_prefix(root).unwrap_or(p).display().to_string()
}

/// Every broken relative link of `files` (paths under `root`), one line each:
/// ``file:line: broken link `target` (why)``.
pub fn check(root: &Path, files: &[PathBuf]) -> Result<Vec<String>> {
    let mut anchors_of: BTreeMap<PathBuf, BTreeSet<String>> = BTreeMap::new();
    let mut broken = Vec::new();
    for file in files {
        let doc = expand(file)?;
        for ((from, line), inc) in &doc.missing {
            broken.push(format!(
                "{}:{line}: broken link `{inc}` (the file it includes does not exist)",
                rel(root, from)
            ));
        }
        let line_starts: Vec<usize> = std::iter::once(0)
            .chain(doc.text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        let dir = file.parent().unwrap_or(root);
        for (ev, range) in Parser::new_ext(&doc.text, options()).into_offset_iter() {
            let dest = match ev {
                Event::Start(Tag::Link {
                    link_type,
                    dest_url,
                    ..
                }) if link_type != LinkType::Email => dest_url,
                Event::Start(Tag::Image { dest_url, .. }) => dest_url,
                _ => continue,
            };
            if dest.is_empty() || external(&dest) {
                continue;
            }
            let Some(why) = why_broken(root, file, dir, &dest, &mut anchors_of)? else {
                continue;
            };
            let idx = line_starts.partition_point(|&s| s <= range.start) - 1;
            let (from, line) = &doc.origin[idx.min(doc.origin.len() - 1)];
            let why = if from == file {
                why
            } else {
                format!("{why}, as included by {}", rel(root, file))
            };
            broken.push(format!(
                "{}:{line}: broken link `{dest}` ({why})",
                rel(root, from)
            ));
        }
    }
    Ok(broken)
}

/// Why `dest`, written in `file` (in `dir`), does not resolve; `None` when it does.
fn why_broken(
    root: &Path,
    file: &Path,
    dir: &Path,
    dest: &str,
    anchors_of: &mut BTreeMap<PathBuf, BTreeSet<String>>,
) -> Result<Option<String>> {
    let (path, fragment) = dest.split_once('#').unwrap_or((dest, ""));
    let path = percent_decode(path.split('?').next().unwrap_or(""));
    let target = if path.is_empty() {
        file.to_path_buf()
    } else if let Some(abs) = path.strip_prefix('/') {
        root.join(abs)
    } else {
        dir.join(&path)
    };
    let Some(target) = normalize(root, &target) else {
        return Ok(Some("outside the repository".into()));
    };
    if !target.exists() {
        return Ok(Some(format!("no such file {}", rel(root, &target))));
    }
    // Fragments are checked in markdown only (`#L10` on a source file is GitHub's own).
    if fragment.is_empty() || !target.is_file() || target.extension().is_none_or(|x| x != "md") {
        return Ok(None);
    }
    if !anchors_of.contains_key(&target) {
        let a = anchors(&expand(&target)?.text);
        anchors_of.insert(target.clone(), a);
    }
    Ok((!anchors_of[&target].contains(fragment))
        .then(|| format!("no heading for #{fragment} in {}", rel(root, &target))))
}

/// mdBook copies only what is under `src/`; the chapters also point at the screenshots and at
/// the repository's other documents (`ARCHITECTURE.md`, `docs/PERF.md`). Each such link of the
/// built pages is pointed at a copy under `out/repo/` (a markdown file rendered to HTML), so the
/// built book works on its own.
pub fn complete_output(root: &Path, src: &Path, out: &Path) -> Result<()> {
    let mut pages = Vec::new();
    html_pages(out, &mut pages)?;
    for page in pages {
        let dir = page.parent().unwrap_or(out);
        let Ok(in_book) = dir.strip_prefix(out) else {
            continue;
        };
        let src_dir = src.join(in_book);
        let up = "../".repeat(in_book.components().count());
        let html = std::fs::read_to_string(&page)?;
        let mut done = String::with_capacity(html.len());
        let mut rest = html.as_str();
        while let Some(i) = [" href=\"", " src=\""]
            .iter()
            .filter_map(|a| rest.find(a).map(|i| i + a.len()))
            .min()
        {
            done.push_str(&rest[..i]);
            rest = &rest[i..];
            let end = rest.find('"').unwrap_or(rest.len());
            let value = &rest[..end];
            match outside_book(root, src, out, &src_dir, dir, value)? {
                Some(copy) => done.push_str(&format!("{up}{copy}")),
                None => done.push_str(value),
            }
            rest = &rest[end..];
        }
        done.push_str(rest);
        if done != html {
            std::fs::write(&page, done)?;
        }
    }
    Ok(())
}

fn html_pages(dir: &Path, pages: &mut Vec<PathBuf>) -> Result<()> {
    for e in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let p = e?.path();
        // `repo/` holds the copies made here, from an earlier build.
        if p.is_dir() && p.file_name().is_some_and(|n| n != "repo") {
            html_pages(&p, pages)?;
        } else if p.extension().is_some_and(|x| x == "html") {
            pages.push(p);
        }
    }
    Ok(())
}

/// For `value`, a link of a built page in `dir` whose source is in `src_dir`: when it leaves the
/// book for a file of the repository, copies that file under `out/repo/` (a markdown file
/// rendered, as mdBook turned `x.md` into `x.html`) and answers the link to the copy, relative to
/// `out`.
fn outside_book(
    root: &Path,
    src: &Path,
    out: &Path,
    src_dir: &Path,
    dir: &Path,
    value: &str,
) -> Result<Option<String>> {
    if value.is_empty() || value.starts_with(['#', '/']) || external(value) {
        return Ok(None);
    }
    let (path, fragment) = value.split_once('#').unwrap_or((value, ""));
    let path = percent_decode(path);
    if dir.join(&path).exists() {
        return Ok(None);
    }
    let Some(meant) = normalize(root, &src_dir.join(&path)) else {
        return Ok(None);
    };
    if meant.starts_with(src) {
        return Ok(None);
    }
    let md = meant.with_extension("md");
    let rendered = meant.extension().is_some_and(|x| x == "html") && md.is_file();
    let file = if rendered { md } else { meant };
    if !file.is_file() {
        return Ok(None);
    }
    let repo_path = PathBuf::from("repo").join(file.strip_prefix(root)?);
    let copy = out.join(&repo_path);
    std::fs::create_dir_all(copy.parent().unwrap_or(out))?;
    let link = if rendered {
        let text = std::fs::read_to_string(&file)?;
        std::fs::write(
            copy.with_extension("html"),
            render(&rel(root, &file), &text),
        )?;
        repo_path.with_extension("html")
    } else {
        std::fs::copy(&file, &copy)?;
        repo_path
    };
    let fragment = if fragment.is_empty() {
        String::new()
    } else {
        format!("#{fragment}")
    };
    Ok(Some(format!("{}{fragment}", link.display())))
}

/// A repository markdown file as a plain HTML page, its headings with GitHub's anchors.
fn render(title: &str, text: &str) -> String {
    let mut events: Vec<Event> = Parser::new_ext(text, options()).collect();
    for (i, new) in heading_ids(&events) {
        if let Event::Start(Tag::Heading { id, .. }) = &mut events[i] {
            *id = Some(new.into());
        }
    }
    let mut body = String::new();
    pulldown_cmark::html::push_html(&mut body, events.into_iter());
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title>\
         <style>body{{max-width:60rem;margin:2rem auto;font-family:sans-serif;line-height:1.5}}\
         table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:.3rem}}</style>\
         </head><body>\n{body}</body></html>\n"
    )
}
