//! GitHub: linked accounts, imported repos, each session's pull request and installation
//! token, handled webhook deliveries. Tokens arrive here already sealed.

use sqlx::FromRow;
use tandem_protocol::github::{PrState, PullRequest};
use tandem_protocol::{RepoId, SessionId, Timestamp, UserId};

use crate::Conn;
use crate::{Error, Result};

/// A person's linked GitHub account.
#[derive(Clone, Debug, FromRow)]
pub struct Account {
    pub user_id: String,
    pub github_id: i64,
    pub login: String,
    pub name: Option<String>,
    pub email: Option<String>,
    pub token_sealed: Option<String>,
    /// The refresh token (sealed), when GitHub gave one (its user tokens then expire).
    pub refresh_sealed: Option<String>,
    /// When the access token expires (ms), if it does.
    pub token_expires_at: Option<i64>,
}

const ACCOUNT: &str = "SELECT user_id, github_id, login, name, email, token_sealed, refresh_sealed, token_expires_at FROM github_accounts";

pub async fn account_by_github_id(mut ex: impl Conn, github_id: i64) -> Result<Option<Account>> {
    Ok(sqlx::query_as(&format!("{ACCOUNT} WHERE github_id = $1"))
        .bind(github_id)
        .fetch_optional(ex.ex())
        .await?)
}

pub async fn account_of(mut ex: impl Conn, user: UserId) -> Result<Option<Account>> {
    Ok(sqlx::query_as(&format!("{ACCOUNT} WHERE user_id = $1"))
        .bind(user.to_string())
        .fetch_optional(ex.ex())
        .await?)
}

