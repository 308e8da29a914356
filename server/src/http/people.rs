//! `/api/people` (admins: invites, roles, deactivation), `/api/repos/{id}/access` (who may use a
//! repo) and `/api/sessions/{id}/visibility` (private sessions).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use tandem_protocol::live::Role;
use tandem_protocol::people::{
    CreateInvite, CreatedInvite, Grantee, Invite, Person, RepoAccessSettings, SessionVisibility,
    UpdatePerson,
};
use tandem_protocol::{RepoId, Session, SessionId, User, UserId};
use utoipa_axum::routes;

use super::ApiRouter;
use crate::identity::auth::CurrentUser;
use crate::identity::people;
use crate::openapi::{BadRequest, Conflict, Forbidden, Invalid, JsonBody, NotFound, Unauthorized};
use crate::state::AppState;
use crate::{Error, Result, db, now_ms};

pub fn router() -> ApiRouter {
    ApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(admins))
        .routes(routes!(update))
        .routes(routes!(invites, invite))
        .routes(routes!(revoke_invite))
        .routes(routes!(repo_access, set_repo_access))
        .routes(routes!(set_visibility))
}

/// Everyone, with how they sign in (admins).
#[utoipa::path(
    get,
    path = "/people",
    tag = "people",
    operation_id = "list_people",
    responses(
        (status = 200, description = "The people", body = Vec<Person>),
        Unauthorized,
        Forbidden,
    ),
)]
async fn list(State(state): State<AppState>, user: CurrentUser) -> Result<Json<Vec<Person>>> {
    Ok(Json(people::list(&state, &user.0).await?))
}

/// Whom to ask for access (any signed-in person may know the admins' names).
#[utoipa::path(
    get,
    path = "/people/admins",
    tag = "people",
    operation_id = "list_admins",
    responses((status = 200, description = "The admins' names", body = Vec<String>), Unauthorized),
)]
async fn admins(State(state): State<AppState>, _user: CurrentUser) -> Result<Json<Vec<String>>> {
    Ok(Json(
        db::users::admins(&state.db)
            .await?
            .into_iter()
            .map(|u| u.name)
            .collect(),
    ))
}

/// Makes a person an admin or not, deactivates or reactivates them (admins; one admin stays).
#[utoipa::path(
    patch,
    path = "/people/{id}",
    tag = "people",
    operation_id = "update_person",
    params(("id" = UserId, Path)),
    request_body = UpdatePerson,
    responses(
        (status = 200, description = "The person as now", body = User),
        BadRequest,
        JsonBody,
        Unauthorized,
        Forbidden,
        NotFound,
        Conflict,
    ),
)]
async fn update(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<UserId>,
    Json(req): Json<UpdatePerson>,
) -> Result<Json<User>> {
    Ok(Json(people::update(&state, &user.0, id, req).await?))
}

/// Every invite, used or not (admins).
#[utoipa::path(
    get,
    path = "/people/invites",
    tag = "people",
    operation_id = "list_invites",
    responses(
        (status = 200, description = "The invites", body = Vec<Invite>),
        Unauthorized,
        Forbidden,
    ),
)]
async fn invites(State(state): State<AppState>, user: CurrentUser) -> Result<Json<Vec<Invite>>> {
    Ok(Json(people::invites(&state, &user.0).await?))
}

/// Invites a person (admins); the answer's link is shown this once.
#[utoipa::path(
    post,
    path = "/people/invites",
    tag = "people",
    operation_id = "create_invite",
    request_body = CreateInvite,
    responses(
        (status = 201, description = "The invite and its one-time link", body = CreatedInvite),
        JsonBody,
        Unauthorized,
        Forbidden,
        Conflict,
        Invalid,
    ),
)]
async fn invite(
    State(state): State<AppState>,
    user: CurrentUser,
    Json(req): Json<CreateInvite>,
) -> Result<(StatusCode, Json<CreatedInvite>)> {
    Ok((
        StatusCode::CREATED,
        Json(people::invite(&state, &user.0, req).await?),
    ))
}

