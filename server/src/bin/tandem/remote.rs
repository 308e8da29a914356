//! Commands that talk to a running server over its HTTP API.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use tandem_protocol::{
    AgentSpec, CreatePrompt, CreateRepo, CreateSession, CreateToken, ExecRequest, PromptMode,
    SessionId, SnapshotState,
};
use tandem_server::client::Client;

use super::{Remote, output};

fn client(remote: &Remote) -> Result<Client> {
    Ok(Client::new(&remote.url, remote.token.clone())?)
}

pub async fn repo_add(
    remote: &Remote,
    name: String,
    url: String,
    branch: Option<String>,
    warm_pool: Option<i64>,
) -> Result<()> {
    let repo = client(remote)?
        .create_repo(&CreateRepo {
            name,
            url,
            default_branch: branch,
            warm_pool,
        })
        .await?;
    output::repos(&[repo], remote.json)
}

pub async fn repo_ls(remote: &Remote) -> Result<()> {
    output::repos(&client(remote)?.repos().await?, remote.json)
}

/// `--agent NAME` / `--command TEMPLATE` as a spec (none given: the server's default).
pub fn agent_spec(agent: Option<String>, command: Option<String>) -> Result<Option<AgentSpec>> {
    Ok(match (agent.as_deref(), command) {
        (_, Some(template)) => Some(AgentSpec::Command { template }),
        (None, None) => None,
        (Some("builtin"), None) => Some(AgentSpec::Builtin),
        (Some("opencode"), None) => Some(AgentSpec::Opencode),
        (Some("none"), None) => Some(AgentSpec::None),
        (Some(other), None) => {
            bail!("unknown agent {other:?}: builtin, opencode or none (or --command TEMPLATE)")
        }
    })
}

pub async fn session_new(
    remote: &Remote,
    repo: &str,
    branch: Option<String>,
    agent: Option<AgentSpec>,
    prompt: String,
) -> Result<()> {
    let c = client(remote)?;
    let repo = c.find_repo(repo).await?;
    let detail = c
        .create_session(&CreateSession {
            repo_id: repo.id,
            prompt,
            branch,
            agent,
            context: None,
        })
        .await?;
    output::sessions(&[detail.session], remote.json)
}

pub async fn prompt(remote: &Remote, id: &str, text: String, steer: bool) -> Result<()> {
    let mode = if steer {
        PromptMode::Steer
    } else {
        PromptMode::Queue
    };
    let p = client(remote)?
        .submit_prompt(
            session_id(id)?,
            &CreatePrompt {
                text,
                mode,
                agent: None,
                context: None,
            },
        )
        .await?;
    if remote.json {
        println!("{}", serde_json::to_string_pretty(&p)?);
    } else {
        println!(
            "prompt {} {}",
            p.id,
            if steer {
                "sent to steer the running turn"
            } else {
                "queued"
            }
        );
    }
    Ok(())
}

pub async fn repo_import(remote: &Remote, full_name: &str) -> Result<()> {
    let repo = client(remote)?.import_github_repo(full_name).await?;
    output::repos(&[repo], remote.json)
}

pub async fn github_repos(remote: &Remote) -> Result<()> {
    let repos = client(remote)?.github_repos().await?;
    if remote.json {
        println!("{}", serde_json::to_string_pretty(&repos)?);
        return Ok(());
    }
    for r in repos {
        let imported = r
            .imported_as
            .map(|id| format!("imported as {id}"))
            .unwrap_or_else(|| "not imported".into());
        println!("{:<40} {:<12} {}", r.full_name, r.default_branch, imported);
    }
    Ok(())
}

pub async fn open_pr(
    remote: &Remote,
    id: &str,
    req: tandem_protocol::github::CreatePr,
) -> Result<()> {
    let pr = client(remote)?.open_pr(session_id(id)?, &req).await?;
    if remote.json {
        println!("{}", serde_json::to_string_pretty(&pr)?);
    } else {
        println!(
            "pull request #{} ({}) on {}: {}",
            pr.number,
            pr.state.as_str(),
            pr.branch,
            pr.url
        );
    }
    Ok(())
}

pub async fn stop_turn(remote: &Remote, id: &str) -> Result<()> {
    client(remote)?.stop_turn(session_id(id)?).await?;
    println!("stopping the running turn");
    Ok(())
}

pub async fn children(remote: &Remote, id: &str) -> Result<()> {
    let children = client(remote)?.children(session_id(id)?).await?;
    if remote.json {
        println!("{}", serde_json::to_string_pretty(&children)?);
        return Ok(());
    }
    let sessions: Vec<_> = children.into_iter().map(|c| c.session).collect();
    output::sessions(&sessions, false)
}

pub async fn secret_set(remote: &Remote, name: &str) -> Result<()> {
    let mut value = String::new();
    std::io::Read::read_to_string(&mut std::io::stdin(), &mut value)
        .context("reading the secret from standard input")?;
    let value = value.trim_end_matches(['\n', '\r']).to_string();
    client(remote)?.set_secret(name, value).await?;
    println!("secret {name} stored");
    Ok(())
}

