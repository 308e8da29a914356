//! `tandem-workspace-agent git-credential get|store|erase`: git's credential helper inside the
//! workspace. `get` asks the server's gateway for the session's GitHub credential (an
//! installation token for the session's repository, renewed near expiry, revoked when the
//! session ends) and prints it in git's credential format; nothing is ever written to disk.
//! `store` and `erase` do nothing: there is nothing to keep.

use std::io::{Read, Write};

use anyhow::{Result, bail};
use tandem_protocol::agent::{GATEWAY_LOOPBACK, GIT_CREDENTIAL_PATH, GitCredential};

/// Runs the helper for `action`, reading git's request from stdin.
pub fn run(action: Option<&str>) -> Result<()> {
    let mut request = String::new();
    std::io::stdin().read_to_string(&mut request)?;
    if action != Some("get") {
        return Ok(());
    }
    // Only the gateway's git relay gets the session's credential, never another host (a
    // submodule or a clone elsewhere that asks).
    let asked = |key: &str| {
        request
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_default()
    };
    if asked("protocol=") != "http" || asked("host=") != GATEWAY_LOOPBACK {
        return Ok(());
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (status, body) = rt
        .block_on(crate::turns::model::tandem(
            hyper::Method::POST,
            GIT_CREDENTIAL_PATH,
            None,
        ))
        .map_err(anyhow::Error::msg)?;
    if status != 200 {
        // git shows this and goes on without a credential (and then fails with GitHub's answer).
        let said = body
            .get("message")
            .and_then(|m| m.as_str())
            .map(str::to_string)
            .unwrap_or_else(|| body.to_string());
        bail!("Tandem has no GitHub credential for this session: {said}");
    }
    let cred: GitCredential = serde_json::from_value(body)?;
    let mut out = std::io::stdout().lock();
    // Echo what git asked about (protocol, host, path) so it files the answer under it.
    for line in request
        .lines()
        .filter(|l| l.starts_with("protocol=") || l.starts_with("host=") || l.starts_with("path="))
    {
        writeln!(out, "{line}")?;
    }
    writeln!(
        out,
        "username={}\npassword={}\npassword_expiry_utc={}",
        cred.username, cred.password, cred.expires_at
    )?;
    Ok(())
}
