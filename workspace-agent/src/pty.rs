//! Terminals: PTYs whose output fans out to every attached client, with a scrollback ring so a
//! late joiner sees the screen. A slow client is skipped ahead to the scrollback, never waited
//! for: the reader never blocks on a client.

use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::sync::{Arc, Mutex};

use axum::extract::ws::{Message, WebSocket};
use futures::{SinkExt, StreamExt};
use portable_pty::{CommandBuilder, MasterPty, PtySize, native_pty_system};
use tandem_protocol::agent::{MAX_PTYS, PTY_SCROLLBACK_BYTES, PtyControl, PtyInfo, PtyOpen};
use tokio::sync::broadcast;

/// Output chunks queued per client before it is skipped ahead.
const CLIENT_QUEUE: usize = 8192;
/// Most output bytes sent to a client in one frame when several reads are waiting.
const COALESCE_BYTES: usize = 64 * 1024;

/// One terminal.
pub struct Pty {
    info: Mutex<PtyInfo>,
    master: Mutex<Box<dyn MasterPty + Send>>,
    writer: Mutex<Box<dyn Write + Send>>,
    scrollback: Mutex<VecDeque<u8>>,
    output: broadcast::Sender<Out>,
}

#[derive(Clone, Debug)]
enum Out {
    Data(Vec<u8>),
    Exit(Option<i32>),
}

/// All of a workspace's terminals.
#[derive(Default)]
pub struct Ptys {
    next: Mutex<u32>,
    open: Mutex<HashMap<u32, Arc<Pty>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Ptys {
    /// Opens a terminal running `req.command` (default: a login shell).
    pub fn open(self: &Arc<Self>, root: &std::path::Path, req: PtyOpen) -> Result<PtyInfo, String> {
        if lock(&self.open).len() >= MAX_PTYS {
            return Err(format!("at most {MAX_PTYS} terminals per workspace"));
        }
        let size = PtySize {
            rows: req.rows.max(1),
            cols: req.cols.max(1),
            pixel_width: 0,
            pixel_height: 0,
        };
        let pair = native_pty_system()
            .openpty(size)
            .map_err(|e| format!("opening a PTY: {e}"))?;
        let command = req.command.filter(|c| !c.is_empty()).unwrap_or_else(|| {
            if std::path::Path::new("/bin/bash").exists() {
                vec!["/bin/bash".into(), "-l".into()]
            } else {
                vec!["/bin/sh".into()]
            }
        });
        let mut cmd = CommandBuilder::new(&command[0]);
        cmd.args(&command[1..]);
        cmd.cwd(
            req.cwd
                .map(std::path::PathBuf::from)
                .unwrap_or_else(|| root.to_path_buf()),
        );
        cmd.env("TERM", "xterm-256color");
        let mut child = pair
            .slave
            .spawn_command(cmd)
            .map_err(|e| format!("starting {}: {e}", command[0]))?;
        drop(pair.slave);
        let mut reader = pair.master.try_clone_reader().map_err(|e| e.to_string())?;
        let writer = pair.master.take_writer().map_err(|e| e.to_string())?;
        let id = {
            let mut n = lock(&self.next);
            *n += 1;
            *n
        };
        let info = PtyInfo {
            id,
            command,
            cols: size.cols,
            rows: size.rows,
        };
        let (tx, _) = broadcast::channel(CLIENT_QUEUE);
        let pty = Arc::new(Pty {
            info: Mutex::new(info.clone()),
            master: Mutex::new(pair.master),
            writer: Mutex::new(writer),
            scrollback: Mutex::new(VecDeque::new()),
            output: tx,
        });
        lock(&self.open).insert(id, pty.clone());
        let ptys = self.clone();
        // PTY reads block: one thread per terminal, which ends with the program.
        std::thread::spawn(move || {
            let mut buf = [0u8; 16 * 1024];
            loop {
                match reader.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        {
                            let mut sb = lock(&pty.scrollback);
                            sb.extend(&buf[..n]);
                            let excess = sb.len().saturating_sub(PTY_SCROLLBACK_BYTES);
                            sb.drain(..excess);
                        }
                        // No receivers is fine: output is in the scrollback.
                        let _ = pty.output.send(Out::Data(buf[..n].to_vec()));
                    }
                }
            }
            let code = child.wait().ok().map(|s| s.exit_code() as i32);
            // Gone from the list before anyone hears it ended, so a client told "exit" can
            // never attach to it again.
            lock(&ptys.open).remove(&id);
            let _ = pty.output.send(Out::Exit(Some(code.unwrap_or(0))));
        });
        Ok(info)
    }

    pub fn list(&self) -> Vec<PtyInfo> {
        let mut v: Vec<PtyInfo> = lock(&self.open)
            .values()
            .map(|p| lock(&p.info).clone())
            .collect();
        v.sort_by_key(|p| p.id);
        v
    }

    pub fn get(&self, id: u32) -> Option<Arc<Pty>> {
        lock(&self.open).get(&id).cloned()
    }
}

