//! The REST endpoints the Tandem server calls: app installations and their tokens, repositories,
//! the signed-in user, pull requests and issue comments — each with GitHub's auth rules.

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

/// How long an installation token lives, as on GitHub.
const TOKEN_LIFETIME: u64 = 3600;

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
        .route(
            "/repos/{owner}/{repo}/issues/{number}/comments",
            post(create_comment),
        )
}

/// A JSON body; an empty one reads as `{}` (optional bodies, like a token request's).
fn parse_json<T: DeserializeOwned>(body: &[u8]) -> Result<T> {
    let body = if body.iter().all(u8::is_ascii_whitespace) {
        b"{}".as_slice()
    } else {
        body
    };
    serde_json::from_slice(body).map_err(|_| Error::BadJson)
}

fn require_app(caller: &Caller) -> Result<()> {
    match caller {
        Caller::App => Ok(()),
        _ => Err(Error::BadJwt(JWT_UNDECODABLE)),
    }
}

/// The installation token the caller used, for the `/installation/…` endpoints.
fn require_installation<'c>(caller: &'c Caller, doing: &str) -> Result<&'c str> {
    match caller {
        Caller::Installation { token, .. } => Ok(token),
        Caller::Anonymous | Caller::Refused(_) => Err(Error::RequiresAuthentication),
        _ => Err(Error::Forbidden(format!(
            "You must authenticate with an installation access token in order to {doing}."
        ))),
    }
}

