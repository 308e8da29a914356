//! Browser logins as HS256 JWTs. The key is 32 random bytes in `<data dir>/jwt.key` (mode 0600),
//! made on first start; every server process sharing the data dir (or the key file) accepts the
//! others' tokens.

use std::path::Path;

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation, errors::ErrorKind};
use serde::{Deserialize, Serialize};
use tandem_protocol::UserId;

use crate::{Error, Result, now_ms};

/// Name of the key file in the data dir.
pub const KEY_FILE: &str = crate::data_dir::JWT_KEY;

/// What a browser login token says.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Claims {
    /// The user id.
    pub sub: String,
    /// Issued at, seconds since the epoch.
    pub iat: i64,
    /// Expires at, seconds since the epoch.
    pub exp: i64,
    /// What the token is for; only `"browser"` is accepted as a login.
    pub kind: String,
    /// The login's id: logout puts it on the server's revocation list.
    #[serde(default)]
    pub jti: Option<String>,
}

/// What a share-link token says.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ShareClaims {
    /// The session.
    pub sub: String,
    /// The link's id (revocation is checked against it).
    pub jti: String,
    pub role: tandem_protocol::live::Role,
    /// Whether people without an account may join with it.
    pub guests: bool,
    pub iat: i64,
    pub exp: i64,
    /// Always `"share"`: never accepted as a login.
    pub kind: String,
}

/// What a VS Code ticket says: this person may open this session's VS Code on its own origin.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CodeClaims {
    /// The user id, or `link:<jti>` for a guest who came through a share link.
    pub sub: String,
    /// The session.
    pub sid: String,
    pub iat: i64,
    pub exp: i64,
    /// Always `"code"`: never accepted as a login or a share link.
    pub kind: String,
}

/// The signing and verifying keys.
pub struct JwtKeys {
    encoding: EncodingKey,
    decoding: DecodingKey,
    /// For plain signatures of capability links ([`Self::sign`]).
    mac_key: Vec<u8>,
}

impl JwtKeys {
    /// Keys from raw secret bytes.
    pub fn from_secret(secret: &[u8]) -> Result<Self> {
        let bad = |e: jsonwebtoken::errors::Error| Error::Config(format!("JWT key: {e}"));
        Ok(Self {
            encoding: EncodingKey::from_secret(secret).map_err(bad)?,
            decoding: DecodingKey::from_secret(secret).map_err(bad)?,
            mac_key: secret.to_vec(),
        })
    }

