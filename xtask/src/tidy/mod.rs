//! `cargo xtask tidy`: the structure rules the compiler does not check, and the import graph.
//!
//! Rules (each failure names the file and the rule):
//! - every `.rs` file opens with its `//!` line saying what it is;
//! - a source file has at most [`MAX_LINES`] lines before its `#[cfg(test)]` part (test files,
//!   `*tests.rs` and the integration and e2e suites, are exempt);
//! - the server's modules import only their own layer and the layers below ([`LAYERS`]): the
//!   store and host crates are separate crates, so this covers what is left inside the server;
//! - [`FORBIDDEN`]: modules that must not see a transport or a feature.
//!
//! `cargo xtask tidy --graph` also prints the server's module graph and its import circles.
//! The `tidy` unit test runs the rules in `cargo test`, so `cargo xtask test` fails on them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

/// Longest non-test source file, in lines.
pub const MAX_LINES: usize = 600;

/// The server's layers, lowest first; a module may import from its own layer and lower ones.
/// A module not listed is a feature (the top layer).
pub const LAYERS: &[(&str, &[&str])] = &[
    ("base", &["error", "fuzz_support"]),
    ("store", &["db"]),
    (
        "host",
        &[
            "runtime",
            "images",
            "mirrors",
            "workspace_agent",
            "data_dir",
            "Host",
        ],
    ),
    ("config", &["config"]),
];

/// `(module path prefix, what it must not import, why)`.
pub const FORBIDDEN: &[(&str, &[&str], &str)] = &[
    (
        "server/src/sessions",
        &[
            "axum",
            "hyper",
            "crate::github",
            "crate::desktop",
            "crate::code",
            "crate::live",
            "crate::scheduler",
        ],
        "sessions are the domain: transports and features call them, not the other way",
    ),
    (
        "server/src/turns",
        &[
            "axum",
            "hyper",
            "crate::github",
            "crate::desktop",
            "crate::code",
            "crate::live",
            "crate::scheduler",
        ],
        "turns run the agent; what happens after a turn is a hook set in serve.rs",
    ),
    (
        "server/src",
        &["raw_pool", "raw()"],
        "the server reaches the store through its query functions (`&Db`, `&mut Tx`), never sqlx",
    ),
];

/// What the integration and e2e tests may use of the server crate: its boundary — the HTTP
/// client, starting a server (`serve`, `config`, `state`, `app`), minting the credentials an
/// attack needs (`auth`), and the clock. The layers under it (`tandem_store`, `tandem_host`,
/// `tandem_media`) are crates of their own and tested through theirs.
pub const TEST_BOUNDARY: &[&str] = &[
    "client", "serve", "config", "state", "app", "auth", "now_ms",
];

/// White-box tests, named: `(test file, server module, why it cannot go through HTTP)`.
pub const WHITE_BOX: &[(&str, &str, &str)] = &[
    (
        "tests/it/store.rs",
        "sessions",
        "seeds sessions directly to race claims on the store",
    ),
    (
        "tests/it/store.rs",
        "turns",
        "the claim is the unit under test",
    ),
    (
        "tests/it/session_workspaces/cluster.rs",
        "sessions",
        "a session whose row names another server's host exists only in the store",
    ),
    (
        "tests/it/session_workspaces/mod.rs",
        "sessions",
        "finds a workspace's directory on the host to attack it",
    ),
    (
        "tests/it/hostile.rs",
        "turns",
        "the recorder's bound on artifacts, fed more than any agent run would",
    ),
    (
        "tests/it/bounds.rs",
        "turns",
        "the recorder fed frames against stored counters set near their bounds (an agent would need hundreds of thousands of events to reach them)",
    ),
    (
        "tests/it/snapshots.rs",
        "snapshots",
        "snapshot garbage collection and staleness have no route",
    ),
    (
        "tests/it/snapshots.rs",
        "repos",
        "the repo row the collector is given",
    ),
    (
        "tests/it/session_workspaces/lifecycle.rs",
        "snapshots",
        "snapshot garbage collection and staleness have no route",
    ),
    (
        "tests/it/github.rs",
        "gateway",
        "the prefix of the gateway's short-lived git secrets",
    ),
];

/// Source roots the rules look at.
const ROOTS: &[&str] = &[
    "protocol",
    "server",
    "store",
    "host",
    "media",
    "workspace-agent",
    "frontend",
    "xtask",
    "tests",
    "e2e",
];

/// One broken rule.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Finding {
    pub file: String,
    pub rule: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.file, self.rule)
    }
}

