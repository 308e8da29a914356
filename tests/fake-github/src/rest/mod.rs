//! The REST endpoints the Tandem server calls: app installations and their tokens, repositories,
//! the signed-in user, pull requests, issues and issue comments — each with GitHub's auth rules.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Extension, Json, Router};
use bytes::Bytes;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::auth::Caller;
use crate::bare_repo;
use crate::error::{Error, JWT_UNDECODABLE, NOT_ACCESSIBLE, Result};
use crate::shapes::{self, now, timestamp};
use crate::state::{
    Actor, MintedToken, Pull, PullRecord, Shared, Token, World, bot, installation_permissions,
    level, random_text,
};

mod issues;
mod pulls;
use issues::*;
use pulls::*;

/// How long an installation token lives, as on GitHub.
pub(super) const TOKEN_LIFETIME: u64 = 3600;

pub(crate) fn router() -> Router<Arc<Shared>> {
    Router::new()
        .route("/app/installations", get(list_installations))
        .route("/app/installations/{id}", get(get_installation))
        .route("/app/installations/{id}/access_tokens", post(mint_token))
        .route("/installation/token", delete(revoke_token))
        .route("/installation/repositories", get(installation_repositories))
        .route("/user", get(current_user))
        .route("/repos/{owner}/{repo}", get(get_repo))
        .route("/repos/{owner}/{repo}/installation", get(repo_installation))
        .route(
            "/repos/{owner}/{repo}/pulls",
            get(list_pulls).post(create_pull),
        )
        .route(
            "/repos/{owner}/{repo}/pulls/{number}",
            get(get_pull).patch(update_pull),
        )
        .route("/repos/{owner}/{repo}/issues/{number}", get(get_issue))
        .route(
            "/repos/{owner}/{repo}/issues/{number}/comments",
            get(list_comments).post(create_comment),
        )
        .route(
            "/repos/{owner}/{repo}/issues/comments/{id}",
            get(get_comment).patch(update_comment).post(update_comment),
        )
}

/// A JSON body; an empty one reads as `{}` (optional bodies, like a token request's).
pub(super) fn parse_json<T: DeserializeOwned>(body: &[u8]) -> Result<T> {
    let body = if body.iter().all(u8::is_ascii_whitespace) {
        b"{}".as_slice()
    } else {
        body
    };
    serde_json::from_slice(body).map_err(|_| Error::BadJson)
}

pub(super) fn require_app(caller: &Caller) -> Result<()> {
    match caller {
        Caller::App => Ok(()),
        _ => Err(Error::BadJwt(JWT_UNDECODABLE)),
    }
}

/// The installation token the caller used, for the `/installation/…` endpoints.
pub(super) fn require_installation<'c>(caller: &'c Caller, doing: &str) -> Result<&'c str> {
    match caller {
        Caller::Installation { token, .. } => Ok(token),
        Caller::Anonymous | Caller::Refused(_) => Err(Error::RequiresAuthentication),
        _ => Err(Error::Forbidden(format!(
            "You must authenticate with an installation access token in order to {doing}."
        ))),
    }
}

/// Checks that `caller` may use repository `owner/name` with one of `permissions` at `need`
/// (for installation tokens; of a user's own permission only `none` counts, hiding the
/// repository as `GET /repos/{owner}/{repo}` does).
pub(super) fn reach(
    shared: &Shared,
    caller: &Caller,
    owner: &str,
    name: &str,
    permissions: &[&str],
    need: &str,
) -> Result<()> {
    let world = shared.world();
    let full = format!("{owner}/{name}");
    let exists = world.repos.contains_key(&full);
    match caller {
        // A private repository does not exist for strangers.
        Caller::Anonymous | Caller::Refused(_) if need == "write" => {
            Err(Error::RequiresAuthentication)
        }
        Caller::Anonymous | Caller::Refused(_) => Err(Error::NotFound),
        Caller::App => Err(Error::Forbidden(NOT_ACCESSIBLE.into())),
        Caller::User { login } if exists => {
            let key = (login.clone(), full);
            if world
                .user_permissions
                .get(&key)
                .is_some_and(|l| l == "none")
            {
                Err(Error::NotFound)
            } else {
                Ok(())
            }
        }
        Caller::User { .. } => Err(Error::NotFound),
        Caller::Installation { token, .. } => {
            let token = world.token(token).ok_or(Error::BadCredentials)?;
            if !exists || !token.minted.repos.contains(&full) {
                return Err(Error::NotFound);
            }
            let granted = permissions.iter().any(|p| {
                token
                    .minted
                    .permissions
                    .get(*p)
                    .is_some_and(|l| level(l) >= level(need))
            });
            if granted {
                Ok(())
            } else {
                Err(Error::Forbidden(NOT_ACCESSIBLE.into()))
            }
        }
    }
}

