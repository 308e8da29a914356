//! The settings the first-run page (later: Settings) changes — the model endpoint, model name
//! and key, the default agent, the GitHub App — layered under the server's configuration: a
//! value `<data dir>/tandem.toml` sets wins and cannot be changed on the page; a value the page
//! set (the `settings` table) comes next; then the built-in default. The model values and the
//! local repo directories (`local_dirs.rs`) apply at once (read at every use); the GitHub App's
//! when the server next starts.

mod local_dirs;
mod stored;
pub use stored::{store, stored};

use std::sync::RwLock;
use std::time::{Duration, Instant};

use tandem_protocol::{
    AgentSpec, GithubSettings, ModelTest, Problem, ProblemKind, Setting, SettingSource, TestModel,
    UpdateSettings, WorkspacesHealth,
};

use crate::config::{Config, FileSets, GithubConfig};
use crate::db::{self, Db};
use crate::{Error, Result, now_ms};

/// Keys of the `settings` table.
mod key {
    pub const MODEL_BASE_URL: &str = "agents.model_base_url";
    pub const MODEL: &str = "agents.model";
    pub const DEFAULT_AGENT: &str = "agents.default";
    pub const GITHUB_APP_ID: &str = "github.app_id";
    pub const GITHUB_APP_SLUG: &str = "github.app_slug";
    pub const GITHUB_CLIENT_ID: &str = "github.client_id";
    pub const LOCAL_REPO_DIRS: &str = "repos.local_dirs";
}

/// How long the connection test waits for the model endpoint.
pub const MODEL_TEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Most model names a connection test reports.
const MAX_LISTED_MODELS: usize = 50;

/// What the page stored.
#[derive(Clone, Debug, Default)]
struct Stored {
    model_base_url: Option<String>,
    model: Option<String>,
    default_agent: Option<AgentSpec>,
    github_app_id: Option<u64>,
    github_app_slug: Option<String>,
    github_client_id: Option<String>,
    local_repo_dirs: Option<Vec<String>>,
}

/// The model the gateway and turns use now.
#[derive(Clone, Debug)]
pub struct Model {
    pub base_url: Option<String>,
    pub model: String,
    /// The secret holding the API key.
    pub api_key_secret: String,
}

/// The effective settings; cheap to read (a short-held lock, values cloned out).
pub struct Settings {
    file: FileSets,
    /// The configuration's values (the file's where it sets them, else defaults).
    config: crate::config::AgentsConfig,
    github_from_file: Option<GithubConfig>,
    /// `local_repo_dirs` of the configuration (the file's, or the code's in tests).
    local_dirs_from_config: Vec<std::path::PathBuf>,
    stored: RwLock<Stored>,
}

impl Settings {
    /// Reads the stored settings at start-up.
    pub async fn load(db: &Db, config: &Config) -> Result<Self> {
        Ok(Self {
            file: config.file_sets,
            config: config.agents.clone(),
            // Only the file sets `[github]` in a running server (tests set it in code).
            github_from_file: config.github.clone(),
            local_dirs_from_config: config.local_repo_dirs.clone(),
            stored: RwLock::new(read_stored(db).await?),
        })
    }

    /// Reads the table again: another server sharing the database may have changed it.
    pub async fn reload(&self, db: &Db) -> Result<()> {
        let fresh = read_stored(db).await?;
        *self.stored.write().unwrap_or_else(|e| e.into_inner()) = fresh;
        Ok(())
    }

