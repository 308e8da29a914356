//! `cargo xtask test`: everything, the way CI runs it: formatting, clippy and the tidy rules
//! first, then the book and the documentation's links, then every test, then (without a test
//! filter) schemathesis against the API's OpenAPI document, the release web app's build and the
//! `up` smoke test.

use anyhow::{Result, bail};

use crate::postgres::Postgres;
use crate::run;
use crate::{deps, site, smoke};

pub struct Options {
    install: bool,
    /// Extra arguments for `cargo test` (after `--`, e.g. a test name filter).
    filter: Vec<String>,
}

impl Options {
    pub fn parse(args: &[String]) -> Result<Self> {
        let mut o = Options {
            install: true,
            filter: Vec::new(),
        };
        let mut it = args.iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                "--no-install" => o.install = false,
                "--" => o.filter.extend(it.by_ref().cloned()),
                other => bail!(
                    "unknown flag {other:?} for `cargo xtask test` (--no-install, -- <cargo test args>)"
                ),
            }
        }
        Ok(o)
    }
}

/// Formatting, clippy (every target, warnings denied) and the tidy rules: each fails the suite.
fn lint() -> Result<()> {
    let t = run::step("cargo fmt --check, cargo clippy -D warnings, tidy");
    run::cmd(
        run::cargo()
            .args(["fmt", "--all", "--check"])
            .current_dir(run::root()),
    )?;
    run::cmd(
        run::cargo()
            .args([
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ])
            .current_dir(run::root()),
    )?;
    // The server and agent as `up` builds them, without the dev-dependencies' features the
    // lines above and the tests unify in: the suite runs its tests' build of the server (also
    // for schemathesis and the smoke test), so this is where the shipping feature set must
    // still compile (about two minutes on two cores, against six for building it).
    run::cmd(
        run::cargo()
            .arg("clippy")
            .args(&run::SERVER_BINARIES[1..])
            .args(["--", "-D", "warnings"])
            .current_dir(run::root()),
    )?;
    crate::tidy::run(&[])?;
    run::done(t);
    Ok(())
}

/// The path of the Kubernetes runtime's integration tests (`tests/it/on_kubernetes/`).
const KUBERNETES_TESTS: &str = "on_kubernetes::";

pub fn run(o: Options) -> Result<()> {
    let result = run_all(o);
    // Also after a failure: a build that ran out of disk is where it matters most.
    crate::disk::report(&run::target_dir());
    result
}

