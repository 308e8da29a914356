//! Capture and encode, in process with GStreamer: `ximagesrc` on the workspace's X display →
//! I420 → VP8 (`deadline=1 cpu-used=<speed> threads=1`: one thread; libvpx's own threads are
//! pathological on few cores) → an app sink. One encoder per session, shared by all its viewers;
//! a keyframe request (a viewer joining) reaches the encoder as a force-key-unit event.
//!
//! The encoder is a child process (`tandem desktop-encode`): Xlib ends its process when the X
//! server goes away, which must not be the server's. The display's socket is the workspace's
//! `/tmp/.X11-unix` (a host directory bound in); Xlib only connects to `/tmp/.X11-unix/X<n>`, so
//! the child gets a mount namespace of its own whose private `/tmp` holds that directory, and a
//! PID namespace of its own ([`crate::confine`]): the host's `/tmp` stays untouched, and any
//! number of workspaces can use display `:99`. It writes frames
//! to its stdout (`u32` length, `u8` flags — 1 for a keyframe —, `u64` encode latency in µs,
//! then the bytes) and takes a keyframe request for each byte on its stdin.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use gstreamer as gst;
use gstreamer::prelude::*;
use gstreamer_app as gst_app;
use tokio::sync::broadcast;

use crate::{Error, Result};

/// Encoded frames buffered per viewer before a slow one skips ahead (to the next keyframe).
pub const FRAME_QUEUE: usize = 32;

/// One encoded frame.
#[derive(Debug)]
pub struct Frame {
    pub data: Bytes,
    pub key: bool,
    /// From the capture of the frame to its encoded bytes.
    pub encode_latency: Duration,
}

/// A running encoder; dropping it ends the child.
pub struct Encoder {
    pub frames: broadcast::Sender<Arc<Frame>>,
    keyframes: tokio::sync::mpsc::Sender<()>,
    /// Frames encoded so far, and how many were keyframes.
    pub encoded: Arc<AtomicU64>,
    pub keyframes_sent: Arc<AtomicU64>,
    pub fps: u32,
    pub codec: Codec,
    /// The child's pid (its CPU time is the encoder's cost).
    pub pid: Option<u32>,
    /// The last frames' encode latencies (µs).
    pub latencies: Arc<std::sync::Mutex<std::collections::VecDeque<u64>>>,
    _reader: AbortOnDrop,
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Encoder {
    /// Asks for a keyframe (the next frame is one).
    pub fn request_keyframe(&self) {
        let _ = self.keyframes.try_send(());
    }
}

/// An X display number, parsed from the workspace's answer: only `:N` (decimal, at most
/// 65535). The workspace is untrusted; its answer never becomes text another parser reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Display(u16);

impl Display {
    /// `:N`, and nothing else (no screen number, no host, no spaces).
    pub fn parse(s: &str) -> Result<Self> {
        let digits = s.strip_prefix(':').unwrap_or("");
        if digits.is_empty() || digits.len() > 5 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Error::Invalid(format!(
                "the workspace named display {:?}, which is not :N",
                s.chars().take(40).collect::<String>()
            )));
        }
        digits
            .parse::<u16>()
            .map(Display)
            .map_err(|_| Error::Invalid("the workspace's display number is out of range".into()))
    }

    /// `:N`.
    pub fn name(self) -> String {
        format!(":{}", self.0)
    }

    /// Its number `N`.
    pub fn number(self) -> u32 {
        u32::from(self.0)
    }
}

