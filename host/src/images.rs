//! Workspace images: a recipe (`images/*/image.toml`) built with mmdebstrap into a read-only root
//! filesystem under `<data dir>/images/<digest>/rootfs`, content-addressed by the recipe's digest.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::{Error, Result};

/// The default image's recipe, built in.
pub const BASE_RECIPE: &str = include_str!("../../images/base/image.toml");

/// An image recipe.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Recipe {
    pub name: String,
    /// Debian suite, e.g. `bookworm`.
    pub suite: String,
    /// mmdebstrap variant: `minbase`, `buildd`, `important`, …
    #[serde(default = "default_variant")]
    pub variant: String,
    pub packages: Vec<String>,
    /// Debian mirror; default: the host's apt sources.
    #[serde(default)]
    pub mirror: Option<String>,
}

fn default_variant() -> String {
    "minbase".into()
}

/// A built image.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Image {
    pub name: String,
    /// `sha256:<hex>` of the recipe.
    pub digest: String,
    /// The root filesystem (an overlay lower layer; never written).
    pub rootfs: PathBuf,
    pub size_bytes: u64,
    pub build_ms: u64,
}

impl Recipe {
    /// Parses a recipe.
    pub fn parse(text: &str) -> Result<Self> {
        let r: Recipe =
            toml::from_str(text).map_err(|e| Error::Invalid(format!("image recipe: {e}")))?;
        let ok = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.:_".contains(c))
        };
        if !ok(&r.suite) || !ok(&r.variant) || !r.packages.iter().all(|p| ok(p)) {
            return Err(Error::Invalid(
                "image recipe: suite, variant and packages must be plain Debian names".into(),
            ));
        }
        Ok(r)
    }
}

/// `sha256:<hex>` of the recipe text (comments and all: a recipe is its text).
pub fn digest(recipe_text: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"tandem-image-v1\n");
    h.update(recipe_text.as_bytes());
    format!("sha256:{:x}", h.finalize())
}

fn dir_for(images_dir: &Path, digest: &str) -> PathBuf {
    images_dir.join(
        digest
            .trim_start_matches("sha256:")
            .chars()
            .take(24)
            .collect::<String>(),
    )
}

/// The built image for `recipe_text`, if it exists.
pub fn find(images_dir: &Path, recipe_text: &str) -> Option<Image> {
    let meta = dir_for(images_dir, &digest(recipe_text)).join("image.json");
    serde_json::from_slice(&std::fs::read(meta).ok()?).ok()
}

/// Builds the image unless it exists; `progress` gets each line mmdebstrap prints. Safe to call
/// from several processes at once: each builds in a private directory and the first rename wins.
pub async fn build(
    images_dir: &Path,
    recipe_text: &str,
    mut progress: impl FnMut(&str),
) -> Result<Image> {
    if let Some(img) = find(images_dir, recipe_text) {
        return Ok(img);
    }
    let recipe = Recipe::parse(recipe_text)?;
    let digest = digest(recipe_text);
    let final_dir = dir_for(images_dir, &digest);
    let tmp = images_dir.join(format!(".building-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&tmp)?;
    let start = Instant::now();
    let rootfs = tmp.join("rootfs");
    let mut cmd = tokio::process::Command::new("mmdebstrap");
    cmd.arg(format!("--variant={}", recipe.variant))
        .arg("--mode=root")
        .arg("--format=directory")
        .arg("--verbose");
    if !recipe.packages.is_empty() {
        cmd.arg(format!("--include={}", recipe.packages.join(",")));
    }
    cmd.arg(&recipe.suite).arg(&rootfs);
    if let Some(m) = &recipe.mirror {
        cmd.arg(m);
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| {
            Error::Config(format!(
                "cannot run mmdebstrap (apt-get install mmdebstrap): {e}"
            ))
        })?;
    let mut lines = BufReader::new(child.stderr.take().expect("piped")).lines();
    let mut tail: Vec<String> = Vec::new();
    while let Some(line) = lines.next_line().await? {
        progress(&line);
        tail.push(line);
        if tail.len() > 30 {
            tail.remove(0);
        }
    }
    let status = child.wait().await?;
    if !status.success() {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(Error::Internal(format!(
            "mmdebstrap failed ({status}):\n{}",
            tail.join("\n")
        )));
    }
    let image = Image {
        name: recipe.name.clone(),
        digest: digest.clone(),
        rootfs: final_dir.join("rootfs"),
        size_bytes: du(&rootfs),
        build_ms: start.elapsed().as_millis() as u64,
    };
    std::fs::write(tmp.join("recipe.toml"), recipe_text)?;
    std::fs::write(
        tmp.join("image.json"),
        serde_json::to_vec_pretty(&image).map_err(|e| Error::Internal(e.to_string()))?,
    )?;
    match std::fs::rename(&tmp, &final_dir) {
        Ok(()) => Ok(image),
        // Someone else finished first: theirs is identical.
        Err(_) if final_dir.join("image.json").exists() => {
            let _ = std::fs::remove_dir_all(&tmp);
            find(images_dir, recipe_text).ok_or_else(|| Error::Internal("image vanished".into()))
        }
        Err(e) => Err(e.into()),
    }
}

/// Bytes used by a tree (apparent sizes, hard links counted once per name).
pub fn du(p: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(p) else {
        return 0;
    };
    if meta.is_dir() {
        std::fs::read_dir(p)
            .map(|rd| rd.flatten().map(|e| du(&e.path())).sum())
            .unwrap_or(0)
            + meta.len()
    } else {
        meta.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recipes_parse_and_hash_by_content() {
        let r = Recipe::parse(BASE_RECIPE).unwrap();
        assert!(
            r.packages.contains(&"dumb-init".to_string()),
            "the runtime's init comes from the image"
        );
        assert_ne!(digest(BASE_RECIPE), digest(&format!("{BASE_RECIPE}\n")));
        assert!(Recipe::parse("name='x'\nsuite='bookworm'\npackages=['git; rm -rf /']").is_err());
        assert!(Recipe::parse("name='x'\nsuite='bookworm'\npackages=[]\nfoo=1").is_err());
    }
}
