//! The Slack app: `@tandem <task>` in a channel, a thread or a DM starts a session as the Slack
//! user's Tandem person, and the thread becomes the session's conversation (later messages are
//! follow-ups, `steer:` steers). Deliveries come over the Events API, interactivity and one
//! slash command, each signed with the app's signing secret; the signature and its 5-minute
//! window are checked before a byte is parsed, and each delivery is handled once (Slack
//! retries). Progress goes to the thread as one status message kept up to date, the agent's
//! replies, the pull request and failures ([`status`]).
//!
//! Everything from Slack is someone's words: a message's text goes to the agent as that
//! person's prompt, earlier messages of the thread as data marked as such, and what the agent
//! writes goes back escaped, so it cannot ping a channel or dress up a link.

pub mod command;
pub mod conversation;
pub mod deliveries;
pub mod people;
pub mod repos;
pub mod status;
pub mod text;

use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use slack_morphism::prelude::*;

use crate::config::SlackConfig;
use crate::state::AppState;
use crate::{Error, Result};

type Client = SlackClient<SlackClientHyperConnector<HttpsConnector<HttpConnector>>>;

/// How long one Web API call may take.
const CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

/// The configured Slack app and its Web API client.
pub struct Slack {
    pub config: SlackConfig,
    client: Client,
    /// Downloads of attached files (no redirects: the bot token goes to Slack's file host only).
    files: reqwest::Client,
    /// The bot token's own workspace (`auth.test`): its id and how Slack names it.
    own_team: std::sync::Mutex<Option<(String, String)>>,
}

/// A Slack user as `users.info` tells (never the display name, which its owner sets freely).
pub struct SlackPerson {
    /// Their handle (`name`).
    pub handle: String,
    /// Their profile's email, when Slack vouches for them: a full member of `team` (not a
    /// guest, an invitee, a bot, a deactivated account or someone from another organization).
    pub email: Option<String>,
}

/// `fut` cut off at [`CALL_TIMEOUT`].
async fn timed<T, E: std::fmt::Display>(
    method: &str,
    fut: impl std::future::Future<Output = std::result::Result<T, E>>,
) -> Result<T> {
    match tokio::time::timeout(CALL_TIMEOUT, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(refused(method, e)),
        Err(_) => Err(refused(method, "no answer within 15 s")),
    }
}

/// Slack's answer to a call, as our error.
fn refused(method: &str, e: impl std::fmt::Display) -> Error {
    Error::BadGateway(format!("Slack refused {method}: {e}"))
}

impl Slack {
    pub fn new(config: SlackConfig) -> Result<Self> {
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let tls = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_webpki_roots(provider)
            .map_err(|e| Error::Config(format!("Slack's TLS: {e}")))?;
        // Plain HTTP only for a loopback stand-in; Slack itself is HTTPS.
        let connector = if config.api_url.starts_with("http://127.0.0.1")
            || config.api_url.starts_with("http://localhost")
        {
            tls.https_or_http().enable_http1().enable_http2().build()
        } else {
            tls.https_only().enable_http1().enable_http2().build()
        };
        let client = SlackClient::new(
            SlackClientHyperConnector::with_connector(connector)
                .with_slack_api_url(config.api_url.trim_end_matches('/')),
        );
        let loopback =
            |u: &str| u.starts_with("http://127.0.0.1") || u.starts_with("http://localhost");
        if !config.files_url.starts_with("https://") && !loopback(&config.files_url) {
            return Err(Error::Config(format!(
                "[slack] files_url {:?}: must be https (the bot token goes with each download)",
                config.files_url
            )));
        }
        let files = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(CALL_TIMEOUT)
            .build()
            .map_err(|e| Error::Config(format!("Slack's file client: {e}")))?;
        Ok(Self {
            config,
            client,
            files,
            own_team: std::sync::Mutex::new(None),
        })
    }

