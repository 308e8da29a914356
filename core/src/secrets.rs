//! The secret store: values (model API keys, later GitHub App keys) encrypted at rest with
//! ChaCha20-Poly1305 under a key kept in the data dir, so a database dump alone reveals nothing.
//! Values are write-only through the API; only the server reads them, for the request that needs
//! them, and they never enter events, logs or workspaces.

use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use tandem_protocol::{SecretInfo, Timestamp};

use crate::db::{self, Db};
use crate::{Error, Result, now_ms};

/// Longest secret name and value.
pub const MAX_NAME_BYTES: usize = 100;
pub const MAX_VALUE_BYTES: usize = 64 * 1024;

/// The store's key.
pub struct Secrets {
    key: LessSafeKey,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secrets(..)")
    }
}

impl Secrets {
    /// Loads `<data dir>/secrets.key`, made on first use (mode 0600).
    pub fn load_or_create(data_dir: &Path) -> Result<Self> {
        let bytes =
            crate::data_dir::load_or_create_key(&data_dir.join(crate::data_dir::SECRETS_KEY))?;
        let raw: [u8; 32] = bytes
            .get(..32)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| Error::Config("secrets.key is too short".into()))?;
        let key = UnboundKey::new(&CHACHA20_POLY1305, &raw)
            .map_err(|_| Error::Internal("secret key".into()))?;
        Ok(Self {
            key: LessSafeKey::new(key),
        })
    }

    fn seal(&self, name: &str, value: &str) -> Result<(String, String)> {
        let mut nonce = [0u8; 12];
        SystemRandom::new()
            .fill(&mut nonce)
            .map_err(|_| Error::Internal("no randomness".into()))?;
        let mut buf = value.as_bytes().to_vec();
        // The name is the associated data: a ciphertext moved to another name does not open.
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(name.as_bytes()),
                &mut buf,
            )
            .map_err(|_| Error::Internal("encrypting a secret failed".into()))?;
        Ok((STANDARD.encode(nonce), STANDARD.encode(buf)))
    }

    fn open(&self, name: &str, nonce: &str, ciphertext: &str) -> Result<String> {
        let broken = || {
            Error::Internal(format!(
                "secret {name:?} cannot be decrypted with this server's secrets.key"
            ))
        };
        let nonce: [u8; 12] = STANDARD
            .decode(nonce)
            .ok()
            .and_then(|n| n.try_into().ok())
            .ok_or_else(broken)?;
        let mut buf = STANDARD.decode(ciphertext).map_err(|_| broken())?;
        let plain = self
            .key
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(name.as_bytes()),
                &mut buf,
            )
            .map_err(|_| broken())?;
        String::from_utf8(plain.to_vec()).map_err(|_| broken())
    }

    /// `value` sealed for storage elsewhere (`nonce.ciphertext`); `name` binds it to its place.
    pub fn seal_value(&self, name: &str, value: &str) -> Result<String> {
        let (nonce, ct) = self.seal(name, value)?;
        Ok(format!("{nonce}.{ct}"))
    }

    /// The value [`Self::seal_value`] sealed under the same `name`.
    pub fn open_value(&self, name: &str, sealed: &str) -> Result<String> {
        let (nonce, ct) = sealed
            .split_once('.')
            .ok_or_else(|| Error::Internal(format!("sealed value {name:?} is malformed")))?;
        self.open(name, nonce, ct)
    }

    /// Stores `value` under `name`.
    pub async fn set(&self, db: &Db, name: &str, value: &str) -> Result<()> {
        validate_name(name)?;
        if value.is_empty() || value.len() > MAX_VALUE_BYTES {
            return Err(Error::Invalid(format!(
                "a secret's value must be 1 to {MAX_VALUE_BYTES} bytes"
            )));
        }
        let (nonce, ct) = self.seal(name, value)?;
        Ok(db::secrets::put(db, name, &nonce, &ct, now_ms()).await?)
    }

    /// The value of `name`, if set.
    pub async fn get(&self, db: &Db, name: &str) -> Result<Option<String>> {
        match db::secrets::get(db, name).await? {
            Some((nonce, ct)) => self.open(name, &nonce, &ct).map(Some),
            None => Ok(None),
        }
    }
}

/// Names are `[A-Za-z0-9_.-]{1,100}`.
pub fn validate_name(name: &str) -> Result<()> {
    if name.is_empty()
        || name.len() > MAX_NAME_BYTES
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
    {
        return Err(Error::Invalid(format!(
            "a secret's name is 1 to {MAX_NAME_BYTES} of A-Z a-z 0-9 _ . -"
        )));
    }
    Ok(())
}

/// Every secret's name, never a value.
pub async fn list(db: &Db) -> Result<Vec<SecretInfo>> {
    Ok(db::secrets::list(db)
        .await?
        .into_iter()
        .map(|(name, at)| SecretInfo {
            name,
            updated_at: Timestamp(at),
        })
        .collect())
}
