//! Sign-in with OpenID Connect: the authorization code flow with PKCE, `state` and `nonce`
//! (`openidconnect`). A sign-in in flight is a flow ([`crate::identity::auth::flow`]: `state` hashed, bound
//! to the browser that started it, with its nonce and PKCE verifier) taken once. The ID token's
//! signature (against the provider's JWKS, fetched again once when a key is unknown: rotation),
//! issuer, audience, expiry and nonce are checked by the library; then who may sign in (email
//! domain, group) and the group → admin mapping. Only then is anyone created or linked:
//! the identity (provider, subject) if known, else — from a provider the admin trusts for it
//! (`trust_email_verified`) — the person with that verified email, else a new person
//! (just-in-time). A person's groups are kept as `<provider>:<group>`, so one provider's group
//! never satisfies a grant meant for another's.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use openidconnect::core::{CoreAuthenticationFlow, CoreClient, CoreProviderMetadata};
use openidconnect::{
    AuthorizationCode, ClaimsVerificationError, ClientId, ClientSecret, CsrfToken, IssuerUrl,
    Nonce, PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, Scope, SignatureVerificationError,
    TokenResponse,
};
use tandem_protocol::{Timestamp, User};

use crate::config::oidc::OidcConfig;
use crate::identity::auth::{flow, new_user_id};
use crate::state::AppState;
use crate::{Error, Result, db, now_ms};

/// How long a provider's discovery document and keys are used before they are fetched again.
const METADATA_TTL: Duration = Duration::from_secs(3600);
/// How long one call to a provider may take.
const PROVIDER_TIMEOUT: Duration = Duration::from_secs(10);

/// The configured providers' discovery documents (with their keys), fetched lazily.
#[derive(Default)]
pub struct Providers {
    metadata: Mutex<HashMap<String, (Instant, CoreProviderMetadata)>>,
}

fn http() -> Result<openidconnect::reqwest::Client> {
    // No redirects: a provider's endpoints answer themselves (and a redirect could point a
    // server-side request anywhere).
    openidconnect::reqwest::ClientBuilder::new()
        .redirect(openidconnect::reqwest::redirect::Policy::none())
        .timeout(PROVIDER_TIMEOUT)
        .build()
        .map_err(|e| Error::Internal(format!("HTTP client: {e}")))
}

/// The provider configured as `id`.
pub fn provider<'a>(app: &'a AppState, id: &str) -> Result<&'a OidcConfig> {
    app.config
        .oidc
        .iter()
        .find(|p| p.id == id)
        .ok_or_else(|| Error::NotFound(format!("no sign-in provider {id:?}")))
}

async fn metadata(app: &AppState, p: &OidcConfig, fresh: bool) -> Result<CoreProviderMetadata> {
    if !fresh {
        let map = app.oidc.metadata.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, m)) = map.get(&p.id)
            && at.elapsed() < METADATA_TTL
        {
            return Ok(m.clone());
        }
    }
    let issuer = IssuerUrl::new(p.issuer.clone())
        .map_err(|e| Error::Internal(format!("issuer {}: {e}", p.issuer)))?;
    // Discovery checks that the document names this issuer, and fetches the JWKS.
    let m = CoreProviderMetadata::discover_async(issuer, &http()?)
        .await
        .map_err(|e| {
            Error::Unavailable(format!(
                "{} could not be reached for sign-in ({e}); try again, or ask an admin to check [[oidc]] {}",
                p.label, p.id
            ))
        })?;
    app.oidc
        .metadata
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(p.id.clone(), (Instant::now(), m.clone()));
    Ok(m)
}

fn redirect_uri(app: &AppState, p: &OidcConfig) -> Result<RedirectUrl> {
    RedirectUrl::new(format!(
        "{}/api/auth/oidc/{}/callback",
        app.public_url(),
        p.id
    ))
    .map_err(|e| Error::Internal(format!("redirect URL: {e}")))
}

async fn client_secret(app: &AppState, p: &OidcConfig) -> Result<ClientSecret> {
    let name = p.client_secret_name();
    app.secrets
        .get(&app.db, &name)
        .await?
        .map(ClientSecret::new)
        .ok_or_else(|| {
            Error::Unavailable(format!(
                "sign-in with {} is not set up: the client secret {name:?} is missing (tandem secret set {name})",
                p.label
            ))
        })
}