    /// The secret named `name`, or a 503 that says how to set it.
    async fn secret(app: &AppState, name: &str, what: &str) -> Result<String> {
        app.secrets
            .get(&app.db, name)
            .await?
            .filter(|s| !s.is_empty())
            .ok_or_else(|| {
                Error::Unavailable(format!(
                    "Slack is configured but its {what} is not stored: set the secret `{name}` (Settings → Secrets, or `tandem secret set {name}`)"
                ))
            })
    }

    pub async fn signing_secret(&self, app: &AppState) -> Result<String> {
        Self::secret(app, &self.config.signing_secret, "signing secret").await
    }

    async fn token(&self, app: &AppState) -> Result<SlackApiToken> {
        let value = Self::secret(app, &self.config.bot_token, "bot token").await?;
        Ok(SlackApiToken::new(SlackApiTokenValue(value)))
    }

    /// Posts `content` in `channel` (in thread `thread` when given); the new message's ts.
    pub async fn post(
        &self,
        app: &AppState,
        channel: &str,
        thread: Option<&str>,
        content: SlackMessageContent,
    ) -> Result<String> {
        let token = self.token(app).await?;
        let mut req = SlackApiChatPostMessageRequest::new(channel.into(), content)
            .with_unfurl_links(false)
            .with_unfurl_media(false);
        if let Some(t) = thread {
            req = req.with_thread_ts(t.into());
        }
        let session = self.client.open_session(&token);
        let res = timed("chat.postMessage", session.chat_post_message(&req)).await?;
        Ok(res.ts.0)
    }

    /// Replaces message `ts`'s content.
    pub async fn update(
        &self,
        app: &AppState,
        channel: &str,
        ts: &str,
        content: SlackMessageContent,
    ) -> Result<()> {
        let token = self.token(app).await?;
        let req = SlackApiChatUpdateRequest::new(channel.into(), content, ts.into());
        let session = self.client.open_session(&token);
        timed("chat.update", session.chat_update(&req)).await?;
        Ok(())
    }

    /// A message only `user` sees.
    pub async fn ephemeral(
        &self,
        app: &AppState,
        channel: &str,
        user: &str,
        thread: Option<&str>,
        content: SlackMessageContent,
    ) -> Result<()> {
        let token = self.token(app).await?;
        let mut req = SlackApiChatPostEphemeralRequest::new(channel.into(), user.into(), content);
        if let Some(t) = thread {
            req = req.with_thread_ts(t.into());
        }
        let session = self.client.open_session(&token);
        timed("chat.postEphemeral", session.chat_post_ephemeral(&req)).await?;
        Ok(())
    }

    /// Adds (`on`) or takes away the app's `name` reaction on message `ts`; one already there
    /// (or already gone) is fine.
    pub async fn react(
        &self,
        app: &AppState,
        channel: &str,
        ts: &str,
        name: &str,
        on: bool,
    ) -> Result<()> {
        let token = self.token(app).await?;
        let session = self.client.open_session(&token);
        let r = if on {
            let req = SlackApiReactionsAddRequest::new(
                channel.into(),
                SlackReactionName(name.into()),
                ts.into(),
            );
            timed("reactions.add", session.reactions_add(&req))
                .await
                .map(|_| ())
        } else {
            let req = SlackApiReactionsRemoveRequest::new(SlackReactionName(name.into()))
                .with_channel(channel.into())
                .with_timestamp(ts.into());
            timed("reactions.remove", session.reactions_remove(&req))
                .await
                .map(|_| ())
        };
        match r {
            Err(e)
                if e.to_string().contains("already_reacted")
                    || e.to_string().contains("no_reaction") =>
            {
                Ok(())
            }
            other => other,
        }
    }

