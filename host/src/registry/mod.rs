//! Images in an OCI registry: where a cluster's workspaces start from. An image is pushed as
//! uncompressed layers ([`layer`]) under a config and a manifest carrying Tandem's annotations
//! (recipe hash, commit, agent version); a layer the registry has already is not sent again.
//! Images are named by digest (`registry/repository@sha256:…`), so a tag moving never changes
//! what a workspace runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::{Error, Result};

pub mod layer;

/// A registry Tandem pushes workspace images to.
pub struct Registry {
    client: Client,
    /// `host[:port]/path`: images are `<base>/<name>`.
    base: String,
    auth: RegistryAuth,
    /// Plain HTTP.
    insecure: bool,
    /// For what `oci-client` does not do (deleting).
    http: reqwest::Client,
}

fn oci_error(what: &str) -> impl Fn(oci_client::errors::OciDistributionError) -> Error + '_ {
    move |e| Error::BadGateway(format!("{what}: the registry answered: {e}"))
}

/// The media type of an uncompressed layer.
const LAYER: &str = "application/vnd.oci.image.layer.v1.tar";
const CONFIG: &str = "application/vnd.oci.image.config.v1+json";
const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

impl Registry {
    /// The registry at `base` (`host[:port]/path`); `insecure`: plain HTTP (a registry on
    /// loopback); `auth`: user and password, or none.
    pub fn new(base: &str, insecure: bool, auth: Option<(String, String)>) -> Self {
        let host = base.split('/').next().unwrap_or(base).to_string();
        let config = ClientConfig {
            protocol: if insecure {
                ClientProtocol::HttpsExcept(vec![host])
            } else {
                ClientProtocol::Https
            },
            // Whole-blob uploads: one PUT per layer, which every registry takes.
            use_monolithic_push: true,
            ..ClientConfig::default()
        };
        Self {
            client: Client::new(config),
            base: base.trim_end_matches('/').to_string(),
            auth: match auth {
                Some((user, password)) => RegistryAuth::Basic(user, password),
                None => RegistryAuth::Anonymous,
            },
            insecure,
            http: reqwest::Client::builder()
                .timeout(std::time::Duration::from_secs(30))
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap_or_default(),
        }
    }

    fn reference(&self, name: &str, tag: &str) -> Result<Reference> {
        format!("{}/{name}:{tag}", self.base)
            .parse()
            .map_err(|e| Error::Invalid(format!("image name {name}:{tag}: {e}")))
    }