    /// A signature of `what` (hex HMAC-SHA256 under a key derived for `purpose`), for links that
    /// carry their own authority, such as a pull request's screenshots.
    pub fn sign(&self, purpose: &str, what: &str) -> String {
        use hmac::Mac;
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&self.mac_key)
            .expect("HMAC takes any key length");
        mac.update(purpose.as_bytes());
        mac.update(b"\0");
        mac.update(what.as_bytes());
        mac.finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// Whether `sig` is [`Self::sign`]'s signature of `what` (compared in constant time).
    pub fn verify_sig(&self, purpose: &str, what: &str, sig: &str) -> bool {
        let expected = self.sign(purpose, what);
        expected.len() == sig.len()
            && expected
                .bytes()
                .zip(sig.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }

    /// Loads `<dir>/jwt.key`, creating it with fresh random bytes if missing.
    pub fn load_or_create(dir: &Path) -> Result<Self> {
        Self::from_secret(&crate::data_dir::load_or_create_key(
            &dir.join(crate::data_dir::JWT_KEY),
        )?)
    }

    /// A browser login for `user` valid for `ttl_secs` (negative makes an already-expired one).
    pub fn issue(&self, user: UserId, ttl_secs: i64) -> Result<String> {
        let now = now_ms() / 1000;
        let claims = Claims {
            sub: user.to_string(),
            iat: now,
            exp: now + ttl_secs,
            kind: "browser".into(),
            jti: Some(uuid::Uuid::new_v4().simple().to_string()),
        };
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .map_err(|e| Error::Internal(format!("signing JWT: {e}")))
    }

    /// A share-link token (expires at `exp_secs`, seconds since the epoch).
    pub fn issue_share(&self, claims: &ShareClaims) -> Result<String> {
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), claims, &self.encoding)
            .map_err(|e| Error::Internal(format!("signing JWT: {e}")))
    }

    /// Verifies a share-link token's signature, algorithm, expiry (no leeway) and kind.
    pub fn verify_share(&self, token: &str) -> Result<ShareClaims> {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = 0;
        validation.set_required_spec_claims(&["exp", "sub", "jti"]);
        let data = jsonwebtoken::decode::<ShareClaims>(token, &self.decoding, &validation)
            .map_err(|e| {
                Error::Unauthorized(match e.kind() {
                    ErrorKind::ExpiredSignature => {
                        "this share link has expired; ask for a new one".to_string()
                    }
                    ErrorKind::InvalidSignature => {
                        "this share link's signature is not valid".to_string()
                    }
                    _ => "this share link is not valid".to_string(),
                })
            })?;
        if data.claims.kind != "share" {
            return Err(Error::Unauthorized("not a share link".into()));
        }
        Ok(data.claims)
    }

    /// A VS Code ticket for `user` in `session`, valid for `ttl_secs`.
    pub fn issue_code(&self, user: UserId, session: &str, ttl_secs: i64) -> Result<String> {
        self.issue_code_for(&user.to_string(), session, ttl_secs)
    }

    /// A VS Code ticket for `subject` (a user id, or `link:<jti>` for a share link's guest).
    pub fn issue_code_for(&self, subject: &str, session: &str, ttl_secs: i64) -> Result<String> {
        let now = now_ms() / 1000;
        let claims = CodeClaims {
            sub: subject.to_string(),
            sid: session.to_string(),
            iat: now,
            exp: now + ttl_secs,
            kind: "code".into(),
        };
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .map_err(|e| Error::Internal(format!("signing JWT: {e}")))
    }

    /// Verifies a VS Code ticket's signature, algorithm, expiry (no leeway), kind and session.
    pub fn verify_code(&self, token: &str, session: &str) -> Result<CodeClaims> {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = 0;
        validation.set_required_spec_claims(&["exp", "sub"]);
        let data = jsonwebtoken::decode::<CodeClaims>(token, &self.decoding, &validation).map_err(
            |e| {
                Error::Unauthorized(match e.kind() {
                    ErrorKind::ExpiredSignature => {
                        "this VS Code link has expired; open VS Code from the session page again"
                            .to_string()
                    }
                    _ => "this VS Code link is not valid".to_string(),
                })
            },
        )?;
        if data.claims.kind != "code" || data.claims.sid != session {
            return Err(Error::Unauthorized(
                "this VS Code link is for another session".into(),
            ));
        }
        Ok(data.claims)
    }

    /// Verifies signature, algorithm, expiry (no leeway) and kind.
    pub fn verify(&self, token: &str) -> Result<Claims> {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = 0;
        validation.set_required_spec_claims(&["exp", "sub"]);
        let data =
            jsonwebtoken::decode::<Claims>(token, &self.decoding, &validation).map_err(|e| {
                Error::Unauthorized(match e.kind() {
                    ErrorKind::ExpiredSignature => "login expired; sign in again".to_string(),
                    ErrorKind::InvalidSignature => "login token signature is not valid".to_string(),
                    _ => "login token is not valid".to_string(),
                })
            })?;
        if data.claims.kind != "browser" {
            return Err(Error::Unauthorized("token is not a browser login".into()));
        }
        Ok(data.claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forged_expired_and_valid_tokens() {
        let keys = JwtKeys::from_secret(&[7u8; 32]).unwrap();
        let other = JwtKeys::from_secret(&[8u8; 32]).unwrap();
        let user = UserId(uuid::Uuid::new_v4());
        let good = keys.issue(user, 60).unwrap();
        assert_eq!(keys.verify(&good).unwrap().sub, user.to_string());
        let forged = other.issue(user, 60).unwrap();
        assert!(
            keys.verify(&forged)
                .unwrap_err()
                .to_string()
                .contains("signature")
        );
        let expired = keys.issue(user, -5).unwrap();
        assert!(
            keys.verify(&expired)
                .unwrap_err()
                .to_string()
                .contains("expired")
        );
    }

    #[test]
    fn key_file_is_created_once_and_private() {
        let dir = tempfile::tempdir().unwrap();
        let a = JwtKeys::load_or_create(dir.path()).unwrap();
        let b = JwtKeys::load_or_create(dir.path()).unwrap();
        let user = UserId(uuid::Uuid::new_v4());
        assert!(
            b.verify(&a.issue(user, 60).unwrap()).is_ok(),
            "second load reads the same key"
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(KEY_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }
}
