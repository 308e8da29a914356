//! A person's own permission on a GitHub repository, read with their user token (GitHub answers
//! `permissions` on the repository for the token's owner; a repository they cannot see is a
//! 404). Cached by `permissions`.

use serde::Deserialize;
use tandem_protocol::UserId;
use tandem_protocol::people::RepoRole;

use super::GitHub;
use crate::Result;
use crate::state::AppState;

#[derive(Deserialize)]
struct RepoPermissions {
    #[serde(default)]
    permissions: Option<Flags>,
}

#[derive(Deserialize)]
struct Flags {
    #[serde(default)]
    admin: bool,
    #[serde(default)]
    maintain: bool,
    #[serde(default)]
    push: bool,
    #[serde(default)]
    triage: bool,
    #[serde(default)]
    pull: bool,
}

/// What `user` may do with `owner/name` by their GitHub permission: write (push, maintain,
/// admin), read (pull, triage), or nothing (no linked GitHub account, no access, or GitHub
/// refused the token).
pub async fn of_person(
    app: &AppState,
    gh: &GitHub,
    user: UserId,
    owner: &str,
    name: &str,
) -> Result<Option<RepoRole>> {
    let Some(token) = crate::identity::github::person_token(app, gh, user, false).await? else {
        return Ok(None);
    };
    let client = gh.client(&token)?;
    let answer: std::result::Result<RepoPermissions, _> = client
        .get(format!("/repos/{owner}/{name}"), None::<&()>)
        .await;
    let flags = match answer {
        Ok(RepoPermissions {
            permissions: Some(f),
        }) => f,
        Ok(_) => return Ok(None),
        Err(e) => {
            if super::status_of(&e) != Some(404) {
                tracing::warn!(%user, repo = %format!("{owner}/{name}"), error = %e, "reading a person's GitHub permission failed");
            }
            return Ok(None);
        }
    };
    Ok(if flags.admin || flags.maintain || flags.push {
        Some(RepoRole::Write)
    } else if flags.pull || flags.triage {
        Some(RepoRole::Read)
    } else {
        None
    })
}