/// Links `a`: a new link only. A person already linked to a GitHub account, or a GitHub account
/// already linked to a person, is refused by the table's unique keys (a unique violation), never
/// replaced: unlinking is its own action ([`unlink`]).
pub async fn link_account(mut ex: impl Conn, a: &Account, now: i64) -> Result<()> {
    sqlx::query(
        "INSERT INTO github_accounts (user_id, github_id, login, name, email, token_sealed, updated_at, refresh_sealed, token_expires_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    )
    .bind(&a.user_id)
    .bind(a.github_id)
    .bind(&a.login)
    .bind(&a.name)
    .bind(&a.email)
    .bind(&a.token_sealed)
    .bind(now)
    .bind(&a.refresh_sealed)
    .bind(a.token_expires_at)
    .execute(ex.ex())
    .await?;
    Ok(())
}

/// Refreshes the profile and tokens of the link between `a.user_id` and `a.github_id`, only if
/// that very link is there; false if it is not (it was unlinked, or is another).
pub async fn refresh_account(mut ex: impl Conn, a: &Account, now: i64) -> Result<bool> {
    let done = sqlx::query(
        "UPDATE github_accounts SET login = $1, name = $2, email = $3, token_sealed = $4, updated_at = $5, refresh_sealed = $6, token_expires_at = $7
         WHERE user_id = $8 AND github_id = $9",
    )
    .bind(&a.login)
    .bind(&a.name)
    .bind(&a.email)
    .bind(&a.token_sealed)
    .bind(now)
    .bind(&a.refresh_sealed)
    .bind(a.token_expires_at)
    .bind(&a.user_id)
    .bind(a.github_id)
    .execute(ex.ex())
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Removes `user`'s GitHub link (and its sealed tokens with it): the login it was, if any.
pub async fn unlink(mut ex: impl Conn, user: UserId) -> Result<Option<String>> {
    let row: Option<(String,)> =
        sqlx::query_as("DELETE FROM github_accounts WHERE user_id = $1 RETURNING login")
            .bind(user.to_string())
            .fetch_optional(ex.ex())
            .await?;
    Ok(row.map(|(l,)| l))
}

/// Replaces a linked account's tokens (after a refresh).
pub async fn set_tokens(
    mut ex: impl Conn,
    user_id: &str,
    token_sealed: &str,
    refresh_sealed: Option<&str>,
    token_expires_at: Option<i64>,
    now: i64,
) -> Result<()> {
    sqlx::query(
        "UPDATE github_accounts SET token_sealed = $1, refresh_sealed = $2, token_expires_at = $3, updated_at = $4 WHERE user_id = $5",
    )
    .bind(token_sealed)
    .bind(refresh_sealed)
    .bind(token_expires_at)
    .bind(now)
    .bind(user_id)
    .execute(ex.ex())
    .await?;
    Ok(())
}

/// A repo imported from an installation.
#[derive(Clone, Debug, FromRow)]
pub struct LinkedRepo {
    pub repo_id: String,
    pub owner: String,
    pub name: String,
    pub installation_id: i64,
}

impl LinkedRepo {
    pub fn full_name(&self) -> String {
        format!("{}/{}", self.owner, self.name)
    }
}

pub async fn link_repo(mut ex: impl Conn, r: &LinkedRepo) -> Result<()> {
    sqlx::query(
        "INSERT INTO github_repos (repo_id, owner, name, installation_id) VALUES ($1, $2, $3, $4)",
    )
    .bind(&r.repo_id)
    .bind(&r.owner)
    .bind(&r.name)
    .bind(r.installation_id)
    .execute(ex.ex())
    .await?;
    Ok(())
}

pub async fn linked_repo(mut ex: impl Conn, repo: RepoId) -> Result<Option<LinkedRepo>> {
    Ok(sqlx::query_as(
        "SELECT repo_id, owner, name, installation_id FROM github_repos WHERE repo_id = $1",
    )
    .bind(repo.to_string())
    .fetch_optional(ex.ex())
    .await?)
}

pub async fn linked_repo_by_name(
    mut ex: impl Conn,
    owner: &str,
    name: &str,
) -> Result<Option<LinkedRepo>> {
    Ok(sqlx::query_as(
        "SELECT repo_id, owner, name, installation_id FROM github_repos WHERE LOWER(owner) = LOWER($1) AND LOWER(name) = LOWER($2)",
    )
    .bind(owner)
    .bind(name)
    .fetch_optional(ex.ex())
    .await?)
}

pub async fn linked_repos(mut ex: impl Conn) -> Result<Vec<LinkedRepo>> {
    Ok(
        sqlx::query_as("SELECT repo_id, owner, name, installation_id FROM github_repos")
            .fetch_all(ex.ex())
            .await?,
    )
}

#[derive(FromRow)]
struct PrRow {
    session_id: String,
    number: i64,
    url: String,
    branch: String,
    base: String,
    state: String,
    head_sha: String,
    opened_by: String,
    created_at: i64,
    updated_at: i64,
}

impl PrRow {
    fn into_pr(self) -> Result<PullRequest> {
        Ok(PullRequest {
            session_id: SessionId(super::uuid(&self.session_id)?),
            number: self.number,
            url: self.url,
            branch: self.branch,
            base: self.base,
            state: PrState::parse(&self.state).ok_or_else(|| {
                Error::Internal(format!("stored PR state {:?} unknown", self.state))
            })?,
            head_sha: self.head_sha,
            opened_by: self.opened_by,
            created_at: Timestamp(self.created_at),
            updated_at: Timestamp(self.updated_at),
        })
    }
}

const PR: &str = "SELECT session_id, number, url, branch, base, state, head_sha, opened_by, created_at, updated_at FROM pull_requests";

pub async fn pull_request(mut ex: impl Conn, session: SessionId) -> Result<Option<PullRequest>> {
    let row: Option<PrRow> = sqlx::query_as(&format!("{PR} WHERE session_id = $1"))
        .bind(session.to_string())
        .fetch_optional(ex.ex())
        .await?;
    row.map(PrRow::into_pr).transpose()
}

pub async fn pull_request_by_number(
    mut ex: impl Conn,
    repo: RepoId,
    number: i64,
) -> Result<Option<PullRequest>> {
    let row: Option<PrRow> = sqlx::query_as(&format!("{PR} WHERE repo_id = $1 AND number = $2"))
        .bind(repo.to_string())
        .bind(number)
        .fetch_optional(ex.ex())
        .await?;
    row.map(PrRow::into_pr).transpose()
}

pub async fn pull_requests_by_head(
    mut ex: impl Conn,
    repo: RepoId,
    head_sha: &str,
) -> Result<Vec<PullRequest>> {
    let rows: Vec<PrRow> = sqlx::query_as(&format!("{PR} WHERE repo_id = $1 AND head_sha = $2"))
        .bind(repo.to_string())
        .bind(head_sha)
        .fetch_all(ex.ex())
        .await?;
    rows.into_iter().map(PrRow::into_pr).collect()
}

pub async fn insert_pull_request(mut ex: impl Conn, repo: RepoId, pr: &PullRequest) -> Result<()> {
    sqlx::query(
        "INSERT INTO pull_requests (session_id, repo_id, number, url, branch, base, state, head_sha, opened_by, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
    )
    .bind(pr.session_id.to_string())
    .bind(repo.to_string())
    .bind(pr.number)
    .bind(&pr.url)
    .bind(&pr.branch)
    .bind(&pr.base)
    .bind(pr.state.as_str())
    .bind(&pr.head_sha)
    .bind(&pr.opened_by)
    .bind(pr.created_at.0)
    .bind(pr.updated_at.0)
    .execute(ex.ex())
    .await?;
    Ok(())
}

pub async fn set_pull_request_head(
    mut ex: impl Conn,
    session: SessionId,
    head_sha: &str,
    now: i64,
) -> Result<()> {
    sqlx::query("UPDATE pull_requests SET head_sha = $1, updated_at = $2 WHERE session_id = $3")
        .bind(head_sha)
        .bind(now)
        .bind(session.to_string())
        .execute(ex.ex())
        .await?;
    Ok(())
}

/// Sets the state; false when it already was that.
pub async fn set_pull_request_state(
    mut ex: impl Conn,
    session: SessionId,
    state: PrState,
    now: i64,
) -> Result<bool> {
    // When it was merged or closed is kept (review time); a reopened one forgets both.
    let r = sqlx::query(
        "UPDATE pull_requests SET state = $1, updated_at = $2,
            merged_at = CASE WHEN $1 = 'merged' THEN $2 WHEN $1 = 'open' THEN NULL ELSE merged_at END,
            closed_at = CASE WHEN $1 = 'closed' THEN $2 WHEN $1 = 'open' THEN NULL ELSE closed_at END
         WHERE session_id = $3 AND state <> $1",
    )
        .bind(state.as_str())
        .bind(now)
        .bind(session.to_string())
        .execute(ex.ex())
        .await?;
    Ok(r.rows_affected() > 0)
}

/// A session's installation token: `(sealed, expires_at ms)`, unless revoked.
pub async fn credential(mut ex: impl Conn, session: SessionId) -> Result<Option<(String, i64)>> {
    Ok(sqlx::query_as("SELECT token_sealed, expires_at FROM session_credentials WHERE session_id = $1 AND revoked_at IS NULL")
        .bind(session.to_string())
        .fetch_optional(ex.ex())
        .await?)
}

pub async fn put_credential(
    mut ex: impl Conn,
    session: SessionId,
    sealed: &str,
    expires_at: i64,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO session_credentials (session_id, token_sealed, expires_at) VALUES ($1, $2, $3)
         ON CONFLICT (session_id) DO UPDATE SET token_sealed = $2, expires_at = $3, revoked_at = NULL",
    )
    .bind(session.to_string())
    .bind(sealed)
    .bind(expires_at)
    .execute(ex.ex())
    .await?;
    Ok(())
}

/// Marks the token `sealed` revoked (not a newer one minted meanwhile); true if it was live.
pub async fn take_credential(
    mut ex: impl Conn,
    session: SessionId,
    sealed: &str,
    now: i64,
) -> Result<bool> {
    let r = sqlx::query(
        "UPDATE session_credentials SET revoked_at = $1 WHERE session_id = $2 AND token_sealed = $3 AND revoked_at IS NULL",
    )
    .bind(now)
    .bind(session.to_string())
    .bind(sealed)
    .execute(ex.ex())
    .await?;
    Ok(r.rows_affected() > 0)
}

/// Sessions that ended (stopped or failed) while their token is still live.
pub async fn ended_with_credentials(mut ex: impl Conn) -> Result<Vec<SessionId>> {
    let ids: Vec<String> = sqlx::query_scalar(
        "SELECT c.session_id FROM session_credentials c JOIN sessions s ON s.id = c.session_id
         WHERE c.revoked_at IS NULL AND s.state IN ('stopped', 'failed')",
    )
    .fetch_all(ex.ex())
    .await?;
    ids.iter().map(|s| super::uuid(s).map(SessionId)).collect()
}

/// Records a delivery; false when it was seen before.
pub async fn first_delivery(mut ex: impl Conn, id: &str, event: &str, now: i64) -> Result<bool> {
    let r = sqlx::query("INSERT INTO github_deliveries (id, event, received_at) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING")
        .bind(id)
        .bind(event)
        .bind(now)
        .execute(ex.ex())
        .await?;
    Ok(r.rows_affected() > 0)
}
