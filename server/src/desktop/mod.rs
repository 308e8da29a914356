//! The session's desktop for people: the workspace's display (Xvfb + Chromium, started by the
//! workspace agent on first use) captured and encoded once per session (`encode.rs`, GStreamer
//! in process) and sent to each viewer over WebRTC (`peer.rs`). Input from the participant in
//! control goes to the workspace agent, which injects it into the display (XTest).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use tandem_protocol::SessionId;
use tandem_protocol::agent::{DesktopInfo, DesktopInputs};
use tandem_protocol::live::DesktopInput;

use crate::state::AppState;
use crate::{Error, Result};

// The media pipeline is its own crate (`tandem-media`).
pub use tandem_media::{encode, peer};
pub mod vnc;

/// Most input events in one message.
pub const MAX_INPUTS: usize = 64;

/// One session's stream: its encoder, alive while anyone watches.
pub struct Stream {
    pub encoder: encode::Encoder,
    pub info: DesktopInfo,
}

impl Stream {
    /// Its numbers now.
    pub fn stats(self: &Arc<Self>) -> tandem_protocol::agent::DesktopStreamStats {
        let mut l: Vec<u64> = self
            .encoder
            .latencies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .copied()
            .collect();
        l.sort_unstable();
        let at = |p: f64| {
            l.get(((l.len().saturating_sub(1)) as f64 * p).round() as usize)
                .copied()
                .unwrap_or(0)
        };
        tandem_protocol::agent::DesktopStreamStats {
            // Every viewer holds the stream once; this call holds it once more.
            viewers: (Arc::strong_count(self) as u32).saturating_sub(1),
            fps: self.encoder.fps,
            frames: self
                .encoder
                .encoded
                .load(std::sync::atomic::Ordering::Relaxed),
            keyframes: self
                .encoder
                .keyframes_sent
                .load(std::sync::atomic::Ordering::Relaxed),
            encode_latency_p50_us: at(0.5),
            encode_latency_p99_us: at(0.99),
            encoder_pid: self.encoder.pid,
        }
    }
}

/// The sessions' streams.
#[derive(Default)]
pub struct Desktops {
    streams: Mutex<HashMap<SessionId, Weak<Stream>>>,
    starting: tokio::sync::Mutex<()>,
}

impl Desktops {
    /// The session's stream, its desktop and encoder started if need be.
    pub async fn stream(&self, app: &AppState, session: SessionId) -> Result<Arc<Stream>> {
        if let Some(s) = self.get(session) {
            return Ok(s);
        }
        let _one = self.starting.lock().await;
        if let Some(s) = self.get(session) {
            return Ok(s);
        }
        let host = app.workspaces()?;
        let agent = crate::sessions::workspace::workspace_agent(&app.db, &host, session).await?;
        let info: DesktopInfo = agent.start_desktop().await?;
        // The workspace's answer is untrusted: a display number, or nothing.
        let display = encode::Display::parse(&info.display)?;
        // The encoder runs beside the workspace, where its runtime says.
        let beside = host
            .runtime
            .beside(&agent.workspace, agent.instance, display.number())
            .await?;
        let quality = encode::Quality {
            fps: app.config.desktop.fps,
            kbps: app.config.desktop.kbps,
            keyframe_secs: app.config.desktop.keyframe_secs,
            speed: app.config.desktop.vp8_speed,
            codec: match app.config.desktop.codec {
                crate::config::DesktopCodec::Vp8 => encode::Codec::Vp8,
                crate::config::DesktopCodec::H264 => encode::Codec::H264,
            },
        };
        let encoder = encode::start(&host.tandem_bin, &beside.args(), display, quality).await?;
        let stream = Arc::new(Stream { encoder, info });
        self.streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(session, Arc::downgrade(&stream));
        Ok(stream)
    }