/// The kind of provider `p`'s flows.
fn flow_kind(p: &OidcConfig) -> String {
    format!("oidc:{}", p.id)
}

/// Starts a sign-in from the browser of `headers`: the provider's authorization URL and the
/// `Set-Cookie` line binding the flow to this browser.
pub async fn begin(
    app: &AppState,
    p: &OidcConfig,
    headers: &axum::http::HeaderMap,
) -> Result<(String, String)> {
    let m = metadata(app, p, false).await?;
    let client = CoreClient::from_provider_metadata(
        m,
        ClientId::new(p.client_id.clone()),
        Some(client_secret(app, p).await?),
    )
    .set_redirect_uri(redirect_uri(app, p)?);
    let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
    let nonce = Nonce::new_random();
    // The flow's own state (random, kept hashed, bound to this browser) is the `state` sent.
    let started = flow::start(
        app,
        headers,
        &flow_kind(p),
        None,
        serde_json::json!({ "nonce": nonce.secret(), "pkce_verifier": verifier.secret() }),
    )
    .await?;
    let state = started.state.clone();
    let mut req = client
        .authorize_url(
            CoreAuthenticationFlow::AuthorizationCode,
            move || CsrfToken::new(state),
            move || nonce,
        )
        .set_pkce_challenge(challenge);
    for s in &p.scopes {
        req = req.add_scope(Scope::new(s.clone()));
    }
    let (url, _, _) = req.url();
    Ok((url.to_string(), started.cookie))
}

/// What the provider says of the person, once the ID token holds.
#[derive(Debug)]
struct Claims {
    subject: String,
    email: Option<String>,
    email_verified: bool,
    name: Option<String>,
    groups: Vec<String>,
}

/// Completes a sign-in: takes the flow `state` names (this browser's, of this provider, once),
/// exchanges `code`, checks the ID token and who may sign in, then finds, links or creates the
/// person. It signs in only: it never links to whoever is signed in. A refusal creates nothing.
pub async fn complete(
    app: &AppState,
    p: &OidcConfig,
    headers: &axum::http::HeaderMap,
    code: &str,
    state: &str,
) -> Result<User> {
    let taken = flow::take(app, headers, &flow_kind(p), state).await?;
    let field = |k: &str| {
        taken.data[k]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| Error::Internal(format!("a stored sign-in lacks its {k}")))
    };
    let (nonce, pkce_verifier) = (field("nonce")?, field("pkce_verifier")?);
    let secret = client_secret(app, p).await?;
    let m = metadata(app, p, false).await?;
    let client = CoreClient::from_provider_metadata(
        m,
        ClientId::new(p.client_id.clone()),
        Some(secret.clone()),
    )
    .set_redirect_uri(redirect_uri(app, p)?);
    let token = client
        .exchange_code(AuthorizationCode::new(code.to_string()))
        .map_err(|e| Error::Unavailable(format!("{} has no token endpoint: {e}", p.label)))?
        .set_pkce_verifier(PkceCodeVerifier::new(pkce_verifier))
        .request_async(&http()?)
        .await
        .map_err(|e| {
            Error::Unauthorized(format!(
                "{} refused the sign-in code ({e}); start again",
                p.label
            ))
        })?;
    let id_token = token
        .id_token()
        .ok_or_else(|| Error::Unauthorized(format!("{} sent no ID token; start again", p.label)))?;
    let nonce = Nonce::new(nonce);
    let verified = match id_token.claims(&client.id_token_verifier(), &nonce) {
        Ok(c) => Ok(c.clone()),
        // A key it does not know: the provider may have rotated its keys. Fetch them again once.
        Err(ClaimsVerificationError::SignatureVerification(
            SignatureVerificationError::NoMatchingKey,
        )) => {
            let m = metadata(app, p, true).await?;
            let client = CoreClient::from_provider_metadata(
                m,
                ClientId::new(p.client_id.clone()),
                Some(secret),
            )
            .set_redirect_uri(redirect_uri(app, p)?);
            id_token
                .claims(&client.id_token_verifier(), &nonce)
                .cloned()
        }
        Err(e) => Err(e),
    }
    .map_err(|e| refused_token(p, &e))?;
    // The groups claim is not a standard one: read it from the payload the check above has
    // just verified.
    let groups = groups_claim(&id_token.to_string(), &p.groups_claim);
    let claims = Claims {
        subject: verified.subject().to_string(),
        email: verified.email().map(|e| e.to_string().to_lowercase()),
        email_verified: verified.email_verified().unwrap_or(false),
        name: verified
            .preferred_username()
            .map(|u| u.to_string())
            .or_else(|| {
                verified
                    .name()
                    .and_then(|n| n.get(None))
                    .map(|n| n.to_string())
            }),
        groups,
    };
    allowed(p, &claims)?;
    sign_in(app, p, claims).await
}

