//! A desktop viewer in Rust: a receive-only WebRTC peer that counts what arrives. The tests and
//! `cargo xtask bench desktop` watch sessions with it the way a browser would.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rtc::interceptor::Registry;
use rtc::peer_connection::configuration::RTCConfigurationBuilder;
use rtc::peer_connection::configuration::interceptor_registry::register_default_interceptors;
use rtc::peer_connection::configuration::media_engine::{
    MIME_TYPE_H264, MIME_TYPE_VP8, MediaEngine,
};
use rtc::peer_connection::configuration::setting_engine::SettingEngineBuilder;
use rtc::peer_connection::sdp::RTCSessionDescription;
use rtc::rtp_transceiver::rtp_sender::{RTCRtpCodec, RTCRtpCodecParameters, RtpCodecKind};
use rtc::rtp_transceiver::{RTCRtpTransceiverDirection, RTCRtpTransceiverInit};
use tokio::sync::mpsc;
use webrtc::media_stream::track_remote::{TrackRemote, TrackRemoteEvent};
use webrtc::peer_connection::{
    PeerConnection, PeerConnectionBuilder, PeerConnectionEventHandler, RTCIceGatheringState,
};

use crate::{Error, Result};

/// What a viewer has received so far.
#[derive(Default)]
pub struct Received {
    pub packets: AtomicU64,
    pub bytes: AtomicU64,
    /// Frames completed (RTP marker bits).
    pub frames: AtomicU64,
}

struct Handler {
    gathered: mpsc::Sender<()>,
    received: Arc<Received>,
    track: Arc<std::sync::Mutex<Option<Arc<dyn TrackRemote>>>>,
}

#[async_trait::async_trait]
impl PeerConnectionEventHandler for Handler {
    async fn on_ice_gathering_state_change(&self, state: RTCIceGatheringState) {
        if state == RTCIceGatheringState::Complete {
            let _ = self.gathered.try_send(());
        }
    }

    async fn on_track(&self, track: Arc<dyn TrackRemote>) {
        *self.track.lock().unwrap_or_else(|e| e.into_inner()) = Some(track.clone());
        let received = self.received.clone();
        tokio::spawn(async move {
            while let Some(evt) = track.poll().await {
                if let TrackRemoteEvent::OnRtpPacket(p) = evt {
                    received.packets.fetch_add(1, Ordering::Relaxed);
                    received
                        .bytes
                        .fetch_add(p.payload.len() as u64, Ordering::Relaxed);
                    if p.header.marker {
                        received.frames.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
    }
}

/// A receive-only viewer.
pub struct DesktopViewer {
    pc: Box<dyn PeerConnection>,
    pub received: Arc<Received>,
    track: Arc<std::sync::Mutex<Option<Arc<dyn TrackRemote>>>>,
}

fn err(doing: &str) -> impl Fn(webrtc::error::Error) -> Error + '_ {
    move |e| Error::Internal(format!("{doing}: {e}"))
}

impl DesktopViewer {
    /// A viewer on `udp_addr` (`127.0.0.1:0`) and its offer (all candidates in it).
    pub async fn offer(udp_addr: &str) -> Result<(Self, String)> {
        let mut media = MediaEngine::default();
        // Both codecs a stream may use, as a browser offers them.
        for (mime, fmtp, payload_type) in [
            (MIME_TYPE_VP8, "", 100),
            (
                MIME_TYPE_H264,
                "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f",
                102,
            ),
        ] {
            media
                .register_codec(
                    RTCRtpCodecParameters {
                        rtp_codec: RTCRtpCodec {
                            mime_type: mime.to_owned(),
                            clock_rate: 90_000,
                            channels: 0,
                            sdp_fmtp_line: fmtp.to_owned(),
                            rtcp_feedback: vec![],
                        },
                        payload_type,
                    },
                    RtpCodecKind::Video,
                )
                .map_err(err("codec"))?;
        }
        let registry = register_default_interceptors(Registry::new(), &mut media)
            .map_err(err("interceptors"))?;
        let (gathered_tx, mut gathered) = mpsc::channel(1);
        let received = Arc::new(Received::default());
        let track = Arc::new(std::sync::Mutex::new(None));
        let pc = PeerConnectionBuilder::new()
            .with_configuration(RTCConfigurationBuilder::new().build())
            .with_media_engine(media)
            .with_setting_engine(
                SettingEngineBuilder::new()
                    .with_multicast_dns_mode(rtc::ice::mdns::MulticastDnsMode::Disabled)
                    .build(),
            )
            .with_interceptor_registry(registry)
            .with_handler(Arc::new(Handler {
                gathered: gathered_tx,
                received: received.clone(),
                track: track.clone(),
            }))
            .with_runtime(
                webrtc::runtime::default_runtime()
                    .ok_or_else(|| Error::Internal("no WebRTC runtime".into()))?,
            )
            .with_udp_addrs(vec![udp_addr.to_string()])
            .build()
            .await
            .map_err(err("building a peer connection"))?;
        pc.add_transceiver_from_kind(
            RtpCodecKind::Video,
            Some(RTCRtpTransceiverInit {
                direction: RTCRtpTransceiverDirection::Recvonly,
                ..Default::default()
            }),
        )
        .await
        .map_err(err("a video transceiver"))?;
        let offer = pc.create_offer(None).await.map_err(err("the offer"))?;
        pc.set_local_description(offer)
            .await
            .map_err(err("the offer"))?;
        tokio::time::timeout(Duration::from_secs(20), gathered.recv())
            .await
            .map_err(|_| Error::Internal("gathering candidates took too long".into()))?;
        let sdp = pc
            .local_description()
            .await
            .ok_or_else(|| Error::Internal("no offer".into()))?
            .sdp;
        Ok((
            Self {
                pc: Box::new(pc),
                received,
                track,
            },
            sdp,
        ))
    }

    /// Takes the server's answer.
    pub async fn accept(&self, answer_sdp: String) -> Result<()> {
        let answer = RTCSessionDescription::answer(answer_sdp).map_err(err("the answer"))?;
        self.pc
            .set_remote_description(answer)
            .await
            .map_err(err("the answer"))
    }

    /// Asks the sender for a keyframe (RTCP picture loss indication), as a browser does when it
    /// lost packets.
    pub async fn request_keyframe(&self) -> Result<()> {
        let track = self
            .track
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| Error::Internal("no track yet".into()))?;
        let media_ssrc = track
            .ssrcs()
            .await
            .first()
            .copied()
            .ok_or_else(|| Error::Internal("the track has no SSRC".into()))?;
        let pli = rtc::rtcp::payload_feedbacks::picture_loss_indication::PictureLossIndication {
            sender_ssrc: 0,
            media_ssrc,
        };
        track
            .write_rtcp(vec![Box::new(pli)])
            .await
            .map_err(err("sending a keyframe request"))
    }

    pub async fn close(&self) {
        let _ = self.pc.close().await;
    }
}
