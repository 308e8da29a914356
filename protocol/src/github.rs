//! GitHub: repos an App installation offers, importing one, and a session's pull request.

use serde::{Deserialize, Serialize};

use crate::{RepoId, SessionId, Timestamp};

/// A repository the GitHub App is installed on (`GET /api/github/repos`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GithubRepo {
    /// `owner/name`.
    pub full_name: String,
    pub default_branch: String,
    pub private: bool,
    pub installation_id: i64,
    /// The Tandem repo it was imported as, if it was.
    pub imported_as: Option<RepoId>,
}

/// `POST /api/github/repos`: import an installed repository as a Tandem repo.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ImportRepo {
    /// `owner/name`.
    pub full_name: String,
}

/// `POST /api/sessions/{id}/pr` (and the agent's `open_pull_request` tool).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreatePr {
    /// Defaults to the session's title.
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub draft: bool,
    /// When the base branch moved since the session started: `true` rebases the session's
    /// commits onto it first, `false` opens the PR against the moved base as is; unset refuses
    /// with a `stale base` error that says so.
    #[serde(default)]
    pub rebase: Option<bool>,
}

/// Where a pull request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum PrState {
    Open,
    Closed,
    Merged,
}

impl PrState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::Closed => "closed",
            Self::Merged => "merged",
        }
    }

    /// From the stored name.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "open" => Some(Self::Open),
            "closed" => Some(Self::Closed),
            "merged" => Some(Self::Merged),
            _ => None,
        }
    }
}

/// A session's pull request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PullRequest {
    pub session_id: SessionId,
    pub number: i64,
    pub url: String,
    /// The session's branch on GitHub.
    pub branch: String,
    /// The branch it merges into.
    pub base: String,
    pub state: PrState,
    pub head_sha: String,
    /// The GitHub login that opened it (a person's, or the app's bot).
    pub opened_by: String,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// `GET /api/me/github`: the GitHub account linked to the signed-in person (both null: none).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GithubAccount {
    pub login: Option<String>,
    pub github_id: Option<i64>,
}

/// What `POST /api/github/webhook` answers GitHub: `recorded`, `duplicate delivery` or
/// `ignored: <why>`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WebhookOutcome {
    pub result: String,
}
