//! What the settings page (`/api/settings`, admins) reads and changes: the model, the default
//! agent, the GitHub App and the directories local repos may come from, each with where its
//! value comes from (`tandem.toml`, the page, or the default).

use serde::{Deserialize, Serialize};

use crate::api::WorkspacesHealth;

/// Where a setting's value comes from (`GET /api/settings`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum SettingSource {
    /// The server's `tandem.toml` (it wins; the settings page cannot change it).
    File,
    /// Set on the settings page (stored in the database).
    Settings,
    /// Nobody set it: the built-in default.
    Default,
}

/// One setting with its value and where that comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Setting<T> {
    pub value: T,
    pub source: SettingSource,
}

/// `GET /api/settings` (admins): the settings the first-run page edits.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Settings {
    /// The OpenAI-compatible API (`…/v1`); none: builtin and opencode turns wait.
    pub model_base_url: Setting<Option<String>>,
    pub model: Setting<String>,
    /// Whether the secret holding the model's API key is set (its value is never shown).
    pub model_api_key_set: bool,
    /// The secret that holds the key.
    pub api_key_secret: String,
    /// The agent of sessions that name none.
    pub default_agent: Setting<crate::turn::AgentSpec>,
    /// The GitHub App (applies when the server next starts).
    pub github: GithubSettings,
    /// Directories under which a repo may be a local path or `file://` URL (the server's git
    /// reads them as root); empty: no local repos.
    #[serde(default = "no_local_dirs")]
    pub local_repo_dirs: Setting<Vec<String>>,
    /// What stops sessions right now (as in `/api/health`).
    pub workspaces: WorkspacesHealth,
}

fn no_local_dirs() -> Setting<Vec<String>> {
    Setting {
        value: Vec::new(),
        source: SettingSource::Default,
    }
}

/// [`Settings::github`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GithubSettings {
    pub app_id: Setting<Option<u64>>,
    pub app_slug: Setting<Option<String>>,
    pub client_id: Setting<Option<String>>,
    /// Whether the App's private key, webhook secret and client secret are in the store.
    pub private_key_set: bool,
    pub webhook_secret_set: bool,
    pub client_secret_set: bool,
    /// Whether the running server has the App (settings saved since apply at the next start).
    pub active: bool,
}

/// `PUT /api/settings` (admins): only the fields given change; `Some(None)`/empty clears one
/// set on the page. A field `tandem.toml` sets is refused (409: change the file instead).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, default)]
pub struct UpdateSettings {
    pub model_base_url: Option<String>,
    pub model: Option<String>,
    /// Stored in the secret store under `api_key_secret`, never shown again.
    pub model_api_key: Option<String>,
    pub default_agent: Option<crate::turn::AgentSpec>,
    pub github_app_id: Option<u64>,
    pub github_app_slug: Option<String>,
    pub github_client_id: Option<String>,
    /// PEM; stored in the secret store.
    pub github_private_key: Option<String>,
    pub github_webhook_secret: Option<String>,
    pub github_client_secret: Option<String>,
    /// Absolute paths of existing directories; an empty list allows no local repo.
    pub local_repo_dirs: Option<Vec<String>>,
}

/// `POST /api/settings/model/test`: one real request to the model endpoint. Unset fields use
/// the saved settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, default)]
pub struct TestModel {
    pub model_base_url: Option<String>,
    pub model: Option<String>,
    pub model_api_key: Option<String>,
}

/// The answer to [`TestModel`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ModelTest {
    /// The endpoint answered with a model list (and the key, if any, was accepted).
    pub ok: bool,
    /// What happened, in words ("answered in 12 ms; 3 models, gpt-4.1-mini among them").
    pub message: String,
    /// The models the endpoint lists (at most 50).
    pub models: Vec<String>,
    pub elapsed_ms: i64,
}
