//! Keeping a pod's work when it stops ([`crate::runtime::Keep::Upper`]): a pod's writable layer
//! goes with it, so before the pod is deleted its agent packs the workspace's own directories
//! ([`agent::KEPT_DIRS`], each replacing the one below it) as a layer, which is pushed over the
//! image the pod started from as `tandem-snapshots:workspace-<id>`. The workspace's next start
//! (resume) starts from that image.
//!
//! The layer comes from inside the workspace, so it is hostile: it is bounded in size, and
//! refused unless every entry is a plain file, directory or link under one of the kept
//! directories (no device, no path outside them, no `..`).

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use http_body_util::BodyExt;
use sha2::{Digest, Sha256};
use tandem_protocol::agent;
use tokio::io::AsyncWriteExt;

use super::bounded;
use super::status::{instance_of, running};
use crate::cluster_layers::SNAPSHOTS;
use crate::registry::{Registry, layer::Packed};
use crate::runtime::AgentStream;
use crate::{Error, Result};

/// Marks an image as a kept workspace (its last layer the kept one), with the image below it.
pub const KEPT_FROM_ANNOTATION: &str = "dev.tandem.kept-from";
/// The workspace a kept image is: every workspace's is a manifest of its own, so deleting one
/// (by digest) never takes another's tag with it.
pub const WORKSPACE_ANNOTATION: &str = "dev.tandem.workspace";

/// The most a kept layer may hold when the pod names no disk limit.
const DEFAULT_MAX_BYTES: u64 = 20 << 30;

/// What the runtime needs to keep a pod's work.
pub struct Keeper {
    pub registry: Registry,
    /// Derives each workspace's agent token ([`crate::workspace_agent::token`]).
    pub agent_key: Vec<u8>,
    /// Where a layer is written on its way to the registry.
    pub scratch: PathBuf,
}

/// The tag of workspace `id`'s kept image.
pub fn tag(id: &str) -> String {
    format!("workspace-{id}")
}

impl Keeper {
    /// Workspace `id`'s kept image, if it has one.
    pub async fn kept(&self, id: &str) -> Result<Option<String>> {
        self.registry.resolve(SNAPSHOTS, &tag(id)).await
    }

    /// Packs what the agent of workspace `id` behind `stream` keeps and pushes it over `image`
    /// (what the pod started from) as workspace `as_id`'s kept image (a fork's, or its own),
    /// at most `max_bytes` (none: the default).
    pub async fn keep(
        &self,
        id: &str,
        as_id: &str,
        stream: AgentStream,
        image: &str,
        max_bytes: Option<u64>,
    ) -> Result<String> {
        std::fs::create_dir_all(&self.scratch)?;
        let file = self
            .scratch
            .join(format!("kept-{id}-{}.tar", uuid::Uuid::new_v4()));
        let result = async {
            let packed = self
                .receive(id, stream, &file, max_bytes.unwrap_or(DEFAULT_MAX_BYTES))
                .await?;
            let checked = file.clone();
            tokio::task::spawn_blocking(move || check(&checked))
                .await
                .map_err(|e| Error::Internal(format!("checking the kept layer: {e}")))??;
            // Over the image below a kept one, not over the kept one: the new layer holds all
            // the kept directories again, so images do not grow a layer per stop.
            let (mut layers, annotations) = self.registry.layers_of(image).await?;
            let below = match annotations.get(KEPT_FROM_ANNOTATION) {
                Some(from) => {
                    layers.pop();
                    from.clone()
                }
                None => image.to_string(),
            };
            layers.push(packed);
            let mut annotations: BTreeMap<String, String> = annotations
                .into_iter()
                .filter(|(k, _)| k != KEPT_FROM_ANNOTATION)
                .collect();
            annotations.insert(KEPT_FROM_ANNOTATION.into(), below);
            annotations.insert(WORKSPACE_ANNOTATION.into(), as_id.into());
            self.registry
                .push(SNAPSHOTS, &tag(as_id), &layers, &annotations)
                .await
        }
        .await;
        let _ = tokio::fs::remove_file(&file).await;
        result
    }

    /// The kept image `kept` (by digest), also as workspace `to`'s.
    pub async fn retag(&self, kept: &str, to: &str) -> Result<String> {
        let (layers, mut annotations) = self.registry.layers_of(kept).await?;
        annotations.insert(WORKSPACE_ANNOTATION.into(), to.into());
        self.registry
            .push(SNAPSHOTS, &tag(to), &layers, &annotations)
            .await
    }

    /// Deletes workspace `id`'s kept image, if it has one (its layers stay until the
    /// registry's own garbage collection).
    pub async fn forget(&self, id: &str) -> Result<()> {
        match self.kept(id).await? {
            Some(kept) => self.registry.delete(&kept).await,
            None => Ok(()),
        }
    }

