//! `tandem attach` (a session's terminal in this terminal) and `tandem events --follow`, over
//! the live channel.

use std::io::{Read, Write};

use anyhow::{Context, Result, bail};
use tandem_protocol::SessionId;
use tandem_protocol::live::{WsClient, WsServer, close};
use tandem_server::client::live::{Credentials, Incoming, LiveClient};

use super::Remote;

/// Ctrl-]: leaves the session, like telnet.
pub const DETACH_KEY: u8 = 0x1d;

fn creds(remote: &Remote, share: Option<String>, name: Option<String>) -> Credentials {
    Credentials {
        token: remote.token.clone(),
        share,
        name,
    }
}

fn closed_message(code: Option<u16>, reason: &str) -> String {
    let why = match code {
        Some(close::UNAUTHORIZED) => "not signed in, or the link is not valid",
        Some(close::FORBIDDEN) => "access refused or revoked",
        Some(close::NOT_FOUND) => "no such session",
        Some(close::TOO_SLOW) => "this terminal fell too far behind",
        _ => "the connection closed",
    };
    if reason.is_empty() {
        why.to_string()
    } else {
        format!("{why}: {reason}")
    }
}

/// Restores the terminal when dropped.
struct RawMode(bool);

impl RawMode {
    fn enable() -> Self {
        Self(
            std::io::IsTerminal::is_terminal(&std::io::stdin())
                && crossterm::terminal::enable_raw_mode().is_ok(),
        )
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        if self.0 {
            let _ = crossterm::terminal::disable_raw_mode();
        }
    }
}

pub async fn attach(
    remote: &Remote,
    id: SessionId,
    terminal: Option<u32>,
    share: Option<String>,
    name: Option<String>,
) -> Result<()> {
    let mut c = LiveClient::connect(&remote.url, id, &creds(remote, share, name)).await?;
    let (role, mut terminals) = loop {
        match c.next().await {
            Some(Incoming::Message(m)) => match *m {
                WsServer::Hello { you, terminals, .. } => break (you.role, terminals),
                _ => continue,
            },
            Some(Incoming::Closed(code, reason)) => bail!("{}", closed_message(code, &reason)),
            Some(_) => continue,
            None => bail!("the live channel closed before the session answered"),
        }
    };
    // A session's first terminal may still be opening.
    while terminals.is_empty() {
        match c.next().await {
            Some(Incoming::Message(m)) => {
                if let WsServer::Terminals { terminals: t } = *m {
                    terminals = t;
                }
            }
            Some(Incoming::Closed(code, reason)) => bail!("{}", closed_message(code, &reason)),
            Some(_) => {}
            None => bail!("the live channel closed"),
        }
    }
    let term = match terminal {
        Some(t) if terminals.iter().any(|x| x.id == t) => t,
        Some(t) => bail!(
            "no terminal {t} (there are {:?})",
            terminals.iter().map(|t| t.id).collect::<Vec<_>>()
        ),
        None => terminals[0].id,
    };
    eprintln!(
        "attached to terminal {term} as {}{}; Ctrl-] detaches\r",
        tandem_server::db::links::role_str(role),
        if role.can_drive() { "" } else { " (read-only)" }
    );
    let raw = RawMode::enable();
    if role.can_drive()
        && raw.0
        && let Ok((cols, rows)) = crossterm::terminal::size()
    {
        c.send(&WsClient::Resize {
            terminal: term,
            cols,
            rows,
        })
        .await?;
    }
    // Standard input on a thread (blocking reads), into a bounded channel.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(64);
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin();
        let mut buf = [0u8; 4096];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if tx.blocking_send(buf[..n].to_vec()).is_err() {
                        return;
                    }
                }
            }
        }
    });
    let mut winch = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change())
        .context("watching the terminal size")?;
    let mut stdout = std::io::stdout();
    let mut told_read_only = false;
    let mut input_open = true;
    let outcome = loop {
        tokio::select! {
            m = c.next() => match m {
                Some(Incoming::Terminal(t, bytes)) if t == term => {
                    stdout.write_all(&bytes)?;
                    stdout.flush()?;
                }
                Some(Incoming::Message(m)) => {
                    if let WsServer::Refused { request, reason } = *m
                        && !(request == "input" && told_read_only)
                    {
                        told_read_only |= request == "input";
                        eprint!("\r\n[tandem: {request} refused: {reason}]\r\n");
                    }
                }
                Some(Incoming::Closed(code, reason)) => break Err(closed_message(code, &reason)),
                Some(_) => {}
                None => break Err("the live channel closed".to_string()),
            },
            bytes = rx.recv(), if input_open => match bytes {
                Some(b) => {
                    if let Some(at) = b.iter().position(|x| *x == DETACH_KEY) {
                        if at > 0 && role.can_drive() {
                            c.input(term, &b[..at]).await?;
                        }
                        break Ok(());
                    }
                    if role.can_drive() {
                        c.input(term, &b).await?;
                    } else if !told_read_only {
                        told_read_only = true;
                        eprint!("\r\n[tandem: you are a viewer here; your keys are not sent]\r\n");
                    }
                }
                // Input ended (a pipe): keep showing output until the session closes or Ctrl-C.
                None => input_open = false,
            },
            _ = winch.recv() => {
                if role.can_drive() && let Ok((cols, rows)) = crossterm::terminal::size() {
                    c.send(&WsClient::Resize { terminal: term, cols, rows }).await?;
                }
            }
            _ = tokio::signal::ctrl_c() => break Ok(()),
        }
    };
    drop(raw);
    c.close().await;
    match outcome {
        Ok(()) => {
            eprintln!("\ndetached");
            Ok(())
        }
        Err(e) => bail!("{e}"),
    }
}

/// Prints the session's events after `after`; with `follow`, keeps printing new ones.
pub async fn events(remote: &Remote, id: SessionId, after: i64, follow: bool) -> Result<()> {
    if !follow {
        let c = tandem_server::client::Client::new(&remote.url, remote.token.clone())?;
        let mut last = after;
        loop {
            let page = c.events(id, last).await?;
            if page.events.is_empty() {
                return Ok(());
            }
            for e in &page.events {
                print_event(remote, e)?;
                last = e.seq;
            }
        }
    }
    let mut c = LiveClient::connect(&remote.url, id, &creds(remote, None, None)).await?;
    c.send(&WsClient::Subscribe { after }).await?;
    loop {
        tokio::select! {
            m = c.next() => match m {
                Some(Incoming::Message(m)) => {
                    if let WsServer::Events { events } = *m {
                        for e in &events {
                            print_event(remote, e)?;
                        }
                    }
                }
                Some(Incoming::Closed(code, reason)) => bail!("{}", closed_message(code, &reason)),
                Some(_) => {}
                None => bail!("the live channel closed"),
            },
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
    }
}

fn print_event(remote: &Remote, e: &tandem_protocol::Event) -> Result<()> {
    let mut out = std::io::stdout();
    if remote.json {
        writeln!(out, "{}", serde_json::to_string(e)?)?;
    } else {
        writeln!(out, "{:>5}  {}", e.seq, e.kind.summary())?;
    }
    out.flush()?;
    Ok(())
}