/// Revokes an unused invite (admins).
#[utoipa::path(
    delete,
    path = "/people/invites/{id}",
    tag = "people",
    operation_id = "revoke_invite",
    params(("id" = String, Path, description = "The invite's id")),
    responses(
        (status = 204, description = "Revoked"),
        Unauthorized,
        Forbidden,
        NotFound,
    ),
)]
async fn revoke_invite(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<String>,
) -> Result<StatusCode> {
    people::revoke_invite(&state, &user.0, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A repo's access mode and grants: admins (others see the repo's 404 or a 403).
#[utoipa::path(
    get,
    path = "/repos/{id}/access",
    tag = "people",
    operation_id = "get_repo_access",
    params(("id" = RepoId, Path)),
    responses(
        (status = 200, description = "Who may use the repo", body = RepoAccessSettings),
        BadRequest,
        Unauthorized,
        Forbidden,
        NotFound,
    ),
)]
async fn repo_access(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<RepoId>,
) -> Result<Json<RepoAccessSettings>> {
    let (repo, _) = crate::permissions::repo(&state, &user.0, id).await?;
    people::require_admin(&user.0)?;
    Ok(Json(RepoAccessSettings {
        access: repo.access,
        grants: db::repos::grants(&state.db, id).await?,
    }))
}

/// Sets who may use a repo (admins); a group is `<provider>:<group>`.
#[utoipa::path(
    put,
    path = "/repos/{id}/access",
    tag = "people",
    operation_id = "set_repo_access",
    params(("id" = RepoId, Path)),
    request_body = RepoAccessSettings,
    responses(
        (status = 200, description = "Who may use the repo now", body = RepoAccessSettings),
        BadRequest,
        JsonBody,
        Unauthorized,
        Forbidden,
        NotFound,
        Invalid,
    ),
)]
async fn set_repo_access(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<RepoId>,
    Json(req): Json<RepoAccessSettings>,
) -> Result<Json<RepoAccessSettings>> {
    let (repo, _) = crate::permissions::repo(&state, &user.0, id).await?;
    people::require_admin(&user.0)?;
    if req.grants.len() > tandem_protocol::limits::MAX_LIST as usize {
        return Err(Error::Invalid("too many grants".into()));
    }
    for g in &req.grants {
        match &g.grantee {
            Grantee::User(u) => {
                if db::users::get(&state.db, *u).await?.is_none() {
                    return Err(Error::Invalid(format!("no person {u}")));
                }
            }
            Grantee::Group(name) => {
                // A group is one provider's: `<provider id>:<group>`, so a group of the same
                // name from another provider never satisfies it.
                let known = name
                    .split_once(':')
                    .filter(|(p, _)| state.config.oidc.iter().any(|o| o.id == *p));
                if let Some((_, group)) = known {
                    people::validate_name(group)?;
                } else {
                    let ids: Vec<&str> = state.config.oidc.iter().map(|o| o.id.as_str()).collect();
                    return Err(Error::Invalid(format!(
                        "group {name:?}: name a group as <provider>:<group>, the provider being one of the [[oidc]] ids ({})",
                        if ids.is_empty() {
                            "none configured".to_string()
                        } else {
                            ids.join(", ")
                        }
                    )));
                }
            }
        }
    }
    let mut tx = state.db.begin().await?;
    db::repos::set_access(&mut tx, id, req.access, &req.grants, now_ms()).await?;
    db::audit::record(
        &mut tx,
        now_ms(),
        db::audit::Entry {
            actor_user_id: Some(user.0.id),
            actor_name: &user.0.name,
            action: "repo.access",
            target: &id.to_string(),
            detail: serde_json::json!({ "repo": repo.name, "access": req.access, "grants": req.grants }),
        },
    )
    .await?;
    tx.commit().await?;
    Ok(Json(RepoAccessSettings {
        access: req.access,
        grants: db::repos::grants(&state.db, id).await?,
    }))
}

/// Its owner makes a session private (owner and the people they shared it with) or not.
#[utoipa::path(
    put,
    path = "/sessions/{id}/visibility",
    tag = "sessions",
    operation_id = "set_session_visibility",
    params(("id" = SessionId, Path)),
    request_body = SessionVisibility,
    responses(
        (status = 200, description = "The session", body = Session),
        BadRequest,
        JsonBody,
        Unauthorized,
        Forbidden,
        NotFound,
    ),
)]
async fn set_visibility(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<SessionId>,
    Json(req): Json<SessionVisibility>,
) -> Result<Json<Session>> {
    crate::permissions::require(&state, id, &user.0, Role::Owner).await?;
    db::sessions::set_private(&state.db, id, req.private).await?;
    db::audit::record(
        &state.db,
        now_ms(),
        db::audit::Entry {
            actor_user_id: Some(user.0.id),
            actor_name: &user.0.name,
            action: "session.visibility",
            target: &id.to_string(),
            detail: serde_json::json!({ "private": req.private }),
        },
    )
    .await?;
    Ok(Json(crate::sessions::get(&state.db, id).await?.session))
}
