//! GitHub: Tandem acts as a GitHub App. `mod.rs` holds the App's identity — its JWT, the
//! installation tokens it mints, API clients (octocrab) for the App, an installation or a
//! person — and the git credentials of the server's own mirrors. `credentials.rs` is each
//! session's installation token; `pr.rs` the pull request flow; `webhook.rs` what GitHub tells
//! us back; `signin.rs` "Sign in with GitHub" and repo import.
//!
//! Tokens never leave this module except to where they are used: sealed in the database, in an
//! `Authorization` header, or handed to the session's own git credential helper. They are never
//! logged, never put in events, URLs or a git config.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use base64::Engine;
use octocrab::Octocrab;
use serde::{Deserialize, Serialize};
use tandem_protocol::{Repo, SessionId};

use crate::config::GithubConfig;
use crate::db::{self, Db};
use crate::secrets::Secrets;
use crate::{Error, Result};

pub mod credentials;
pub mod issues;
pub mod permission;
pub mod pr;
pub mod webhook;

/// The permissions a session's token gets: push its branch, open its pull request.
pub const SESSION_PERMISSIONS: &[(&str, &str)] =
    &[("contents", "write"), ("pull_requests", "write")];
/// Tokens this close to expiry are minted again before use (ms).
const RENEW_MARGIN_MS: i64 = 5 * 60 * 1000;

/// The App, as configured.
pub struct GitHub {
    pub config: GithubConfig,
    db: Db,
    secrets: Arc<Secrets>,
    /// Installation tokens for the server's own work (mirror fetches, reads), per installation.
    host_tokens: Mutex<HashMap<i64, Token>>,
    /// One pull request operation per session at a time.
    pr_locks: Mutex<HashMap<SessionId, Arc<tokio::sync::Mutex<()>>>>,
    /// Each session's live token, to cut out of anything recorded (a command's or a tool's output
    /// that happened to print it).
    live_tokens: Mutex<HashMap<SessionId, String>>,
    /// Workspaces whose git is prepared for GitHub.
    prepared: Mutex<std::collections::HashSet<String>>,
    /// Per session: its token is minted or revoked one at a time.
    token_locks: Mutex<HashMap<SessionId, Arc<tokio::sync::Mutex<()>>>>,
    /// Plain HTTP for the OAuth endpoints (not part of the REST API).
    pub(crate) http: reqwest::Client,
}

impl std::fmt::Debug for GitHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitHub")
            .field("app_id", &self.config.app_id)
            .field("api_url", &self.config.api_url)
            .finish_non_exhaustive()
    }
}

/// An installation token and when it expires (ms).
#[derive(Clone)]
pub struct Token {
    pub token: String,
    pub expires_at: i64,
}

#[derive(Serialize)]
struct AppClaims {
    iat: i64,
    exp: i64,
    iss: String,
}

#[derive(Deserialize)]
struct Minted {
    token: String,
    expires_at: String,
}

#[derive(Deserialize)]
struct InstallationRef {
    id: i64,
}