fn refused_token(p: &OidcConfig, e: &ClaimsVerificationError) -> Error {
    let why = match e {
        ClaimsVerificationError::Expired(_) => "it has expired".to_string(),
        ClaimsVerificationError::InvalidIssuer(_) => {
            format!("it was issued by someone else than {}", p.issuer)
        }
        ClaimsVerificationError::InvalidAudience(_) => "it is for another application".into(),
        ClaimsVerificationError::InvalidNonce(_) => {
            "it does not answer this sign-in (nonce mismatch)".into()
        }
        ClaimsVerificationError::SignatureVerification(_) => {
            "its signature does not verify against the provider's keys".into()
        }
        other => other.to_string(),
    };
    Error::Unauthorized(format!(
        "{}'s ID token was refused: {why}. Start again; if it keeps happening, ask an admin to check [[oidc]] {}",
        p.label, p.id
    ))
}

/// The string list under `claim` in a JWT's payload (already verified).
fn groups_claim(jwt: &str, claim: &str) -> Vec<String> {
    use base64::Engine;
    let Some(payload) = jwt.split('.').nth(1) else {
        return Vec::new();
    };
    let Ok(bytes) = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload) else {
        return Vec::new();
    };
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
        return Vec::new();
    };
    match v.get(claim) {
        Some(serde_json::Value::Array(a)) => a
            .iter()
            .filter_map(|g| g.as_str().map(str::to_string))
            .take(200)
            .collect(),
        Some(serde_json::Value::String(s)) => vec![s.clone()],
        _ => Vec::new(),
    }
}

/// Who may sign in through `p`.
fn allowed(p: &OidcConfig, c: &Claims) -> Result<()> {
    if !p.allowed_domains.is_empty() {
        let domain = c
            .email
            .as_deref()
            .filter(|_| c.email_verified)
            .and_then(|e| e.rsplit_once('@'))
            .map(|(_, d)| d);
        if !domain.is_some_and(|d| p.allowed_domains.iter().any(|a| a == d)) {
            return Err(Error::Forbidden(format!(
                "{} may not sign in here: only verified emails at {} may (ask an admin)",
                c.email.as_deref().unwrap_or("this account"),
                p.allowed_domains.join(", ")
            )));
        }
    }
    if !p.allowed_groups.is_empty() && !c.groups.iter().any(|g| p.allowed_groups.contains(g)) {
        return Err(Error::Forbidden(format!(
            "{} may not sign in here: only members of {} may (ask an admin)",
            c.email.as_deref().unwrap_or("this account"),
            p.allowed_groups.join(", ")
        )));
    }
    Ok(())
}

/// The email `p` says is verified, if the admin trusts `p` for that (`trust_email_verified`):
/// only such an email links to an existing person or is recorded (it is who a Slack user's
/// email finds, too). A provider whose people set their own email and its flag is not trusted.
fn vouched_email<'c>(p: &OidcConfig, c: &'c Claims) -> Option<&'c str> {
    c.email
        .as_deref()
        .filter(|_| c.email_verified && p.trust_email_verified)
}

