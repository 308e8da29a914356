//! Commands about this host: `tandem doctor`, `tandem image build`.

use std::time::Duration;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use tandem_server::config::Config;
use tandem_server::{images, runtime};

/// `tandem doctor`.
pub fn doctor(json: bool) -> Result<()> {
    let checks = runtime::doctor::checks();
    if json {
        println!("{}", serde_json::to_string_pretty(&checks)?);
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
