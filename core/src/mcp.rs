//! The remote MCP servers admins configure (`/api/mcp/servers`): where they are, the secret
//! the gateway sends them, which repos' sessions get them and the rules for their tools. A
//! repo's own servers run inside its workspaces (`tandem.toml` `[[mcp]]`): a file any pusher
//! writes cannot direct a credential anywhere or open a way past the egress allow-list.

use tandem_protocol::approval::{ActionPolicy, McpServer, PutMcpServer, ToolRule};

use crate::db::{self, Db};
use crate::secrets::Secrets;
use crate::{Error, Result, now_ms};

/// Most servers an installation may configure.
pub const MAX_SERVERS: usize = 50;
/// Most rules per server (installation and each repo's).
pub const MAX_RULES: usize = 200;

/// A server or local server name: it prefixes its tools' names (`<name>__<tool>`).
pub fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 32
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && !name.contains("__");
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "an MCP server's name is 1 to 32 letters, digits, `-` or `_` (no `__`), not {name:?}"
        )))
    }
}

fn check_rules(rules: &[ToolRule]) -> Result<()> {
    if rules.len() > MAX_RULES {
        return Err(Error::Invalid(format!(
            "at most {MAX_RULES} rules per server"
        )));
    }
    crate::approvals::policy::check_rules(rules)
}

/// Every server, with whether its secret is set.
pub async fn list(db: &Db, secrets: &Secrets) -> Result<Vec<McpServer>> {
    let mut all = db::mcp_servers::list(db).await?;
    for s in &mut all {
        if let Some(name) = &s.secret {
            s.secret_set = secrets.get(db, name).await?.is_some();
        }
    }
    Ok(all)
}

/// The servers a session of `repo` (`owner/name`) gets.
pub async fn for_repo(db: &Db, repo: &str) -> Result<Vec<McpServer>> {
    Ok(db::mcp_servers::list(db)
        .await?
        .into_iter()
        .filter(|s| s.repos.is_empty() || s.repos.iter().any(|r| r == repo))
        .collect())
}

/// The rules for `server`'s tools in a session of `repo`: the repo's, then the installation's.
pub fn rules_for<'a>(server: &'a McpServer, repo: &str) -> impl Iterator<Item = &'a ToolRule> {
    server
        .repo_rules
        .get(repo)
        .into_iter()
        .flatten()
        .chain(server.rules.iter())
}

/// Creates or replaces a server (admins); its secret's value, if given, goes to the store.
pub async fn put(
    db: &Db,
    secrets: &Secrets,
    name: &str,
    req: PutMcpServer,
    by: &str,
) -> Result<McpServer> {
    check_name(name)?;
    let url = url::Url::parse(req.url.trim())
        .map_err(|e| Error::Invalid(format!("the server's URL does not parse: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(Error::Invalid(
            "an MCP server's URL is http(s)://host/… (its streamable HTTP endpoint)".into(),
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(Error::Invalid(
            "put the server's credential in `secret`, not in its URL".into(),
        ));
    }
    check_rules(&req.rules)?;
    for (repo, rules) in &req.repo_rules {
        if repo.split('/').count() != 2 {
            return Err(Error::Invalid(format!("{repo:?} is not owner/name")));
        }
        check_rules(rules)?;
    }
    if let Some(secret) = &req.secret {
        crate::secrets::validate_name(secret)?;
    }
    if req.secret_value.is_some() && req.secret.is_none() {
        return Err(Error::Invalid(
            "a secret's value needs the secret's name (`secret`)".into(),
        ));
    }
    let existing = db::mcp_servers::list(db).await?;
    if existing.len() >= MAX_SERVERS && !existing.iter().any(|s| s.name == name) {
        return Err(Error::TooMany(format!("at most {MAX_SERVERS} MCP servers")));
    }
    if let (Some(secret), Some(value)) = (&req.secret, &req.secret_value) {
        secrets.set(db, secret, value).await?;
    }
    let server = McpServer {
        name: name.to_string(),
        url: url.to_string(),
        secret: req.secret,
        secret_set: false,
        repos: req.repos,
        rules: req.rules,
        repo_rules: req.repo_rules,
    };
    let now = now_ms();
    let mut tx = db.begin().await?;
    db::mcp_servers::put(&mut tx, &server, by, now).await?;
    db::audit::record(
        &mut tx,
        now,
        db::audit::Entry {
            actor_user_id: None,
            actor_name: by,
            action: "mcp.server_put",
            target: &format!("mcp:{name}"),
            detail: serde_json::json!({ "url": server.url, "repos": server.repos }),
        },
    )
    .await?;
    tx.commit().await?;
    list(db, secrets)
        .await?
        .into_iter()
        .find(|s| s.name == name)
        .ok_or_else(|| Error::Internal("a saved MCP server vanished".into()))
}

/// Removes a server (admins).
pub async fn delete(db: &Db, name: &str, by: &str) -> Result<()> {
    let mut tx = db.begin().await?;
    if !db::mcp_servers::delete(&mut tx, name).await? {
        return Err(Error::NotFound(format!("no MCP server {name}")));
    }
    db::audit::record(
        &mut tx,
        now_ms(),
        db::audit::Entry {
            actor_user_id: None,
            actor_name: by,
            action: "mcp.server_deleted",
            target: &format!("mcp:{name}"),
            detail: serde_json::json!({}),
        },
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// The settings key of the [`ActionPolicy`].
const ACTIONS_KEY: &str = "actions_policy";

/// The rules for Tandem's own actions (none set: every action allowed).
pub async fn actions(db: &Db) -> Result<ActionPolicy> {
    crate::settings::stored(db, ACTIONS_KEY).await
}

/// Replaces the rules for Tandem's own actions (admins).
pub async fn put_actions(db: &Db, policy: &ActionPolicy, by: &str) -> Result<()> {
    check_rules(&policy.rules)?;
    for (repo, rules) in &policy.repo_rules {
        if repo.split('/').count() != 2 {
            return Err(Error::Invalid(format!("{repo:?} is not owner/name")));
        }
        check_rules(rules)?;
    }
    crate::settings::store(db, ACTIONS_KEY, policy, by, "mcp.actions_put").await
}