fn run_all(o: Options) -> Result<()> {
    let start = std::time::Instant::now();
    if o.install {
        deps::ensure(deps::Needs { test: true })?;
    }
    crate::disk::warn_if_short(&run::target_dir());
    lint()?;
    // The book is built and every link checked before the long runs (under a second once
    // mdBook is installed).
    crate::docs::run(o.install)?;
    let site = site::build(site::Profile::Debug)?;
    // Workspaces run the agent binary from next to `tandem`.
    run::cmd(
        run::cargo()
            // The real agent, and the hostile one the trust-boundary tests start workspaces with.
            .args([
                "build",
                "-p",
                "tandem-workspace-agent",
                "-p",
                "tandem-hostile-agent",
            ])
            .current_dir(run::root()),
    )?;
    run::build_confine(false)?;
    // Installed with everything else; without installs, used where it is already there.
    let phoenix = if o.install {
        Some(crate::phoenix::python(true)?)
    } else {
        crate::phoenix::python(false).ok()
    };
    let pg = Postgres::start()?;
    let t = run::step(
        "cargo test (unit, integration on SQLite + PostgreSQL, e2e in headless Chromium)",
    );
    let env = |c: &mut std::process::Command| {
        c.current_dir(run::root())
            .env("TANDEM_TEST_POSTGRES_URL", &pg.url)
            .env("TANDEM_TEST_REQUIRE_POSTGRES", "1")
            .env("TANDEM_E2E_WEB_DIR", &site)
            .env("TANDEM_E2E_REQUIRE", "1")
            .env("TANDEM_TEST_REQUIRE_WORKSPACES", "1")
            .env("TANDEM_TEST_REQUIRE_MCP", "1")
            .env(
                "TANDEM_TEST_IMAGES_DIR",
                run::target_dir().join("tandem-test-images"),
            )
            .env("TANDEM_TEST_OPENCODE", deps::opencode_bin())
            .env("TANDEM_TEST_CODE_SERVER", deps::code_server_dir())
            .env_remove("TANDEM_TOKEN")
            .env_remove("TANDEM_URL");
        if let Some(python) = &phoenix {
            c.env("TANDEM_TEST_PHOENIX", python)
                .env("TANDEM_TEST_REQUIRE_PHOENIX", "1");
        }
    };
    // The Kubernetes runtime's tests run on their own, with the cluster up only for them: the
    // rest of the suite runs on a machine without it.
    // A filter naming only Kubernetes tests runs those alone.
    let only_kubernetes =
        !o.filter.is_empty() && o.filter.iter().all(|f| f.starts_with(KUBERNETES_TESTS));
    let mut counts = run::TestCounts::default();
    if !only_kubernetes {
        let mut all = run::cargo();
        all.args(["test", "--workspace"]);
        env(&mut all);
        counts = run::cargo_test(
            all.arg("--")
                .args(&o.filter)
                .args(["--skip", KUBERNETES_TESTS]),
        )?;
    }
    run::done(t);
    let mut down = Ok(());
    if o.filter.is_empty() || o.filter.iter().any(|f| f.contains("kubernetes")) {
        let cluster = crate::cluster::Cluster::start()?;
        let t = run::step("cargo test: the Kubernetes runtime against the cluster");
        let mut kube = run::cargo();
        // `--workspace`, as above: the same features, so nothing is built again.
        kube.args(["test", "--workspace", "--test", "it"]);
        env(&mut kube);
        let more = run::cargo_test(
            kube.env("TANDEM_TEST_KUBECONFIG", &cluster.kubeconfig)
                .env("TANDEM_TEST_REGISTRY", cluster.registry)
                .env("TANDEM_TEST_REQUIRE_KUBERNETES", "1")
                .arg("--")
                // The filters narrow it; without one, every Kubernetes test.
                .args(o.filter.is_empty().then_some(KUBERNETES_TESTS))
                // Each test runs pods on the same two cores as the cluster's own control
                // plane, the registry and the image pulls: two at once keeps every pod start
                // and push well inside its limits on a fresh machine (three did not).
                .arg("--test-threads=2")
                .args(&o.filter),
        )?;
        run::done(t);
        counts.passed += more.passed;
        counts.failed += more.failed;
        counts.ignored += more.ignored;
        // Nothing of the cluster is left, or the run fails (after the counts are said).
        down = cluster.stop();
    }
    eprintln!(
        "    {} passed, {} failed, {} ignored in cargo test",
        counts.passed, counts.failed, counts.ignored
    );
    down?;
    drop(pg);
    if o.filter.is_empty() {
        // The REST API against its OpenAPI document (needs the image the tests built), and
        // below `up`: both run the debug server `cargo test` built and tested. Built again
        // alone, without the tests' dev-dependency features, it took a second build of most
        // dependencies (~6 minutes of CI on two cores). Tandem's own code is the same in both
        // (its features: `tandem-protocol/openapi`, always on in the server, and
        // `tandem-core/testing`, a test helper module); the dependencies' features differ, and
        // `lint` checks that the server compiles with the ones `up` builds it with.
        crate::schemathesis::run(o.install, false)?;
        // `up`'s web app as people get it (wasm-release, wasm-opt): the smoke test below runs
        // the debug build the suite made, so this is where the release profile's build is
        // checked.
        site::build(site::Profile::Release)?;
        smoke::up(false)?;
    }
    // Every test stops what it started: anything of theirs still here fails the suite.
    crate::leaks::check()?;
    let whole_suite = 2 * usize::from(o.filter.is_empty());
    eprintln!("all tests passed in {:.0}s", start.elapsed().as_secs_f64());
    // One closing line for CI: the cargo test total plus schemathesis and the `up` smoke test.
    println!("tests: {} passed, 0 failed", counts.passed + whole_suite);
    Ok(())
}
