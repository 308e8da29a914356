//! People: users, their email and groups, deactivation.

use sqlx::FromRow;
use tandem_protocol::{Timestamp, User, UserId};

use crate::Conn;
use crate::Result;

#[derive(FromRow)]
struct UserRow {
    id: String,
    name: String,
    is_admin: i64,
    created_at: i64,
    email: Option<String>,
    groups: String,
    deactivated_at: Option<i64>,
}

const COLUMNS: &str = "id, name, is_admin, created_at, email, groups, deactivated_at";

impl UserRow {
    fn into_user(self) -> Result<User> {
        Ok(User {
            id: UserId(super::uuid(&self.id)?),
            name: self.name,
            is_admin: self.is_admin != 0,
            created_at: Timestamp(self.created_at),
            email: self.email,
            groups: serde_json::from_str(&self.groups).unwrap_or_default(),
            deactivated_at: self.deactivated_at.map(Timestamp),
        })
    }
}

/// Inserts a user.
pub async fn insert(mut ex: impl Conn, user: &User) -> Result<()> {
    sqlx::query(
        "INSERT INTO users (id, name, is_admin, created_at, email, groups, deactivated_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(user.id.to_string())
    .bind(&user.name)
    .bind(i64::from(user.is_admin))
    .bind(user.created_at.0)
    .bind(user.email.as_deref().map(str::to_lowercase))
    .bind(serde_json::to_string(&user.groups).unwrap_or_else(|_| "[]".into()))
    .bind(user.deactivated_at.map(|t| t.0))
    .execute(ex.ex())
    .await?;
    Ok(())
}

/// A user by id.
pub async fn get(mut ex: impl Conn, id: UserId) -> Result<Option<User>> {
    let row: Option<UserRow> =
        sqlx::query_as(&format!("SELECT {COLUMNS} FROM users WHERE id = $1"))
            .bind(id.to_string())
            .fetch_optional(ex.ex())
            .await?;
    row.map(UserRow::into_user).transpose()
}

/// A user by (lower-cased) email.
pub async fn by_email(mut ex: impl Conn, email: &str) -> Result<Option<User>> {
    let row: Option<UserRow> =
        sqlx::query_as(&format!("SELECT {COLUMNS} FROM users WHERE email = $1"))
            .bind(email.to_lowercase())
            .fetch_optional(ex.ex())
            .await?;
    row.map(UserRow::into_user).transpose()
}

/// A user by login name.
pub async fn by_name(mut ex: impl Conn, name: &str) -> Result<Option<User>> {
    let row: Option<UserRow> =
        sqlx::query_as(&format!("SELECT {COLUMNS} FROM users WHERE name = $1"))
            .bind(name)
            .fetch_optional(ex.ex())
            .await?;
    row.map(UserRow::into_user).transpose()
}

/// Everyone, by name.
pub async fn list(mut ex: impl Conn, limit: i64) -> Result<Vec<User>> {
    let rows: Vec<UserRow> = sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM users ORDER BY name LIMIT $1"
    ))
    .bind(limit)
    .fetch_all(ex.ex())
    .await?;
    rows.into_iter().map(UserRow::into_user).collect()
}

/// The active admins, by name (whom to ask for access).
pub async fn admins(mut ex: impl Conn) -> Result<Vec<User>> {
    let rows: Vec<UserRow> = sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM users WHERE is_admin = 1 AND deactivated_at IS NULL ORDER BY name"
    ))
    .fetch_all(ex.ex())
    .await?;
    rows.into_iter().map(UserRow::into_user).collect()
}

/// The first admin (oldest), if any.
pub async fn first_admin(mut ex: impl Conn) -> Result<Option<User>> {
    let row: Option<UserRow> = sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM users WHERE is_admin = 1 ORDER BY created_at LIMIT 1"
    ))
    .fetch_optional(ex.ex())
    .await?;
    row.map(UserRow::into_user).transpose()
}

/// How many users exist.
pub async fn count(mut ex: impl Conn) -> Result<i64> {
    let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM users")
        .fetch_one(ex.ex())
        .await?;
    Ok(n)
}

/// Counts the active admins while holding them: their rows stay locked (PostgreSQL) or the
/// database's write lock held (SQLite) until the transaction ends, so two demotions at once
/// are serialized and the second sees the first. A plain `COUNT(*)` in each of two concurrent
/// READ COMMITTED transactions both see two admins, and both demote.
pub async fn lock_active_admins(mut ex: impl Conn) -> Result<u64> {
    let done =
        sqlx::query("UPDATE users SET is_admin = 1 WHERE is_admin = 1 AND deactivated_at IS NULL")
            .execute(ex.ex())
            .await?;
    Ok(done.rows_affected())
}

/// Sets whether `id` is an admin; whether the user exists.
pub async fn set_admin(mut ex: impl Conn, id: UserId, is_admin: bool) -> Result<bool> {
    let done = sqlx::query("UPDATE users SET is_admin = $1 WHERE id = $2")
        .bind(i64::from(is_admin))
        .bind(id.to_string())
        .execute(ex.ex())
        .await?;
    Ok(done.rows_affected() == 1)
}

/// Deactivates (`Some(now)`) or reactivates (`None`) `id`; whether the user exists.
pub async fn set_deactivated(mut ex: impl Conn, id: UserId, at: Option<i64>) -> Result<bool> {
    let done = sqlx::query("UPDATE users SET deactivated_at = $1 WHERE id = $2")
        .bind(at)
        .bind(id.to_string())
        .execute(ex.ex())
        .await?;
    Ok(done.rows_affected() == 1)
}

/// Records what the identity provider says of `id` at a sign-in.
pub async fn set_profile(
    mut ex: impl Conn,
    id: UserId,
    email: Option<&str>,
    groups: &[String],
) -> Result<()> {
    sqlx::query("UPDATE users SET email = COALESCE($1, email), groups = $2 WHERE id = $3")
        .bind(email.map(str::to_lowercase))
        .bind(serde_json::to_string(groups).unwrap_or_else(|_| "[]".into()))
        .bind(id.to_string())
        .execute(ex.ex())
        .await?;
    Ok(())
}
