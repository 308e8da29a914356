//! The extension as a CRX3 file, signed with this server's own ECDSA P-256 key (made on first
//! use, kept in the data dir), and the update manifest `ExtensionInstallForcelist` reads. The
//! key fixes the extension's id: the first 16 bytes of the SHA-256 of its public key, in the
//! letters a–p.

use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair};
use sha2::Digest;

use crate::{Error, Result};

/// The DER prefix of a P-256 public key's SubjectPublicKeyInfo (the uncompressed point follows).
const P256_SPKI_PREFIX: &[u8] = &[
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// The signing key: read from `path`, or made and written there (mode 0600) the first time.
pub struct Signer {
    key: EcdsaKeyPair,
}

impl Signer {
    pub fn load_or_create(path: &std::path::Path) -> Result<Self> {
        let rng = SystemRandom::new();
        let pkcs8 = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let made = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng)
                    .map_err(|_| Error::Internal("making the extension's key failed".into()))?;
                match write_private(path, made.as_ref()) {
                    Ok(()) => made.as_ref().to_vec(),
                    // Another request made it first: that one is the key.
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => std::fs::read(path)
                        .map_err(|e| Error::Internal(format!("reading {}: {e}", path.display())))?,
                    Err(e) => {
                        return Err(Error::Internal(format!("writing {}: {e}", path.display())));
                    }
                }
            }
            Err(e) => {
                return Err(Error::Internal(format!("reading {}: {e}", path.display())));
            }
        };
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &pkcs8, &rng)
            .map_err(|_| Error::Internal(format!("{} is not a P-256 key", path.display())))?;
        Ok(Self { key })
    }

    /// The public key as SubjectPublicKeyInfo DER.
    pub fn public_key(&self) -> Vec<u8> {
        [P256_SPKI_PREFIX, self.key.public_key().as_ref()].concat()
    }

    /// The extension id this key gives.
    pub fn extension_id(&self) -> String {
        let hash = sha2::Sha256::digest(self.public_key());
        id_of(&hash[..16])
    }

    /// `zip` as a signed CRX3 file.
    pub fn crx(&self, zip: &[u8]) -> Result<Vec<u8>> {
        let public = self.public_key();
        let crx_id = &sha2::Sha256::digest(&public)[..16];
        // SignedData { crx_id = 1 }
        let signed_data = field(1, crx_id);
        let mut message = b"CRX3 SignedData\x00".to_vec();
        message.extend((signed_data.len() as u32).to_le_bytes());
        message.extend(&signed_data);
        message.extend(zip);
        let signature = self
            .key
            .sign(&SystemRandom::new(), &message)
            .map_err(|_| Error::Internal("signing the extension failed".into()))?;
        // CrxFileHeader { sha256_with_ecdsa = 3: AsymmetricKeyProof { public_key = 1,
        // signature = 2 }, signed_header_data = 10000 }
        let proof = [field(1, &public), field(2, signature.as_ref())].concat();
        let header = [field(3, &proof), field(10_000, &signed_data)].concat();
        let mut out = b"Cr24".to_vec();
        out.extend(3u32.to_le_bytes());
        out.extend((header.len() as u32).to_le_bytes());
        out.extend(header);
        out.extend(zip);
        Ok(out)
    }
}

/// The signing key and the signed package, each made once: the package is public (Chrome's
/// updater has no sign-in), so a request must not cost a signature. The version is the
/// binary's, so a new version is a new process and a new signature.
#[derive(Default)]
pub struct Cache {
    signer: tokio::sync::OnceCell<Signer>,
    crx: tokio::sync::OnceCell<(String, bytes::Bytes)>,
    signed: std::sync::atomic::AtomicU64,
}

impl Cache {
    /// The key at `path` (read or made once; a failure is tried again next time).
    pub async fn signer(&self, path: &std::path::Path) -> Result<&Signer> {
        self.signer
            .get_or_try_init(|| async { Signer::load_or_create(path) })
            .await
    }

    /// The package `zip` makes, signed once for `version`.
    pub async fn crx<F, Fut>(
        &self,
        path: &std::path::Path,
        version: &str,
        zip: F,
    ) -> Result<bytes::Bytes>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<Vec<u8>>>,
    {
        let (signed_for, crx) = self
            .crx
            .get_or_try_init(|| async {
                let signer = self.signer(path).await?;
                let crx = signer.crx(&zip().await?)?;
                self.signed
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Ok::<_, Error>((version.to_string(), bytes::Bytes::from(crx)))
            })
            .await?;
        if signed_for != version {
            return Err(Error::Internal(format!(
                "the extension was signed for version {signed_for}, not {version}"
            )));
        }
        Ok(crx.clone())
    }