/// Finds, links or creates the person the claims name.
async fn sign_in(app: &AppState, p: &OidcConfig, c: Claims) -> Result<User> {
    let admin =
        (!p.admin_groups.is_empty()).then(|| c.groups.iter().any(|g| p.admin_groups.contains(g)));
    let known = match db::people::identity(&app.db, &p.id, &c.subject).await? {
        Some(id) => db::users::get(&app.db, id).await?,
        None => None,
    };
    let user = match known {
        Some(u) => crate::identity::auth::active(u)?,
        None => {
            let by_email = match vouched_email(p, &c) {
                Some(e) => db::users::by_email(&app.db, e).await?,
                None => None,
            };
            let mut tx = app.db.begin().await?;
            let user = match by_email {
                // An admin's account is never taken over by an email a provider vouches for.
                Some(u) if u.is_admin => {
                    return Err(Error::Forbidden(format!(
                        "{} is an admin's email: an admin's account is not linked by email; sign in as them another way",
                        u.email.as_deref().unwrap_or("this")
                    )));
                }
                Some(u) => crate::identity::auth::active(u)?,
                None => {
                    let base = c
                        .name
                        .clone()
                        .or_else(|| {
                            c.email
                                .as_deref()
                                .and_then(|e| e.split('@').next())
                                .map(str::to_string)
                        })
                        .unwrap_or_else(|| format!("{}-user", p.id));
                    new_person(&mut tx, &base, vouched_email(p, &c), admin.unwrap_or(false)).await?
                }
            };
            db::people::link_identity(&mut tx, &p.id, &c.subject, user.id, now_ms()).await?;
            tx.commit().await?;
            user
        }
    };
    let groups: Vec<String> = c.groups.iter().map(|g| format!("{}:{g}", p.id)).collect();
    db::users::set_profile(&app.db, user.id, vouched_email(p, &c), &groups).await?;
    if let Some(a) = admin.filter(|a| *a != user.is_admin) {
        crate::identity::people::set_role_keeping_an_admin(app, user.id, a).await?;
    }
    app.permissions.forget(user.id);
    db::users::get(&app.db, user.id)
        .await?
        .ok_or_else(|| Error::Internal("a person signing in is gone".into()))
}

/// A new person named after `base` (`base-2`, `base-3`… when taken).
async fn new_person(tx: &mut db::Tx, base: &str, email: Option<&str>, admin: bool) -> Result<User> {
    let base: String = base
        .chars()
        .filter(|c| c.is_alphanumeric() || " .-_@".contains(*c))
        .take(60)
        .collect();
    let base = if base.trim().is_empty() {
        "person".to_string()
    } else {
        base
    };
    let now = now_ms();
    for n in 1..=20 {
        let name = if n == 1 {
            base.clone()
        } else {
            format!("{base}-{n}")
        };
        if db::users::by_name(&mut *tx, &name).await?.is_some() {
            continue;
        }
        let mut user = User::new(new_user_id(), name, admin, Timestamp(now));
        user.email = email.map(str::to_string);
        db::users::insert(&mut *tx, &user).await?;
        return Ok(user);
    }
    Err(Error::Conflict(format!("no free name for {base}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provider(domains: &[&str], groups: &[&str]) -> OidcConfig {
        OidcConfig {
            id: "acme".into(),
            label: "Acme".into(),
            issuer: "https://id.acme.test".into(),
            client_id: "tandem".into(),
            client_secret: None,
            scopes: vec![],
            allowed_domains: domains.iter().map(|d| d.to_string()).collect(),
            allowed_groups: groups.iter().map(|d| d.to_string()).collect(),
            open_signup: false,
            admin_groups: vec![],
            trust_email_verified: false,
            groups_claim: "groups".into(),
        }
    }

    fn claims(email: &str, verified: bool, groups: &[&str]) -> Claims {
        Claims {
            subject: "s".into(),
            email: Some(email.into()),
            email_verified: verified,
            name: None,
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }

    #[test]
    fn only_verified_emails_of_allowed_domains_and_groups_sign_in() {
        let p = provider(&["acme.test"], &[]);
        assert!(allowed(&p, &claims("a@acme.test", true, &[])).is_ok());
        assert!(allowed(&p, &claims("a@acme.test", false, &[])).is_err());
        assert!(allowed(&p, &claims("a@evil.test", true, &[])).is_err());
        // A subdomain trick is another domain.
        assert!(allowed(&p, &claims("a@acme.test.evil.test", true, &[])).is_err());
        let g = provider(&[], &["eng"]);
        assert!(allowed(&g, &claims("a@x.test", false, &["eng"])).is_ok());
        assert!(allowed(&g, &claims("a@x.test", true, &["design"])).is_err());
    }

    #[test]
    fn the_groups_claim_is_read_from_the_payload() {
        use base64::Engine;
        let b = |v: serde_json::Value| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
        };
        let jwt = format!(
            "{}.{}.sig",
            b(serde_json::json!({})),
            b(serde_json::json!({"groups": ["a", "b"], "roles": "admin"}))
        );
        assert_eq!(groups_claim(&jwt, "groups"), vec!["a", "b"]);
        assert_eq!(groups_claim(&jwt, "roles"), vec!["admin"]);
        assert!(groups_claim(&jwt, "missing").is_empty());
        assert!(groups_claim("garbage", "groups").is_empty());
    }
}