/// The capture → encode pipeline for `display`, built element by element with typed
/// properties (never from launch syntax).
pub fn build_pipeline(
    display: Display,
    quality: Quality,
) -> Result<(gst::Pipeline, gst_app::AppSink)> {
    let Quality {
        fps,
        kbps,
        keyframe_secs,
        speed,
        codec,
    } = quality;
    let make = |factory: &str| {
        gst::ElementFactory::make(factory)
            .build()
            .map_err(|e| Error::Unavailable(format!("GStreamer element {factory}: {e}")))
    };
    let src = make("ximagesrc")?;
    src.set_property("display-name", display.name());
    src.set_property("use-damage", false);
    src.set_property("show-pointer", true);
    let rate = make("capsfilter")?;
    rate.set_property(
        "caps",
        gst::Caps::builder("video/x-raw")
            .field("framerate", gst::Fraction::new(fps.max(1) as i32, 1))
            .build(),
    );
    let convert = make("videoconvert")?;
    let format = make("capsfilter")?;
    format.set_property(
        "caps",
        gst::Caps::builder("video/x-raw")
            .field("format", "I420")
            .build(),
    );
    let gop = (fps.max(1) * keyframe_secs.max(1)) as i32;
    let enc =
        match codec {
            Codec::Vp8 => {
                let enc = make("vp8enc")?;
                enc.set_property("deadline", 1i64);
                enc.set_property("cpu-used", speed.clamp(SPEEDS.0, SPEEDS.1));
                enc.set_property("threads", 1i32);
                enc.set_property_from_str("end-usage", "cbr");
                enc.set_property("target-bitrate", (kbps.saturating_mul(1000)) as i32);
                enc.set_property("keyframe-max-dist", gop);
                enc.set_property_from_str("error-resilient", "partitions");
                enc.set_property("lag-in-frames", 0i32);
                enc
            }
            Codec::H264 => {
                let enc = gst::ElementFactory::make("openh264enc").build().map_err(|e| {
                Error::Unavailable(format!(
                    "the H.264 encoder (GStreamer's openh264enc) is missing: install Debian's \
                     gstreamer1.0-plugins-bad, or set [desktop] codec = \"vp8\" ({e})"
                ))
            })?;
                enc.set_property_from_str("usage-type", "screen");
                enc.set_property_from_str("complexity", "low");
                enc.set_property_from_str("rate-control", "bitrate");
                enc.set_property("bitrate", kbps.saturating_mul(1000));
                enc.set_property("max-bitrate", kbps.saturating_mul(1000));
                // Keyframes when asked for (a viewer joining, a loss) and every `keyframe_secs`,
                // not at every page change: an IDR is several times a frame's size.
                enc.set_property("scene-change-detection", false);
                enc.set_property("gop-size", gop as u32);
                enc.set_property("multi-thread", 1u32);
                enc.set_property("enable-frame-skip", false);
                enc
            }
        };
    // H.264 leaves as Annex B access units, the form its RTP packetiser splits into NAL units.
    let stream = make("capsfilter")?;
    stream.set_property(
        "caps",
        match codec {
            Codec::Vp8 => gst::Caps::builder("video/x-vp8").build(),
            Codec::H264 => gst::Caps::builder("video/x-h264")
                .field("stream-format", "byte-stream")
                .field("alignment", "au")
                .build(),
        },
    );
    let sink = gst_app::AppSink::builder()
        .sync(false)
        .max_buffers(2)
        .drop(true)
        .build();
    let pipeline = gst::Pipeline::new();
    let elements = [
        &src,
        &rate,
        &convert,
        &format,
        &enc,
        &stream,
        sink.upcast_ref(),
    ];
    pipeline
        .add_many(elements)
        .map_err(|e| Error::Internal(format!("desktop pipeline: {e}")))?;
    gst::Element::link_many(elements)
        .map_err(|e| Error::Internal(format!("desktop pipeline: {e}")))?;
    Ok((pipeline, sink))
}

/// Encode latencies kept for the stream's numbers.
pub const LATENCY_WINDOW: usize = 512;

/// Largest encoded frame accepted from the child.
const MAX_FRAME_BYTES: usize = 8 * 1024 * 1024;

/// The video codec a stream is encoded with; every viewer of the stream gets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    /// libvpx (`vp8enc`).
    Vp8,
    /// OpenH264 (`openh264enc`), constrained baseline: what every WebRTC browser decodes.
    H264,
}

impl Codec {
    fn word(self) -> &'static str {
        match self {
            Codec::Vp8 => "vp8",
            Codec::H264 => "h264",
        }
    }
}

/// The VP8 speeds (libvpx's `cpu-used`) the encoder takes: higher is faster and coarser.
pub const SPEEDS: (i32, i32) = (0, 16);

/// How the encoder encodes: frames per second, target bitrate, keyframe interval, VP8 speed.
#[derive(Clone, Copy, Debug)]
pub struct Quality {
    pub fps: u32,
    pub kbps: u32,
    pub keyframe_secs: u32,
    /// libvpx's `cpu-used` in real-time mode, within [`SPEEDS`] (VP8 only).
    pub speed: i32,
    pub codec: Codec,
}

impl Quality {
    /// The child's arguments: `FPS KBPS KEYFRAME_SECS SPEED CODEC`.
    fn args(self) -> [String; 5] {
        [
            self.fps.to_string(),
            self.kbps.to_string(),
            self.keyframe_secs.to_string(),
            self.speed.to_string(),
            self.codec.word().to_string(),
        ]
    }

