//! Repo logic: validating and registering git remotes.

use tandem_protocol::limits::{MAX_LIST, MAX_NAME_BYTES, MAX_URL_BYTES};
use tandem_protocol::people::RepoAccess;
use tandem_protocol::{CreateRepo, Repo, RepoId, Timestamp, User};

use crate::db::{self, Db};
use crate::error::conflict_on_unique;
use crate::{Error, Result, now_ms};

/// Registers a repo by URL: admins only (the server's git fetches whatever it names), and a
/// local path or `file://` URL only under one of `local_dirs`.
pub async fn create(
    db: &Db,
    user: &User,
    req: CreateRepo,
    local_dirs: &[std::path::PathBuf],
) -> Result<Repo> {
    if !user.is_admin {
        return Err(Error::Forbidden(
            "only admins add repos by URL (members import them from GitHub)".into(),
        ));
    }
    check_local(req.url.trim(), local_dirs)?;
    create_with(db, user, req, None).await
}

/// A local path or `file://` URL must lie under a directory the operator allows
/// (`local_repo_dirs`: tandem.toml's, else the settings page's), after symlinks are resolved.
pub fn check_local(url: &str, local_dirs: &[std::path::PathBuf]) -> Result<()> {
    let path = if let Some(p) = url.strip_prefix("file://") {
        p
    } else if url.starts_with('/') {
        url
    } else {
        return Ok(());
    };
    let refuse = || {
        Error::Forbidden(format!(
            "local repos are allowed only under the directories an admin allows (Settings → Local repos, or `local_repo_dirs` in tandem.toml); {path:?} is not under {}",
            if local_dirs.is_empty() {
                "any (none is listed)".to_string()
            } else {
                local_dirs
                    .iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        ))
    };
    let real = std::fs::canonicalize(path).map_err(|_| refuse())?;
    let allowed = local_dirs
        .iter()
        .any(|d| std::fs::canonicalize(d).is_ok_and(|d| real.starts_with(&d)));
    if allowed { Ok(()) } else { Err(refuse()) }
}

/// Registers a repo, linked to the GitHub repository `(owner, name, installation id)` when given,
/// in the same transaction.
pub async fn create_with(
    db: &Db,
    user: &User,
    req: CreateRepo,
    github: Option<(String, String, i64)>,
) -> Result<Repo> {
    let name = req.name.trim().to_string();
    validate_name(&name)?;
    let url = req.url.trim().to_string();
    validate_url(&url)?;
    let default_branch = req
        .default_branch
        .map(|b| b.trim().to_string())
        .unwrap_or_else(|| "main".into());
    validate_branch(&default_branch)?;
    let warm_pool = req.warm_pool.unwrap_or(0);
    validate_warm_pool(warm_pool)?;
    let now = now_ms();
    let repo = Repo {
        id: RepoId(uuid::Uuid::new_v4()),
        name,
        url,
        default_branch,
        created_by: user.id,
        created_at: Timestamp(now),
        warm_pool,
        warm_ready: 0,
        // A GitHub repo follows each person's GitHub permission until an admin says otherwise.
        access: if github.is_some() {
            RepoAccess::Github
        } else {
            RepoAccess::Everyone
        },
    };
    let mut tx = db.begin().await?;
    db::repos::insert(&mut tx, &repo)
        .await
        .map_err(|e| conflict_on_unique(e, &format!("a repo named {:?}", repo.name)))?;
    if let Some((owner, name, installation_id)) = github {
        let linked = db::github::LinkedRepo {
            repo_id: repo.id.to_string(),
            owner,
            name,
            installation_id,
        };
        db::github::link_repo(&mut tx, &linked).await?;
    }
    db::audit::record(
        &mut tx,
        now,
        db::audit::Entry {
            actor_user_id: Some(user.id),
            actor_name: &user.name,
            action: "repo.create",
            target: &repo.id.to_string(),
            detail: serde_json::json!({ "name": repo.name, "url": repo.url }),
        },
    )
    .await?;
    tx.commit().await?;
    Ok(repo)
}

/// One repo.
pub async fn get(db: &Db, id: RepoId) -> Result<Repo> {
    db::repos::get(db, id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("no repo {id}")))
}

/// All repos by name.
pub async fn list(db: &Db) -> Result<Vec<Repo>> {
    Ok(db::repos::list(db, MAX_LIST).await?)
}

/// 0 to `MAX_WARM_POOL`.
pub fn validate_warm_pool(size: i64) -> Result<()> {
    if (0..=tandem_protocol::limits::MAX_WARM_POOL).contains(&size) {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "warm pool size must be 0–{}",
            tandem_protocol::limits::MAX_WARM_POOL
        )))
    }
}

/// `owner/name`-style: letters, digits, `.`, `_`, `-`, `/`.
pub fn validate_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_NAME_BYTES {
        return Err(Error::Invalid(format!(
            "repo name must be 1–{MAX_NAME_BYTES} bytes"
        )));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/'))
    {
        return Err(Error::Invalid(format!(
            "repo name {name:?} may only hold letters, digits, '.', '_', '-' and '/'"
        )));
    }
    Ok(())
}

/// A git remote: `https://`, `http://`, `ssh://`, `git://`, `file://`, `user@host:path` or an
/// absolute path. Never an option-looking string (it reaches `git clone`).
pub fn validate_url(url: &str) -> Result<()> {
    if url.is_empty() || url.len() > MAX_URL_BYTES {
        return Err(Error::Invalid(format!(
            "repo url must be 1–{MAX_URL_BYTES} bytes"
        )));
    }
    if url.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(Error::Invalid(
            "repo url must not contain spaces or control characters".into(),
        ));
    }
    let scheme_ok = ["https://", "http://", "ssh://", "git://", "file://"]
        .iter()
        .any(|s| url.starts_with(s));
    let scp_ok =
        !url.starts_with('-') && url.contains('@') && url.contains(':') && !url.contains("://");
    if scheme_ok || scp_ok || url.starts_with('/') {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "repo url {url:?} is not a git remote (https://, ssh://, git://, file://, user@host:path or /abs/path)"
        )))
    }
}

/// A git branch name per `git check-ref-format --branch`, the common subset.
pub fn validate_branch(b: &str) -> Result<()> {
    let bad = b.is_empty()
        || b.len() > 255
        || b.starts_with('-')
        || b.starts_with('/')
        || b.ends_with('/')
        || b.ends_with('.')
        || b.ends_with(".lock")
        || b.contains("..")
        || b.contains("//")
        || b.contains("@{")
        || b.chars()
            .any(|c| c.is_control() || c.is_whitespace() || "~^:?*[\\".contains(c));
    if bad {
        Err(Error::Invalid(format!("{b:?} is not a valid branch name")))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_branches() {
        for ok in [
            "https://github.com/a/b.git",
            "git@github.com:a/b.git",
            "/srv/git/x",
            "file:///tmp/x",
        ] {
            validate_url(ok).unwrap();
        }
        for bad in ["", "--upload-pack=evil", "ftp://x", "a b", "relative/path"] {
            assert!(validate_url(bad).is_err(), "{bad}");
        }
        validate_branch("feature/x-1").unwrap();
        for bad in ["", "-x", "a..b", "a b", "x.lock", "a:b"] {
            assert!(validate_branch(bad).is_err(), "{bad}");
        }
    }
}
