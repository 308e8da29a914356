//! "Sign in with GitHub" (the OAuth web flow of the App's client) and importing the repositories
//! the App is installed on.

use serde::Deserialize;
use tandem_protocol::github::GithubRepo;
use tandem_protocol::{CreateRepo, Repo, Timestamp, User, UserId};

use crate::github::GitHub;
use crate::identity::auth::CurrentUser;
use crate::state::AppState;
use crate::{Error, Result, db, now_ms};

/// Where GitHub sends the browser back.
pub const CALLBACK_PATH: &str = "/api/auth/github/callback";

/// The name a person's GitHub token is sealed under.
pub fn sealed_name(user: UserId) -> String {
    format!("github.user.{user}")
}

fn client_id(gh: &GitHub) -> Result<&str> {
    gh.config.client_id.as_deref().ok_or_else(|| {
        Error::Unavailable("sign-in with GitHub is off: set client_id under [github]".into())
    })
}

/// GitHub's authorization page for this sign-in attempt (`state` ties the answer to it).
pub fn authorize_url(app: &AppState, gh: &GitHub, state: &str) -> Result<String> {
    let redirect = format!("{}{CALLBACK_PATH}", app.public_url());
    let url = reqwest::Url::parse_with_params(
        &format!("{}/login/oauth/authorize", gh.config.web_url),
        &[
            ("client_id", client_id(gh)?),
            ("redirect_uri", redirect.as_str()),
            ("state", state),
        ],
    )
    .map_err(|e| Error::Config(format!("github.web_url: {e}")))?;
    Ok(url.to_string())
}

#[derive(Deserialize)]
struct TokenAnswer {
    access_token: Option<String>,
    /// Seconds; present when the App's user tokens expire (then with a refresh token).
    expires_in: Option<i64>,
    refresh_token: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

/// A person's GitHub tokens as GitHub handed them out.
struct Tokens {
    access: String,
    refresh: Option<String>,
    /// When the access token expires (ms).
    expires_at: Option<i64>,
}

/// Where a person's refresh token is sealed (its own name: the two never open each other).
fn refresh_sealed_name(user: UserId) -> String {
    format!("github.user-refresh.{user}")
}

/// Refresh this long before a person's token expires.
const REFRESH_MARGIN_MS: i64 = 5 * 60 * 1000;

/// Asks GitHub's token endpoint for a person's tokens (`params`: a code, or a refresh token).
async fn token_request(gh: &GitHub, params: &[(&str, &str)], what: &str) -> Result<Tokens> {
    let secret = gh
        .secret(&gh.config.client_secret, "OAuth client secret")
        .await?;
    let mut form = vec![
        ("client_id", client_id(gh)?),
        ("client_secret", secret.as_str()),
    ];
    form.extend_from_slice(params);
    let answer: TokenAnswer = gh
        .http
        .post(format!("{}/login/oauth/access_token", gh.config.web_url))
        .header("accept", "application/json")
        .form(&form)
        .send()
        .await
        .map_err(|e| {
            Error::BadGateway(format!(
                "GitHub is not reachable for {what}: {}",
                e.without_url()
            ))
        })?
        .json()
        .await
        .map_err(|e| {
            Error::BadGateway(format!(
                "GitHub's answer to {what} is not JSON: {}",
                e.without_url()
            ))
        })?;
    match answer {
        TokenAnswer {
            access_token: Some(access),
            expires_in,
            refresh_token,
            ..
        } => Ok(Tokens {
            access,
            refresh: refresh_token,
            expires_at: expires_in.map(|s| now_ms() + s * 1000),
        }),
        TokenAnswer {
            error,
            error_description,
            ..
        } => Err(Error::Unauthorized(format!(
            "GitHub {what} failed: {}",
            error_description
                .or(error)
                .unwrap_or_else(|| "no token in GitHub's answer".into())
        ))),
    }
}

/// The person's own GitHub token, refreshed first when it is about to expire (or `force`d: it
/// was just refused). None when they never linked GitHub, or it cannot be refreshed.
pub async fn person_token(
    app: &AppState,
    gh: &GitHub,
    user: UserId,
    force: bool,
) -> Result<Option<String>> {
    let Some(account) = db::github::account_of(&app.db, user).await? else {
        return Ok(None);
    };
    let Some(sealed) = account.token_sealed else {
        return Ok(None);
    };
    let due = account
        .token_expires_at
        .is_some_and(|at| at - REFRESH_MARGIN_MS <= now_ms());
    let refresh = match (&account.refresh_sealed, force || due) {
        (Some(r), true) => app.secrets.open_value(&refresh_sealed_name(user), r)?,
        (None, true) if force => return Ok(None),
        _ => return Ok(Some(app.secrets.open_value(&sealed_name(user), &sealed)?)),
    };
    let fresh = match token_request(
        gh,
        &[("grant_type", "refresh_token"), ("refresh_token", &refresh)],
        "refreshing a person's token",
    )
    .await
    {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(%user, error = %e, "refreshing a person's GitHub token failed");
            return Ok(None);
        }
    };
    db::github::set_tokens(
        &app.db,
        &account.user_id,
        &app.secrets.seal_value(&sealed_name(user), &fresh.access)?,
        fresh
            .refresh
            .as_deref()
            .map(|r| app.secrets.seal_value(&refresh_sealed_name(user), r))
            .transpose()?
            .as_deref(),
        fresh.expires_at,
        now_ms(),
    )
    .await?;
    Ok(Some(fresh.access))
}