/// Who acts for the caller: the app's bot for an installation token, else the user.
pub(super) fn actor(world: &World, caller: &Caller) -> Actor {
    match caller {
        Caller::User { login } => world.actor(login),
        _ => bot(),
    }
}

pub(super) async fn list_installations(
    State(s): State<Arc<Shared>>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Value>> {
    require_app(&caller)?;
    let world = s.world();
    Ok(Json(
        world
            .installations
            .values()
            .map(|i| shapes::installation(&s.url, &world, s.app_id, i))
            .collect(),
    ))
}

pub(super) async fn get_installation(
    State(s): State<Arc<Shared>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<u64>,
) -> Result<Json<Value>> {
    require_app(&caller)?;
    let world = s.world();
    let inst = world.installations.get(&id).ok_or(Error::NotFound)?;
    Ok(Json(shapes::installation(&s.url, &world, s.app_id, inst)))
}

pub(super) async fn repo_installation(
    State(s): State<Arc<Shared>>,
    Extension(caller): Extension<Caller>,
    Path((owner, repo)): Path<(String, String)>,
) -> Result<Json<Value>> {
    require_app(&caller)?;
    let world = s.world();
    let inst = world
        .installation_for(&format!("{owner}/{repo}"))
        .ok_or(Error::NotFound)?;
    Ok(Json(shapes::installation(&s.url, &world, s.app_id, inst)))
}

#[derive(Deserialize)]
pub(super) struct TokenRequest {
    repositories: Option<Vec<String>>,
    repository_ids: Option<Vec<u64>>,
    permissions: Option<BTreeMap<String, String>>,
}

pub(super) async fn mint_token(
    State(s): State<Arc<Shared>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<u64>,
    body: Bytes,
) -> Result<Response> {
    require_app(&caller)?;
    let ask: TokenRequest = parse_json(&body)?;
    let mut world = s.world();
    let inst = world.installations.get(&id).ok_or(Error::NotFound)?.clone();
    let names = ask.repositories.unwrap_or_default();
    let ids = ask.repository_ids.unwrap_or_default();
    let unreachable = || {
        Error::Unprocessable("There is at least one repository that does not exist or is not accessible to the parent installation.".into())
    };
    let mut repos: Vec<String> = Vec::new();
    if names.is_empty() && ids.is_empty() {
        repos.clone_from(&inst.repos);
    }
    // GitHub takes bare repository names here (the installation's account is the owner).
    for name in &names {
        let full = inst
            .repos
            .iter()
            .find(|f| f.split_once('/').is_some_and(|(_, n)| n == name))
            .ok_or_else(unreachable)?;
        if !repos.contains(full) {
            repos.push(full.clone());
        }
    }
    for rid in &ids {
        let full = inst
            .repos
            .iter()
            .find(|f| world.repos.get(*f).is_some_and(|r| r.id == *rid))
            .ok_or_else(unreachable)?;
        if !repos.contains(full) {
            repos.push(full.clone());
        }
    }
    let granted = installation_permissions();
    let mut permissions = match ask.permissions {
        None => granted.clone(),
        Some(asked) => {
            let within = asked
                .iter()
                .all(|(k, v)| level(v) > 0 && granted.get(k).is_some_and(|g| level(g) >= level(v)));
            if !within {
                return Err(Error::Unprocessable(
                    "The permissions requested are not granted to this installation.".into(),
                ));
            }
            asked
        }
    };
    permissions
        .entry("metadata".into())
        .or_insert_with(|| "read".into());
    let expires = now() + TOKEN_LIFETIME;
    let minted = MintedToken {
        token: format!("ghs_{}", random_text(36)),
        installation_id: id,
        repos: repos.clone(),
        permissions: permissions.clone(),
        revoked: false,
        expires_at: timestamp(expires),
    };
    world.tokens.push(Token {
        minted: minted.clone(),
        expires,
    });
    let repositories: Vec<Value> = repos
        .iter()
        .filter_map(|f| world.repos.get(f))
        .map(|r| shapes::repo(&s.url, &world, r))
        .collect();
    let body = json!({
        "token": minted.token,
        "expires_at": minted.expires_at,
        "permissions": permissions,
        "repository_selection": "selected",
        "repositories": repositories,
    });
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

pub(super) async fn revoke_token(
    State(s): State<Arc<Shared>>,
    Extension(caller): Extension<Caller>,
) -> Result<StatusCode> {
    let token = require_installation(&caller, "revoke an installation token")?;
    let mut world = s.world();
    if let Some(t) = world.tokens.iter_mut().find(|t| t.minted.token == token) {
        t.minted.revoked = true;
    }
    Ok(StatusCode::NO_CONTENT)
}

pub(super) async fn installation_repositories(
    State(s): State<Arc<Shared>>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Value>> {
    let token = require_installation(&caller, "list repositories for an installation")?;
    let world = s.world();
    let token = world.token(token).ok_or(Error::BadCredentials)?;
    let repos: Vec<Value> = token
        .minted
        .repos
        .iter()
        .filter_map(|f| world.repos.get(f))
        .map(|r| shapes::repo(&s.url, &world, r))
        .collect();
    Ok(Json(
        json!({ "total_count": repos.len(), "repository_selection": "selected", "repositories": repos }),
    ))
}

pub(super) async fn current_user(
    State(s): State<Arc<Shared>>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Value>> {
    match &caller {
        Caller::User { login } => {
            let world = s.world();
            let user = world.users.get(login).ok_or(Error::NotFound)?;
            Ok(Json(shapes::profile(
                &s.url,
                &world.actor(login),
                &user.name,
                &user.email,
                user.created,
            )))
        }
        Caller::Anonymous | Caller::Refused(_) => Err(Error::RequiresAuthentication),
        _ => Err(Error::Forbidden(NOT_ACCESSIBLE.into())),
    }
}

pub(super) async fn get_repo(
    State(s): State<Arc<Shared>>,
    Extension(caller): Extension<Caller>,
    Path((owner, repo)): Path<(String, String)>,
) -> Result<Json<Value>> {
    reach(&s, &caller, &owner, &repo, &["metadata"], "read")?;
    let world = s.world();
    let full = format!("{owner}/{repo}");
    let repo = world.repos.get(&full).ok_or(Error::NotFound)?;
    let mut v = shapes::repo(&s.url, &world, repo);
    // A user's token sees the repository with their own permission on it (none: not at all).
    if let Caller::User { login } = &caller {
        let level = world
            .user_permissions
            .get(&(login.clone(), full))
            .map_or("admin", String::as_str);
        if level == "none" {
            return Err(Error::NotFound);
        }
        const LEVELS: [&str; 6] = ["none", "read", "triage", "write", "maintain", "admin"];
        let rank = |l: &str| LEVELS.iter().position(|x| *x == l).unwrap_or(0);
        let at_least = |l: &str| rank(level) >= rank(l);
        v["permissions"] = json!({
            "admin": at_least("admin"),
            "maintain": at_least("maintain"),
            "push": at_least("write"),
            "triage": at_least("triage"),
            "pull": at_least("read"),
        });
    }
    Ok(Json(v))
}
