//! The daemon inside every workspace. For now it only proves it can reach its server: it asks
//! `GET /api/health` and reports what answered. PTYs, exec, files and git come with workspaces.
#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tandem_protocol::Health;

/// How long one connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

fn main() -> Result<()> {
    let server = std::env::args()
        .skip_while(|a| a != "--server")
        .nth(1)
        .or_else(|| std::env::var("TANDEM_SERVER").ok())
        .context("usage: tandem-workspace-agent --server http://HOST:PORT")?;
    let health = check(&server)?;
    println!("connected to Tandem {} at {server} (database: {})", health.version, health.database);
    Ok(())
}

/// `GET /api/health` over plain HTTP/1.1.
fn check(server: &str) -> Result<Health> {
    let hostport = server
        .strip_prefix("http://")
        .context("the stub agent speaks plain http:// only")?
        .trim_end_matches('/');
    let addr = std::net::ToSocketAddrs::to_socket_addrs(hostport)?.next().context("no address")?;
    let mut s = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)?;
    s.set_read_timeout(Some(CONNECT_TIMEOUT))?;
    write!(s, "GET /api/health HTTP/1.1\r\nHost: {hostport}\r\nConnection: close\r\n\r\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let (head, body) = text.split_once("\r\n\r\n").context("malformed HTTP answer")?;
    if !head.starts_with("HTTP/1.1 200") {
        bail!("server answered: {}", head.lines().next().unwrap_or_default());
    }
    Ok(serde_json::from_str(body.trim())?)
}