pub fn run(args: &[String]) -> Result<()> {
    let root = crate::run::root();
    let files = sources(&root)?;
    if args.iter().any(|a| a == "--graph") {
        print_graph(&files);
    }
    let findings = check(&files);
    for f in &findings {
        eprintln!("tidy: {f}");
    }
    if !findings.is_empty() {
        bail!("{} tidy rule(s) broken (see above)", findings.len());
    }
    eprintln!("tidy: {} files follow the rules", files.len());
    Ok(())
}

/// A source file: its path relative to the repo and its text.
pub struct Source {
    pub path: String,
    pub text: String,
}

/// Every `.rs` file under [`ROOTS`] (no build output, no npm packages).
pub fn sources(root: &Path) -> Result<Vec<Source>> {
    let mut out = Vec::new();
    for r in ROOTS {
        walk(root, &root.join(r), &mut out)?;
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<Source>) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for e in entries {
        let e = e?;
        let p: PathBuf = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if e.file_type()?.is_dir() {
            if name == "target" || name == "node_modules" || name.starts_with('.') {
                continue;
            }
            walk(root, &p, out)?;
        } else if name.ends_with(".rs") {
            let path = p
                .strip_prefix(root)
                .unwrap_or(&p)
                .to_string_lossy()
                .into_owned();
            out.push(Source {
                path,
                text: std::fs::read_to_string(&p)?,
            });
        }
    }
    Ok(())
}

/// Every broken rule in `files`.
pub fn check(files: &[Source]) -> Vec<Finding> {
    let mut out = Vec::new();
    for f in files {
        let mut find = |rule: String| {
            out.push(Finding {
                file: f.path.clone(),
                rule,
            })
        };
        let first = f.text.lines().find(|l| !l.trim().is_empty());
        if !first.is_some_and(|l| l.starts_with("//!")) {
            find("does not open with a `//!` line saying what it is".into());
        }
        if !is_test_file(&f.path) {
            let lines = production_lines(&f.text);
            if lines > MAX_LINES {
                find(format!(
                    "{lines} lines before its tests (at most {MAX_LINES}): split it by what it does"
                ));
            }
        }
        for (prefix, banned, why) in FORBIDDEN {
            if !in_module(&f.path, prefix) {
                continue;
            }
            for (line, code) in code_lines(&f.text) {
                if let Some(b) = banned.iter().find(|b| mentions(&code, b)) {
                    find(format!("line {line} uses `{b}`: {why}"));
                }
            }
        }
        if f.path.starts_with("tests/it/") || f.path.starts_with("e2e/") {
            for (line, import) in imports(&f.text) {
                for used in modules_after(&import, "tandem_server::") {
                    let white_box = WHITE_BOX
                        .iter()
                        .any(|(file, m, _)| *file == f.path && *m == used);
                    if !TEST_BOUNDARY.contains(&used.as_str()) && !white_box {
                        find(format!(
                            "line {line} uses `tandem_server::{used}`: tests reach the server through its boundary ({}); name a white-box test in tidy's WHITE_BOX with why",
                            TEST_BOUNDARY.join(", ")
                        ));
                    }
                }
            }
        }
        if let Some(module) = server_module(&f.path) {
            let own = layer_of(&module);
            for (line, import) in imports(&f.text) {
                for used in crate_modules(&import) {
                    if layer_of(&used) > own {
                        find(format!(
                            "line {line}: `{module}` ({}) imports `crate::{used}` ({}), a higher layer",
                            layer_name(own),
                            layer_name(layer_of(&used))
                        ));
                    }
                }
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Whether `path` is `prefix` itself (`prefix.rs`) or inside the folder `prefix/`.
fn in_module(path: &str, prefix: &str) -> bool {
    path == format!("{prefix}.rs") || path.starts_with(&format!("{prefix}/"))
}

fn is_test_file(path: &str) -> bool {
    path.starts_with("tests/it/")
        || path.starts_with("e2e/")
        || path.ends_with("tests.rs")
        || path.contains("/tests/")
        || path.contains("/examples/")
}

/// Lines before the first top-level `#[cfg(test)]`.
fn production_lines(text: &str) -> usize {
    text.lines()
        .take_while(|l| !l.starts_with("#[cfg(test)]"))
        .count()
}

/// `(line number, code)` of each line that is not a comment (a trailing comment cut off).
fn code_lines(text: &str) -> Vec<(usize, String)> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim_start().starts_with("//"))
        .map(|(i, l)| (i + 1, l.split("//").next().unwrap_or("").to_string()))
        .collect()
}

/// `(line number, text)` of each path a file names: its `use` items and `crate::…` paths in code
/// (comments and doc comments are skipped).
fn imports(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut in_use: Option<(usize, String)> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim_start();
        if line.starts_with("//") {
            continue;
        }
        let code = line.split("//").next().unwrap_or("");
        if let Some((n, mut acc)) = in_use.take() {
            acc.push_str(code);
            if code.contains(';') {
                out.push((n, acc));
            } else {
                in_use = Some((n, acc));
            }
            continue;
        }
        let stripped = code
            .strip_prefix("pub ")
            .or_else(|| code.strip_prefix("pub(crate) "))
            .unwrap_or(code);
        if let Some(rest) = stripped.strip_prefix("use ") {
            if rest.contains(';') {
                out.push((i + 1, rest.to_string()));
            } else {
                in_use = Some((i + 1, rest.to_string()));
            }
        } else if ["crate::", "axum::", "hyper::", "tandem_server::"]
            .iter()
            .any(|p| code.contains(p))
        {
            out.push((i + 1, code.to_string()));
        }
    }
    out
}

/// Whether `import` names the crate or module path `what` (`axum`, `crate::github`).
fn mentions(import: &str, what: &str) -> bool {
    let bytes = import.as_bytes();
    let mut from = 0;
    while let Some(at) = import[from..].find(what) {
        let start = from + at;
        let end = start + what.len();
        let before_ok = start == 0 || !is_ident(bytes[start - 1]) && bytes[start - 1] != b':';
        let after_ok = end == bytes.len() || !is_ident(bytes[end]);
        if before_ok && after_ok {
            return true;
        }
        from = end;
    }
    false
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The server's top-level modules `import` uses (`crate::db::x` and `use crate::{db, runtime}`).
fn crate_modules(import: &str) -> BTreeSet<String> {
    modules_after(import, "crate::")
}

/// The names right after each `prefix` in `import` (`prefix::a::b`, `prefix::{a, b::c}`).
fn modules_after(import: &str, prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = import;
    while let Some(at) = rest.find(prefix) {
        let before = &rest[..at];
        let after = &rest[at + prefix.len()..];
        // `tandem_server::` is not `crate::`'s tail (`mycrate::`).
        if before.ends_with(|c: char| c.is_alphanumeric() || c == '_') {
            rest = after;
            continue;
        }
        if let Some(group) = after.strip_prefix('{') {
            let inner = group.split('}').next().unwrap_or("");
            for part in inner.split(',') {
                let name: String = part
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    out.insert(name);
                }
            }
        } else {
            let name: String = after
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.insert(name);
            }
        }
        rest = after;
    }
    out
}

