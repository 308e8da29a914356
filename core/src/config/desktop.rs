//! `[desktop]`: how a workspace's desktop is captured, encoded and streamed to browsers.

use serde::Deserialize;

use crate::{Error, Result};

/// `[desktop]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DesktopConfig {
    /// Local addresses WebRTC's host candidates use (`IP:port`, port 0 picks one). Empty: the
    /// listen address's IP. Browsers must reach one of them over UDP; where they cannot, the
    /// noVNC view over the WebSocket works instead.
    pub udp_addrs: Vec<String>,
    /// Frames per second captured.
    pub fps: u32,
    /// Target bitrate (kbit/s).
    pub kbps: u32,
    /// A keyframe at least this often (seconds); viewers joining or losing packets ask for
    /// one in between.
    pub keyframe_secs: u32,
    /// VP8's speed (libvpx's real-time `cpu-used`, 0–16): higher costs less CPU a frame and
    /// gives a coarser picture at the same bitrate.
    pub vp8_speed: i32,
    /// The video codec: `vp8` (libvpx) or `h264` (OpenH264, constrained baseline; needs
    /// GStreamer's `openh264enc`, Debian's `gstreamer1.0-plugins-bad`).
    pub codec: DesktopCodec,
}

/// `[desktop] codec`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DesktopCodec {
    #[default]
    Vp8,
    H264,
}

impl DesktopConfig {
    /// The section, or what in it is out of range.
    pub(super) fn validated(self) -> Result<Self> {
        if !(1..=60).contains(&self.fps) {
            return Err(Error::Config(format!(
                "[desktop] fps = {}: must be 1 to 60",
                self.fps
            )));
        }
        if !(1..=100_000).contains(&self.kbps) {
            return Err(Error::Config(format!(
                "[desktop] kbps = {}: must be 1 to 100000",
                self.kbps
            )));
        }
        if !(1..=3600).contains(&self.keyframe_secs) {
            return Err(Error::Config(format!(
                "[desktop] keyframe_secs = {}: must be 1 to 3600",
                self.keyframe_secs
            )));
        }
        if !(0..=16).contains(&self.vp8_speed) {
            return Err(Error::Config(format!(
                "[desktop] vp8_speed = {}: must be 0 (slowest, sharpest) to 16 (fastest)",
                self.vp8_speed
            )));
        }
        Ok(self)
    }
}

impl Default for DesktopConfig {
    fn default() -> Self {
        Self {
            udp_addrs: vec![],
            fps: 30,
            kbps: 2500,
            keyframe_secs: 4,
            vp8_speed: 12,
            codec: DesktopCodec::Vp8,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{CONFIG_FILE, Config, DesktopCodec, Overrides};

    #[test]
    fn a_desktop_section_out_of_range_is_refused_with_its_range() {
        let dir = tempfile::tempdir().unwrap();
        let resolve = |toml: &str| {
            std::fs::write(dir.path().join(CONFIG_FILE), toml).unwrap();
            Config::resolve(Overrides {
                data_dir: Some(dir.path().into()),
                ..Default::default()
            })
        };
        let cfg = resolve("[desktop]\nfps = 30\nvp8_speed = 12\ncodec = \"h264\"\n").unwrap();
        assert_eq!(
            (cfg.desktop.fps, cfg.desktop.vp8_speed, cfg.desktop.codec),
            (30, 12, DesktopCodec::H264)
        );
        for (toml, says) in [
            ("[desktop]\nfps = 0\n", "fps = 0: must be 1 to 60"),
            ("[desktop]\nfps = 240\n", "fps = 240: must be 1 to 60"),
            ("[desktop]\nvp8_speed = 17\n", "vp8_speed = 17: must be 0"),
            ("[desktop]\nkbps = 0\n", "kbps = 0: must be 1 to 100000"),
            ("[desktop]\nkbps = 4000000\n", "kbps = 4000000: must be 1"),
            (
                "[desktop]\nkeyframe_secs = 0\n",
                "keyframe_secs = 0: must be 1 to 3600",
            ),
            (
                "[desktop]\nkeyframe_secs = 4294967295\n",
                "keyframe_secs = 4294967295",
            ),
            ("[desktop]\nvp8_speed = -3\n", "vp8_speed = -3: must be 0"),
            ("[desktop]\ncodec = \"av1\"\n", "unknown variant `av1`"),
        ] {
            let err = resolve(toml).unwrap_err().to_string();
            assert!(err.contains(says), "{toml:?}: {err}");
        }
    }
}
