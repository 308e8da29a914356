//! `cargo xtask tidy`: the structure rules the compiler does not check, and the import graph.
//!
//! Files are read as the compiler reads them (`syntax.rs`, with syn): `use` trees with their
//! groups and nesting, paths in code, attributes and macro bodies, `self`/`super` resolved.
//! Rules (each failure names the file, the line and the rule):
//! - every `.rs` file opens with its `//!` line saying what it is, and parses;
//! - a source file has at most [`MAX_LINES`] lines outside its `#[cfg(test)]` items (test files,
//!   `*tests.rs` and the integration and e2e suites, are exempt);
//! - the server's modules import only their own layer and the layers below ([`LAYERS`]);
//! - [`FORBIDDEN`]: modules that must not see a transport or a feature;
//! - the integration and e2e tests reach the server through its boundary ([`TEST_BOUNDARY`]);
//! - no import circle among the server's modules but those on [`ALLOWED_CIRCLES`] (`graph.rs`);
//! - the workspace boundary's public surface ([`BOUNDARY`]) names no place on this machine
//!   ([`MACHINE_NAMES`]), and only [`LOCAL_RUNTIME_NAMED_BY`] names this machine's runtime.
//!
//! `cargo xtask tidy --graph` also prints the server's module graph and its import circles.
//! The `tidy` unit test runs the rules in `cargo test`, so `cargo xtask test` fails on them; the
//! self-tests in `tests.rs` break each rule on purpose.

mod graph;
mod syntax;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

pub use graph::{ALLOWED_CIRCLES, circles};

/// Longest non-test source file, in lines.
pub const MAX_LINES: usize = 600;

/// The server's layers, lowest first; a module may import from its own layer and lower ones.
/// A module not listed is a surface (the top layer).
/// (The core, store, host and media layers are crates of their own: the crate graph keeps them,
/// and [`CORE_DEPENDENCIES`] keeps the core's.)
pub const LAYERS: &[(&str, &[&str])] = &[
    ("base", &["error"]),
    (
        "tools",
        &[
            "client",
            "openapi",
            "proxy",
            "rate_limit",
            "extension_package",
            "websocket",
        ],
    ),
];

/// The workspace crates `tandem-core` may depend on; any other `tandem-*` crate is a surface
/// or a layer above it.
pub const CORE_MAY_USE: &[&str] = &["tandem-protocol", "tandem-store", "tandem-host"];

/// Crates that make a surface (an HTTP server, WebSockets, a code host, a chat app, WebRTC, a
/// browser UI): `tandem-core` depends on none of them.
pub const CORE_MUST_NOT_USE: &[&str] = &[
    "axum",
    "hyper",
    "hyper-util",
    "tower",
    "tower-http",
    "tokio-tungstenite",
    "octocrab",
    "slack-morphism",
    "openidconnect",
    "webrtc",
    "leptos",
];

/// `(module path prefix, what it must not name, why)`: a crate (`axum`), a module of the server
/// (`crate::identity`, however it is reached: grouped, nested, `super::`, in a macro) or a
/// method called without arguments (`.raw_pool()`).
pub const FORBIDDEN: &[(&str, &[&str], &str)] = &[
    (
        "server/src/gateway",
        &[
            "crate::identity",
            "crate::live",
            "crate::desktop",
            "crate::vscode",
            "crate::slack",
        ],
        "the gateway answers a workspace, whose requests are hostile: it reaches no person's credentials and no other surface",
    ),
    (
        "server/src/live",
        &["crate::github", "crate::slack", "crate::gateway", "hyper"],
        "the live channel forwards what the core records; code hosts and chat apps report through `progress`",
    ),
    (
        "server/src",
        &[".raw_pool()", ".raw()"],
        "the server reaches the store through its query functions (`&Db`, `&mut Tx`), never sqlx",
    ),
    (
        "core/src",
        &[".raw_pool()", ".raw()"],
        "the core reaches the store through its query functions (`&Db`, `&mut Tx`), never sqlx",
    ),
];

/// The workspace boundary: the files of `host` whose public surface is all the core and the
/// surfaces see of a workspace (the `Runtime` trait and its types, the layer store, the
/// agent's client). It names no host path, pid or namespace; this machine's runtime's own
/// modules (`runtime::oci`, `runtime::beside`, …) do, and stay behind it.
pub const BOUNDARY: &[&str] = &[
    "host/src/runtime/mod.rs",
    "host/src/layers.rs",
    "host/src/workspace_agent",
];

/// Identifiers that name a place on this machine (and any `…_pid`).
pub const MACHINE_NAMES: &[&str] = &[
    "Path", "PathBuf", "OsStr", "OsString", "pid", "netns", "RawFd", "OwnedFd", "Dirs",
];

/// Who may name this machine's runtime outside `host` (`runtime::oci`, `runtime::beside`, a
/// runtime's `.local()`): the composition root that makes it, and the runtime's own tests and
/// benchmarks.
pub const LOCAL_RUNTIME_NAMED_BY: &[&str] = &[
    "server/src/serve",
    "server/src/bin",
    "bench/src",
    "tests/it",
];

