//! `[[oidc]]`: OpenID Connect providers people sign in with (Okta, Google, Entra ID, Keycloak…).
//! The client secret lives in the secret store under `client_secret` (set with
//! `tandem secret set`), like GitHub's.

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OidcConfig {
    /// Short id, in URLs (`/api/auth/oidc/<id>`): lowercase letters, digits and `-`.
    pub id: String,
    /// What the sign-in button says after "Sign in with".
    pub label: String,
    /// The issuer (its discovery document is `<issuer>/.well-known/openid-configuration`).
    pub issuer: String,
    pub client_id: String,
    /// Secret holding the client secret.
    #[serde(default)]
    pub client_secret: Option<String>,
    /// Scopes besides `openid` (default: `email`, `profile`).
    #[serde(default = "default_scopes")]
    pub scopes: Vec<String>,
    /// Only people whose (verified) email is in one of these domains may sign in; empty: any.
    #[serde(default)]
    pub allowed_domains: Vec<String>,
    /// Only people in one of these groups may sign in; empty: any.
    #[serde(default)]
    pub allowed_groups: Vec<String>,
    /// Anyone the provider signs in may get an account (no domain or group rule): must be said
    /// outright, as a public provider (Google) signs in the whole world.
    #[serde(default)]
    pub open_signup: bool,
    /// People in one of these groups are admins (checked at each sign-in); empty: roles are
    /// set in Tandem only. This entry's rules (`allowed_groups`, `admin_groups`) are checked
    /// against this provider's own groups only; a person's groups are kept, and repo grants
    /// name them, as `<id>:<group>`.
    #[serde(default)]
    pub admin_groups: Vec<String>,
    /// Whether this provider's `email_verified` is trusted: only then does a verified email
    /// link a first sign-in to the existing person with that email, and is it recorded as the
    /// person's email (which Slack's email matching uses). Default false: a provider whose
    /// users can set their own email (and whose `email_verified` the admin does not vouch
    /// for) could otherwise take over another person's account.
    #[serde(default)]
    pub trust_email_verified: bool,
    /// The ID token claim that lists the person's groups.
    #[serde(default = "default_groups_claim")]
    pub groups_claim: String,
}

fn default_scopes() -> Vec<String> {
    vec!["email".into(), "profile".into()]
}

fn default_groups_claim() -> String {
    "groups".into()
}

impl OidcConfig {
    /// The secret store's name for the client secret.
    pub fn client_secret_name(&self) -> String {
        self.client_secret
            .clone()
            .unwrap_or_else(|| format!("oidc_{}_client_secret", self.id.replace('-', "_")))
    }

    /// Checks the values a typo would break later, and lower-cases the domains.
    pub fn validated(mut self) -> Result<Self> {
        let id_ok = !self.id.is_empty()
            && self.id.len() <= 40
            && self
                .id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !id_ok {
            return Err(Error::Config(format!(
                "[[oidc]] id {:?}: 1–40 lowercase letters, digits and -",
                self.id
            )));
        }
        let url = reqwest::Url::parse(&self.issuer)
            .map_err(|e| Error::Config(format!("[[oidc]] {} issuer: {e}", self.id)))?;
        let loopback = url.host_str().is_some_and(|h| {
            h == "localhost" || h.parse::<std::net::IpAddr>().is_ok_and(|a| a.is_loopback())
        });
        if url.scheme() != "https" && !(url.scheme() == "http" && loopback) {
            return Err(Error::Config(format!(
                "[[oidc]] {} issuer {:?}: must be https (http only on loopback)",
                self.id, self.issuer
            )));
        }
        if self.label.trim().is_empty() || self.client_id.trim().is_empty() {
            return Err(Error::Config(format!(
                "[[oidc]] {}: label and client_id are required",
                self.id
            )));
        }
        if self.allowed_domains.is_empty() && self.allowed_groups.is_empty() && !self.open_signup {
            return Err(Error::Config(format!(
                "[[oidc]] {}: say who may sign in — allowed_domains, allowed_groups, or open_signup = true",
                self.id
            )));
        }
        for d in &mut self.allowed_domains {
            *d = d.trim().trim_start_matches('@').to_lowercase();
        }
        Ok(self)
    }
}