    /// Parses [`Quality::args`] (the child's side).
    pub fn parse(words: &[String]) -> Result<Self> {
        let bad = |what: &str| Error::Invalid(format!("desktop-encode: {what} is not a number"));
        let [fps, kbps, keyframe_secs, speed, codec] = words else {
            return Err(Error::Invalid(
                "desktop-encode takes FPS KBPS KEYFRAME_SECS SPEED CODEC".into(),
            ));
        };
        let codec = match codec.as_str() {
            "vp8" => Codec::Vp8,
            "h264" => Codec::H264,
            _ => {
                return Err(Error::Invalid(
                    "desktop-encode: CODEC is vp8 or h264".into(),
                ));
            }
        };
        Ok(Self {
            fps: fps.parse().map_err(|_| bad("FPS"))?,
            kbps: kbps.parse().map_err(|_| bad("KBPS"))?,
            keyframe_secs: keyframe_secs.parse().map_err(|_| bad("KEYFRAME_SECS"))?,
            speed: speed.parse().map_err(|_| bad("SPEED"))?,
            codec,
        })
    }
}

/// Starts `tandem` (`bin`) encoding display `display` whose socket directory on this host is
/// `x11_dir`, of the workspace whose init is `init_pid` (the encoder shares its IPC namespace:
/// X shared memory, so frames are not copied through the socket).
pub async fn start(
    bin: &Path,
    beside: &[std::ffi::OsString],
    display: Display,
    quality: Quality,
) -> Result<Encoder> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fps = quality.fps;
    let mut child = tokio::process::Command::new(bin)
        // None of the server's environment (a database URL with its password, …) reaches the
        // process that parses what the workspace's X server sends.
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", "/nonexistent")
        .arg("desktop-encode")
        .arg(display.name())
        .args(quality.args())
        .arg("--")
        .args(beside)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| {
            Error::Unavailable(format!(
                "cannot start the desktop encoder {}: {e}",
                bin.display()
            ))
        })?;
    let outer = child.id();
    // Its last words, for the error when it ends before its first frame (a missing GStreamer
    // plugin, a display it cannot open).
    let last_words = Arc::new(std::sync::Mutex::new(String::new()));
    let stderr_done = child
        .stderr
        .take()
        .map(|err| tokio::spawn(log_stderr(err, last_words.clone())));
    let mut out = child
        .stdout
        .take()
        .ok_or_else(|| Error::Internal("encoder stdout".into()))?;
    let mut input = child
        .stdin
        .take()
        .ok_or_else(|| Error::Internal("encoder stdin".into()))?;
    let (frames, _) = broadcast::channel(FRAME_QUEUE);
    let (keyframes, mut asks) = tokio::sync::mpsc::channel::<()>(4);
    let encoded = Arc::new(AtomicU64::new(0));
    let latencies = Arc::new(std::sync::Mutex::new(
        std::collections::VecDeque::with_capacity(LATENCY_WINDOW),
    ));
    let keyframes_sent = Arc::new(AtomicU64::new(0));
    let (tx, n, lat, kn) = (
        frames.clone(),
        encoded.clone(),
        latencies.clone(),
        keyframes_sent.clone(),
    );
    let (first_tx, first) = tokio::sync::oneshot::channel::<()>();
    let reader = tokio::spawn(async move {
        let _child = child;
        let mut first_tx = Some(first_tx);
        let read = async {
            loop {
                let mut head = [0u8; 13];
                out.read_exact(&mut head).await?;
                let len = u32::from_be_bytes(head[..4].try_into().unwrap_or_default()) as usize;
                if len > MAX_FRAME_BYTES {
                    return Err(std::io::Error::other("a frame over the limit"));
                }
                let mut data = vec![0u8; len];
                out.read_exact(&mut data).await?;
                let frame = Frame {
                    data: Bytes::from(data),
                    key: head[4] & 1 == 1,
                    encode_latency: Duration::from_micros(u64::from_be_bytes(
                        head[5..13].try_into().unwrap_or_default(),
                    )),
                };
                n.fetch_add(1, Ordering::Relaxed);
                if frame.key {
                    kn.fetch_add(1, Ordering::Relaxed);
                }
                {
                    let mut l = lat.lock().unwrap_or_else(|e| e.into_inner());
                    if l.len() == LATENCY_WINDOW {
                        l.pop_front();
                    }
                    l.push_back(frame.encode_latency.as_micros() as u64);
                }
                if let Some(t) = first_tx.take() {
                    let _ = t.send(());
                }
                let _ = tx.send(Arc::new(frame));
            }
            #[allow(unreachable_code)]
            Ok::<(), std::io::Error>(())
        };
        let ask = async {
            while asks.recv().await.is_some() {
                if input.write_all(b"k").await.is_err() {
                    break;
                }
            }
            std::future::pending::<()>().await;
        };
        tokio::select! {
            r = read => if let Err(e) = r { tracing::info!(error = %e, "the desktop encoder ended") },
            () = ask => {}
        }
    });
    // Ready when the first frame is out.
    let first = tokio::time::timeout(Duration::from_secs(10), first)
        .await
        .map_err(|_| Error::Unavailable("the desktop encoder sent no frame within 10 s".into()));
    if matches!(first, Ok(Err(_))) {
        // It ended: what it said last (read to its end, which follows its exit).
        if let Some(done) = stderr_done {
            let _ = tokio::time::timeout(Duration::from_secs(1), done).await;
        }
        let said = last_words.lock().unwrap_or_else(|e| e.into_inner()).clone();
        return Err(Error::Unavailable(format!(
            "the desktop encoder stopped before its first frame of display {}{}",
            display.name(),
            if said.is_empty() {
                String::new()
            } else {
                format!(": {said}")
            }
        )));
    }
    first?.map_err(|_| Error::Internal("the desktop encoder's first frame".into()))?;
    Ok(Encoder {
        frames,
        keyframes,
        encoded,
        keyframes_sent,
        fps,
        codec: quality.codec,
        // The process that encodes (the outer one only waits for it).
        pid: outer.map(|o| crate::confine::inner_pid(o).unwrap_or(o)),
        latencies,
        _reader: AbortOnDrop(reader),
    })
}

