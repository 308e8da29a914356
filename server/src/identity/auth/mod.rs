//! Authentication: API tokens and one-time login codes (random secrets, stored hashed), browser
//! logins as short-lived JWTs in an HttpOnly cookie, and the request extractor that turns either
//! into a [`CurrentUser`].

pub mod cookies;
mod extract;
pub mod flow;
pub use tandem_core::jwt;
mod secrets;
mod share;

pub use extract::CurrentUser;
pub use jwt::{Claims, JwtKeys};
pub use secrets::{hash_secret, new_secret};
pub use share::ShareCredential;

use tandem_protocol::limits::{API_TOKEN_PREFIX, LOGIN_CODE_PREFIX, LOGIN_LINK_TTL_SECS};
use tandem_protocol::{CreatedToken, Timestamp, TokenId, TokenInfo, User, UserId};

use crate::db::{self, Db};
use crate::{Error, Result, now_ms};

/// Mints a full API token for `user`; returns the secret once.
pub async fn create_api_token(
    db: &Db,
    user: &User,
    name: &str,
    expires_in_secs: Option<i64>,
) -> Result<CreatedToken> {
    create_token(db, user, name, expires_in_secs, None).await
}

/// The scope of the Chrome extension's tokens: prompting and reading what its person may see.
pub const EXTENSION_SCOPE: &str = "extension";

/// Mints an API token for `user`, limited to `scope` when given; returns the secret once.
pub async fn create_token(
    db: &Db,
    user: &User,
    name: &str,
    expires_in_secs: Option<i64>,
    scope: Option<&str>,
) -> Result<CreatedToken> {
    let name = name.trim();
    if name.is_empty() || name.len() > tandem_protocol::limits::MAX_NAME_BYTES {
        return Err(Error::Invalid("token name must be 1–200 bytes".into()));
    }
    if let Some(s) = expires_in_secs
        && s <= 0
    {
        return Err(Error::Invalid("expires_in_secs must be positive".into()));
    }
    let now = now_ms();
    let token = new_secret(API_TOKEN_PREFIX);
    let info = TokenInfo {
        id: TokenId(uuid::Uuid::new_v4()),
        name: name.to_string(),
        created_at: Timestamp(now),
        expires_at: expires_in_secs.map(|s| Timestamp(now.saturating_add(s.saturating_mul(1000)))),
        last_used_at: None,
        scope: scope.map(str::to_string),
    };
    let mut tx = db.begin().await?;
    db::tokens::insert(&mut tx, user.id, &info, &hash_secret(&token)).await?;
    db::audit::record(
        &mut tx,
        now,
        db::audit::Entry {
            actor_user_id: Some(user.id),
            actor_name: &user.name,
            action: "token.create",
            target: &info.id.to_string(),
            detail: serde_json::json!({ "name": info.name, "expires_at": info.expires_at, "scope": info.scope }),
        },
    )
    .await?;
    tx.commit().await?;
    Ok(CreatedToken { info, token })
}

/// Mints a one-time login code for `user`; returns the secret.
pub async fn create_login_code(db: &Db, user: UserId) -> Result<String> {
    let now = now_ms();
    let code = new_secret(LOGIN_CODE_PREFIX);
    db::tokens::insert_login_code(
        db,
        user,
        &hash_secret(&code),
        now,
        now + LOGIN_LINK_TTL_SECS * 1000,
    )
    .await?;
    Ok(code)
}

/// The browser URL that redeems a login code. The code travels in the fragment, so it never
/// reaches a server log or a `Referer` header.
pub fn login_url(public_url: &str, code: &str) -> String {
    format!("{public_url}/login#code={code}")
}

/// Resolves a full API token to its user, refusing unknown, revoked, expired and scoped tokens
/// (a scoped token is not exchanged for a browser login).
pub async fn user_for_api_token(db: &Db, token: &str) -> Result<User> {
    match scoped_user_for_api_token(db, token).await? {
        (user, None) => Ok(user),
        (_, Some(scope)) => Err(Error::Forbidden(format!(
            "this is an {scope} token: it signs in nothing else"
        ))),
    }
}

/// Resolves an API token to its user and scope, refusing unknown, revoked and expired tokens.
pub async fn scoped_user_for_api_token(db: &Db, token: &str) -> Result<(User, Option<String>)> {
    let owner = db::tokens::find_by_hash(db, &hash_secret(token))
        .await?
        .ok_or_else(|| Error::Unauthorized("unknown API token".into()))?;
    let now = now_ms();
    if owner.revoked {
        return Err(Error::Unauthorized("API token revoked".into()));
    }
    if owner.expires_at.is_some_and(|e| e <= now) {
        return Err(Error::Unauthorized("API token expired".into()));
    }
    let user = db::users::get(db, owner.user_id)
        .await?
        .ok_or_else(|| Error::Unauthorized("the token's user no longer exists".into()))
        .and_then(active)?;
    db::tokens::touch(db, owner.token_id, now).await?;
    Ok((user, owner.scope))
}

/// `user` if they are active: a deactivated person's every credential is refused.
pub fn active(user: User) -> Result<User> {
    if user.deactivated_at.is_some() {
        return Err(Error::Unauthorized(format!(
            "{} was deactivated by an admin; ask an admin to reactivate them",
            user.name
        )));
    }
    Ok(user)
}

/// Redeems a one-time login code.
pub async fn user_for_login_code(db: &Db, code: &str) -> Result<User> {
    let user = db::tokens::redeem_login_code(db, &hash_secret(code), now_ms())
        .await?
        .ok_or_else(|| {
            Error::Unauthorized(
                "login code unknown, already used or expired; ask for a new link".into(),
            )
        })?;
    db::users::get(db, user)
        .await?
        .ok_or_else(|| Error::Unauthorized("the login code's user no longer exists".into()))
        .and_then(active)
}

/// A fresh user id.
pub fn new_user_id() -> UserId {
    UserId(uuid::Uuid::new_v4())
}

/// On an empty database, creates the `admin` user and returns a one-time login code for it.
pub async fn bootstrap_admin(db: &Db) -> Result<Option<String>> {
    if db::users::count(db).await? > 0 {
        return Ok(None);
    }
    let admin = User::new(new_user_id(), "admin", true, Timestamp(now_ms()));
    db::users::insert(db, &admin).await?;
    Ok(Some(create_login_code(db, admin.id).await?))
}

/// The first admin, for local commands run next to the data dir (`tandem token create`,
/// `tandem login-link`).
pub async fn local_admin(db: &Db) -> Result<User> {
    db::users::first_admin(db)
        .await?
        .ok_or_else(|| Error::NotFound("no admin user yet; start `tandem serve` once first".into()))
}