    fn stored(&self) -> Stored {
        self.stored
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The model endpoint, name and key secret in force.
    pub fn model(&self) -> Model {
        let s = self.stored();
        Model {
            base_url: if self.file.model_base_url {
                self.config.model_base_url.clone()
            } else {
                s.model_base_url
                    .or_else(|| self.config.model_base_url.clone())
            },
            model: if self.file.model {
                self.config.model.clone()
            } else {
                s.model.unwrap_or_else(|| self.config.model.clone())
            },
            api_key_secret: self.config.api_key_secret.clone(),
        }
    }

    /// Whether the configuration decides `local_repo_dirs` (the page cannot change it).
    fn local_dirs_fixed(&self) -> bool {
        self.file.local_repo_dirs || !self.local_dirs_from_config.is_empty()
    }

    /// The directories under which a repo may be a local path: the configuration's when it
    /// names any, else the page's.
    pub fn local_repo_dirs(&self) -> Vec<std::path::PathBuf> {
        if self.local_dirs_fixed() {
            return self.local_dirs_from_config.clone();
        }
        self.stored()
            .local_repo_dirs
            .unwrap_or_default()
            .into_iter()
            .map(std::path::PathBuf::from)
            .collect()
    }

    /// The agent of sessions that name none.
    pub fn default_agent(&self) -> AgentSpec {
        if self.file.default_agent {
            return self.config.default.clone();
        }
        self.stored()
            .default_agent
            .unwrap_or_else(|| self.config.default.clone())
    }

    /// Why `agent` cannot run a turn here (it needs a model and none is set), if it cannot.
    pub fn model_problem(&self, agent: &AgentSpec) -> Option<Problem> {
        let needs_model = matches!(agent, AgentSpec::Builtin | AgentSpec::Opencode);
        (needs_model && self.model().base_url.is_none()).then(|| {
            crate::availability::problem(
                ProblemKind::Model,
                format!("no model is configured for the {} agent", agent.name()),
                "an admin sets the model endpoint on the Settings page (or `model_base_url` under [agents] in tandem.toml)",
            )
        })
    }

    /// The GitHub App the server starts with: the file's `[github]`, else the page's values
    /// (App id and slug both set), with the secrets' default names.
    pub fn github_config(&self) -> Option<GithubConfig> {
        if let Some(g) = &self.github_from_file {
            return Some(g.clone());
        }
        let s = self.stored();
        let (Some(app_id), Some(app_slug)) = (s.github_app_id, s.github_app_slug) else {
            return None;
        };
        let text = format!(
            "app_id = {app_id}\napp_slug = {}\n{}",
            toml_string(&app_slug),
            s.github_client_id
                .map(|c| format!("client_id = {}\n", toml_string(&c)))
                .unwrap_or_default()
        );
        toml::from_str(&text).ok()
    }

    fn source(&self, from_file: bool, stored: bool) -> SettingSource {
        if from_file {
            SettingSource::File
        } else if stored {
            SettingSource::Settings
        } else {
            SettingSource::Default
        }
    }

    /// What the settings page shows.
    pub async fn view(
        &self,
        db: &Db,
        github_active: bool,
        workspaces: WorkspacesHealth,
    ) -> Result<tandem_protocol::Settings> {
        let s = self.stored();
        let m = self.model();
        let secret_set =
            |name: String| async move { db::secrets::get(db, &name).await.map(|v| v.is_some()) };
        let gh_file = self.github_from_file.as_ref();
        let gh_names = gh_file.cloned().unwrap_or_else(|| {
            toml::from_str("app_id = 0\napp_slug = \"x\"\n").expect("the defaults parse")
        });
        let file_gh = gh_file.is_some();
        Ok(tandem_protocol::Settings {
            model_base_url: Setting {
                value: m.base_url.clone(),
                source: self.source(self.file.model_base_url, s.model_base_url.is_some()),
            },
            model: Setting {
                value: m.model.clone(),
                source: self.source(self.file.model, s.model.is_some()),
            },
            model_api_key_set: secret_set(m.api_key_secret.clone()).await?,
            api_key_secret: m.api_key_secret,
            default_agent: Setting {
                value: self.default_agent(),
                source: self.source(self.file.default_agent, s.default_agent.is_some()),
            },
            github: GithubSettings {
                app_id: Setting {
                    value: gh_file.map(|g| g.app_id).or(s.github_app_id),
                    source: self.source(file_gh, s.github_app_id.is_some()),
                },
                app_slug: Setting {
                    source: self.source(file_gh, s.github_app_slug.is_some()),
                    value: gh_file.map(|g| g.app_slug.clone()).or(s.github_app_slug),
                },
                client_id: Setting {
                    source: self.source(file_gh, s.github_client_id.is_some()),
                    value: gh_file
                        .and_then(|g| g.client_id.clone())
                        .or(s.github_client_id),
                },
                private_key_set: secret_set(gh_names.private_key_secret.clone()).await?,
                webhook_secret_set: secret_set(gh_names.webhook_secret.clone()).await?,
                client_secret_set: secret_set(gh_names.client_secret.clone()).await?,
                active: github_active,
            },
            local_repo_dirs: Setting {
                value: self
                    .local_repo_dirs()
                    .iter()
                    .map(|d| d.display().to_string())
                    .collect(),
                source: self.source(self.local_dirs_fixed(), s.local_repo_dirs.is_some()),
            },
            workspaces,
        })
    }

    /// Applies a change from the page: stores the values (refusing any the file sets), puts
    /// keys into the secret store, and takes effect at once for the model values.
    pub async fn update(
        &self,
        db: &Db,
        secrets: &crate::secrets::Secrets,
        req: UpdateSettings,
        by: &str,
    ) -> Result<Vec<&'static str>> {
        let refuse = |name: &str| {
            Err(Error::Conflict(format!(
                "{name} is set in the server's tandem.toml; change it there"
            )))
        };
        if req.model_base_url.is_some() && self.file.model_base_url {
            return refuse("model_base_url");
        }
        if req.model.is_some() && self.file.model {
            return refuse("model");
        }
        if req.default_agent.is_some() && self.file.default_agent {
            return refuse("the default agent");
        }
        let github_change = req.github_app_id.is_some()
            || req.github_app_slug.is_some()
            || req.github_client_id.is_some();
        if github_change && self.github_from_file.is_some() {
            return refuse("[github]");
        }
        if req.local_repo_dirs.is_some() && self.local_dirs_fixed() {
            return refuse("local_repo_dirs");
        }
        let local_dirs = match &req.local_repo_dirs {
            None => None,
            Some(d) => Some(Some(local_dirs::check(d)?).filter(|d| !d.is_empty())),
        };
        let base_url = match req.model_base_url.as_deref().map(str::trim) {
            None => None,
            Some("") => Some(None),
            Some(u) => Some(Some(model_url(u)?)),
        };
        let model = match req.model.as_deref().map(str::trim) {
            None => None,
            Some("") => Some(None),
            Some(m) if m.len() > 200 || m.chars().any(char::is_control) => {
                return Err(Error::Invalid("the model name is not a model name".into()));
            }
            Some(m) => Some(Some(m.to_string())),
        };
        if let Some(AgentSpec::Command { template }) = &req.default_agent
            && template.trim().is_empty()
        {
            return Err(Error::Invalid("a command agent needs a template".into()));
        }
        let slug = match req.github_app_slug.as_deref().map(str::trim) {
            None => None,
            Some("") => Some(None),
            Some(s)
                if s.len() <= 100 && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') =>
            {
                Some(Some(s.to_string()))
            }
            Some(_) => {
                return Err(Error::Invalid(
                    "the App slug is the last part of github.com/apps/<slug>".into(),
                ));
            }
        };
        let client_id = req
            .github_client_id
            .as_deref()
            .map(str::trim)
            .map(|c| (!c.is_empty()).then(|| c.to_string()));
        let now = now_ms();
        let mut changed = Vec::new();
        let mut tx = db.begin().await?;
        let writes: [(&'static str, &'static str, Option<Option<String>>); 7] = [
            (
                key::MODEL_BASE_URL,
                "model_base_url",
                base_url.clone().map(|v| v.map(|v| json(&v))),
            ),
            (
                key::MODEL,
                "model",
                model.clone().map(|v| v.map(|v| json(&v))),
            ),
            (
                key::DEFAULT_AGENT,
                "default_agent",
                req.default_agent.as_ref().map(|v| Some(json(v))),
            ),
            (
                key::GITHUB_APP_ID,
                "github_app_id",
                req.github_app_id.map(|v| (v != 0).then(|| json(&v))),
            ),
            (
                key::GITHUB_APP_SLUG,
                "github_app_slug",
                slug.clone().map(|v| v.map(|v| json(&v))),
            ),
            (
                key::GITHUB_CLIENT_ID,
                "github_client_id",
                client_id.clone().map(|v| v.map(|v| json(&v))),
            ),
            (
                key::LOCAL_REPO_DIRS,
                "local_repo_dirs",
                local_dirs.clone().map(|v| v.map(|v| json(&v))),
            ),
        ];
        for (k, label, write) in writes {
            match write {
                None => continue,
                Some(Some(v)) => db::settings::put(&mut tx, k, &v, now, by).await?,
                Some(None) => db::settings::delete(&mut tx, k).await?,
            }
            changed.push(label);
        }
        tx.commit().await?;
        let gh_names: GithubConfig = self.github_from_file.clone().unwrap_or_else(|| {
            toml::from_str("app_id = 0\napp_slug = \"x\"\n").expect("the defaults parse")
        });
        for (value, name, label) in [
            (
                &req.model_api_key,
                self.config.api_key_secret.clone(),
                "model_api_key",
            ),
            (
                &req.github_private_key,
                gh_names.private_key_secret,
                "github_private_key",
            ),
            (
                &req.github_webhook_secret,
                gh_names.webhook_secret,
                "github_webhook_secret",
            ),
            (
                &req.github_client_secret,
                gh_names.client_secret,
                "github_client_secret",
            ),
        ] {
            if let Some(v) = value.as_deref().map(str::trim).filter(|v| !v.is_empty()) {
                secrets.set(db, &name, v).await?;
                changed.push(label);
            }
        }
        let mut s = self.stored.write().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = base_url {
            s.model_base_url = v;
        }
        if let Some(v) = model {
            s.model = v;
        }
        if let Some(v) = req.default_agent {
            s.default_agent = Some(v);
        }
        if let Some(v) = req.github_app_id {
            s.github_app_id = (v != 0).then_some(v);
        }
        if let Some(v) = slug {
            s.github_app_slug = v;
        }
        if let Some(v) = client_id {
            s.github_client_id = v;
        }
        if let Some(v) = local_dirs {
            s.local_repo_dirs = v;
        }
        Ok(changed)
    }