/// The server module a file belongs to (`server/src/db/x.rs` → `db`); none for the binary.
fn server_module(path: &str) -> Option<String> {
    let rest = path.strip_prefix("server/src/")?;
    if rest.starts_with("bin/") || rest == "lib.rs" {
        return None;
    }
    let top = rest.split('/').next()?;
    Some(top.trim_end_matches(".rs").to_string())
}

/// Index into [`LAYERS`], or one past it for a feature; the crate root's items are base.
fn layer_of(module: &str) -> usize {
    if module.chars().next().is_some_and(|c| c.is_uppercase())
        || module == "now_ms"
        || module == "VERSION"
    {
        return 0;
    }
    LAYERS
        .iter()
        .position(|(_, ms)| ms.contains(&module))
        .unwrap_or(LAYERS.len())
}

fn layer_name(i: usize) -> &'static str {
    LAYERS.get(i).map_or("feature", |(n, _)| n)
}

/// The server's module graph (from the `use` lines) and the circles in it.
pub fn graph(files: &[Source]) -> BTreeMap<String, BTreeSet<String>> {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in files {
        let Some(module) = server_module(&f.path) else {
            continue;
        };
        let entry = edges.entry(module.clone()).or_default();
        for (_, import) in imports(&f.text) {
            for used in crate_modules(&import) {
                let is_module =
                    used.chars().next().is_some_and(|c| c.is_lowercase()) && used != "now_ms";
                if used != module && is_module {
                    entry.insert(used);
                }
            }
        }
    }
    edges
}

/// Strongly connected components with more than one module (Tarjan's algorithm).
pub fn circles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            self.index.insert(v, self.next);
            self.low.insert(v, self.next);
            self.next += 1;
            self.stack.push(v);
            self.on_stack.insert(v);
            if let Some(ws) = self.edges.get(v) {
                for w in ws {
                    let w = w.as_str();
                    if !self.index.contains_key(w) {
                        self.visit(w);
                        let lw = self.low[w];
                        let lv = self.low.get_mut(v).expect("visited");
                        *lv = (*lv).min(lw);
                    } else if self.on_stack.contains(w) {
                        let iw = self.index[w];
                        let lv = self.low.get_mut(v).expect("visited");
                        *lv = (*lv).min(iw);
                    }
                }
            }
            if self.low[v] == self.index[v] {
                let mut comp = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    comp.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort();
                    self.out.push(comp);
                }
            }
        }
    }
    let mut w = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !w.index.contains_key(v.as_str()) {
            w.visit(v);
        }
    }
    w.out
}

