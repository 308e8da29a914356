//! Who may do what in a session: the owner (its author, or an admin), drivers and viewers
//! (signed-in users who joined through a share link, or guests holding one). Signed-in users
//! with no link watch. Enforced here, for REST and the live channel alike.

use tandem_protocol::live::{MAX_DISPLAY_NAME, Role, ShareLink};
use tandem_protocol::{Session, SessionId, User, UserId};

use crate::db::{self, Db};
use crate::jwt::JwtKeys;
use crate::{Error, Result, now_ms};

/// A participant's identity and role in one session.
#[derive(Clone, Debug)]
pub struct Access {
    pub name: String,
    pub user_id: Option<UserId>,
    pub role: Role,
    /// The share link it came through (revoking the link ends it).
    pub jti: Option<String>,
}

/// A signed-in user's role in `session`.
pub async fn of_user(db: &Db, session: &Session, user: &User) -> Result<Access> {
    let (role, jti) = if user.is_admin || session.author.user_id == Some(user.id) {
        (Role::Owner, None)
    } else {
        match db::links::member(db, session.id, user.id).await? {
            // A membership lasts as long as the link it came through: revoked or expired,
            // the person is back to watching.
            Some((role, Some(jti))) => match link_by_id(db, session.id, &jti).await {
                Ok(_) => (role, Some(jti)),
                Err(_) => (Role::Viewer, None),
            },
            Some((role, None)) => (role, None),
            None => (Role::Viewer, None),
        }
    };
    Ok(Access {
        name: user.name.clone(),
        user_id: Some(user.id),
        role,
        jti,
    })
}

/// Requires at least `need` in `session` for `user`.
pub async fn require(db: &Db, session: SessionId, user: &User, need: Role) -> Result<Access> {
    let s = super::get(db, session).await?.session;
    let a = of_user(db, &s, user).await?;
    if a.role < need {
        return Err(Error::Forbidden(format!(
            "you are a {} in this session; this needs a {}",
            name(a.role),
            name(need)
        )));
    }
    Ok(a)
}

fn name(r: Role) -> &'static str {
    db::links::role_str(r)
}

/// A live, unrevoked, unexpired link of `session` from its token.
pub async fn link(db: &Db, jwt: &JwtKeys, session: SessionId, token: &str) -> Result<ShareLink> {
    let claims = jwt.verify_share(token)?;
    if claims.sub != session.to_string() {
        return Err(Error::Forbidden(
            "this share link is for another session".into(),
        ));
    }
    link_by_id(db, session, &claims.jti).await
}

/// Share link `jti` of `session`, if it still holds (not revoked, not expired).
pub async fn link_by_id(db: &Db, session: SessionId, jti: &str) -> Result<ShareLink> {
    let link = db::links::get(db, jti)
        .await?
        .ok_or_else(|| Error::Unauthorized("this share link does not exist".into()))?;
    if link.session_id != session {
        return Err(Error::Forbidden(
            "this share link is for another session".into(),
        ));
    }
    if link.revoked_at.is_some() {
        return Err(Error::Forbidden("this share link was revoked".into()));
    }
    if link.expires_at.0 <= now_ms() {
        return Err(Error::Unauthorized(
            "this share link has expired; ask for a new one".into(),
        ));
    }
    if !db::links::maker_active(db, jti).await? {
        return Err(Error::Forbidden(
            "the person who shared this link no longer has access; ask for a new one".into(),
        ));
    }
    Ok(link)
}

/// Who is on the other end of a live channel: a share token (a guest with `guest_name`, or a
/// signed-in user), else a signed-in user.
pub async fn resolve(
    db: &Db,
    jwt: &JwtKeys,
    session: &Session,
    user: Option<&User>,
    share: Option<&str>,
    guest_name: Option<&str>,
) -> Result<Access> {
    if let Some(token) = share {
        let link = link(db, jwt, session.id, token).await?;
        if let Some(user) = user {
            // A signed-in user keeps the better of the link's role and their own.
            let own = of_user(db, session, user).await?;
            if own.role >= link.role {
                return Ok(own);
            }
            return Ok(Access {
                name: user.name.clone(),
                user_id: Some(user.id),
                role: link.role,
                jti: Some(link.jti),
            });
        }
        if !link.allow_guests {
            return Err(Error::Unauthorized(
                "this share link is for signed-in people; sign in first".into(),
            ));
        }
        let name = guest_name
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| Error::Invalid("a guest needs a display name".into()))?;
        if name.chars().count() > MAX_DISPLAY_NAME || name.chars().any(char::is_control) {
            return Err(Error::Invalid(format!(
                "a display name is 1 to {MAX_DISPLAY_NAME} printable characters"
            )));
        }
        return Ok(Access {
            name: format!("{name} (guest)"),
            user_id: None,
            role: link.role,
            jti: Some(link.jti),
        });
    }
    match user {
        Some(u) => of_user(db, session, u).await,
        None => Err(Error::Unauthorized("sign in, or open a share link".into())),
    }
}