/// What the integration and e2e tests may use of the server crate: its boundary — the HTTP
/// client, starting a server (`serve`, `config`, `state`, `app`), minting the credentials an
/// attack needs (`identity`), and the clock. The layers under it (`tandem_store`, `tandem_host`,
/// `tandem_media`) are crates of their own and tested through theirs.
pub const TEST_BOUNDARY: &[&str] = &[
    "client", "serve", "config", "state", "app", "identity", "now_ms",
];

/// White-box tests, named: `(test file, server module, why it cannot go through HTTP)`.
pub const WHITE_BOX: &[(&str, &str, &str)] = &[
    (
        "tests/it/on_kubernetes/warm_pool.rs",
        "sessions",
        "a pod named as another replica names its pool pods, which no API of this server makes",
    ),
    (
        "tests/it/on_kubernetes/warm_pool.rs",
        "supervisor",
        "a restart's clean-up of pool pods, run beside another replica's pod without restarting",
    ),
    (
        "tests/it/session_workspaces/lifecycle.rs",
        "supervisor",
        "the supervisor's look, run again and again inside the verbs' stops instead of once a second",
    ),
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
        "tests/it/desktop.rs",
        "desktop",
        "the encoder's uid, to find its process among the host's and read its namespaces",
    ),
    (
        "tests/it/gateway.rs",
        "sessions",
        "the tree budget raced on the store's count itself, and children made under a root directly",
    ),
    (
        "tests/it/gateway/trees.rs",
        "sessions",
        "a tree's root where an older server left it out exists only in the store",
    ),
    (
        "tests/it/session_workspaces/lifecycle.rs",
        "sessions",
        "finds a workspace's id on the host to inspect what a suspend kept",
    ),
    (
        "tests/it/session_workspaces/resume_failures.rs",
        "sessions",
        "finds a workspace's id on the host to break its start",
    ),
    (
        "tests/it/signin_forgery.rs",
        "db",
        "reads the stored links and flows an attack must not have made",
    ),
    (
        "tests/it/signin_forgery/flows_store.rs",
        "db",
        "a flow taken by racing tasks is the store's own statement under test",
    ),
    (
        "tests/it/signin_forgery/hardening.rs",
        "db",
        "counts the flows a flood must not have stored",
    ),
    (
        "tests/it/signin_forgery/oidc_and_slack.rs",
        "db",
        "reads the Slack and OpenID links an attack must not have made",
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
        "tests/it/on_kubernetes/sessions.rs",
        "snapshots",
        "snapshot garbage collection has no route",
    ),
    (
        "tests/it/on_kubernetes/sessions.rs",
        "repos",
        "the repo row the collector is given",
    ),
    (
        "tests/it/on_kubernetes/sessions.rs",
        "sessions",
        "a session's workspace id, to find its kept image in the registry",
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
    "bench",
    "protocol",
    "core",
    "server",
    "store",
    "host",
    "media",
    "confine",
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
        graph::print(&files);
    }
    let mut findings = check(&files);
    let manifest = std::fs::read_to_string(root.join("core/Cargo.toml"))?;
    findings.extend(core_dependencies("core/Cargo.toml", &manifest));
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
    let mut parsed = BTreeMap::new();
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
        let p = match syntax::parse(&f.path, &f.text) {
            Ok(p) => p,
            Err(e) => {
                find(format!(
                    "does not parse ({e}), so no other rule could be checked"
                ));
                continue;
            }
        };
        if !is_test_file(&f.path) {
            let lines = p.production_lines(&f.text);
            if lines > MAX_LINES {
                find(format!(
                    "{lines} lines outside its tests (at most {MAX_LINES}): split it by what it does"
                ));
            }
        }
        for (prefix, banned, why) in FORBIDDEN {
            if !in_module(&f.path, prefix) {
                continue;
            }
            for b in *banned {
                if let Some(method) = b.strip_prefix('.').and_then(|m| m.strip_suffix("()")) {
                    for (line, _, _) in p
                        .methods
                        .iter()
                        .filter(|(_, m, args)| m == method && *args == 0)
                    {
                        find(format!("line {line} calls `{b}`: {why}"));
                    }
                    continue;
                }
                let want: Vec<&str> = b.split("::").collect();
                for n in p.named.iter().filter(|n| starts_with(&n.path, &want)) {
                    find(format!("line {} uses `{b}`: {why}", n.line));
                }
            }
        }
        if BOUNDARY
            .iter()
            .any(|b| in_module(&f.path, b.trim_end_matches(".rs")))
        {
            for (line, id) in &p.public {
                if MACHINE_NAMES.contains(&id.as_str()) || id.ends_with("_pid") {
                    find(format!(
                        "line {line}: its public surface names `{id}`, a place on this machine: the workspace boundary hands out ids and opaque handles; keep it in the local runtime's own modules"
                    ));
                }
            }
        }
        for (line, id) in &p.idents {
            let id = id.trim_start_matches("r#");
            if id == "debug_assertions" || id.starts_with("debug_assert") {
                find(format!(
                    "line {line} uses `{id}`: the debug and release builds run the same code (the suite and `up`'s smoke test run the debug build; people run the release one)"
                ));
            }
        }
        let outside_host = f.path.starts_with("core/") || f.path.starts_with("server/");
        if outside_host && !LOCAL_RUNTIME_NAMED_BY.iter().any(|m| in_module(&f.path, m)) {
            let why = "only the composition root names this machine's runtime; everything else reaches a workspace through `Runtime`";
            for n in &p.named {
                if n.path
                    .windows(2)
                    .any(|w| w[0] == "runtime" && (w[1] == "oci" || w[1] == "beside"))
                {
                    find(format!(
                        "line {} names `{}`: {why}",
                        n.line,
                        n.path.join("::")
                    ));
                }
            }
            for (line, _, _) in p.methods.iter().filter(|(_, m, a)| m == "local" && *a == 0) {
                find(format!("line {line} calls `.local()`: {why}"));
            }
        }
        if f.path.starts_with("tests/it/") || f.path.starts_with("e2e/") {
            for n in &p.named {
                let [root, used, ..] = n.path.as_slice() else {
                    continue;
                };
                if root != "tandem_server" {
                    continue;
                }
                let white_box = WHITE_BOX
                    .iter()
                    .any(|(file, m, _)| *file == f.path && m == used);
                if !TEST_BOUNDARY.contains(&used.as_str()) && !white_box {
                    find(format!(
                        "line {} uses `tandem_server::{used}`: tests reach the server through its boundary ({}); name a white-box test in tidy's WHITE_BOX with why",
                        n.line,
                        TEST_BOUNDARY.join(", ")
                    ));
                }
            }
        }
        parsed.insert(f.path.clone(), p);
    }
    let modules = graph::ServerModules::read(&parsed);
    for (path, p) in &parsed {
        let Some(module) = graph::server_module(path) else {
            continue;
        };
        let own = layer_of(&module);
        for n in &p.named {
            let Some(used) = modules.module_of(&n.path) else {
                continue;
            };
            if layer_of(&used) > own {
                out.push(Finding {
                    file: path.clone(),
                    rule: format!(
                        "line {}: `{module}` ({}) imports `crate::{used}` ({}), a higher layer",
                        n.line,
                        layer_name(own),
                        layer_name(layer_of(&used))
                    ),
                });
            }
        }
    }
    let edges = modules.edges(&parsed);
    for c in circles(&edges) {
        if !ALLOWED_CIRCLES
            .iter()
            .any(|(allowed, _)| c.iter().all(|m| allowed.contains(&m.as_str())))
        {
            out.push(Finding {
                file: "server/src".into(),
                rule: format!(
                    "import circle of {} modules not on tidy's ALLOWED_CIRCLES: {} (`cargo xtask tidy --graph` shows who imports whom); cut it with a trait the lower module defines",
                    c.len(),
                    c.join(" ")
                ),
            });
        }
    }
    out.sort();
    out.dedup();
    out
}