fn print_graph(files: &[Source]) {
    let edges = graph(files);
    println!("server modules and what they import:");
    for (m, to) in &edges {
        let to: Vec<&str> = to.iter().map(String::as_str).collect();
        println!("  {m} ({}) -> {}", layer_name(layer_of(m)), to.join(" "));
    }
    for c in circles(&edges) {
        println!("import circle of {} modules: {}", c.len(), c.join(" "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(path: &str, text: &str) -> Source {
        Source {
            path: path.into(),
            text: text.into(),
        }
    }

    /// The repository follows every rule (this is what `cargo xtask test` runs).
    #[test]
    fn tidy() {
        let files = sources(&crate::run::root()).unwrap();
        assert!(files.len() > 100, "found only {} files", files.len());
        let findings = check(&files);
        assert!(
            findings.is_empty(),
            "tidy rules broken:\n{}",
            findings
                .iter()
                .map(|f| format!("  {f}"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }

    /// Each rule fails on a file that breaks it.
    #[test]
    fn each_rule_catches_what_breaks_it() {
        let long = format!("//! Long.\n{}", "fn f() {}\n".repeat(MAX_LINES));
        let long_but_tests = format!(
            "//! Fine.\nfn f() {{}}\n#[cfg(test)]\nmod tests {{\n{}}}\n",
            "fn t() {}\n".repeat(MAX_LINES)
        );
        let files = [
            src("server/src/a.rs", "use std::io;\n"),
            src("server/src/b.rs", &long),
            src("server/src/c.rs", &long_but_tests),
            src("tests/it/d.rs", &long),
            src(
                "server/src/sessions/e.rs",
                "//! E.\nuse axum::Json;\nfn f() { crate::github::x(); }\n// crate::live in a comment\n",
            ),
            src(
                "server/src/config/f.rs",
                "//! F.\nuse crate::sessions::X;\n",
            ),
            src(
                "server/src/config.rs",
                "//! F.\nuse crate::{Error, Result};\n",
            ),
            src(
                "server/src/error.rs",
                "//! G.\nuse crate::{Error, sessions::Session};\n",
            ),
            src("server/src/sessions/h.rs", "//! H.\nuse crate::db::Db;\n"),
            src(
                "server/src/repos.rs",
                "//! R.\nfn f(db: &Db) {\n    let _ = db.raw_pool();\n}\n",
            ),
            src(
                "tests/it/t.rs",
                "//! T.\nuse tandem_server::{client::Client, sessions};\nfn f() { tandem_server::turns::x(); tandem_server::now_ms(); }\n",
            ),
            src(
                "e2e/u.rs",
                "//! U.\nuse tandem_server::client::Client;\nuse tandem_server::serve::Server;\n",
            ),
        ];
        let found: Vec<String> = check(&files).iter().map(|f| f.to_string()).collect();
        let has = |file: &str, what: &str| {
            assert!(
                found
                    .iter()
                    .any(|f| f.starts_with(file) && f.contains(what)),
                "no finding for {file} containing {what:?} in {found:#?}"
            )
        };
        has("server/src/a.rs", "`//!` line");
        has("server/src/b.rs", "601 lines");
        has("server/src/sessions/e.rs", "line 2 uses `axum`");
        has("server/src/sessions/e.rs", "line 3 uses `crate::github`");
        has("server/src/config/f.rs", "imports `crate::sessions`");
        has("server/src/error.rs", "imports `crate::sessions`");
        has("server/src/repos.rs", "line 3 uses `raw_pool`");
        has("tests/it/t.rs", "line 2 uses `tandem_server::sessions`");
        has("tests/it/t.rs", "line 3 uses `tandem_server::turns`");
        assert!(
            !found.iter().any(|f| f.contains("tandem_server::client")
                || f.contains("tandem_server::now_ms")),
            "the boundary counted: {found:#?}"
        );
        let clean = [
            "server/src/c.rs",
            "tests/it/d.rs",
            "server/src/config.rs",
            "server/src/sessions/h.rs",
            "e2e/u.rs",
        ];
        for c in clean {
            assert!(
                !found.iter().any(|f| f.starts_with(c)),
                "{c} follows the rules but was flagged: {found:#?}"
            );
        }
        assert!(
            !found.iter().any(|f| f.contains("crate::live")),
            "a comment counted: {found:#?}"
        );
    }

    #[test]
    fn circles_are_found() {
        let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("d", "e")] {
            g.entry(a.into()).or_default().insert(b.into());
        }
        assert_eq!(
            circles(&g),
            vec![vec!["a".to_string(), "b".into(), "c".into()]]
        );
    }
}
