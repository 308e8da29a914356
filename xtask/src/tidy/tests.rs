//! tidy on the repository, and tidy's self-test: each rule broken on purpose, in every way a
//! text scan could be fooled (grouped, nested and relative imports, paths in expressions and
//! macros, a `#[cfg(test)]` declaration early in a long file, a new import circle).

use std::collections::{BTreeMap, BTreeSet};

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

fn findings(files: &[Source]) -> Vec<String> {
    check(files).iter().map(|f| f.to_string()).collect()
}

fn has(found: &[String], file: &str, what: &str) {
    assert!(
        found
            .iter()
            .any(|f| f.starts_with(file) && f.contains(what)),
        "no finding for {file} containing {what:?} in {found:#?}"
    )
}

fn clean(found: &[String], file: &str) {
    assert!(
        !found.iter().any(|f| f.starts_with(file)),
        "{file} follows the rules but was flagged: {found:#?}"
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
    // A test module declared at the top does not end the count: 601 lines follow it.
    let long_after_a_test_declaration = format!(
        "//! Long.\n#[cfg(test)]\nmod fuzz_tests;\n{}",
        "fn f() {}\n".repeat(MAX_LINES)
    );
    let files = [
        src("server/src/a.rs", "use std::io;\n"),
        src("server/src/b.rs", &long),
        src("server/src/c.rs", &long_but_tests),
        src("server/src/turns/mod.rs", &long_after_a_test_declaration),
        src("tests/it/d.rs", &long),
        src(
            "server/src/gateway/e.rs",
            "//! E.\nuse crate::identity::oidc::Providers;\nfn f() { crate::identity::auth::x(); }\n// crate::live in a comment\n",
        ),
        // Grouped, nested, multi-line and relative imports, and paths in macros.
        src(
            "server/src/gateway/g.rs",
            "//! G.\nuse crate::{\n    error::Error,\n    identity::people,\n};\nuse crate::{db, live::{hub::{Hub}}};\nuse super::super::desktop as d;\nfn f() {\n    tokio::spawn(async { crate::vscode::open().await });\n    let _ = format!(\"{}\", crate::slack::name());\n}\n",
        ),
        src(
            "server/src/live/h.rs",
            "//! H.\nmod inner {\n    use super::super::super::github::person;\n}\nfn f() -> ::hyper::Uri { todo!() }\n",
        ),
        src("server/src/proxy/f.rs", "//! F.\nuse crate::sessions::X;\n"),
        src(
            "server/src/proxy.rs",
            "//! F.\nuse crate::{Error, Result};\n",
        ),
        src(
            "server/src/error.rs",
            "//! G.\nuse crate::{Error, sessions::Session};\n",
        ),
        src(
            "server/src/proxy/reexport.rs",
            "//! Through the crate root's re-export.\nfn f(_: crate::AppState) {}\n",
        ),
        src("server/src/gateway/h.rs", "//! H.\nuse crate::db::Db;\n"),
        src(
            "core/src/repos.rs",
            "//! R.\nfn f(db: &Db, c: &mut Client) {\n    let _ = db.raw_pool();\n    c.raw(frame);\n}\n",
        ),
        src(
            "server/src/lib.rs",
            "//! Root.\npub mod sessions;\npub use state::AppState;\npub use tandem_store as db;\n",
        ),
        src("server/src/state.rs", "//! State.\n"),
        src("server/src/sessions.rs", "//! Sessions.\n"),
        src("server/src/broken.rs", "//! Broken.\nfn f( {\n"),
        src(
            "host/src/profile.rs",
            "//! P.\n#[cfg(not(debug_assertions))]\nfn f() {}\nfn g() { if cfg!(debug_assertions) {} }\nfn h(x: u8) { debug_assert_eq!(x, 1); }\n#[cfg_attr(r#debug_assertions, inline)]\nfn i(x: u8) { debug_assert_matches!(x, 1); }\n",
        ),
        src(
            "host/src/profile_words.rs",
            "//! Says debug_assertions in a comment.\n/// debug_assert! in a doc.\nfn f() -> &'static str { \"debug_assertions\" }\n",
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
    let found = findings(&files);
    has(&found, "server/src/a.rs", "`//!` line");
    has(&found, "server/src/b.rs", "601 lines");
    has(&found, "server/src/turns/mod.rs", "601 lines");
    has(
        &found,
        "server/src/gateway/e.rs",
        "line 2 uses `crate::identity`",
    );
    has(
        &found,
        "server/src/gateway/e.rs",
        "line 3 uses `crate::identity`",
    );
    has(
        &found,
        "server/src/gateway/g.rs",
        "line 4 uses `crate::identity`",
    );
    has(
        &found,
        "server/src/gateway/g.rs",
        "line 6 uses `crate::live`",
    );
    has(
        &found,
        "server/src/gateway/g.rs",
        "line 7 uses `crate::desktop`",
    );
    has(
        &found,
        "server/src/gateway/g.rs",
        "line 9 uses `crate::vscode`",
    );
    has(
        &found,
        "server/src/gateway/g.rs",
        "line 10 uses `crate::slack`",
    );
    has(
        &found,
        "server/src/live/h.rs",
        "line 3 uses `crate::github`",
    );
    has(&found, "server/src/live/h.rs", "line 5 uses `hyper`");
    has(&found, "server/src/proxy/f.rs", "imports `crate::sessions`");
    has(&found, "server/src/error.rs", "imports `crate::sessions`");
    has(
        &found,
        "server/src/proxy/reexport.rs",
        "imports `crate::state`",
    );
    has(&found, "core/src/repos.rs", "line 3 calls `.raw_pool()`");
    assert!(
        !found.iter().any(|f| f.contains("line 4 calls")),
        "a method of another name's arity counted: {found:#?}"
    );
    has(&found, "server/src/broken.rs", "does not parse");
    has(
        &found,
        "host/src/profile.rs",
        "line 2 uses `debug_assertions`",
    );
    has(
        &found,
        "host/src/profile.rs",
        "line 4 uses `debug_assertions`",
    );
    has(
        &found,
        "host/src/profile.rs",
        "line 5 uses `debug_assert_eq`",
    );
    has(
        &found,
        "tests/it/t.rs",
        "line 2 uses `tandem_server::sessions`",
    );
    has(
        &found,
        "tests/it/t.rs",
        "line 3 uses `tandem_server::turns`",
    );
    assert!(
        !found
            .iter()
            .any(|f| f.contains("tandem_server::client") || f.contains("tandem_server::now_ms")),
        "the boundary counted: {found:#?}"
    );
    for c in [
        "server/src/c.rs",
        "tests/it/d.rs",
        "server/src/proxy.rs",
        "server/src/gateway/h.rs",
        "e2e/u.rs",
    ] {
        clean(&found, c);
    }
    assert!(
        !found.iter().any(|f| f.contains("crate::live in")),
        "a comment counted: {found:#?}"
    );
}

/// The core's manifest may name the store, host and protocol crates and general crates; a
/// surface's crate or another Tandem crate fails, however the dependency is written.
#[test]
fn the_core_depends_on_no_surface() {
    let manifest = "[package]\nname = \"tandem-core\"\n\n[dependencies]\ntandem-protocol = { workspace = true }\ntandem-store = { workspace = true }\naxum = { workspace = true }\n# tandem-server in a comment\ntandem-media = { workspace = true }\nserde = \"1\"\n\n[dependencies.octocrab]\nversion = \"0.44\"\n\n[dev-dependencies]\naxum = \"0.8\"\n";
    let found: Vec<String> = core_dependencies("core/Cargo.toml", manifest)
        .iter()
        .map(|f| f.to_string())
        .collect();
    has(&found, "core/Cargo.toml", "line 7 depends on `axum`");
    has(
        &found,
        "core/Cargo.toml",
        "line 9 depends on `tandem-media`",
    );
    has(&found, "core/Cargo.toml", "line 12 depends on `octocrab`");
    assert_eq!(found.len(), 3, "{found:#?}");
    let real = std::fs::read_to_string(crate::run::root().join("core/Cargo.toml")).unwrap();
    assert!(
        core_dependencies("core/Cargo.toml", &real).is_empty(),
        "the core's own manifest"
    );
}

/// A circle between server modules fails unless it is on the allow-list, whichever way its
/// imports are written; a tree without one passes.
#[test]
fn an_import_circle_fails() {
    let circle = [
        src(
            "server/src/alpha.rs",
            "//! A.\nuse crate::{beta::{self}};\n",
        ),
        src("server/src/beta/mod.rs", "//! B.\nmod x;\n"),
        src(
            "server/src/beta/x.rs",
            "//! B's part.\nfn f() { super::super::alpha::go(); }\n",
        ),
    ];
    let found = findings(&circle);
    has(
        &found,
        "server/src",
        "import circle of 2 modules not on tidy's ALLOWED_CIRCLES: alpha beta",
    );
    let no_circle = [
        src(
            "server/src/alpha.rs",
            "//! A.\nuse crate::{beta::{self}};\n",
        ),
        src("server/src/beta/mod.rs", "//! B.\nmod x;\n"),
        src("server/src/beta/x.rs", "//! B's part.\nfn f() {}\n"),
    ];
    let found = findings(&no_circle);
    assert!(!found.iter().any(|f| f.contains("circle")), "{found:#?}");
    // A test module's imports are not the module's dependencies.
    let in_tests = [
        src("server/src/alpha.rs", "//! A.\nuse crate::beta;\n"),
        src(
            "server/src/beta.rs",
            "//! B.\n#[cfg(test)]\nmod tests {\n    use crate::alpha;\n}\n",
        ),
    ];
    assert!(!findings(&in_tests).iter().any(|f| f.contains("circle")));
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

/// The workspace boundary: a path, a pid or an OS string in the public surface of the
/// boundary's files, however it is spelled (a parameter, a field, a trait method, a type
/// alias), is caught; the same inside `pub(crate)`, a test or the local runtime's own module is
/// not. And only the composition root names the local runtime.
#[test]
fn the_workspace_boundary_names_no_place_on_this_machine() {
    let files = [
        src(
            "host/src/runtime/mod.rs",
            "//! R.\npub trait Runtime {\n    fn upper_dir(&self, id: &str) -> std::path::PathBuf;\n}\npub struct Workspace {\n    pub init_pid: i32,\n    pub(crate) dir: PathBuf,\n}\npub(crate) fn dirs(p: &Path) {}\n#[cfg(test)]\nmod tests {\n    pub fn f(p: &Path) {}\n}\n",
        ),
        src(
            "host/src/layers.rs",
            "//! L.\npub type Layer = Vec<PathBuf>;\npub enum Site {\n    Here(OsString),\n}\nimpl Host {\n    pub fn snapshot_dir(&self, id: u64, pid: i32) {}\n    fn private(&self) -> PathBuf { todo!() }\n}\n",
        ),
        src(
            "host/src/workspace_agent/conn.rs",
            "//! C.\npub fn connect(socket: &Path) {}\n",
        ),
        src(
            "host/src/runtime/oci.rs",
            "//! O.\npub fn upper_dir(id: &str) -> PathBuf { todo!() }\n",
        ),
        src(
            "core/src/sessions/boot.rs",
            "//! B.\nuse crate::runtime::{Keep, oci::OciRuntime};\nfn f(h: &Host) {\n    let rt = h.runtime.local();\n    tandem_host::runtime::beside::Beside::from_args(&[]);\n}\n",
        ),
        src(
            "server/src/desktop/mod.rs",
            "//! D.\nfn f(h: &Host) { h.runtime.beside(id, 1, 0); }\n",
        ),
        src(
            "server/src/serve/mod.rs",
            "//! S.\nuse crate::runtime::oci::OciRuntime;\n",
        ),
    ];
    let found = findings(&files);
    has(
        &found,
        "host/src/runtime/mod.rs",
        "line 3: its public surface names `PathBuf`",
    );
    has(
        &found,
        "host/src/runtime/mod.rs",
        "line 6: its public surface names `init_pid`",
    );
    has(
        &found,
        "host/src/layers.rs",
        "line 2: its public surface names `PathBuf`",
    );
    has(
        &found,
        "host/src/layers.rs",
        "line 4: its public surface names `OsString`",
    );
    has(
        &found,
        "host/src/layers.rs",
        "line 7: its public surface names `pid`",
    );
    has(
        &found,
        "host/src/workspace_agent/conn.rs",
        "line 2: its public surface names `Path`",
    );
    for quiet in ["line 7:", "line 9:", "line 12:"] {
        assert!(
            !found
                .iter()
                .any(|f| f.starts_with("host/src/runtime/mod.rs") && f.contains(quiet)),
            "pub(crate) and tests are not the public surface: {found:#?}"
        );
    }
    assert!(
        !found
            .iter()
            .any(|f| f.starts_with("host/src/layers.rs") && f.contains("line 8:")),
        "a private method is not the public surface: {found:#?}"
    );
    has(
        &found,
        "core/src/sessions/boot.rs",
        "line 2 names `crate::runtime::oci::OciRuntime`",
    );
    has(
        &found,
        "core/src/sessions/boot.rs",
        "line 4 calls `.local()`",
    );
    has(
        &found,
        "core/src/sessions/boot.rs",
        "line 5 names `tandem_host::runtime::beside::Beside::from_args`",
    );
    for c in [
        "host/src/runtime/oci.rs",
        "server/src/desktop/mod.rs",
        "server/src/serve/mod.rs",
    ] {
        clean(&found, c);
    }
}