    /// Pushes the image of `layers` (bottom first, already packed) as `name:tag` with
    /// `annotations`; returns its reference by digest.
    pub async fn push(
        &self,
        name: &str,
        tag: &str,
        layers: &[layer::Packed],
        annotations: &BTreeMap<String, String>,
    ) -> Result<String> {
        let reference = self.reference(name, tag)?;
        self.client
            .store_auth_if_needed(reference.resolve_registry(), &self.auth)
            .await;
        for l in layers {
            let there = self
                .client
                .blob_exists(&reference, &l.digest)
                .await
                .map_err(oci_error("checking a layer"))?;
            if !there {
                let file = tokio::fs::File::open(&l.file).await?;
                let stream = tokio_util::io::ReaderStream::with_capacity(file, 1 << 20);
                let stream = futures::StreamExt::map(stream, |r| {
                    r.map_err(oci_client::errors::OciDistributionError::IoError)
                });
                self.client
                    .push_blob_stream(&reference, stream, &l.digest, Some(l.size))
                    .await
                    .map_err(oci_error("pushing a layer"))?;
            }
        }
        let config = serde_json::to_vec(&json!({
            "architecture": "amd64",
            "os": "linux",
            "config": {},
            "rootfs": {
                "type": "layers",
                "diff_ids": layers.iter().map(|l| l.digest.clone()).collect::<Vec<_>>(),
            },
        }))
        .map_err(|e| Error::Internal(e.to_string()))?;
        let config_digest = format!("sha256:{:x}", Sha256::digest(&config));
        self.client
            .push_blob(&reference, config.clone(), &config_digest)
            .await
            .map_err(oci_error("pushing the image's config"))?;
        let manifest = serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "config": { "mediaType": CONFIG, "digest": config_digest, "size": config.len() },
            "layers": layers.iter().map(|l| json!({
                "mediaType": LAYER, "digest": l.digest, "size": l.size,
            })).collect::<Vec<_>>(),
            "annotations": annotations,
        }))
        .map_err(|e| Error::Internal(e.to_string()))?;
        let digest = format!("sha256:{:x}", Sha256::digest(&manifest));
        self.client
            .push_manifest_raw(
                &reference,
                manifest,
                MANIFEST.parse().expect("a media type"),
            )
            .await
            .map_err(oci_error("pushing the image's manifest"))?;
        Ok(format!("{}/{name}@{digest}", self.base))
    }

    /// The reference by digest of `name:tag`, or none where the registry has no such image (an
    /// unreachable registry is an error, never "none").
    pub async fn resolve(&self, name: &str, tag: &str) -> Result<Option<String>> {
        let reference = self.reference(name, tag)?;
        match self
            .client
            .pull_manifest_raw(&reference, &self.auth, &[MANIFEST])
            .await
        {
            Ok((_, digest)) => Ok(Some(format!("{}/{name}@{digest}", self.base))),
            Err(e) if missing(&e) => Ok(None),
            Err(e) => Err(oci_error("looking the image up")(e)),
        }
    }

    /// The layers (digest and size; no file here) and annotations of the image `reference`.
    pub async fn layers_of(
        &self,
        reference: &str,
    ) -> Result<(Vec<layer::Packed>, BTreeMap<String, String>)> {
        let r: Reference = reference
            .parse()
            .map_err(|e| Error::Invalid(format!("image {reference}: {e}")))?;
        let (manifest, _) = self
            .client
            .pull_image_manifest(&r, &self.auth)
            .await
            .map_err(oci_error("reading the image's manifest"))?;
        let layers = manifest
            .layers
            .iter()
            .map(|l| layer::Packed {
                file: PathBuf::new(),
                digest: l.digest.clone(),
                size: l.size.max(0) as u64,
            })
            .collect();
        Ok((
            layers,
            manifest
                .annotations
                .unwrap_or_default()
                .into_iter()
                .collect(),
        ))
    }

    /// Deletes the image `reference` (by digest, as [`Registry::push`] names it) and so every
    /// tag on it. One the registry does not have is no error.
    pub async fn delete(&self, reference: &str) -> Result<()> {
        let (repository, digest) = reference
            .strip_prefix(&format!("{}/", self.base))
            .and_then(|rest| rest.split_once('@'))
            .ok_or_else(|| {
                Error::Invalid(format!("{reference} is not an image of {}", self.base))
            })?;
        let host = self.base.split('/').next().unwrap_or(&self.base);
        let path = self.base[host.len()..].trim_start_matches('/');
        let repository = if path.is_empty() {
            repository.to_string()
        } else {
            format!("{path}/{repository}")
        };
        let scheme = if self.insecure { "http" } else { "https" };
        let url = format!("{scheme}://{host}/v2/{repository}/manifests/{digest}");
        let mut req = self.http.delete(&url);
        if let RegistryAuth::Basic(user, password) = &self.auth {
            req = req.basic_auth(user, Some(password));
        }
        let res = req
            .send()
            .await
            .map_err(|e| Error::BadGateway(format!("deleting {reference}: {e}")))?;
        match res.status().as_u16() {
            200..=299 | 404 => Ok(()),
            405 => Err(Error::Config(format!(
                "the registry refuses to delete images ({reference}): enable deletes in its configuration (storage.delete.enabled)"
            ))),
            s => Err(Error::BadGateway(format!(
                "deleting {reference}: the registry answered {s}"
            ))),
        }
    }

    /// The annotations of the image `reference` (a digest reference this registry holds).
    pub async fn annotations(&self, reference: &str) -> Result<BTreeMap<String, String>> {
        let r: Reference = reference
            .parse()
            .map_err(|e| Error::Invalid(format!("image {reference}: {e}")))?;
        let (manifest, _) = self
            .client
            .pull_image_manifest(&r, &self.auth)
            .await
            .map_err(oci_error("reading the image's manifest"))?;
        Ok(manifest
            .annotations
            .unwrap_or_default()
            .into_iter()
            .collect())
    }
}

/// Whether the registry said the image is not there (as opposed to failing).
fn missing(e: &oci_client::errors::OciDistributionError) -> bool {
    use oci_client::errors::{OciDistributionError as E, OciErrorCode as C};
    match e {
        E::ImageManifestNotFoundError(_) => true,
        E::ServerError { code, .. } => *code == 404,
        E::RegistryError { envelope, .. } => envelope
            .errors
            .iter()
            .any(|e| matches!(e.code, C::ManifestUnknown | C::NameUnknown | C::NotFound)),
        _ => false,
    }
}

/// Packs `source` into `dir/<name>.tar` off the async threads.
pub async fn pack(source: layer::Source, dir: &Path, name: &str) -> Result<layer::Packed> {
    std::fs::create_dir_all(dir)?;
    let into = dir.join(format!("{name}.tar"));
    tokio::task::spawn_blocking(move || layer::pack(&source, &into))
        .await
        .map_err(|e| Error::Internal(format!("packing a layer: {e}")))?
}

/// [`pack`] once for a `name` that says what it holds (a content address, such as an
/// image's recipe digest): a layer packed before under that name is taken as it is.
pub async fn pack_once(source: layer::Source, dir: &Path, name: &str) -> Result<layer::Packed> {
    let file = dir.join(format!("{name}.tar"));
    let note = dir.join(format!("{name}.digest"));
    if let (Ok(digest), Ok(meta)) = (std::fs::read_to_string(&note), std::fs::metadata(&file)) {
        return Ok(layer::Packed {
            file,
            digest: digest.trim().to_string(),
            size: meta.len(),
        });
    }
    let packed = pack(source, dir, name).await?;
    // Written last: a pack cut short leaves no note, so it is packed again.
    std::fs::write(&note, &packed.digest)?;
    Ok(packed)
}
