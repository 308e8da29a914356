//! Random secrets and their at-rest hashes. The secrets carry 256 random bits, so a fast hash
//! (SHA-256) is enough: there is nothing to brute-force.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::RngCore;
use sha2::{Digest, Sha256};

/// `prefix` + 43 URL-safe characters (256 random bits).
pub fn new_secret(prefix: &str) -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!("{prefix}{}", URL_SAFE_NO_PAD.encode(bytes))
}

/// Hex SHA-256 of a secret, as stored.
pub fn hash_secret(secret: &str) -> String {
    let digest = Sha256::digest(secret.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_unique_prefixed_and_hash_stably() {
        let a = new_secret("tdm_");
        let b = new_secret("tdm_");
        assert_ne!(a, b);
        assert!(a.starts_with("tdm_") && a.len() == 4 + 43, "{a}");
        assert_eq!(hash_secret(&a), hash_secret(&a));
        assert_ne!(hash_secret(&a), hash_secret(&b));
        assert_eq!(hash_secret(&a).len(), 64);
    }
}