pub async fn user_invite(
    remote: &Remote,
    name: String,
    email: Option<String>,
    is_admin: bool,
    expires_in_secs: Option<i64>,
) -> Result<()> {
    let made = client(remote)?
        .invite(&tandem_protocol::people::CreateInvite {
            name,
            email,
            is_admin,
            expires_in_secs,
        })
        .await?;
    output::invite(&made, remote.json)
}

pub async fn user_ls(remote: &Remote) -> Result<()> {
    output::people(&client(remote)?.people().await?, remote.json)
}

pub async fn user_update(
    remote: &Remote,
    name: &str,
    is_admin: Option<bool>,
    deactivated: Option<bool>,
) -> Result<()> {
    let c = client(remote)?;
    let person = c.find_person(name).await?;
    let user = c
        .update_person(
            person.user.id,
            &tandem_protocol::people::UpdatePerson {
                is_admin,
                deactivated,
            },
        )
        .await?;
    output::person(&user, remote.json)
}

pub async fn session_ls(remote: &Remote, repo: Option<&str>) -> Result<()> {
    let c = client(remote)?;
    let repo_id = match repo {
        Some(r) => Some(c.find_repo(r).await?.id),
        None => None,
    };
    output::sessions(&c.sessions(repo_id).await?, remote.json)
}

pub async fn session_show(remote: &Remote, id: &str) -> Result<()> {
    let id: SessionId = id
        .parse()
        .with_context(|| format!("{id:?} is not a session id"))?;
    let c = client(remote)?;
    let detail = c.session(id).await?;
    let events = c.events(id, 0).await?;
    output::session_detail(&detail, &events, remote.json)
}

pub async fn token_create(remote: &Remote, name: String, expires_in: Option<i64>) -> Result<()> {
    let created = client(remote)?
        .create_token(&CreateToken {
            name,
            expires_in_secs: expires_in,
        })
        .await?;
    output::token(&created, remote.json)
}

/// How often `snapshot build` asks how the build is going.
const SNAPSHOT_POLL: Duration = Duration::from_millis(500);

pub async fn snapshot_build(remote: &Remote, repo: &str, wait: bool) -> Result<()> {
    let c = client(remote)?;
    let repo = c.find_repo(repo).await?;
    let mut snap = c.build_snapshot(repo.id).await?;
    if wait {
        let bar = ProgressBar::new_spinner();
        bar.set_style(ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] building snapshot of {msg}",
        )?);
        bar.set_message(repo.name.clone());
        bar.enable_steady_tick(Duration::from_millis(120));
        while snap.state == SnapshotState::Building {
            tokio::time::sleep(SNAPSHOT_POLL).await;
            snap = c.snapshot(snap.id).await?;
            // The build's newest log line, as it runs.
            if let Some(line) = snap.log.lines().rev().find(|l| !l.trim().is_empty()) {
                bar.set_message(format!(
                    "{}: {}",
                    repo.name,
                    line.chars().take(80).collect::<String>()
                ));
            }
        }
        bar.finish_and_clear();
    }
    output::snapshots(std::slice::from_ref(&snap), remote.json)?;
    if snap.state == SnapshotState::Failed {
        eprintln!("{}", snap.log);
        bail!("snapshot build failed: {}", snap.error.unwrap_or_default());
    }
    Ok(())
}

pub async fn snapshot_ls(remote: &Remote, repo: &str) -> Result<()> {
    let c = client(remote)?;
    let repo = c.find_repo(repo).await?;
    output::snapshots(&c.snapshots(repo.id).await?, remote.json)
}

pub fn session_id(id: &str) -> Result<SessionId> {
    id.parse()
        .with_context(|| format!("{id:?} is not a session id"))
}

pub async fn session_action(remote: &Remote, id: &str, action: &str) -> Result<()> {
    let d = client(remote)?
        .session_action(session_id(id)?, action)
        .await?;
    output::sessions(&[d.session], remote.json)
}

pub async fn session_fork(remote: &Remote, id: &str, count: i64) -> Result<()> {
    let forks = client(remote)?.fork(session_id(id)?, count).await?;
    output::sessions(&forks, remote.json)
}

pub async fn session_diff(remote: &Remote, id: &str) -> Result<()> {
    let d = client(remote)?.diff(session_id(id)?).await?;
    if remote.json {
        println!("{}", serde_json::to_string_pretty(&d)?);
    } else {
        print!("{}", d.patch);
    }
    Ok(())
}

/// Prints the command's output as it was and exits with its code.
pub async fn exec(remote: &Remote, id: &str, cwd: Option<String>, command: String) -> Result<()> {
    let r = client(remote)?
        .exec(
            session_id(id)?,
            &ExecRequest {
                command,
                cwd,
                timeout_secs: None,
            },
        )
        .await?;
    if remote.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    print!("{}", r.stdout);
    eprint!("{}", r.stderr);
    if r.truncated {
        eprintln!("[output truncated]");
    }
    std::process::exit(r.exit_code.unwrap_or(137));
}