    /// The agent's layer, written to `file` while hashed; refused past `max` bytes.
    async fn receive(
        &self,
        id: &str,
        stream: AgentStream,
        file: &Path,
        max: u64,
    ) -> Result<Packed> {
        let unreachable = |e: &dyn std::fmt::Display| {
            Error::Unavailable(format!("keeping workspace {id}'s files: {e}"))
        };
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|e| unreachable(&e))?;
        tokio::spawn(conn);
        let token = crate::workspace_agent::token(&self.agent_key, id);
        let req = hyper::Request::builder()
            .method(hyper::Method::GET)
            .uri(agent::routes::LAYER)
            .header("host", "agent")
            .header("authorization", format!("Bearer {token}"))
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .map_err(|e| Error::Internal(e.to_string()))?;
        let res = sender
            .send_request(req)
            .await
            .map_err(|e| unreachable(&e))?;
        if res.status() != hyper::StatusCode::OK {
            return Err(unreachable(&format!("its agent answered {}", res.status())));
        }
        let mut body = res.into_body();
        let mut out = tokio::fs::File::create(file).await?;
        let mut hash = Sha256::new();
        let mut size = 0u64;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| unreachable(&e))?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            size += data.len() as u64;
            if size > max {
                return Err(Error::TooLarge(format!(
                    "workspace {id}'s files are more than {} MiB, its disk limit: they cannot be kept",
                    max >> 20
                )));
            }
            hash.update(&data);
            out.write_all(&data).await?;
        }
        out.flush().await?;
        Ok(Packed {
            file: file.to_path_buf(),
            digest: format!("sha256:{:x}", hash.finalize()),
            size,
        })
    }
}

impl super::KubernetesRuntime {
    /// This runtime, keeping a stopping pod's work with `keeper`.
    pub fn keeping(mut self, keeper: Keeper) -> Self {
        self.keeper = Some(keeper);
        self
    }

    /// Workspace `id`'s kept image (what its pod left when it stopped), if it has one.
    pub async fn kept(&self, id: &str) -> Result<Option<String>> {
        match &self.keeper {
            Some(k) => k.kept(id).await,
            None => Ok(None),
        }
    }

    /// Keeps the work of workspace `id`'s pod, if it has a running one, before it goes.
    pub(super) async fn keep_inner(&self, id: &str) -> Result<()> {
        self.keep_as(id, id).await
    }

    /// Keeps the work of workspace `id`'s running pod as what workspace `as_id` starts with.
    /// One keep of a pod at a time: a stop and the supervisor's cleanup of a pod that died
    /// meanwhile must not push the same tag at once (the registry refuses one of two manifests
    /// written together).
    pub(super) async fn keep_as(&self, id: &str, as_id: &str) -> Result<()> {
        let one = {
            let mut all = KEEPING.lock().unwrap_or_else(|e| e.into_inner());
            all.retain(|_, l| std::sync::Arc::strong_count(l) > 1);
            all.entry(id.to_string()).or_default().clone()
        };
        let _one = one.lock().await;
        self.keep_as_alone(id, as_id).await
    }

    async fn keep_as_alone(&self, id: &str, as_id: &str) -> Result<()> {
        let Some(keeper) = &self.keeper else {
            // Nothing is lost: the pod runs on until its work can be kept.
            return Err(Error::Unavailable(format!(
                "workspace {id} runs in a pod, and no registry is configured to keep its files: stop it without keeping them"
            )));
        };
        let Some(pod) = bounded("reading the pod", self.pods.get_opt(id)).await? else {
            // Gone already (evicted, stopped before): what it kept, if anything, stays.
            return Ok(());
        };
        if !running(&pod) {
            tracing::warn!(workspace = %id, "the pod is not running: its files cannot be kept");
            return Ok(());
        }
        let container = pod.spec.as_ref().and_then(|s| s.containers.first());
        let image = container
            .and_then(|c| c.image.clone())
            .ok_or_else(|| Error::Internal(format!("workspace {id}'s pod names no image")))?;
        let max = container
            .and_then(|c| {
                c.resources
                    .as_ref()?
                    .limits
                    .as_ref()?
                    .get("ephemeral-storage")
                    .cloned()
            })
            .and_then(|q| q.0.parse::<u64>().ok());
        let stream = self.connect_inner(id, instance_of(&pod)).await?;
        let kept = keeper.keep(id, as_id, stream, &image, max).await?;
        tracing::info!(workspace = %id, image = %kept, "kept the pod's files");
        Ok(())
    }
}