/// `tandem desktop-encode DISPLAY FPS KBPS KEYFRAME_SECS SPEED CODEC -- BESIDE…`: the child. `enter` takes
/// it beside the workspace (from the runtime's words after `--`). Runs until its stdout or the
/// display goes away.
pub fn child_main(
    display: &str,
    quality: Quality,
    enter: impl FnOnce() -> Result<()>,
) -> Result<()> {
    use std::io::{Read, Write};
    let display = Display::parse(display)?;
    if !crate::confine::is_inner() {
        let code = crate::confine::outer(enter)?;
        std::process::exit(code);
    }
    crate::confine::inner()?;
    gst::init().map_err(|e| Error::Unavailable(format!("GStreamer cannot start: {e}")))?;
    let (pipeline, sink) = build_pipeline(display, quality)?;
    let display = display.name();
    pipeline
        .set_state(gst::State::Playing)
        .map_err(|_| Error::Unavailable(format!("the encoder cannot open display {display}")))?;
    let keyframe = Arc::new(AtomicBool::new(true));
    let kf = keyframe.clone();
    std::thread::spawn(move || {
        let mut b = [0u8; 64];
        while let Ok(n) = std::io::stdin().read(&mut b) {
            if n == 0 {
                std::process::exit(0);
            }
            kf.store(true, Ordering::Relaxed);
        }
    });
    let bus = pipeline.bus();
    let mut stdout = std::io::stdout().lock();
    loop {
        if keyframe.swap(false, Ordering::Relaxed) {
            let s = gst::Structure::builder("GstForceKeyUnit")
                .field("all-headers", true)
                .build();
            sink.send_event(gst::event::CustomUpstream::new(s));
        }
        if let Some(msg) = bus
            .as_ref()
            .and_then(|b| b.pop_filtered(&[gst::MessageType::Error, gst::MessageType::Eos]))
        {
            let _ = pipeline.set_state(gst::State::Null);
            return Err(Error::Unavailable(format!(
                "the desktop pipeline stopped: {msg:?}"
            )));
        }
        let Some(sample) = sink.try_pull_sample(gst::ClockTime::from_mseconds(200)) else {
            continue;
        };
        let Some(buffer) = sample.buffer() else {
            continue;
        };
        let latency = match (pipeline.clock(), pipeline.base_time(), buffer.pts()) {
            (Some(clock), Some(base), Some(pts)) => clock
                .time()
                .checked_sub(base + pts)
                .map(|d| d.nseconds() / 1000),
            _ => None,
        };
        let Ok(map) = buffer.map_readable() else {
            continue;
        };
        let key = !buffer.flags().contains(gst::BufferFlags::DELTA_UNIT);
        let mut head = Vec::with_capacity(13);
        head.extend_from_slice(&(map.len() as u32).to_be_bytes());
        head.push(u8::from(key));
        head.extend_from_slice(&latency.unwrap_or(0).to_be_bytes());
        if stdout
            .write_all(&head)
            .and_then(|_| stdout.write_all(map.as_slice()))
            .and_then(|_| stdout.flush())
            .is_err()
        {
            let _ = pipeline.set_state(gst::State::Null);
            return Ok(());
        }
    }
}

