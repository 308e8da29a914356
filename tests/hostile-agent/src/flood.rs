//! The hostile agent's turns: a prompt `flood <prompts> <lookups>` makes the turn spawn a child
//! session through the gateway, post it `<prompts>` prompts (8 at a time) while looking up
//! `<lookups>` random names straight at the workspace's name server (UDP, 64 in flight), then
//! report what it got as one message. A prompt `hold` keeps its turn open and idle (a child
//! whose queue only grows); any other prompt ends its turn at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tandem_protocol::agent::{self, TurnFrame};
use tandem_protocol::{TurnOutcome, Usage};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

/// `POST /turns`: the turn's frames, as newline-delimited JSON.
pub async fn turn(body: axum::body::Bytes) -> axum::response::Response {
    let start: Value = serde_json::from_slice(&body).unwrap_or_default();
    let prompt = start["prompt"].as_str().unwrap_or_default().to_string();
    let (tx, rx) = mpsc::channel::<TurnFrame>(16);
    tokio::spawn(async move {
        let mut words = prompt.split_whitespace();
        match words.next() {
            Some("hold") => {
                // Never ends: the sender stays, so the stream stays open.
                std::future::pending::<()>().await;
            }
            Some("flood") => {
                let n: usize = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
                let m: usize = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
                let report = flood(n, m, &tx).await;
                let _ = tx
                    .send(TurnFrame::Message {
                        text: report.to_string(),
                    })
                    .await;
            }
            _ => {}
        }
        let _ = tx
            .send(TurnFrame::End {
                outcome: TurnOutcome::Completed,
                usage: Usage::default(),
                error: None,
                undelivered: vec![],
            })
            .await;
    });
    let lines = futures::stream::unfold(rx, |mut rx| async move {
        let frame = rx.recv().await?;
        let mut line = serde_json::to_vec(&frame).unwrap_or_default();
        line.push(b'\n');
        Some((Ok::<_, std::convert::Infallible>(line), rx))
    });
    axum::response::Response::builder()
        .header("content-type", "application/x-ndjson")
        .body(axum::body::Body::from_stream(lines))
        .unwrap_or_default()
}

/// Progress, as a delta of the turn.
async fn progress(tx: &mpsc::Sender<TurnFrame>, text: String) {
    let _ = tx.send(TurnFrame::Delta { text }).await;
}

/// Spawns a child and floods it with `prompts` prompts while looking up `lookups` names.
async fn flood(prompts: usize, lookups: usize, tx: &mpsc::Sender<TurnFrame>) -> Value {
    let (status, body) = call(
        "POST",
        "/tandem/children",
        &json!({ "prompt": "hold" }).to_string(),
    )
    .await;
    let spawned: Value = serde_json::from_str(&body).unwrap_or_default();
    let Some(child) = spawned[0]["id"].as_str().map(str::to_string) else {
        return json!({ "error": format!("spawning a child: {status} {body}") });
    };
    progress(tx, format!("spawned {child}\n")).await;
    let (posted, looked) = tokio::join!(post_prompts(&child, prompts, tx), look_up(lookups, tx));
    json!({ "child": child, "prompts": posted, "lookups": looked })
}

/// Posts `n` prompts to `child`, 8 at a time: how many were taken, refused (and the first
/// refusal's words), or failed otherwise.
async fn post_prompts(child: &str, n: usize, tx: &mpsc::Sender<TurnFrame>) -> Value {
    let next = Arc::new(AtomicUsize::new(0));
    let path = format!("/tandem/children/{child}/prompts");
    let t0 = Instant::now();
    let workers = (0..8).map(|_| {
        let (next, path, t0) = (next.clone(), path.clone(), t0);
        async move {
            let (mut created, mut refused, mut other) = (0u64, 0u64, 0u64);
            let (mut first_refusal, mut first_other) = (None, None);
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                if i % 2000 == 0 {
                    progress(tx, format!("prompt {i} at {:?}\n", t0.elapsed())).await;
                }
                let body = json!({ "text": format!("flood prompt {i}") }).to_string();
                let (status, answer) = call("POST", &path, &body).await;
                match status {
                    201 => created += 1,
                    429 => {
                        refused += 1;
                        first_refusal.get_or_insert(answer);
                    }
                    _ => {
                        other += 1;
                        first_other.get_or_insert(format!("{status} {answer}"));
                    }
                }
            }
            (created, refused, other, first_refusal, first_other)
        }
    });
    let mut all = json!({ "created": 0, "refused": 0, "other": 0 });
    for (c, r, o, fr, fo) in futures::future::join_all(workers).await {
        for (k, v) in [("created", c), ("refused", r), ("other", o)] {
            all[k] = json!(all[k].as_u64().unwrap_or(0) + v);
        }
        if all.get("first_refusal").is_none()
            && let Some(fr) = fr
        {
            all["first_refusal"] = json!(fr);
        }
        if all.get("first_other").is_none()
            && let Some(fo) = fo
        {
            all["first_other"] = json!(fo);
        }
    }
    all["secs"] = json!(t0.elapsed().as_secs_f64());
    all
}

