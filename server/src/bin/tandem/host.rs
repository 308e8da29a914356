//! Commands about this host: `tandem doctor`, `tandem image build`.

use std::time::Duration;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use tandem_server::config::Config;
use tandem_server::{images, runtime};

/// `tandem doctor`: the host's checks, then what stops sessions with this data dir's
/// configuration (the same problems `/api/health` and the dashboard report).
pub async fn doctor(config: &Config, json: bool) -> Result<()> {
    let mut checks = runtime::doctor::checks();
    // The server makes its data dir at start; so does this, to probe what it would.
    let _ = std::fs::create_dir_all(&config.data_dir);
    // User namespaces also need a data dir a workspace's uid can reach.
    if let Some(c) = checks
        .iter_mut()
        .find(|c| c.name == "user namespaces" && c.ok)
        && let Err(why) = runtime::userns::reachable(&config.data_dir.join("workspaces"))
    {
        c.ok = false;
        c.detail = format!("not used with this data dir: {why}");
    }
    let mut problems: Vec<tandem_protocol::Problem> =
        match tandem_server::serve::workspaces(config, None).await {
            Err(p) => vec![p],
            Ok(host) => host.start_problem().into_iter().collect(),
        };
    // The model may be set on the settings page: read the database if it is there.
    if let Ok(db) = tandem_server::db::Db::connect(&config.database_url).await
        && let Ok(settings) = tandem_server::settings::Settings::load(&db, config).await
    {
        problems.extend(settings.model_problem(&settings.default_agent()));
    }
    // The configured `code_url` as the server would take it (`*.localhost` beside loopback).
    let mut resolved = config.clone();
    let public_url = resolved
        .public_url
        .clone()
        .unwrap_or_else(|| format!("http://{}", resolved.listen));
    resolved.code_url = resolved
        .code_url
        .take()
        .or_else(|| tandem_server::config::code_origin::CodeOrigin::beside(&public_url));
    let warnings = tandem_server::availability::warnings(&resolved);
    let refused = tandem_server::availability::code_url_refusal(&resolved);
    if json {
        let out = serde_json::json!({
            "checks": checks,
            "workspaces": tandem_protocol::WorkspacesHealth {
                ready: problems.is_empty(),
                problems,
            },
            "warnings": warnings,
            "refused": refused,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    for c in &checks {
        println!(
            "{} {:<16} {}",
            if c.ok { "✓" } else { "✗" },
            c.name,
            c.detail
        );
    }
    if problems.is_empty() {
        println!("✓ {:<16} sessions can start here", "workspaces");
    }
    for p in &problems {
        println!(
            "✗ {:<16} {}\n  {:<16} fix: {}",
            "workspaces", p.message, "", p.fix
        );
    }
    if let Some(why) = &refused {
        println!(
            "✗ {:<16} `tandem serve` refuses to start so: {why}",
            "code_url"
        );
    }
    for p in &warnings {
        println!(
            "! {:<16} {}\n  {:<16} fix: {}",
            "code_url", p.message, "", p.fix
        );
    }
    Ok(())
}

/// `tandem image build`.
pub async fn image_build(config: &Config) -> Result<()> {
    let text = match &config.image_recipe {
        Some(p) => {
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?
        }
        None => images::BASE_RECIPE.to_string(),
    };
    let dir = config.images_dir.clone();
    if let Some(img) = images::find(&dir, &text) {
        println!(
            "{} {} is already built: {}",
            img.name,
            img.digest,
            img.rootfs.display()
        );
        return Ok(());
    }
    let bar = ProgressBar::new_spinner();
    bar.set_style(ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] building image: {wide_msg}",
    )?);
    bar.enable_steady_tick(Duration::from_millis(120));
    let img = images::build(&dir, &text, |line| {
        // mmdebstrap's verbose lines; show the phase, not the noise.
        let l = line.trim();
        if !l.is_empty() {
            bar.set_message(l.chars().take(100).collect::<String>());
        }
    })
    .await;
    bar.finish_and_clear();
    let img = img?;
    println!(
        "built {} {} in {:.1}s ({} MiB): {}",
        img.name,
        img.digest,
        img.build_ms as f64 / 1000.0,
        img.size_bytes >> 20,
        img.rootfs.display()
    );
    Ok(())
}