    /// How many times the package was signed (once per process).
    pub fn signatures(&self) -> u64 {
        self.signed.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Writes a new file readable by its owner only; fails if it exists. Written whole under a
/// temporary name first, so no reader sees half a key.
fn write_private(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    // A hard link fails if the key exists: the first one made stays.
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    linked
}

/// 16 bytes as an extension id: each half-byte as a letter a–p.
pub fn id_of(bytes: &[u8]) -> String {
    bytes
        .iter()
        .flat_map(|b| [b >> 4, b & 15])
        .map(|n| (b'a' + n) as char)
        .collect()
}

/// A protobuf length-delimited field.
fn field(number: u32, bytes: &[u8]) -> Vec<u8> {
    let mut out = varint(u64::from(number) << 3 | 2);
    out.extend(varint(bytes.len() as u64));
    out.extend(bytes);
    out
}

fn varint(mut n: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let low = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(low);
            return out;
        }
        out.push(low | 0x80);
    }
}

/// The update manifest (`gupdate`) offering `crx_url` at `version` for extension `id`.
pub fn update_manifest(id: &str, crx_url: &str, version: &str) -> String {
    let esc = |s: &str| {
        s.replace('&', "&amp;")
            .replace('\'', "&apos;")
            .replace('<', "&lt;")
    };
    format!(
        "<?xml version='1.0' encoding='UTF-8'?>\n<gupdate xmlns='http://www.google.com/update2/response' protocol='2.0'>\n  <app appid='{}'>\n    <updatecheck codebase='{}' version='{}' />\n  </app>\n</gupdate>\n",
        esc(id),
        esc(crx_url),
        esc(version)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::signature::{ECDSA_P256_SHA256_ASN1, UnparsedPublicKey};

    /// Reads one length-delimited field at `at`: (field number, bytes, next offset).
    fn read_field(b: &[u8], mut at: usize) -> (u64, &[u8], usize) {
        let mut varint = || {
            let (mut n, mut shift) = (0u64, 0);
            loop {
                let byte = b[at];
                at += 1;
                n |= u64::from(byte & 0x7f) << shift;
                shift += 7;
                if byte & 0x80 == 0 {
                    return n;
                }
            }
        };
        let tag = varint();
        let len = varint() as usize;
        assert_eq!(tag & 7, 2, "length-delimited");
        (tag >> 3, &b[at..at + len], at + len)
    }

    #[test]
    fn the_crx_is_signed_by_the_key_that_names_its_id() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("extension-key.pk8");
        let signer = Signer::load_or_create(&key).unwrap();
        let again = Signer::load_or_create(&key).unwrap();
        assert_eq!(
            signer.extension_id(),
            again.extension_id(),
            "the key is kept"
        );
        assert_eq!(signer.extension_id().len(), 32);
        let zip = b"PK\x03\x04 a zip".to_vec();
        let crx = signer.crx(&zip).unwrap();
        assert_eq!(&crx[..4], b"Cr24");
        assert_eq!(u32::from_le_bytes(crx[4..8].try_into().unwrap()), 3);
        let header_len = u32::from_le_bytes(crx[8..12].try_into().unwrap()) as usize;
        let header = &crx[12..12 + header_len];
        assert_eq!(
            &crx[12 + header_len..],
            &zip[..],
            "the zip follows the header"
        );
        let (n, proof, next) = read_field(header, 0);
        assert_eq!(n, 3, "sha256_with_ecdsa");
        let (n, signed_data, _) = read_field(header, next);
        assert_eq!(n, 10_000, "signed_header_data");
        let (_, public, at) = read_field(proof, 0);
        let (_, signature, _) = read_field(proof, at);
        let (_, crx_id, _) = read_field(signed_data, 0);
        assert_eq!(id_of(crx_id), signer.extension_id());
        let mut message = b"CRX3 SignedData\x00".to_vec();
        message.extend((signed_data.len() as u32).to_le_bytes());
        message.extend(signed_data);
        message.extend(&zip);
        let point = public.strip_prefix(P256_SPKI_PREFIX).unwrap();
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_ASN1, point)
            .verify(&message, signature)
            .expect("the signature holds");
        let mut tampered = message.clone();
        *tampered.last_mut().unwrap() ^= 1;
        assert!(
            UnparsedPublicKey::new(&ECDSA_P256_SHA256_ASN1, point)
                .verify(&tampered, signature)
                .is_err()
        );
    }

    #[test]
    fn the_update_manifest_escapes_what_it_quotes() {
        let xml = update_manifest("abc", "https://t/extension/tandem.crx?a=1&b='2'", "1.2");
        assert!(xml.contains("codebase='https://t/extension/tandem.crx?a=1&amp;b=&apos;2&apos;'"));
        assert!(xml.contains("appid='abc'"));
    }
}