impl GitHub {
    pub fn new(config: GithubConfig, db: Db, secrets: Arc<Secrets>) -> Self {
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(30))
            .build()
            .unwrap_or_default();
        Self {
            config,
            db,
            secrets,
            host_tokens: Mutex::new(HashMap::new()),
            pr_locks: Mutex::new(HashMap::new()),
            token_locks: Mutex::new(HashMap::new()),
            live_tokens: Mutex::new(HashMap::new()),
            prepared: Default::default(),
            http,
        }
    }

    pub(crate) async fn secret(&self, name: &str, what: &str) -> Result<String> {
        self.secrets.get(&self.db, name).await?.ok_or_else(|| {
            Error::Unavailable(format!(
                "GitHub is configured but its {what} is not: `tandem secret set {name}`"
            ))
        })
    }

    /// A JWT signed with the App's private key (RS256, 9 minutes), as GitHub asks of Apps.
    async fn app_jwt(&self) -> Result<String> {
        let pem = self
            .secret(&self.config.private_key_secret, "App private key")
            .await?;
        let key = jsonwebtoken::EncodingKey::from_rsa_pem(pem.as_bytes()).map_err(|e| {
            Error::Unavailable(format!(
                "the GitHub App private key is not an RSA PEM key: {e}"
            ))
        })?;
        let now = crate::now_ms() / 1000;
        // Backdated a minute for clock drift, as GitHub recommends.
        let claims = AppClaims {
            iat: now - 60,
            exp: now + 9 * 60,
            iss: self.config.app_id.to_string(),
        };
        jsonwebtoken::encode(
            &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256),
            &claims,
            &key,
        )
        .map_err(|e| Error::Internal(format!("signing the App JWT: {e}")))
    }

    /// An API client acting with `token` (an App JWT, an installation token or a person's token).
    pub fn client(&self, token: &str) -> Result<Octocrab> {
        Octocrab::builder()
            .base_uri(self.config.api_url.as_str())
            .map_err(|e| Error::Config(format!("github.api_url: {e}")))?
            .personal_token(token.to_string())
            .set_connect_timeout(Some(std::time::Duration::from_secs(10)))
            .set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .set_write_timeout(Some(std::time::Duration::from_secs(30)))
            .build()
            .map_err(|e| Error::Internal(format!("GitHub client: {e}")))
    }

    /// An API client acting as the App itself.
    pub(crate) async fn app_client(&self) -> Result<Octocrab> {
        self.client(&self.app_jwt().await?)
    }

    /// The installation that covers `owner/name`, or an `app_not_installed` error saying where to
    /// install the App.
    pub async fn installation_of(&self, owner: &str, name: &str) -> Result<i64> {
        let app = self.app_client().await?;
        match app
            .get::<InstallationRef, _, ()>(format!("/repos/{owner}/{name}/installation"), None)
            .await
        {
            Ok(i) => Ok(i.id),
            Err(e) if status_of(&e) == Some(404) => Err(Error::Refused {
                code: "app_not_installed",
                message: format!(
                    "the GitHub App is not installed on {owner}/{name}: install it from {}/apps/{}/installations/new and grant it that repository",
                    self.config.web_url, self.config.app_slug
                ),
            }),
            Err(e) => Err(upstream("looking up the App's installation", &e)),
        }
    }

    /// Mints an installation token; with `repo`, scoped to that one repository with
    /// [`SESSION_PERMISSIONS`].
    pub async fn mint(&self, installation: i64, repo: Option<&str>) -> Result<Token> {
        let app = self.app_client().await?;
        let body = match repo {
            Some(name) => serde_json::json!({
                "repositories": [name],
                "permissions": SESSION_PERMISSIONS.iter().map(|(k, v)| (k.to_string(), serde_json::json!(v))).collect::<serde_json::Map<_, _>>(),
            }),
            None => serde_json::json!({}),
        };
        let minted: Minted = app
            .post(
                format!("/app/installations/{installation}/access_tokens"),
                Some(&body),
            )
            .await
            .map_err(|e| upstream("minting an installation token", &e))?;
        let expires_at =
            parse_time(&minted.expires_at).unwrap_or_else(|| crate::now_ms() + 55 * 60 * 1000);
        Ok(Token {
            token: minted.token,
            expires_at,
        })
    }

    /// Revokes an installation token (it stops working at once, for git too).
    pub async fn revoke(&self, token: &str) -> Result<()> {
        let client = self.client(token)?;
        match client._delete("/installation/token", None::<&()>).await {
            Ok(res) if res.status().is_success() || res.status().as_u16() == 401 => Ok(()),
            Ok(res) => Err(Error::BadGateway(format!(
                "GitHub refused to revoke a token: HTTP {}",
                res.status()
            ))),
            Err(e) => Err(upstream("revoking a token", &e)),
        }
    }

    /// A token for the server's own reads of `installation` (cached until near expiry).
    pub async fn host_token(&self, installation: i64) -> Result<String> {
        let cached = self
            .host_tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&installation)
            .cloned();
        if let Some(t) = cached.filter(|t| t.expires_at - RENEW_MARGIN_MS > crate::now_ms()) {
            return Ok(t.token);
        }
        let t = self.mint(installation, None).await?;
        self.host_tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(installation, t.clone());
        Ok(t.token)
    }

    /// The `http.extraHeader` the server's git uses for `repo`'s remote, when it is a GitHub repo.
    pub async fn remote_auth(&self, repo: &Repo) -> Result<Option<String>> {
        let Some(linked) = db::github::linked_repo(&self.db, repo.id).await? else {
            return Ok(None);
        };
        let token = self.host_token(linked.installation_id).await?;
        Ok(Some(basic_auth_header(&token)))
    }

    /// Forgets the workspaces not in `live` (their git was prepared; they are gone).
    pub fn retain_prepared(&self, live: &std::collections::HashSet<String>) {
        self.prepared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|w| live.contains(w));
    }

    /// `text` with the session's token (if it has one) replaced by a placeholder.
    pub fn redact(&self, session: SessionId, text: &str) -> Option<String> {
        let tokens = self.live_tokens.lock().unwrap_or_else(|e| e.into_inner());
        let token = tokens.get(&session)?;
        text.contains(token.as_str())
            .then(|| text.replace(token.as_str(), "[GitHub token]"))
    }

    fn remember_token(&self, session: SessionId, token: Option<&str>) {
        let mut tokens = self.live_tokens.lock().unwrap_or_else(|e| e.into_inner());
        match token {
            Some(t) => tokens.insert(session, t.to_string()),
            None => tokens.remove(&session),
        };
    }

    /// The lock that serialises minting and revoking `session`'s token.
    fn token_lock(&self, session: SessionId) -> Arc<tokio::sync::Mutex<()>> {
        self.token_locks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(session)
            .or_default()
            .clone()
    }

    /// The lock that serialises pull request work on `session`.
    fn pr_lock(&self, session: SessionId) -> Arc<tokio::sync::Mutex<()>> {
        self.pr_locks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(session)
            .or_default()
            .clone()
    }
}

