//! Each session's GitHub credential: an installation token scoped to the session's repository
//! alone (contents and pull requests, write), minted on first use, renewed when near expiry,
//! sealed in the database and revoked when the session ends. The workspace gets it only through
//! its git credential helper, which asks the gateway each time git needs it.

use tandem_protocol::{SessionId, SessionState};

use super::{GitHub, RENEW_MARGIN_MS, Token};
use crate::db::github::LinkedRepo;
use crate::{Error, Result, db, now_ms};

fn sealed_name(session: SessionId) -> String {
    format!("github.session.{session}")
}

/// The GitHub repository behind `session`, or a `not_a_github_repo` refusal.
pub async fn linked(gh: &GitHub, session: SessionId) -> Result<LinkedRepo> {
    let detail = crate::sessions::get(&gh.db, session).await?;
    db::github::linked_repo(&gh.db, detail.session.repo_id).await?.ok_or_else(|| Error::Refused {
        code: "not_a_github_repo",
        message: format!("{} is not a GitHub repository imported through the App (`tandem repo import owner/name`)", detail.session.repo_name),
    })
}

/// The session's token, minted when it has none or it is about to expire. Ended sessions get none.
/// Minting and revoking take the session's own lock, so a stop never races a renewal.
pub async fn for_session(gh: &GitHub, session: SessionId) -> Result<(LinkedRepo, Token)> {
    let repo = linked(gh, session).await?;
    let lock = gh.token_lock(session);
    let _one = lock.lock().await;
    let state = crate::sessions::get(&gh.db, session).await?.session.state;
    if matches!(state, SessionState::Stopped | SessionState::Failed) {
        return Err(Error::Forbidden(format!(
            "session {session} has ended; its GitHub credential is revoked"
        )));
    }
    if let Some((sealed, expires_at)) = db::github::credential(&gh.db, session).await?
        && expires_at - RENEW_MARGIN_MS > now_ms()
    {
        let token = gh.secrets.open_value(&sealed_name(session), &sealed)?;
        gh.remember_token(session, Some(&token));
        return Ok((repo, Token { token, expires_at }));
    }
    // The previous token (minutes from expiry) is left to expire: a clone or push that got it
    // just now may still be using it.
    let token = gh.mint(repo.installation_id, Some(&repo.name)).await?;
    let sealed = gh.secrets.seal_value(&sealed_name(session), &token.token)?;
    db::github::put_credential(&gh.db, session, &sealed, token.expires_at).await?;
    gh.remember_token(session, Some(&token.token));
    tracing::info!(%session, repo = %repo.full_name(), "minted the session's GitHub token");
    Ok((repo, token))
}

/// Revokes the session's token, if it has a live one.
pub async fn revoke(gh: &GitHub, session: SessionId) -> Result<bool> {
    let lock = gh.token_lock(session);
    let _one = lock.lock().await;
    let Some((sealed, _)) = db::github::credential(&gh.db, session).await? else {
        return Ok(false);
    };
    let token = gh.secrets.open_value(&sealed_name(session), &sealed)?;
    // GitHub first: a failure leaves the row live, so the next sweep tries again.
    gh.revoke(&token).await?;
    db::github::take_credential(&gh.db, session, &sealed, now_ms()).await?;
    gh.remember_token(session, None);
    tracing::info!(%session, "revoked the session's GitHub token");
    Ok(true)
}

/// Revokes the tokens of every session that ended (stopped, failed) with one still live — after
/// a restart, or when revoking at the moment it ended failed.
pub async fn revoke_ended(gh: &GitHub) -> Result<usize> {
    let mut n = 0;
    for session in db::github::ended_with_credentials(&gh.db).await? {
        match revoke(gh, session).await {
            Ok(true) => n += 1,
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(%session, error = %e, "revoking an ended session's GitHub token failed")
            }
        }
    }
    Ok(n)
}

/// The server's git fetches with the App's installation token; a workspace's output never
/// shows its session's token; an ended session's token is revoked.
#[async_trait::async_trait]
impl tandem_host::GitCredentials for GitHub {
    async fn remote_auth(
        &self,
        repo: &tandem_protocol::Repo,
    ) -> tandem_host::Result<Option<String>> {
        Ok(GitHub::remote_auth(self, repo).await?)
    }

    fn redact(&self, session: SessionId, text: &str) -> Option<String> {
        GitHub::redact(self, session, text)
    }

    async fn revoke(&self, session: SessionId) {
        if let Err(e) = revoke(self, session).await {
            tracing::warn!(%session, error = %e, "revoking the session's GitHub token failed; retried later");
        }
    }
}
