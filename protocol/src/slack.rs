//! The Slack app's settings (`/api/slack/settings`): channels' default repos and the admins'
//! keyword rules.

use serde::{Deserialize, Serialize};

use crate::ids::RepoId;

/// `GET /api/slack/settings`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SlackSettings {
    /// Whether `[slack]` is configured on this server.
    pub configured: bool,
    pub channels: Vec<SlackChannel>,
    pub rules: Vec<SlackRule>,
}

/// A channel's default repo. `team_id` is `*` for one set in the web app (any workspace).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SlackChannel {
    pub team_id: String,
    pub channel_id: String,
    pub repo_id: RepoId,
    pub repo_name: String,
}

/// A message holding `keyword` (a word, or a piece of a URL; any case) is about `repo_id`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SlackRule {
    pub keyword: String,
    pub repo_id: RepoId,
    pub repo_name: String,
}

/// One rule of `PUT /api/slack/settings` (admins; the list replaces the old one).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SetSlackRule {
    pub keyword: String,
    pub repo_id: RepoId,
}

/// `PUT /api/slack/channels/{channel}` (admins).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SetSlackChannel {
    pub repo_id: RepoId,
}