/// The name and email commits by `author` carry: their GitHub identity when they signed in with
/// GitHub (their public email, else their no-reply address, so GitHub links the commit to them),
/// else their Tandem name at a non-routable domain.
pub async fn commit_identity(
    db: &Db,
    author: &tandem_protocol::Author,
) -> Result<(String, String)> {
    if let Some(user) = author.user_id
        && let Some(a) = db::github::account_of(db, user).await?
    {
        let name = a
            .name
            .clone()
            .filter(|n| !n.trim().is_empty())
            .unwrap_or_else(|| a.login.clone());
        let email = a
            .email
            .clone()
            .filter(|e| e.contains('@'))
            .unwrap_or_else(|| format!("{}+{}@users.noreply.github.com", a.github_id, a.login));
        return Ok((name, email));
    }
    Ok((
        author.name.clone(),
        format!(
            "{}@users.tandem.invalid",
            author
                .name
                .replace(|c: char| !c.is_ascii_alphanumeric(), "-")
        ),
    ))
}

/// A link to an artifact that works without signing in (GitHub shows it in the pull request):
/// `<public url>/api/artifacts/<id>/<signature>`.
pub fn artifact_link(
    app: &crate::state::AppState,
    artifact: tandem_protocol::ArtifactId,
) -> String {
    let exp = crate::now_ms() / 1000 + ARTIFACT_LINK_TTL_SECS;
    format!(
        "{}/api/artifacts/{artifact}/{}",
        app.public_url(),
        artifact_sig(&app.jwt, artifact, exp)
    )
}

/// The purpose artifact links are signed for.
pub const ARTIFACT_LINK: &str = "artifact-link";

/// How long an artifact link works (a pull request's body gets fresh links when it is updated).
pub const ARTIFACT_LINK_TTL_SECS: i64 = 90 * 24 * 3600;

/// The last path segment of an artifact link: `<expiry>.<signature of id and expiry>`.
pub fn artifact_sig(
    jwt: &crate::identity::auth::JwtKeys,
    artifact: tandem_protocol::ArtifactId,
    exp: i64,
) -> String {
    format!(
        "{exp}.{}",
        jwt.sign(ARTIFACT_LINK, &format!("{artifact} {exp}"))
    )
}