/// One HTTP/1.1 request to the gateway socket: the status and the answer's body.
async fn call(method: &str, path: &str, body: &str) -> (u16, String) {
    let exchange = async {
        let mut s = tokio::net::UnixStream::connect(agent::GATEWAY_SOCKET).await?;
        let req = format!(
            "{method} {path} HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).await?;
        let mut out = Vec::new();
        s.read_to_end(&mut out).await?;
        Ok::<_, std::io::Error>(String::from_utf8_lossy(&out).to_string())
    };
    match exchange.await {
        Ok(text) => {
            let status = text
                .split(' ')
                .nth(1)
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
            let body = text
                .split_once("\r\n\r\n")
                .map(|(_, b)| b.to_string())
                .unwrap_or_default();
            (status, body)
        }
        Err(e) => (0, e.to_string()),
    }
}

/// Looks up `n` random names (A records) at the first name server of `/etc/resolv.conf`, 64 in
/// flight: how many were answered, how many NXDOMAIN, and how long it took.
async fn look_up(n: usize, tx: &mpsc::Sender<TurnFrame>) -> Value {
    let server = std::fs::read_to_string("/etc/resolv.conf")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().strip_prefix("nameserver"))
        .find_map(|a| a.trim().parse::<std::net::IpAddr>().ok());
    let Some(server) = server else {
        return json!({ "error": "no name server in /etc/resolv.conf" });
    };
    let bind = if server.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    };
    let sock = match tokio::net::UdpSocket::bind(bind).await {
        Ok(s) => s,
        Err(e) => return json!({ "error": e.to_string() }),
    };
    if let Err(e) = sock.connect((server, 53)).await {
        return json!({ "error": e.to_string() });
    }
    let mut rng = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
        | 1;
    let t0 = Instant::now();
    let (mut sent, mut answered, mut nxdomain) = (0usize, 0u64, 0u64);
    let mut buf = [0u8; 1024];
    let mut note_at = 0;
    while sent < n {
        if sent >= note_at {
            note_at += 20_000;
            progress(
                tx,
                format!("lookup {sent} at {:?}, {answered} answered\n", t0.elapsed()),
            )
            .await;
        }
        let batch = 64.min(n - sent);
        for k in 0..batch {
            // xorshift: a name no one looked up before.
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let name = format!("{rng:016x}{:x}.flood.test", sent + k);
            let _ = sock.send(&query((sent + k) as u16, &name)).await;
        }
        sent += batch;
        for _ in 0..batch {
            match tokio::time::timeout(Duration::from_millis(500), sock.recv(&mut buf)).await {
                Ok(Ok(len)) if len >= 4 => {
                    answered += 1;
                    if buf[3] & 0x0f == 3 {
                        nxdomain += 1;
                    }
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
    }
    json!({
        "sent": sent,
        "answered": answered,
        "nxdomain": nxdomain,
        "secs": t0.elapsed().as_secs_f64(),
    })
}

/// A DNS query for `name`'s A records.
fn query(id: u16, name: &str) -> Vec<u8> {
    let mut q = Vec::with_capacity(64);
    q.extend_from_slice(&id.to_be_bytes());
    // Recursion desired; one question.
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split('.') {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    q
}
