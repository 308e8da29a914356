//! Commands with their output streamed as it comes: newline-delimited JSON frames
//! (`stdout`/`stderr` chunks, then one `exit`).

use std::process::Stdio;
use std::time::Duration;

use axum::body::Body;
use tandem_protocol::agent::{ExecFrame, ExecStart};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc;

/// Frames buffered before the reader waits for the server to take them (backpressure).
const FRAME_QUEUE: usize = 64;

async fn pump(mut pipe: impl AsyncRead + Unpin, stderr: bool, tx: mpsc::Sender<ExecFrame>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let data = String::from_utf8_lossy(&buf[..n]).into_owned();
                let frame = if stderr {
                    ExecFrame::Stderr { data }
                } else {
                    ExecFrame::Stdout { data }
                };
                if tx.send(frame).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Starts the command; the body streams its frames.
pub fn start(root: &std::path::Path, req: ExecStart) -> Result<Body, String> {
    let Some((prog, args)) = req.argv.split_first() else {
        return Err("exec needs a command".into());
    };
    let mut cmd = tokio::process::Command::new(prog);
    cmd.args(args)
        .current_dir(
            req.cwd
                .map(std::path::PathBuf::from)
                .unwrap_or_else(|| root.to_path_buf()),
        )
        .envs(req.env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|e| format!("starting {prog}: {e}"))?;
    let (tx, mut rx) = mpsc::channel::<ExecFrame>(FRAME_QUEUE);
    let (out, err) = (child.stdout.take(), child.stderr.take());
    let timeout = req.timeout_secs.map(Duration::from_secs);
    tokio::spawn(async move {
        let pumps = async {
            tokio::join!(
                async {
                    if let Some(o) = out {
                        pump(o, false, tx.clone()).await
                    }
                },
                async {
                    if let Some(e) = err {
                        pump(e, true, tx.clone()).await
                    }
                },
            );
            child.wait().await
        };
        let (code, timed_out) = match timeout {
            Some(t) => match tokio::time::timeout(t, pumps).await {
                Ok(status) => (status.ok().and_then(|s| s.code()), false),
                // Dropping the future kills the child (kill_on_drop).
                Err(_) => (None, true),
            },
            None => (pumps.await.ok().and_then(|s| s.code()), false),
        };
        let _ = tx.send(ExecFrame::Exit { code, timed_out }).await;
    });
    let stream = async_stream(move |yield_tx| async move {
        while let Some(frame) = rx.recv().await {
            let mut line = serde_json::to_vec(&frame).unwrap_or_default();
            line.push(b'\n');
            if yield_tx.send(Ok::<_, std::io::Error>(line)).await.is_err() {
                return;
            }
        }
    });
    Ok(Body::from_stream(stream))
}

/// A stream fed by a task (keeps the dependency list short: no async-stream crate).
fn async_stream<F, Fut>(f: F) -> impl futures::Stream<Item = Result<Vec<u8>, std::io::Error>>
where
    F: FnOnce(mpsc::Sender<Result<Vec<u8>, std::io::Error>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(FRAME_QUEUE);
    tokio::spawn(f(tx));
    futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    })
}