/// What `manifest` (the core's `Cargo.toml`) depends on that the core must not: a workspace
/// crate not on [`CORE_MAY_USE`], or a surface's crate ([`CORE_MUST_NOT_USE`]). Dev-dependencies
/// do not count (tests may use anything).
pub fn core_dependencies(file: &str, manifest: &str) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut in_deps = false;
    for (i, line) in manifest.lines().enumerate() {
        let line = line.trim();
        if let Some(header) = line.strip_prefix('[') {
            let header = header.trim_end_matches(']').trim();
            in_deps = header == "dependencies";
            // `[dependencies.axum]`
            if let Some(name) = header.strip_prefix("dependencies.") {
                out.extend(core_dependency(file, i + 1, name.trim_matches('"')));
            }
            continue;
        }
        if !in_deps || line.starts_with('#') || line.is_empty() {
            continue;
        }
        if let Some((name, _)) = line.split_once('=') {
            out.extend(core_dependency(file, i + 1, name.trim().trim_matches('"')));
        }
    }
    out
}

fn core_dependency(file: &str, line: usize, name: &str) -> Option<Finding> {
    let why = if name.starts_with("tandem-") && !CORE_MAY_USE.contains(&name) {
        format!(
            "the core depends on {} only among Tandem's crates",
            CORE_MAY_USE.join(", ")
        )
    } else if CORE_MUST_NOT_USE.contains(&name) {
        "it is a surface's crate; the core asks a surface through `hooks::Hooks`".to_string()
    } else {
        return None;
    };
    Some(Finding {
        file: file.into(),
        rule: format!("line {line} depends on `{name}`: {why}"),
    })
}

/// Whether `path` begins with the segments `want`.
fn starts_with(path: &[String], want: &[&str]) -> bool {
    path.len() >= want.len() && path.iter().zip(want).all(|(a, b)| a == b)
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
        || path.starts_with("bench/")
}

/// Index into [`LAYERS`], or one past it for a feature.
fn layer_of(module: &str) -> usize {
    LAYERS
        .iter()
        .position(|(_, ms)| ms.contains(&module))
        .unwrap_or(LAYERS.len())
}

fn layer_name(i: usize) -> &'static str {
    LAYERS.get(i).map_or("feature", |(n, _)| n)
}
