//! People: invites (one-time links, like login links, that expire), roles, deactivation (every
//! token, cookie, link and live connection of theirs stops at once), and the audit of sign-ins.
//! Admins do all of it; REST, the CLI and the People page call here.

use tandem_protocol::limits::{
    INVITE_CODE_PREFIX, INVITE_TTL_SECS, MAX_INVITE_TTL_SECS, MAX_LIST, MAX_NAME_BYTES,
};
use tandem_protocol::people::{CreateInvite, CreatedInvite, Invite, Person, UpdatePerson};
use tandem_protocol::{Timestamp, User, UserId};

use crate::error::conflict_on_unique;
use crate::identity::auth::{hash_secret, new_secret, new_user_id};
use crate::state::AppState;
use crate::{Error, Result, db, now_ms};

/// Only admins manage people.
pub fn require_admin(user: &User) -> Result<()> {
    if user.is_admin {
        Ok(())
    } else {
        Err(Error::Forbidden("only admins may manage people".into()))
    }
}

/// A login name: 1–200 bytes of letters, digits and `.-_@ `, not only spaces.
pub fn validate_name(name: &str) -> Result<()> {
    let ok = !name.trim().is_empty()
        && name.len() <= MAX_NAME_BYTES
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || " .-_@".contains(c));
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "a name is 1 to {MAX_NAME_BYTES} bytes of letters, digits, spaces and . - _ @"
        )))
    }
}

/// An email address, lower-cased: one `@` with something on each side, no spaces.
pub fn normalize_email(email: &str) -> Result<String> {
    let e = email.trim().to_lowercase();
    let ok = e.len() <= MAX_NAME_BYTES
        && e.split('@').count() == 2
        && e.split('@').all(|p| !p.is_empty())
        && !e.chars().any(|c| c.is_whitespace() || c.is_control());
    if ok {
        Ok(e)
    } else {
        Err(Error::Invalid(format!("{email:?} is not an email address")))
    }
}

/// Makes an invite; its link is in the answer only.
pub async fn invite(app: &AppState, by: &User, req: CreateInvite) -> Result<CreatedInvite> {
    require_admin(by)?;
    let name = req.name.trim().to_string();
    validate_name(&name)?;
    let email = req.email.as_deref().map(normalize_email).transpose()?;
    let ttl = req.expires_in_secs.unwrap_or(INVITE_TTL_SECS);
    if !(1..=MAX_INVITE_TTL_SECS).contains(&ttl) {
        return Err(Error::Invalid(format!(
            "an invite lasts 1 to {MAX_INVITE_TTL_SECS} seconds"
        )));
    }
    if db::users::by_name(&app.db, &name).await?.is_some() {
        return Err(Error::Conflict(format!(
            "someone is already called {name:?}"
        )));
    }
    if let Some(e) = &email
        && db::users::by_email(&app.db, e).await?.is_some()
    {
        return Err(Error::Conflict(format!(
            "someone already has the email {e}"
        )));
    }
    let now = now_ms();
    let code = new_secret(INVITE_CODE_PREFIX);
    let invite = Invite {
        id: uuid::Uuid::new_v4().to_string(),
        name,
        email,
        is_admin: req.is_admin,
        created_by: by.name.clone(),
        created_at: Timestamp(now),
        expires_at: Timestamp(now + ttl * 1000),
        used_at: None,
        revoked_at: None,
    };
    let mut tx = app.db.begin().await?;
    db::people::insert_invite(&mut tx, &invite, by.id, &hash_secret(&code)).await?;
    audit(
        &mut tx,
        by,
        "person.invite",
        &invite.id,
        serde_json::json!({ "name": invite.name, "email": invite.email, "is_admin": invite.is_admin }),
    )
    .await?;
    tx.commit().await?;
    let url = format!("{}/invite#code={code}", app.public_url());
    Ok(CreatedInvite { invite, url })
}