    /// One real request to the model endpoint (`GET …/models`) with the given or saved values.
    pub async fn test_model(
        &self,
        db: &Db,
        secrets: &crate::secrets::Secrets,
        req: TestModel,
    ) -> Result<ModelTest> {
        let saved = self.model();
        let base = match req.model_base_url.as_deref().map(str::trim) {
            Some(u) if !u.is_empty() => model_url(u)?,
            _ => saved.base_url.clone().ok_or_else(|| {
                Error::Invalid("no model endpoint to test: enter its URL first".into())
            })?,
        };
        let model = req
            .model
            .map(|m| m.trim().to_string())
            .filter(|m| !m.is_empty())
            .unwrap_or(saved.model);
        let key = match req.model_api_key.map(|k| k.trim().to_string()) {
            Some(k) if !k.is_empty() => Some(k),
            _ => secrets.get(db, &saved.api_key_secret).await?,
        };
        let client = reqwest::Client::builder()
            .timeout(MODEL_TEST_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| Error::Internal(format!("http client: {e}")))?;
        let url = format!("{}/models", base.trim_end_matches('/'));
        let mut get = client.get(&url);
        if let Some(k) = &key {
            get = get.bearer_auth(k);
        }
        let t0 = Instant::now();
        let res = get.send().await;
        let elapsed_ms = t0.elapsed().as_millis() as i64;
        let res = match res {
            Ok(r) => r,
            Err(e) => {
                return Ok(ModelTest {
                    ok: false,
                    // Never the request itself: it carries the key.
                    message: format!("{base} is not reachable: {}", e.without_url()),
                    models: vec![],
                    elapsed_ms,
                });
            }
        };
        let status = res.status();
        if !status.is_success() {
            let hint = match status.as_u16() {
                401 | 403 => " (the API key was refused)",
                404 => " (is the URL the API root, ending in /v1?)",
                _ => "",
            };
            return Ok(ModelTest {
                ok: false,
                message: format!("{base} answered {status}{hint}"),
                models: vec![],
                elapsed_ms,
            });
        }
        #[derive(serde::Deserialize)]
        struct List {
            data: Vec<Entry>,
        }
        #[derive(serde::Deserialize)]
        struct Entry {
            id: String,
        }
        let body = res.bytes().await.unwrap_or_default();
        let Ok(list) = serde_json::from_slice::<List>(&body) else {
            return Ok(ModelTest {
                ok: false,
                message: format!("{base} answered, but not with an OpenAI-compatible model list"),
                models: vec![],
                elapsed_ms,
            });
        };
        let models: Vec<String> = list
            .data
            .into_iter()
            .map(|e| e.id.chars().take(200).collect())
            .take(MAX_LISTED_MODELS)
            .collect();
        let listed = models.contains(&model);
        Ok(ModelTest {
            ok: true,
            message: format!(
                "{base} answered in {elapsed_ms} ms with {} model{}{}",
                models.len(),
                if models.len() == 1 { "" } else { "s" },
                if listed {
                    format!(", {model} among them")
                } else {
                    format!("; {model} is not among them (check the model name)")
                }
            ),
            models,
            elapsed_ms,
        })
    }
}