#[derive(Deserialize)]
struct GhUser {
    id: i64,
    login: String,
    name: Option<String>,
    email: Option<String>,
}

/// How a person unlinks GitHub (said wherever a link is refused).
const UNLINK_HINT: &str = "unlink it first (`DELETE /api/me/github`, signed in as the person it is linked to), then link again";

/// Exchanges GitHub's `code` for the person's token and signs them in: the Tandem user their
/// GitHub account is linked to; else `link_to` (the person who started this flow signed in and
/// finished it in the same browser, checked by the caller: GitHub gets linked to them); else a
/// new user, when the login is allowed to sign up. An existing link is never replaced: a GitHub
/// account linked to someone else, or a person linked to another GitHub account, is refused.
/// The token is kept sealed, for opening pull requests as them.
pub async fn complete(
    app: &AppState,
    gh: &GitHub,
    code: &str,
    link_to: Option<User>,
) -> Result<User> {
    let redirect = format!("{}{CALLBACK_PATH}", app.public_url());
    let tokens = token_request(
        gh,
        &[("code", code), ("redirect_uri", redirect.as_str())],
        "sign-in",
    )
    .await?;
    let token = tokens.access.clone();
    let me: GhUser = gh
        .client(&token)?
        .get("/user", None::<&()>)
        .await
        .map_err(|e| crate::github::upstream("reading the signed-in user", &e))?;
    let linked = db::github::account_by_github_id(&app.db, me.id).await?;
    let (user, new_link) = match (linked, link_to) {
        (Some(a), link_to) => {
            let user = db::users::get(
                &app.db,
                a.user_id
                    .parse()
                    .map_err(|_| Error::Internal("stored user id".into()))?,
            )
            .await?
            .ok_or_else(|| Error::Internal("a linked GitHub account's user is gone".into()))
            .and_then(crate::identity::auth::active)?;
            if link_to.is_some_and(|c| c.id != user.id) {
                return Err(Error::Conflict(format!(
                    "GitHub user {} is already linked to another Tandem person, and a link is never replaced: {UNLINK_HINT}",
                    me.login
                )));
            }
            (user, false)
        }
        (None, Some(current)) => {
            if let Some(mine) = db::github::account_of(&app.db, current.id).await? {
                return Err(Error::Conflict(format!(
                    "you are linked to GitHub user {} already, and a link is never replaced: {UNLINK_HINT}",
                    mine.login
                )));
            }
            (current, true)
        }
        (None, None)
            if gh.config.open_signup
                || gh
                    .config
                    .allowed_logins
                    .iter()
                    .any(|l| l.eq_ignore_ascii_case(&me.login)) =>
        {
            (new_user(app, &me.login).await?, true)
        }
        (None, None) => {
            return Err(Error::Forbidden(format!(
                "GitHub user {} has no Tandem account: an admin can add the login to allowed_logins under [github], or you can sign in another way first and then link GitHub with \"Sign in with GitHub\"",
                me.login
            )));
        }
    };
    let account = db::github::Account {
        user_id: user.id.to_string(),
        github_id: me.id,
        login: me.login.clone(),
        name: me.name,
        email: me.email,
        token_sealed: Some(app.secrets.seal_value(&sealed_name(user.id), &token)?),
        refresh_sealed: tokens
            .refresh
            .as_deref()
            .map(|r| app.secrets.seal_value(&refresh_sealed_name(user.id), r))
            .transpose()?,
        token_expires_at: tokens.expires_at,
    };
    // Both writes are conditional, so a link made or removed meanwhile is not overwritten.
    let raced = || {
        Error::Conflict(format!(
            "GitHub user {}'s link changed while signing in; nothing was replaced: start again",
            me.login
        ))
    };
    if new_link {
        match db::github::link_account(&app.db, &account, now_ms()).await {
            Err(e) if e.is_unique_violation() => return Err(raced()),
            other => other?,
        }
    } else if !db::github::refresh_account(&app.db, &account, now_ms()).await? {
        return Err(raced());
    }
    db::audit::record(
        &app.db,
        now_ms(),
        db::audit::Entry {
            actor_user_id: Some(user.id),
            actor_name: &user.name,
            action: "auth.login",
            target: &user.id.to_string(),
            detail: serde_json::json!({ "via": "github", "login": me.login, "linked_now": new_link }),
        },
    )
    .await?;
    // What GitHub lets them do is asked again.
    app.permissions.forget(user.id);
    Ok(user)
}