    /// The Slack user of workspace `team`: their name, and their email when Slack vouches for
    /// it (it needs the `users:read.email` scope).
    pub async fn user(&self, app: &AppState, team: &str, user: &str) -> Result<SlackPerson> {
        let token = self.token(app).await?;
        let session = self.client.open_session(&token);
        let req = SlackApiUsersInfoRequest::new(user.into());
        let res = timed("users.info", session.users_info(&req)).await?;
        let u = res.user;
        let f = &u.flags;
        let member = u.team_id.as_ref().is_some_and(|t| t.0 == team)
            && u.deleted != Some(true)
            && [
                f.is_bot,
                f.is_app_user,
                f.is_restricted,
                f.is_ultra_restricted,
                f.is_stranger,
                f.is_invited_user,
            ]
            .iter()
            .all(|x| *x != Some(true));
        let handle = u.name.clone().unwrap_or_else(|| user.to_string());
        let email = u
            .profile
            .and_then(|p| p.email)
            .map(|e| e.0.to_lowercase())
            .filter(|_| member);
        Ok(SlackPerson { handle, email })
    }

    /// The messages of thread `ts` in `channel`, oldest first.
    pub async fn replies(
        &self,
        app: &AppState,
        channel: &str,
        ts: &str,
    ) -> Result<Vec<SlackHistoryMessage>> {
        let token = self.token(app).await?;
        let session = self.client.open_session(&token);
        let req =
            SlackApiConversationsRepliesRequest::new(channel.into(), ts.into()).with_limit(200);
        let res = timed("conversations.replies", session.conversations_replies(&req)).await?;
        Ok(res.messages)
    }

    /// An attached file's bytes, if it is on Slack's file host and at most `max` bytes.
    pub async fn download(&self, app: &AppState, url: &str, max: usize) -> Result<Vec<u8>> {
        let base = self.config.files_url.trim_end_matches('/');
        if !url.starts_with(&format!("{base}/")) {
            return Err(Error::Invalid(format!(
                "a file that is not on Slack's file host ({base})"
            )));
        }
        let token = self.token(app).await?;
        let mut res = timed(
            "a file download",
            self.files.get(url).bearer_auth(&token.token_value.0).send(),
        )
        .await?;
        if !res.status().is_success() {
            return Err(refused("a file download", res.status()));
        }
        let mut out = Vec::new();
        while let Some(chunk) = timed("a file download", res.chunk()).await? {
            if out.len() + chunk.len() > max {
                return Err(Error::TooLarge(format!("a file over {max} bytes")));
            }
            out.extend_from_slice(&chunk);
        }
        Ok(out)
    }

    /// Whether deliveries from Slack workspace `team` are taken: those `allowed_teams` names,
    /// or (none named) the bot token's own workspace.
    pub async fn team_allowed(&self, app: &AppState, team: &str) -> Result<bool> {
        if !self.config.allowed_teams.is_empty() {
            return Ok(self.config.allowed_teams.iter().any(|t| t == team));
        }
        Ok(self.own_team(app).await?.0 == team)
    }

    /// The bot token's own workspace (`auth.test`, asked once): its id, and its name and
    /// address as Slack gives them.
    async fn own_team(&self, app: &AppState) -> Result<(String, String)> {
        let known = self
            .own_team
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(t) = known {
            return Ok(t);
        }
        let token = self.token(app).await?;
        let session = self.client.open_session(&token);
        let res = timed("auth.test", session.auth_test()).await?;
        let t = (res.team_id.0, format!("{} ({})", res.team, res.url.0));
        *self.own_team.lock().unwrap_or_else(|e| e.into_inner()) = Some(t.clone());
        Ok(t)
    }

    /// Workspace `team` as Slack names it: the bot's own workspace's name and address, another
    /// (an `allowed_teams` one) by its id.
    pub async fn team_label(&self, app: &AppState, team: &str) -> String {
        match self.own_team(app).await {
            Ok((id, label)) if id == team => format!("{label}, {team}"),
            _ => team.to_string(),
        }
    }
}

/// The configured Slack app, or a 404 saying it is off.
pub fn slack(app: &AppState) -> Result<&Slack> {
    app.slack.as_deref().ok_or_else(|| {
        Error::NotFound("Slack is not configured on this server ([slack] in tandem.toml)".into())
    })
}