pub use crate::confine::ENCODER_UID;

/// Most lines of an encoder's own complaints logged as warnings (the rest at debug).
const STDERR_WARNINGS: usize = 20;

/// Logs what an encoder child prints: Xlib's last words when the workspace's display goes away
/// (the workspace ended) are expected and logged at debug; anything else as a warning, a few.
async fn log_stderr(err: tokio::process::ChildStderr, last: Arc<std::sync::Mutex<String>>) {
    use tokio::io::AsyncReadExt;
    // Read to the end whatever it is (the encoder must never block on, or die of, a closed
    // pipe); lines are cut at 1 KiB and decoded lossily.
    let mut reader = tokio::io::BufReader::new(err);
    let mut buf = [0u8; 4096];
    let mut line = Vec::new();
    let mut warned = 0;
    let mut lines = Vec::new();
    loop {
        let n = match reader.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for b in &buf[..n] {
            if *b == b'\n' || line.len() >= 1024 {
                lines.push(String::from_utf8_lossy(&line).into_owned());
                line.clear();
            }
            if *b != b'\n' {
                line.push(*b);
            }
        }
        for line in lines.drain(..) {
            log_line(&line, &mut warned);
            if !line.trim().is_empty() && !display_gone(&line) {
                // Shown to the person watching: printable, and short.
                *last.lock().unwrap_or_else(|e| e.into_inner()) =
                    line.chars().filter(|c| !c.is_control()).take(300).collect();
            }
        }
    }
}

fn log_line(line: &str, warned: &mut usize) {
    if display_gone(line) || *warned >= STDERR_WARNINGS {
        tracing::debug!("desktop encoder: {line}");
    } else {
        *warned += 1;
        tracing::warn!("desktop encoder: {line}");
    }
}

/// Xlib's report of a lost display (`XIO: fatal IO error … on X server ":99"` and its
/// `after N requests …` line).
fn display_gone(line: &str) -> bool {
    line.contains("XIO:") || (line.contains("requests") && line.contains("events remaining"))
}

#[cfg(test)]
mod tests {
    use super::Display;

    #[test]
    fn only_a_plain_display_number_is_a_display() {
        assert_eq!(Display::parse(":99").unwrap().name(), ":99");
        assert_eq!(Display::parse(":0").unwrap().number(), 0);
        for hostile in [
            ":99 ! filesrc location=/var/lib/tandem/jwt.key ! fakesink",
            ":99 use-damage=true",
            "99",
            ":",
            ":99.0",
            "host:99",
            ":-1",
            ":999999",
            ":65536",
            ":9\n9",
            "",
        ] {
            assert!(Display::parse(hostile).is_err(), "{hostile:?} was accepted");
        }
    }

    #[test]
    fn the_childs_quality_arguments_read_back_as_given_and_nonsense_is_refused() {
        let q = super::Quality {
            fps: 30,
            kbps: 2500,
            keyframe_secs: 4,
            speed: 12,
            codec: super::Codec::H264,
        };
        let back = super::Quality::parse(&q.args()).unwrap();
        assert_eq!(
            (
                back.fps,
                back.kbps,
                back.keyframe_secs,
                back.speed,
                back.codec
            ),
            (30, 2500, 4, 12, super::Codec::H264)
        );
        let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(super::Quality::parse(&words(&["30", "2500", "4", "8"])).is_err());
        let err = super::Quality::parse(&words(&["30", "2500", "4", "fast", "vp8"])).unwrap_err();
        assert!(err.to_string().contains("SPEED"), "{err}");
        let err = super::Quality::parse(&words(&["30", "2500", "4", "8", "x264 ! filesink"]))
            .unwrap_err();
        assert!(err.to_string().contains("vp8 or h264"), "{err}");
    }

    #[test]
    fn xlibs_words_on_a_lost_display_are_told_apart() {
        assert!(super::display_gone(
            "XIO:  fatal IO error 11 (Resource temporarily unavailable) on X server \":99\""
        ));
        assert!(super::display_gone(
            "      after 2291 requests (2291 known processed) with 0 events remaining."
        ));
        assert!(!super::display_gone(
            "ERROR: from element /GstPipeline: could not link"
        ));
    }
}
