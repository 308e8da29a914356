//! How the CLI prints things: aligned tables for people, `--json` for scripts.

use anyhow::Result;
use tandem_protocol::{CreatedToken, EventsPage, Repo, Session, SessionDetail, Snapshot};

fn json<T: serde::Serialize>(v: &T) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

fn table(header: &[&str], rows: Vec<Vec<String>>) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let parts: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("{}", parts.join("  ").trim_end());
    };
    line(header.iter().map(|h| h.to_string()).collect());
    for r in rows {
        line(r);
    }
}

pub fn repos(repos: &[Repo], as_json: bool) -> Result<()> {
    if as_json {
        return json(&repos);
    }
    table(
        &["ID", "NAME", "URL", "BRANCH"],
        repos
            .iter()
            .map(|r| {
                vec![
                    r.id.to_string(),
                    r.name.clone(),
                    r.url.clone(),
                    r.default_branch.clone(),
                ]
            })
            .collect(),
    );
    Ok(())
}

pub fn sessions(sessions: &[Session], as_json: bool) -> Result<()> {
    if as_json {
        return json(&sessions);
    }
    table(
        &["ID", "REPO", "STATE", "AUTHOR", "TITLE"],
        sessions
            .iter()
            .map(|s| {
                vec![
                    s.id.to_string(),
                    s.repo_name.clone(),
                    s.state.as_str().into(),
                    s.author.name.clone(),
                    s.title.clone(),
                ]
            })
            .collect(),
    );
    Ok(())
}

pub fn session_detail(d: &SessionDetail, events: &EventsPage, as_json: bool) -> Result<()> {
    if as_json {
        return json(
            &serde_json::json!({ "session": d.session, "prompts": d.prompts, "events": events.events }),
        );
    }
    let s = &d.session;
    println!(
        "session  {}\nrepo     {} ({})\nstate    {}\nauthor   {}\ntitle    {}",
        s.id,
        s.repo_name,
        s.branch,
        s.state.as_str(),
        s.author.name,
        s.title
    );
    println!("\nprompts:");
    for p in &d.prompts {
        println!("  [{:?}] {}: {}", p.state, p.author.name, p.text);
    }
    println!("\nevents:");
    for e in &events.events {
        let what = e.kind.summary();
        println!("  #{:<4} {what}", e.seq);
    }
    Ok(())
}

pub fn token(t: &CreatedToken, as_json: bool) -> Result<()> {
    if as_json {
        return json(t);
    }
    println!("{}", t.token);
    eprintln!(
        "API token {:?} created ({}); it is shown only once. Use it as TANDEM_TOKEN.",
        t.info.name, t.info.id
    );
    Ok(())
}

pub fn snapshots(snaps: &[Snapshot], as_json: bool) -> Result<()> {
    if as_json {
        return json(&snaps);
    }
    table(
        &["ID", "STATE", "COMMIT", "SIZE", "BUILD", "ERROR"],
        snaps
            .iter()
            .map(|s| {
                vec![
                    s.id.to_string(),
                    if s.quarantined_at.is_some() {
                        format!("set aside ({} failed starts)", s.boot_failures)
                    } else {
                        format!("{:?}", s.state).to_lowercase()
                    },
                    s.commit
                        .as_deref()
                        .map(|c| c.chars().take(12).collect())
                        .unwrap_or_default(),
                    s.size_bytes
                        .map(|b| format!("{:.1} MiB", b as f64 / 1048576.0))
                        .unwrap_or_default(),
                    s.build_ms
                        .map(|ms| format!("{:.1}s", ms as f64 / 1000.0))
                        .unwrap_or_default(),
                    s.error.clone().unwrap_or_default(),
                ]
            })
            .collect(),
    );
    Ok(())
}

pub fn invite(made: &tandem_protocol::people::CreatedInvite, as_json: bool) -> Result<()> {
    if as_json {
        return json(made);
    }
    println!("{}", made.url);
    eprintln!(
        "invite for {} made; the link is shown only once and holds until {}",
        made.invite.name, made.invite.expires_at.0
    );
    Ok(())
}

pub fn people(people: &[tandem_protocol::people::Person], as_json: bool) -> Result<()> {
    if as_json {
        return json(&people);
    }
    table(
        &["ID", "NAME", "EMAIL", "ROLE", "SIGN-IN", "STATUS"],
        people
            .iter()
            .map(|p| {
                vec![
                    p.user.id.to_string(),
                    p.user.name.clone(),
                    p.user.email.clone().unwrap_or_default(),
                    role(&p.user).into(),
                    p.sign_in.join(", "),
                    status(&p.user).into(),
                ]
            })
            .collect(),
    );
    Ok(())
}

pub fn person(user: &tandem_protocol::User, as_json: bool) -> Result<()> {
    if as_json {
        return json(user);
    }
    println!("{} is {} ({})", user.name, role(user), status(user));
    Ok(())
}

fn role(u: &tandem_protocol::User) -> &'static str {
    if u.is_admin { "admin" } else { "member" }
}

fn status(u: &tandem_protocol::User) -> &'static str {
    if u.deactivated_at.is_some() {
        "deactivated"
    } else {
        "active"
    }
}
