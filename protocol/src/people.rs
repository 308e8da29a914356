//! People and permissions on the wire: invites, roles, deactivation, who may use a repo, and
//! the sign-in providers.

use serde::{Deserialize, Serialize};

use crate::{Timestamp, User, UserId};

/// Who may use a repo, besides its grants and the admins.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum RepoAccess {
    /// Every active person may view and start sessions.
    #[default]
    Everyone,
    /// The person's own permission on the GitHub repository (read → view, write → start).
    Github,
    /// Only the people and groups granted below.
    Members,
}

impl RepoAccess {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Everyone => "everyone",
            Self::Github => "github",
            Self::Members => "members",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "everyone" => Self::Everyone,
            "github" => Self::Github,
            "members" => Self::Members,
            _ => return None,
        })
    }
}

/// What a person may do with a repo.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum RepoRole {
    /// See its sessions (watch them, read their files and diffs).
    Read,
    /// Also start sessions and drive their own.
    Write,
}

impl RepoRole {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "read" => Self::Read,
            "write" => Self::Write,
            _ => return None,
        })
    }
}

/// Whom a grant is for.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case", tag = "kind", content = "who")]
pub enum Grantee {
    User(UserId),
    /// A group from the identity provider's group claim.
    Group(String),
}

/// One grant on a repo.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RepoGrant {
    #[serde(flatten)]
    pub grantee: Grantee,
    pub role: RepoRole,
}

/// `GET`/`PUT /api/repos/{id}/access`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RepoAccessSettings {
    pub access: RepoAccess,
    #[serde(default)]
    pub grants: Vec<RepoGrant>,
}

/// `GET /api/repos/{id}/access/me`: what the asking person may do, and whom to ask for more.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MyRepoAccess {
    pub role: Option<RepoRole>,
    pub ask: Vec<String>,
}

/// `POST /api/people/invites`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateInvite {
    /// Their login name in Tandem.
    pub name: String,
    #[serde(default)]
    pub email: Option<String>,
    #[serde(default)]
    pub is_admin: bool,
    /// Default [`crate::limits::INVITE_TTL_SECS`].
    #[serde(default)]
    pub expires_in_secs: Option<i64>,
}

/// An invite, as listed (its link is shown once, when made).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Invite {
    pub id: String,
    pub name: String,
    pub email: Option<String>,
    pub is_admin: bool,
    pub created_by: String,
    pub created_at: Timestamp,
    pub expires_at: Timestamp,
    pub used_at: Option<Timestamp>,
    pub revoked_at: Option<Timestamp>,
}

/// A new invite with its one-time link.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CreatedInvite {
    pub invite: Invite,
    /// `…/invite#code=tiv_…`: the code is in the fragment, so it reaches no log.
    pub url: String,
}

/// `POST /api/auth/invite`: redeem an invite's code for a browser session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AcceptInvite {
    pub code: String,
}

/// `PATCH /api/people/{id}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct UpdatePerson {
    #[serde(default)]
    pub is_admin: Option<bool>,
    /// `true` deactivates (every token, cookie and link of theirs stops at once); `false`
    /// reactivates.
    #[serde(default)]
    pub deactivated: Option<bool>,
}

/// `GET /api/people`: a person and how they sign in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Person {
    #[serde(flatten)]
    pub user: User,
    /// `github`, `oidc:<provider>`, `invite`, `login link`.
    pub sign_in: Vec<String>,
}

/// `PUT /api/sessions/{id}/visibility`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SessionVisibility {
    pub private: bool,
}

/// One sign-in method the sign-in page offers (`GET /api/auth/providers`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SignInProvider {
    /// `github` or an OpenID provider's id from `tandem.toml`.
    pub id: String,
    /// What the button says ("Sign in with Okta").
    pub label: String,
    /// Where the button goes.
    pub url: String,
}

/// `GET /api/auth/providers`: the sign-in methods this server offers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SignInProviders {
    /// "Sign in with GitHub": the GitHub App has an OAuth client id.
    #[serde(default)]
    pub github: bool,
    /// The OpenID Connect providers (`[[oidc]]`).
    #[serde(default)]
    pub oidc: Vec<SignInProvider>,
}