/// Redeems an invite's code: the person it names, created now (once; a second use, an expired
/// or revoked invite, or a name taken since is refused and changes nothing).
pub async fn accept(app: &AppState, code: &str) -> Result<User> {
    let now = now_ms();
    let mut tx = app.db.begin().await?;
    let invite = db::people::redeem_invite(&mut tx, &hash_secret(code.trim()), now)
        .await?
        .ok_or_else(|| {
            Error::Unauthorized(
                "this invite is unknown, already used, revoked or expired; ask for a new one"
                    .into(),
            )
        })?;
    let mut user = User::new(
        new_user_id(),
        invite.name.clone(),
        invite.is_admin,
        Timestamp(now),
    );
    user.email = invite.email.clone();
    db::users::insert(&mut tx, &user)
        .await
        .map_err(|e| conflict_on_unique(e, &format!("someone called {:?}", user.name)))?;
    db::people::set_invite_user(&mut tx, &invite.id, user.id).await?;
    audit(
        &mut tx,
        &user,
        "person.join",
        &user.id.to_string(),
        serde_json::json!({ "invite": invite.id, "invited_by": invite.created_by }),
    )
    .await?;
    tx.commit().await?;
    Ok(user)
}

/// Everyone, with how they sign in.
pub async fn list(app: &AppState, by: &User) -> Result<Vec<Person>> {
    require_admin(by)?;
    let mut out = Vec::new();
    for user in db::users::list(&app.db, MAX_LIST).await? {
        let mut sign_in: Vec<String> = db::people::identities_of(&app.db, user.id)
            .await?
            .into_iter()
            .map(|p| format!("oidc:{p}"))
            .collect();
        if db::github::account_of(&app.db, user.id).await?.is_some() {
            sign_in.push("github".into());
        }
        out.push(Person { user, sign_in });
    }
    Ok(out)
}

/// Invites, newest first.
pub async fn invites(app: &AppState, by: &User) -> Result<Vec<Invite>> {
    require_admin(by)?;
    Ok(db::people::list_invites(&app.db, MAX_LIST).await?)
}

/// Revokes an unused invite.
pub async fn revoke_invite(app: &AppState, by: &User, id: &str) -> Result<()> {
    require_admin(by)?;
    let mut tx = app.db.begin().await?;
    if !db::people::revoke_invite(&mut tx, id, now_ms()).await? {
        return Err(Error::NotFound(format!("no unused invite {id}")));
    }
    audit(
        &mut tx,
        by,
        "person.invite_revoke",
        id,
        serde_json::json!({}),
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// Sets a person's admin role from outside the people page (an identity provider's groups at
/// sign-in); a demotion that would leave no active admin is not made (logged instead), so the
/// last admin stays on every path. Whether the role changed.
pub async fn set_role_keeping_an_admin(app: &AppState, id: UserId, admin: bool) -> Result<bool> {
    let mut tx = app.db.begin().await?;
    if !admin {
        let person = db::users::get(&mut tx, id).await?;
        let holds_the_last = person.is_some_and(|p| p.is_admin && p.deactivated_at.is_none())
            && db::users::lock_active_admins(&mut tx).await? <= 1;
        if holds_the_last {
            tracing::warn!(%id, "kept the last active admin's role although their provider's groups no longer make them one");
            return Ok(false);
        }
    }
    let changed = db::users::set_admin(&mut tx, id, admin).await?;
    tx.commit().await?;
    Ok(changed)
}

/// Changes a person's role or deactivates (reactivates) them. The last active admin stays.
pub async fn update(app: &AppState, by: &User, id: UserId, req: UpdatePerson) -> Result<User> {
    require_admin(by)?;
    let person = db::users::get(&app.db, id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("no person {id}")))?;
    let demotes = req.is_admin == Some(false) && person.is_admin;
    let deactivates = req.deactivated == Some(true) && person.deactivated_at.is_none();
    let now = now_ms();
    // Counted with the admins' rows held until this transaction ends: two admins demoting
    // each other at once are serialized, and the second finds the last one.
    let mut tx = app.db.begin().await?;
    if (demotes || deactivates)
        && person.is_admin
        && person.deactivated_at.is_none()
        && db::users::lock_active_admins(&mut tx).await? <= 1
    {
        return Err(Error::Conflict(format!(
            "{} is the last active admin: make someone else an admin first",
            person.name
        )));
    }
    let mut dropped_links = Vec::new();
    if let Some(admin) = req.is_admin.filter(|a| *a != person.is_admin) {
        db::users::set_admin(&mut tx, id, admin).await?;
        if !admin {
            db::people::revoke_invites_by(&mut tx, id, now).await?;
        }
        audit(
            &mut tx,
            by,
            "person.role",
            &id.to_string(),
            serde_json::json!({ "name": person.name, "role": if admin { "admin" } else { "member" } }),
        )
        .await?;
    }
    match req.deactivated {
        Some(true) if person.deactivated_at.is_none() => {
            db::users::set_deactivated(&mut tx, id, Some(now)).await?;
            let tokens = db::tokens::revoke_all(&mut tx, id, now).await?;
            db::people::revoke_invites_by(&mut tx, id, now).await?;
            dropped_links = db::links::revoke_made_by(&mut tx, id, now).await?;
            audit(
                &mut tx,
                by,
                "person.deactivate",
                &id.to_string(),
                serde_json::json!({ "name": person.name, "tokens": tokens, "links": dropped_links.len() }),
            )
            .await?;
        }
        Some(false) if person.deactivated_at.is_some() => {
            db::users::set_deactivated(&mut tx, id, None).await?;
            audit(
                &mut tx,
                by,
                "person.reactivate",
                &id.to_string(),
                serde_json::json!({ "name": person.name }),
            )
            .await?;
        }
        _ => {}
    }
    tx.commit().await?;
    if req.deactivated == Some(true) {
        // Their open connections, and the guests of the links they made, end now.
        app.hubs.drop_user(id);
        for (session, jti) in &dropped_links {
            app.hubs.revoke(*session, jti);
        }
        app.permissions.forget(id);
        stop_their_prompts(app, by, id).await?;
    }
    db::users::get(&app.db, id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("no person {id}")))
}