    /// The session's stream, if anyone watches.
    pub fn get(&self, session: SessionId) -> Option<Arc<Stream>> {
        let mut streams = self.streams.lock().unwrap_or_else(|e| e.into_inner());
        streams.retain(|_, w| w.strong_count() > 0);
        streams.get(&session).and_then(Weak::upgrade)
    }

    /// How many sessions stream right now.
    pub fn active(&self) -> usize {
        let mut streams = self.streams.lock().unwrap_or_else(|e| e.into_inner());
        streams.retain(|_, w| w.strong_count() > 0);
        streams.len()
    }
}

/// A viewer's offer answered: the SDP, and what keeps the stream flowing to them.
/// Whether the session's desktop runs already (asked of its agent; an answer that does not
/// parse counts as no).
pub async fn running(app: &AppState, session: SessionId) -> Result<bool> {
    let host = app.workspaces()?;
    let agent = crate::sessions::workspace::workspace_agent(&app.db, &host, session).await?;
    Ok(agent.desktop_page().await.is_ok_and(|p| p.running))
}

/// `may_start`: whether the asker may start the desktop (drivers); anyone may watch one that runs.
pub async fn watch(
    app: &AppState,
    session: SessionId,
    offer: String,
    may_start: bool,
) -> Result<(String, Arc<Stream>, peer::Viewer)> {
    if offer.len() > 64 * 1024 || !offer.starts_with("v=0") {
        return Err(Error::BadRequest("not an SDP offer".into()));
    }
    let stream = match app.desktops.get(session) {
        Some(s) => s,
        // A viewer may start the encoder of a desktop that runs (not the desktop itself).
        None if may_start || running(app, session).await? => {
            app.desktops.stream(app, session).await?
        }
        None => {
            return Err(Error::Forbidden(
                "the desktop is not running; a driver starts it".into(),
            ));
        }
    };
    let frames = stream.encoder.frames.subscribe();
    let weak = Arc::downgrade(&stream);
    let keyframe = move || {
        if let Some(s) = weak.upgrade() {
            s.encoder.request_keyframe();
        }
    };
    let addrs = match app.config.desktop.udp_addrs.as_slice() {
        [] => vec![format!("{}:0", app.config.listen.ip())],
        some => some.to_vec(),
    };
    let (sdp, viewer) = peer::answer(
        offer,
        &addrs,
        frames,
        stream.encoder.fps,
        stream.encoder.codec,
        keyframe,
    )
    .await?;
    Ok((sdp, stream, viewer))
}

/// Injects input into the session's display.
pub async fn input(app: &AppState, session: SessionId, events: Vec<DesktopInput>) -> Result<()> {
    if events.len() > MAX_INPUTS {
        return Err(Error::TooLarge(format!(
            "at most {MAX_INPUTS} input events at once"
        )));
    }
    let host = app.workspaces()?;
    crate::sessions::workspace::workspace_agent(&app.db, &host, session)
        .await?
        .desktop_input(&DesktopInputs { events })
        .await?;
    Ok(())
}

/// The desktop's state and its browser's page.
pub async fn page(
    app: &AppState,
    session: SessionId,
) -> Result<tandem_protocol::agent::DesktopPage> {
    let host = app.workspaces()?;
    let mut page = crate::sessions::workspace::workspace_agent(&app.db, &host, session)
        .await?
        .desktop_page()
        .await?;
    page.stream = app.desktops.get(session).map(|s| s.stats());
    Ok(page)
}

/// Shows `url` in the desktop's browser (starting the desktop if need be).
pub async fn open(app: &AppState, session: SessionId, url: &str) -> Result<()> {
    if url.len() > 8192
        || !["http://", "https://", "file://", "about:"]
            .iter()
            .any(|p| url.starts_with(p))
    {
        return Err(Error::Invalid(
            "a URL starts with http://, https://, file:// or about:".into(),
        ));
    }
    let host = app.workspaces()?;
    crate::sessions::workspace::workspace_agent(&app.db, &host, session)
        .await?
        .desktop_open(url)
        .await?;
    Ok(())
}
