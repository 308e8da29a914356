//! Users.

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
}

impl UserRow {
    fn into_user(self) -> Result<User> {
        Ok(User {
            id: UserId(super::uuid(&self.id)?),
            name: self.name,
            is_admin: self.is_admin != 0,
            created_at: Timestamp(self.created_at),
        })
    }
}

/// Inserts a user.
pub async fn insert(mut ex: impl Conn, user: &User) -> Result<()> {
    sqlx::query("INSERT INTO users (id, name, is_admin, created_at) VALUES ($1, $2, $3, $4)")
        .bind(user.id.to_string())
        .bind(&user.name)
        .bind(i64::from(user.is_admin))
        .bind(user.created_at.0)
        .execute(ex.ex())
        .await?;
    Ok(())
}

/// A user by id.
pub async fn get(mut ex: impl Conn, id: UserId) -> Result<Option<User>> {
    let row: Option<UserRow> =
        sqlx::query_as("SELECT id, name, is_admin, created_at FROM users WHERE id = $1")
            .bind(id.to_string())
            .fetch_optional(ex.ex())
            .await?;
    row.map(UserRow::into_user).transpose()
}

/// The first admin (oldest), if any.
pub async fn first_admin(mut ex: impl Conn) -> Result<Option<User>> {
    let row: Option<UserRow> = sqlx::query_as(
        "SELECT id, name, is_admin, created_at FROM users WHERE is_admin = 1 ORDER BY created_at LIMIT 1",
    )
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