/// A deactivated person's queued prompts are withdrawn and their running turns stopped: the
/// agent acts as its prompt's person (their pull requests, their GitHub token), who has gone.
async fn stop_their_prompts(app: &AppState, by: &User, person: UserId) -> Result<()> {
    let admin = tandem_protocol::Author {
        kind: tandem_protocol::AuthorKind::User,
        user_id: Some(by.id),
        name: by.name.clone(),
    };
    for (session, prompt, running) in db::prompts::pending_by(&app.db, person).await? {
        if running {
            crate::commands::stop_turn(app, session, &admin).await?;
            continue;
        }
        let mut tx = app.db.begin().await?;
        if db::prompts::set_state(
            &mut tx,
            prompt,
            tandem_protocol::PromptState::Queued,
            tandem_protocol::PromptState::Withdrawn,
        )
        .await?
        {
            db::events::append(
                &mut tx,
                session,
                now_ms(),
                tandem_protocol::EventKind::PromptWithdrawn {
                    prompt_id: prompt,
                    author: admin.clone(),
                },
            )
            .await?;
        }
        tx.commit().await?;
    }
    Ok(())
}

/// Records a sign-in (`user`) or its refusal (`reason`) through `via`.
pub async fn audit_sign_in(
    app: &AppState,
    via: &str,
    user: Option<&User>,
    reason: Option<&str>,
    detail: serde_json::Value,
) {
    let (action, target) = match (user, reason) {
        (Some(u), None) => ("auth.login", u.id.to_string()),
        _ => ("auth.refused", String::new()),
    };
    let entry = db::audit::Entry {
        actor_user_id: user.map(|u| u.id),
        actor_name: user.map_or("(not signed in)", |u| u.name.as_str()),
        action,
        target: &target,
        detail: serde_json::json!({ "via": via, "reason": reason, "detail": detail }),
    };
    if let Err(e) = db::audit::record(&app.db, now_ms(), entry).await {
        tracing::warn!(error = %e, "recording a sign-in in the audit log failed");
    }
}

async fn audit(
    tx: &mut db::Tx,
    by: &User,
    action: &str,
    target: &str,
    detail: serde_json::Value,
) -> Result<()> {
    let entry = db::audit::Entry {
        actor_user_id: Some(by.id),
        actor_name: &by.name,
        action,
        target,
        detail,
    };
    db::audit::record(tx, now_ms(), entry).await?;
    Ok(())
}