/// Checks that `caller` may use repository `owner/name` with one of `permissions` at `need`
/// (installation tokens only: the fake does not model a user's own repository permissions).
fn reach(
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
        Caller::User { .. } if exists => Ok(()),
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
fn actor(world: &World, caller: &Caller) -> Actor {
    match caller {
        Caller::User { login } => world.actor(login),
        _ => bot(),
    }
}

async fn list_installations(
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

async fn get_installation(
    State(s): State<Arc<Shared>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<u64>,
) -> Result<Json<Value>> {
    require_app(&caller)?;
    let world = s.world();
    let inst = world.installations.get(&id).ok_or(Error::NotFound)?;
    Ok(Json(shapes::installation(&s.url, &world, s.app_id, inst)))
}

async fn repo_installation(
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
struct TokenRequest {
    repositories: Option<Vec<String>>,
    repository_ids: Option<Vec<u64>>,
    permissions: Option<BTreeMap<String, String>>,
}

async fn mint_token(
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

async fn revoke_token(
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

async fn installation_repositories(
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

async fn current_user(
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

async fn get_repo(
    State(s): State<Arc<Shared>>,
    Extension(caller): Extension<Caller>,
    Path((owner, repo)): Path<(String, String)>,
) -> Result<Json<Value>> {
    reach(&s, &caller, &owner, &repo, &["metadata"], "read")?;
    let world = s.world();
    let repo = world
        .repos
        .get(&format!("{owner}/{repo}"))
        .ok_or(Error::NotFound)?;
    Ok(Json(shapes::repo(&s.url, &world, repo)))
}

/// The JSON of pull request `number` of `owner/repo`.
fn pull_json(s: &Shared, world: &World, full: &str, number: u64) -> Option<Value> {
    let repo = world.repos.get(full)?;
    let pull = world.pulls.iter().find(|p| {
        p.record.number == number && p.record.owner == repo.owner && p.record.repo == repo.name
    })?;
    Some(shapes::pull(&s.url, world, repo, pull))
}

fn invalid(field: &str) -> Error {
    Error::Validation(vec![
        json!({ "resource": "PullRequest", "field": field, "code": "invalid" }),
    ])
}

fn missing(field: &str) -> Error {
    Error::Validation(vec![
        json!({ "resource": "PullRequest", "field": field, "code": "missing_field" }),
    ])
}

fn custom(message: String) -> Error {
    Error::Validation(vec![
        json!({ "resource": "PullRequest", "code": "custom", "message": message }),
    ])
}

fn already_exists(owner: &str, head: &str) -> Error {
    custom(format!("A pull request already exists for {owner}:{head}."))
}

/// Whether another open pull request (not number `except`) goes from `head` into `base`.
fn open_pull_exists(
    world: &World,
    owner: &str,
    repo: &str,
    head: &str,
    base: &str,
    except: Option<u64>,
) -> bool {
    world.pulls.iter().any(|p| {
        let r = &p.record;
        r.owner == owner
            && r.repo == repo
            && r.head == head
            && r.base == base
            && r.state == "open"
            && Some(r.number) != except
    })
}

#[derive(Deserialize)]
struct NewPull {
    title: Option<String>,
    head: Option<String>,
    base: Option<String>,
    body: Option<String>,
    #[serde(default)]
    draft: bool,
}

async fn create_pull(
    State(s): State<Arc<Shared>>,
    Extension(caller): Extension<Caller>,
    Path((owner, name)): Path<(String, String)>,
    body: Bytes,
) -> Result<Response> {
    reach(&s, &caller, &owner, &name, &["pull_requests"], "write")?;
    let ask: NewPull = parse_json(&body)?;
    let title = ask
        .title
        .filter(|t| !t.trim().is_empty())
        .ok_or_else(|| missing("title"))?;
    let head = ask
        .head
        .filter(|h| !h.is_empty())
        .ok_or_else(|| missing("head"))?;
    let base = ask
        .base
        .filter(|b| !b.is_empty())
        .ok_or_else(|| missing("base"))?;
    // `owner:branch` names a branch of this repository; another owner would be a fork.
    let head = match head.split_once(':') {
        Some((o, branch)) if o == owner => branch.to_string(),
        Some(_) => return Err(invalid("head")),
        None => head,
    };
    let path = s.repo_path(&owner, &name);
    let tips = bare_repo::tips(&path).await;
    let head_sha = tips.get(&head).cloned().ok_or_else(|| invalid("head"))?;
    let base_sha = tips.get(&base).cloned().ok_or_else(|| invalid("base"))?;
    if bare_repo::commits_ahead(&path, &base_sha, &head_sha).await == 0 {
        return Err(custom(format!("No commits between {base} and {head}")));
    }
    let full = format!("{owner}/{name}");
    let mut world = s.world();
    world.sync_tips(&full, &tips);
    if open_pull_exists(&world, &owner, &name, &head, &base, None) {
        return Err(already_exists(&owner, &head));
    }
    let opener = actor(&world, &caller);
    let repo = world.repos.get_mut(&full).ok_or(Error::NotFound)?;
    let number = repo.next_number;
    repo.next_number += 1;
    let (id, issue_id, at) = (world.next_id(), world.next_id(), now());
    let record = PullRecord {
        number,
        owner: owner.clone(),
        repo: name.clone(),
        title,
        body: ask.body,
        head,
        base,
        draft: ask.draft,
        state: "open".into(),
        merged: false,
        opened_by: opener.login.clone(),
    };
    world.pulls.push(Pull {
        record,
        id,
        issue_id,
        opener,
        head_sha,
        base_sha,
        created: at,
        updated: at,
        closed: None,
        merged: None,
        merged_by: None,
        merge_commit_sha: None,
        comments: 0,
    });
    let json = pull_json(&s, &world, &full, number).ok_or(Error::NotFound)?;
    let location = format!("{}/repos/{full}/pulls/{number}", s.url);
    Ok((StatusCode::CREATED, [("location", location)], Json(json)).into_response())
}

async fn get_pull(
    State(s): State<Arc<Shared>>,
    Extension(caller): Extension<Caller>,
    Path((owner, name, number)): Path<(String, String, u64)>,
) -> Result<Json<Value>> {
    reach(&s, &caller, &owner, &name, &["pull_requests"], "read")?;
    let tips = bare_repo::tips(&s.repo_path(&owner, &name)).await;
    let full = format!("{owner}/{name}");
    let mut world = s.world();
    world.sync_tips(&full, &tips);
    pull_json(&s, &world, &full, number)
        .map(Json)
        .ok_or(Error::NotFound)
}

async fn list_pulls(
    State(s): State<Arc<Shared>>,
    Extension(caller): Extension<Caller>,
    Path((owner, name)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<Value>> {
    reach(&s, &caller, &owner, &name, &["pull_requests"], "read")?;
    let state = query.get("state").map_or("open", String::as_str);
    if !["open", "closed", "all"].contains(&state) {
        return Err(Error::Validation(vec![
            json!({ "resource": "PullRequest", "field": "state", "code": "invalid" }),
        ]));
    }
    // `head` is `owner:branch`; a bare branch name is taken as this repository's.
    let head = query.get("head").map(|h| match h.split_once(':') {
        Some((o, branch)) => (o.to_string(), branch.to_string()),
        None => (owner.clone(), h.clone()),
    });
    let base = query.get("base");
    let tips = bare_repo::tips(&s.repo_path(&owner, &name)).await;
    let full = format!("{owner}/{name}");
    let mut world = s.world();
    world.sync_tips(&full, &tips);
    let repo = world.repos.get(&full).ok_or(Error::NotFound)?;
    let mut found: Vec<&Pull> = world
        .pulls
        .iter()
        .filter(|p| p.record.owner == owner && p.record.repo == name)
        .filter(|p| state == "all" || p.record.state == state)
        .filter(|p| {
            head.as_ref()
                .is_none_or(|(o, b)| *o == owner && p.record.head == *b)
        })
        .filter(|p| base.is_none_or(|b| p.record.base == *b))
        .collect();
    // GitHub's default order: newest first.
    found.sort_by_key(|p| std::cmp::Reverse(p.record.number));
    Ok(Json(
        found
            .into_iter()
            .map(|p| shapes::pull(&s.url, &world, repo, p))
            .collect(),
    ))
}

#[derive(Deserialize)]
struct PullChange {
    title: Option<String>,
    body: Option<String>,
    state: Option<String>,
    base: Option<String>,
}

async fn update_pull(
    State(s): State<Arc<Shared>>,
    Extension(caller): Extension<Caller>,
    Path((owner, name, number)): Path<(String, String, u64)>,
    body: Bytes,
) -> Result<Json<Value>> {
    reach(&s, &caller, &owner, &name, &["pull_requests"], "write")?;
    let ask: PullChange = parse_json(&body)?;
    let tips = bare_repo::tips(&s.repo_path(&owner, &name)).await;
    let full = format!("{owner}/{name}");
    let mut world = s.world();
    world.sync_tips(&full, &tips);
    let at = world
        .pulls
        .iter()
        .position(|p| p.record.owner == owner && p.record.repo == name && p.record.number == number)
        .ok_or(Error::NotFound)?;
    let (head, base, merged) = {
        let r = &world.pulls[at].record;
        (
            r.head.clone(),
            ask.base.clone().unwrap_or_else(|| r.base.clone()),
            r.merged,
        )
    };
    if ask.base.is_some() && !tips.contains_key(&base) {
        return Err(invalid("base"));
    }
    match ask.state.as_deref() {
        None | Some("closed") => {}
        Some("open") if merged => {
            return Err(custom("Cannot reopen a merged pull request.".into()));
        }
        Some("open") if open_pull_exists(&world, &owner, &name, &head, &base, Some(number)) => {
            return Err(already_exists(&owner, &head));
        }
        Some("open") => {}
        Some(_) => return Err(invalid("state")),
    }
    let time = now();
    let pull = &mut world.pulls[at];
    if let Some(title) = ask.title {
        pull.record.title = title;
    }
    if let Some(body) = ask.body {
        pull.record.body = Some(body);
    }
    if let Some(sha) = ask.base.as_ref().and_then(|b| tips.get(b)) {
        pull.base_sha = sha.clone();
    }
    pull.record.base = base;
    match ask.state.as_deref() {
        Some("closed") if pull.record.state == "open" => {
            pull.record.state = "closed".into();
            pull.closed = Some(time);
        }
        Some("open") if pull.record.state == "closed" => {
            pull.record.state = "open".into();
            pull.closed = None;
        }
        _ => {}
    }
    pull.updated = time;
    pull_json(&s, &world, &full, number)
        .map(Json)
        .ok_or(Error::NotFound)
}

#[derive(Deserialize)]
struct NewComment {
    body: Option<String>,
}

async fn create_comment(
    State(s): State<Arc<Shared>>,
    Extension(caller): Extension<Caller>,
    Path((owner, name, number)): Path<(String, String, u64)>,
    body: Bytes,
) -> Result<Response> {
    reach(
        &s,
        &caller,
        &owner,
        &name,
        &["issues", "pull_requests"],
        "write",
    )?;
    let ask: NewComment = parse_json(&body)?;
    let text = ask.body.filter(|b| !b.is_empty()).ok_or_else(|| {
        Error::Validation(vec![
            json!({ "resource": "IssueComment", "field": "body", "code": "missing_field" }),
        ])
    })?;
    let full = format!("{owner}/{name}");
    let mut world = s.world();
    // Only pull requests exist here; an issue number without one is GitHub's 404.
    let at = world
        .pulls
        .iter()
        .position(|p| p.record.owner == owner && p.record.repo == name && p.record.number == number)
        .ok_or(Error::NotFound)?;
    let author = actor(&world, &caller);
    let (id, time) = (world.next_id(), now());
    world.record_comment(at, id, &author, &text, time);
    let repo = world.repos.get(&full).ok_or(Error::NotFound)?;
    let json = shapes::comment(&s.url, repo, number, id, &author, &text, time);
    Ok((StatusCode::CREATED, Json(json)).into_response())
}