/// The `settings` table's values.
async fn read_stored(db: &Db) -> Result<Stored> {
    let mut stored = Stored::default();
    for (k, v) in db::settings::all(db).await? {
        let bad = |e: serde_json::Error| {
            Error::Internal(format!("the stored setting {k} is unreadable: {e}"))
        };
        match k.as_str() {
            key::MODEL_BASE_URL => stored.model_base_url = serde_json::from_str(&v).map_err(bad)?,
            key::MODEL => stored.model = serde_json::from_str(&v).map_err(bad)?,
            key::DEFAULT_AGENT => stored.default_agent = serde_json::from_str(&v).map_err(bad)?,
            key::GITHUB_APP_ID => stored.github_app_id = serde_json::from_str(&v).map_err(bad)?,
            key::GITHUB_APP_SLUG => {
                stored.github_app_slug = serde_json::from_str(&v).map_err(bad)?
            }
            key::GITHUB_CLIENT_ID => {
                stored.github_client_id = serde_json::from_str(&v).map_err(bad)?
            }
            key::LOCAL_REPO_DIRS => {
                stored.local_repo_dirs = serde_json::from_str(&v).map_err(bad)?
            }
            // A key a newer version wrote: left alone.
            _ => {}
        }
    }
    Ok(stored)
}

/// A model endpoint URL: http(s), no credentials in it, no trailing slash.
fn model_url(u: &str) -> Result<String> {
    let parsed = reqwest::Url::parse(u)
        .map_err(|e| Error::Invalid(format!("the model endpoint {u:?} is not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(Error::Invalid(
            "the model endpoint must be an http(s) URL such as https://api.openai.com/v1".into(),
        ));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(Error::Invalid(
            "put the API key in its own field, not in the URL".into(),
        ));
    }
    Ok(u.trim_end_matches('/').to_string())
}

/// A TOML basic string.
fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// A value as the JSON text stored for it.
fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}