/// Refuses a kept layer with anything but files, directories and links under the kept
/// directories, or that ends before the tar's end.
pub fn check(file: &Path) -> Result<()> {
    let bad =
        |why: String| Error::Invalid(format!("the workspace's kept files were refused: {why}"));
    let reader = std::fs::File::open(file)?;
    let mut archive = tar::Archive::new(std::io::BufReader::new(reader));
    let mut count = 0u64;
    for entry in archive.entries().map_err(|e| bad(e.to_string()))? {
        let entry = entry.map_err(|e| bad(e.to_string()))?;
        count += 1;
        let path = entry.path().map_err(|e| bad(e.to_string()))?.into_owned();
        let under = agent::KEPT_DIRS
            .iter()
            .any(|d| path.starts_with(d.trim_start_matches('/')));
        let plain = path.components().all(|c| matches!(c, Component::Normal(_)));
        if !under || !plain {
            return Err(bad(format!(
                "{} is outside the kept directories",
                path.display()
            )));
        }
        use tar::EntryType as T;
        match entry.header().entry_type() {
            T::Regular | T::Directory | T::Symlink | T::GNULongName | T::GNULongLink => {}
            T::Link => {
                let target = entry
                    .link_name()
                    .map_err(|e| bad(e.to_string()))?
                    .unwrap_or_default();
                let inside = agent::KEPT_DIRS
                    .iter()
                    .any(|d| target.starts_with(d.trim_start_matches('/')))
                    && target
                        .components()
                        .all(|c| matches!(c, Component::Normal(_)));
                if !inside {
                    return Err(bad(format!(
                        "the hard link {} leads outside the kept directories",
                        path.display()
                    )));
                }
            }
            other => {
                return Err(bad(format!(
                    "{} is a {other:?}, not a file, directory or link",
                    path.display()
                )));
            }
        }
    }
    if count == 0 {
        return Err(bad(
            "it is empty (the workspace's agent failed to pack it)".into()
        ));
    }
    // Entries end where the stream did: only a tar's closing blocks say it was whole.
    let mut f = std::fs::File::open(file)?;
    let len = f.metadata()?.len();
    let mut tail = [0u8; 1024];
    use std::io::{Read, Seek};
    if len < 1024 || len % 512 != 0 {
        return Err(bad("it was cut short".into()));
    }
    f.seek(std::io::SeekFrom::End(-1024))?;
    f.read_exact(&mut tail)?;
    if tail.iter().any(|b| *b != 0) {
        return Err(bad("it was cut short".into()));
    }
    Ok(())
}

/// Pods whose files are being kept now, one keep each at a time.
static KEEPING: std::sync::LazyLock<
    std::sync::Mutex<std::collections::HashMap<String, std::sync::Arc<tokio::sync::Mutex<()>>>>,
> = std::sync::LazyLock::new(Default::default);

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(entries: &[(&str, tar::EntryType, &str)]) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        let mut tar = tar::Builder::new(std::fs::File::create(file.path()).unwrap());
        for (path, kind, link) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(*kind);
            h.set_size(0);
            h.set_mode(0o644);
            if !link.is_empty() {
                h.set_link_name(link).unwrap();
            }
            // Written raw: the builder itself refuses `..`, a hostile agent does not.
            let name = h.as_old_mut().name.as_mut();
            name[..path.len()].copy_from_slice(path.as_bytes());
            h.set_cksum();
            tar.append(&h, std::io::empty()).unwrap();
        }
        tar.finish().unwrap();
        file
    }

    #[test]
    fn a_kept_layer_of_the_kept_dirs_passes() {
        use tar::EntryType as T;
        let ok = layer(&[
            ("workspace", T::Directory, ""),
            ("workspace/.wh..wh..opq", T::Regular, ""),
            ("workspace/a", T::Regular, ""),
            ("workspace/b", T::Symlink, "/etc/shadow"),
            ("workspace/c", T::Link, "workspace/a"),
            ("root/.bashrc", T::Regular, ""),
        ]);
        check(ok.path()).unwrap();
    }

    #[test]
    fn a_kept_layer_reaching_outside_the_kept_dirs_or_holding_devices_is_refused() {
        use tar::EntryType as T;
        for (entries, why) in [
            (vec![("usr/bin/git", T::Regular, "")], "outside"),
            (vec![("workspace/../etc/passwd", T::Regular, "")], "dot-dot"),
            (
                vec![("workspace/x", T::Link, "usr/bin/git")],
                "hard link out",
            ),
            (vec![("workspace/null", T::Char, "")], "device"),
            (vec![("workspace/fifo", T::Fifo, "")], "fifo"),
        ] {
            let bad = layer(&entries);
            let e = check(bad.path()).expect_err(why);
            assert!(e.to_string().contains("refused"), "{why}: {e}");
        }
        let empty = tempfile::NamedTempFile::new().unwrap();
        assert!(check(empty.path()).is_err(), "an empty layer");
        // A stream cut after a whole entry: the entries read fine, the end is missing.
        let whole = layer(&[("workspace/a", T::Regular, "")]);
        let bytes = std::fs::read(whole.path()).unwrap();
        let cut = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(cut.path(), &bytes[..512]).unwrap();
        let e = check(cut.path()).expect_err("a cut layer");
        assert!(e.to_string().contains("cut short"), "{e}");
    }
}