/// Whether `value` is a signature of `artifact` that has not expired at `now` (seconds).
pub fn artifact_sig_holds(
    jwt: &crate::identity::auth::JwtKeys,
    artifact: tandem_protocol::ArtifactId,
    value: &str,
    now: i64,
) -> bool {
    let Some((exp, sig)) = value.split_once('.') else {
        return false;
    };
    exp.parse::<i64>().is_ok_and(|exp| {
        exp > now && jwt.verify_sig(ARTIFACT_LINK, &format!("{artifact} {exp}"), sig)
    })
}

#[cfg(test)]
mod link_tests {
    use super::{artifact_sig, artifact_sig_holds};

    #[test]
    fn an_artifact_link_expires_and_names_one_artifact() {
        let dir = tempfile::tempdir().unwrap();
        let jwt = crate::identity::auth::JwtKeys::load_or_create(dir.path()).unwrap();
        let (a, b) = (
            tandem_protocol::ArtifactId(uuid::Uuid::new_v4()),
            tandem_protocol::ArtifactId(uuid::Uuid::new_v4()),
        );
        let sig = artifact_sig(&jwt, a, 2_000);
        assert!(artifact_sig_holds(&jwt, a, &sig, 1_999));
        assert!(!artifact_sig_holds(&jwt, a, &sig, 2_000), "expired");
        assert!(
            !artifact_sig_holds(&jwt, b, &sig, 1_000),
            "another artifact"
        );
        let moved = format!("9999999999.{}", sig.split_once('.').unwrap().1);
        assert!(
            !artifact_sig_holds(&jwt, a, &moved, 1_000),
            "a moved expiry"
        );
    }
}

/// `Authorization: Basic …` for git over HTTPS with an installation token.
pub fn basic_auth_header(token: &str) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{token}"));
    format!("Authorization: Basic {b64}")
}

/// The HTTP status of a GitHub API error, if it was one.
pub fn status_of(e: &octocrab::Error) -> Option<u16> {
    match e {
        octocrab::Error::GitHub { source, .. } => Some(source.status_code.as_u16()),
        _ => None,
    }
}

/// A GitHub failure as a 502 that says what Tandem was doing and what GitHub said (never a token).
pub fn upstream(doing: &str, e: &octocrab::Error) -> Error {
    match e {
        octocrab::Error::GitHub { source, .. } => Error::BadGateway(format!(
            "GitHub refused {doing}: HTTP {} {}",
            source.status_code.as_u16(),
            source.message
        )),
        other => Error::BadGateway(format!(
            "GitHub is not reachable ({doing}): {}",
            short(other)
        )),
    }
}

fn short(e: &octocrab::Error) -> String {
    let s = e.to_string();
    s.lines()
        .next()
        .unwrap_or_default()
        .chars()
        .take(300)
        .collect()
}

/// RFC 3339 (`2026-01-01T00:00:00Z`) to ms since the epoch.
pub fn parse_time(s: &str) -> Option<i64> {
    let s = s.trim();
    let (date, time) = s.split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let time = time.trim_end_matches('Z');
    let time = time.split(['+', '.']).next()?;
    let mut t = time.split(':').map(|p| p.parse::<i64>().ok());
    let (h, min, sec) = (t.next()??, t.next()??, t.next()??);
    // Days from civil (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + h) * 60 + min) * 60_000 + sec * 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_times_parse() {
        assert_eq!(parse_time("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_time("2016-07-11T22:14:10Z"), Some(1_468_275_250_000));
        assert_eq!(parse_time("nonsense"), None);
    }

    #[test]
    fn basic_auth_carries_the_token_as_password() {
        let h = basic_auth_header("ghs_abc");
        let b64 = h.strip_prefix("Authorization: Basic ").unwrap();
        let raw = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        assert_eq!(raw, b"x-access-token:ghs_abc");
    }
}