impl Pty {
    fn snapshot(&self) -> Vec<u8> {
        lock(&self.scrollback).iter().copied().collect()
    }

    fn resize(&self, cols: u16, rows: u16) {
        let size = PtySize {
            rows: rows.max(1),
            cols: cols.max(1),
            pixel_width: 0,
            pixel_height: 0,
        };
        let _ = lock(&self.master).resize(size);
        let mut info = lock(&self.info);
        info.cols = size.cols;
        info.rows = size.rows;
    }

    /// Writes input; a full PTY buffer blocks, so never on the async runtime's thread.
    async fn write(self: &Arc<Self>, data: Vec<u8>) {
        let me = self.clone();
        let _ = tokio::task::spawn_blocking(move || {
            let mut w = lock(&me.writer);
            let _ = w.write_all(&data);
            let _ = w.flush();
        })
        .await;
    }

    /// Serves one attached client: scrollback first, then live output (what is already read
    /// goes out together, in frames of up to [`COALESCE_BYTES`]); its binary frames are input,
    /// its text frames control.
    pub async fn attach(self: Arc<Self>, socket: WebSocket) {
        // Subscribe before reading the scrollback, so no output falls in between.
        let mut rx = self.output.subscribe();
        let (mut sink, mut stream) = socket.split();
        if sink
            .send(Message::Binary(self.snapshot().into()))
            .await
            .is_err()
        {
            return;
        }
        let mut next = None;
        loop {
            let out = match next.take() {
                Some(out) => out,
                None => tokio::select! {
                    out = rx.recv() => out,
                    msg = stream.next() => {
                        match msg {
                            Some(Ok(Message::Binary(b))) => self.write(b.to_vec()).await,
                            Some(Ok(Message::Text(t))) => {
                                if let Ok(PtyControl::Resize { cols, rows }) = serde_json::from_str(&t) {
                                    self.resize(cols, rows);
                                }
                            }
                            Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                            Some(Ok(_)) => {}
                        }
                        continue;
                    }
                },
            };
            match out {
                Ok(Out::Data(mut d)) => {
                    // Fewer, larger frames under load; no wait when nothing more is there.
                    while d.len() < COALESCE_BYTES {
                        match rx.try_recv() {
                            Ok(Out::Data(more)) => d.extend_from_slice(&more),
                            Ok(other) => {
                                next = Some(Ok(other));
                                break;
                            }
                            Err(broadcast::error::TryRecvError::Lagged(n)) => {
                                next = Some(Err(broadcast::error::RecvError::Lagged(n)));
                                break;
                            }
                            Err(_) => break,
                        }
                    }
                    if sink.send(Message::Binary(d.into())).await.is_err() {
                        return;
                    }
                }
                Ok(Out::Exit(code)) => {
                    let text =
                        serde_json::to_string(&PtyControl::Exit { code }).unwrap_or_default();
                    let _ = sink.send(Message::Text(text.into())).await;
                    let _ = sink.close().await;
                    return;
                }
                // Too slow: skip ahead to the current screen rather than hold anyone up.
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    rx = self.output.subscribe();
                    if sink
                        .send(Message::Binary(self.snapshot().into()))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    }
}
