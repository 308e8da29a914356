//! The link checker's self-tests: broken files and anchors planted in a scratch repository are
//! reported, one line each; good links, code and external links are not.

use std::path::{Path, PathBuf};

use super::{check, complete_output, markdown_files, slug};

/// A scratch repository under the system temp dir, removed when dropped.
struct Repo(PathBuf);

impl Repo {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("tandem-docs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Repo(dir)
    }

    fn write(&self, path: &str, text: &str) -> &Self {
        let p = self.0.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
        self
    }

    fn check(&self) -> Vec<String> {
        check(&self.0, &markdown_files(&self.0).unwrap()).unwrap()
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Repo {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_broken_file_link_and_a_broken_anchor_are_each_reported_with_their_line() {
    let repo = Repo::new("broken");
    repo.write(
        "docs/guide.md",
        "# Guide\n\n## The first run\n\nText.\n\n## The first run\n",
    )
    .write(
        "README.md",
        "# Tandem\n\
         \n\
         See [the guide](docs/guide.md#the-first-run) and [again](docs/guide.md#the-first-run-1).\n\
         A [missing file](docs/missing.md) and\n\
         [a missing heading](docs/guide.md#no-such-heading).\n\
         [Up](#tandem), [down](#nowhere).\n",
    );
    assert_eq!(
        repo.check(),
        [
            "README.md:4: broken link `docs/missing.md` (no such file docs/missing.md)",
            "README.md:5: broken link `docs/guide.md#no-such-heading` (no heading for #no-such-heading in docs/guide.md)",
            "README.md:6: broken link `#nowhere` (no heading for #nowhere in README.md)",
        ]
    );
}

#[test]
fn good_links_code_and_external_links_pass() {
    let repo = Repo::new("good");
    repo.write("docs/screenshots/a.png", "")
        .write("docs/book/src/SUMMARY.md", "# Summary\n\n- [Intro](intro.md)\n")
        .write(
            "docs/book/src/intro.md",
            "# Intro\n\n\
             ![A screenshot](../../screenshots/a.png)\n\
             [The front page](../../../README.md#whats-here), [a folder](../../screenshots/),\n\
             [the web](https://example.com/nowhere.md), <mailto:a@example.com>, <a@example.com>.\n\
             `[not a link](nowhere.md)`\n\n\
             ```md\n[not a link either](nowhere.md)\n```\n",
        )
        .write(
            "README.md",
            "# What's here\n\n[The book](docs/book/src/intro.md#intro), [root](/docs/book/src/SUMMARY.md).\n",
        );
    assert_eq!(repo.check(), Vec::<String>::new());
}

#[test]
fn a_link_that_climbs_out_of_the_repository_is_broken() {
    let repo = Repo::new("outside");
    repo.write("README.md", "[Elsewhere](../../etc/passwd)\n");
    assert_eq!(
        repo.check(),
        ["README.md:1: broken link `../../etc/passwd` (outside the repository)"]
    );
}

/// mdBook's `{{#include}}` puts a file's text in a chapter: its headings are the chapter's
/// anchors, and its links are read from the chapter's directory, where the book shows them.
#[test]
fn an_included_files_links_are_checked_where_the_chapter_includes_them() {
    let repo = Repo::new("include");
    repo.write(
        "docs/SECURITY.md",
        "# Security\n\n## Trust boundaries\n\nSee [PERF](PERF.md).\n",
    )
    .write("docs/PERF.md", "# Performance\n")
    .write(
        "docs/book/src/security.md",
        "{{#include ../../SECURITY.md}}\n\n{{#include ../../GONE.md}}\n",
    )
    .write(
        "README.md",
        "[Boundaries](docs/book/src/security.md#trust-boundaries)\n",
    );
    assert_eq!(
        repo.check(),
        [
            "docs/book/src/security.md:3: broken link `../../GONE.md` (the file it includes does not exist)",
            "docs/SECURITY.md:5: broken link `PERF.md` (no such file docs/book/src/PERF.md, as included by docs/book/src/security.md)",
        ]
    );
}

#[test]
fn headings_slug_as_github_does() {
    assert_eq!(slug("Workspaces and snapshots"), "workspaces-and-snapshots");
    assert_eq!(
        slug("`protocol/` (crate `tandem-protocol`) — API boundary"),
        "protocol-crate-tandem-protocol--api-boundary"
    );
    assert_eq!(
        slug("What `cargo xtask up` does"),
        "what-cargo-xtask-up-does"
    );
    assert_eq!(slug("The recipe: tandem.toml"), "the-recipe-tandemtoml");
}

/// The built book keeps working on its own: a screenshot and a repository document a chapter
/// points at are copied under `repo/` and the page's links follow them.
#[test]
fn links_that_leave_the_built_book_point_at_copies() {
    let repo = Repo::new("output");
    repo.write("docs/screenshots/a.png", "png")
        .write("docs/PERF.md", "# Performance\n\n## Session start\n")
        .write("docs/book/src/intro.md", "# Intro\n")
        .write(
            "target/book/intro.html",
            "<img src=\"../../screenshots/a.png\" alt=\"\"> <a href=\"../../PERF.html#session-start\">PERF</a> \
             <a href=\"other.html\">in the book</a> <a href=\"https://example.com\">out</a>",
        )
        .write("target/book/other.html", "");
    let out = repo.path().join("target/book");
    complete_output(repo.path(), &repo.path().join("docs/book/src"), &out).unwrap();
    assert_eq!(
        std::fs::read_to_string(out.join("intro.html")).unwrap(),
        "<img src=\"repo/docs/screenshots/a.png\" alt=\"\"> <a href=\"repo/docs/PERF.html#session-start\">PERF</a> \
         <a href=\"other.html\">in the book</a> <a href=\"https://example.com\">out</a>"
    );
    assert_eq!(
        std::fs::read_to_string(out.join("repo/docs/screenshots/a.png")).unwrap(),
        "png"
    );
    let perf = std::fs::read_to_string(out.join("repo/docs/PERF.html")).unwrap();
    assert!(perf.contains("<h2 id=\"session-start\">"), "{perf}");
}