/// A new user named after the GitHub login (`login-2`, `login-3`… when a local user has it).
async fn new_user(app: &AppState, login: &str) -> Result<User> {
    for n in 1..=20 {
        let name = if n == 1 {
            login.to_string()
        } else {
            format!("{login}-{n}")
        };
        let user = User::new(
            crate::identity::auth::new_user_id(),
            name,
            false,
            Timestamp(now_ms()),
        );
        match db::users::insert(&app.db, &user).await {
            Ok(()) => return Ok(user),
            Err(e) if e.is_unique_violation() => {
                continue;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::Conflict(format!(
        "no free user name for GitHub user {login}"
    )))
}

#[derive(Deserialize)]
struct InstallationRef {
    id: i64,
}

#[derive(Deserialize)]
struct RepoPage {
    repositories: Vec<GhRepo>,
}

#[derive(Deserialize)]
struct GhRepo {
    full_name: String,
    default_branch: Option<String>,
    #[serde(default)]
    private: bool,
    clone_url: Option<String>,
}

/// Every repository the App's installations cover, and what each was imported as.
pub async fn installable(app: &AppState, gh: &GitHub) -> Result<Vec<GithubRepo>> {
    let app_client = gh.app_client().await?;
    let mut installations: Vec<InstallationRef> = Vec::new();
    for page in 1..=MAX_PAGES {
        let batch: Vec<InstallationRef> = app_client
            .get(
                "/app/installations",
                Some(&[("per_page", "100"), ("page", &page.to_string())]),
            )
            .await
            .map_err(|e| crate::github::upstream("listing the App's installations", &e))?;
        let last = batch.len() < 100;
        installations.extend(batch);
        if last {
            break;
        }
    }
    let mut out = Vec::new();
    for inst in installations {
        let client = gh.client(&gh.host_token(inst.id).await?)?;
        for page in 1..=MAX_PAGES {
            let batch: RepoPage = client
                .get(
                    "/installation/repositories",
                    Some(&[("per_page", "100"), ("page", &page.to_string())]),
                )
                .await
                .map_err(|e| {
                    crate::github::upstream("listing an installation's repositories", &e)
                })?;
            let last = batch.repositories.len() < 100;
            for r in batch.repositories {
                let (owner, name) = r.full_name.split_once('/').unwrap_or_default();
                let imported_as = db::github::linked_repo_by_name(&app.db, owner, name)
                    .await?
                    .and_then(|l| l.repo_id.parse().ok());
                out.push(GithubRepo {
                    full_name: r.full_name,
                    default_branch: r.default_branch.unwrap_or_else(|| "main".into()),
                    private: r.private,
                    installation_id: inst.id,
                    imported_as,
                });
            }
            if last {
                break;
            }
        }
    }
    Ok(out)
}

/// Most pages of 100 read from one GitHub listing (10,000 entries).
const MAX_PAGES: usize = 100;

/// Imports `owner/name` as a Tandem repo whose git remote is GitHub's, fetched with the App's
/// installation token.
pub async fn import(
    app: &AppState,
    gh: &GitHub,
    user: &CurrentUser,
    full_name: &str,
) -> Result<Repo> {
    let (owner, name) = full_name
        .trim()
        .split_once('/')
        .filter(|(o, n)| !o.is_empty() && !n.is_empty() && !n.contains('/'))
        .ok_or_else(|| Error::Invalid(format!("{full_name:?} is not owner/name")))?;
    if let Some(l) = db::github::linked_repo_by_name(&app.db, owner, name).await? {
        return Err(Error::Conflict(format!(
            "{full_name} is already imported (repo {})",
            l.repo_id
        )));
    }
    let installation = gh.installation_of(owner, name).await?;
    let client = gh.client(&gh.host_token(installation).await?)?;
    let repo: GhRepo = client
        .get(format!("/repos/{owner}/{name}"), None::<&()>)
        .await
        .map_err(|e| crate::github::upstream("reading the repository", &e))?;
    let url = repo
        .clone_url
        .unwrap_or_else(|| format!("{}/{owner}/{name}.git", gh.config.web_url));
    let req = CreateRepo {
        name: repo.full_name.clone(),
        url,
        default_branch: repo.default_branch,
        warm_pool: None,
    };
    Ok(crate::repos::create_with(
        &app.db,
        &user.0,
        req,
        Some((owner.to_string(), name.to_string(), installation)),
    )
    .await?)
}
