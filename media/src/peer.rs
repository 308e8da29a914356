//! One viewer of a desktop: a WebRTC peer connection (webrtc-rs) that sends the session's
//! encoded frames, packetised for this viewer alone (its own payload type and sequence
//! numbers, as its browser negotiated). Signalling is one offer and one answer with every
//! candidate in them (no trickle); host candidates are on the configured addresses; mDNS is off.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rtc::interceptor::Registry;
use rtc::media::Sample;
use rtc::media_stream::MediaStreamTrack;
use rtc::peer_connection::configuration::RTCConfigurationBuilder;
use rtc::peer_connection::configuration::interceptor_registry::register_default_interceptors;
use rtc::peer_connection::configuration::media_engine::{
    MIME_TYPE_H264, MIME_TYPE_VP8, MediaEngine,
};
use rtc::peer_connection::configuration::setting_engine::SettingEngineBuilder;
use rtc::peer_connection::sdp::RTCSessionDescription;
use rtc::rtp_transceiver::rtp_sender::{
    RTCRtpCodec, RTCRtpCodecParameters, RTCRtpCodingParameters, RTCRtpEncodingParameters,
    RtpCodecKind,
};
use tokio::sync::{broadcast, mpsc};
use webrtc::media_stream::track_local::TrackLocal;
use webrtc::media_stream::track_local::static_sample::TrackLocalStaticSample;
use webrtc::peer_connection::{
    PeerConnection, PeerConnectionBuilder, PeerConnectionEventHandler, RTCIceGatheringState,
    RTCPeerConnectionState,
};

use crate::encode::{Codec, Frame};
use crate::{Error, Result};

/// How long gathering candidates and connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);
/// The payload type in our offer to ourselves (the browser's choice wins in the answer).
const VP8_PAYLOAD: u8 = 96;
const H264_PAYLOAD: u8 = 102;

/// The RTP codec a stream's frames go out as, and its payload type in our own offer. H.264 is
/// constrained baseline with non-interleaved packetisation (mode 1), which every WebRTC
/// browser offers.
fn rtp_codec(codec: Codec) -> (RTCRtpCodec, u8) {
    let (mime, fmtp, payload) = match codec {
        Codec::Vp8 => (MIME_TYPE_VP8, "", VP8_PAYLOAD),
        Codec::H264 => (
            MIME_TYPE_H264,
            "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f",
            H264_PAYLOAD,
        ),
    };
    (
        RTCRtpCodec {
            mime_type: mime.to_owned(),
            clock_rate: 90_000,
            channels: 0,
            sdp_fmtp_line: fmtp.to_owned(),
            rtcp_feedback: vec![],
        },
        payload,
    )
}

/// Whether an offer has H.264 the way we send it: a payload type mapped to `H264/90000` whose
/// format parameters say packetization mode 1 and a constrained baseline profile (`42e0…`).
fn offers_h264(sdp: &str) -> bool {
    let h264: Vec<&str> = sdp
        .lines()
        .filter_map(|l| l.strip_prefix("a=rtpmap:"))
        .filter_map(|l| l.split_once(' '))
        .filter(|(_, codec)| codec.trim().eq_ignore_ascii_case("H264/90000"))
        .map(|(pt, _)| pt)
        .collect();
    sdp.lines()
        .filter_map(|l| l.strip_prefix("a=fmtp:"))
        .filter_map(|l| l.split_once(' '))
        .filter(|(pt, _)| h264.contains(pt))
        .any(|(_, params)| {
            let params = params.trim().to_ascii_lowercase();
            let has = |k: &str, ok: &dyn Fn(&str) -> bool| {
                params
                    .split(';')
                    .filter_map(|p| p.trim().split_once('='))
                    .any(|(key, v)| key == k && ok(v))
            };
            has("packetization-mode", &|v| v == "1")
                && has("profile-level-id", &|v| v.starts_with("42e0"))
        })
}

#[derive(Clone)]
struct Handler {
    gathered: mpsc::Sender<()>,
    state: mpsc::Sender<RTCPeerConnectionState>,
}

#[async_trait::async_trait]
impl PeerConnectionEventHandler for Handler {
    async fn on_ice_gathering_state_change(&self, state: RTCIceGatheringState) {
        if state == RTCIceGatheringState::Complete {
            let _ = self.gathered.try_send(());
        }
    }

    async fn on_connection_state_change(&self, state: RTCPeerConnectionState) {
        let _ = self.state.try_send(state);
    }
}

fn rtc_error(doing: &str) -> impl Fn(webrtc::error::Error) -> Error + '_ {
    move |e| Error::BadRequest(format!("{doing}: {e}"))
}

/// A connected (or connecting) viewer; dropping it closes the connection.
pub struct Viewer {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Viewer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Answers a viewer's offer; the answer SDP and the viewer, which sends every frame of
/// `frames` from the next keyframe on (asking `keyframe` for one when it connects).
pub async fn answer(
    offer_sdp: String,
    udp_addrs: &[String],
    mut frames: broadcast::Receiver<Arc<Frame>>,
    fps: u32,
    kind: Codec,
    keyframe: impl Fn() + Send + Sync + 'static,
) -> Result<(String, Viewer)> {
    if kind == Codec::H264 && !offers_h264(&offer_sdp) {
        return Err(Error::Unavailable(
            "this browser does not decode H.264 (constrained baseline, packetization mode 1), \
             the codec this server streams desktops in: watch from a browser that does, or ask \
             an admin to set [desktop] codec = \"vp8\""
                .into(),
        ));
    }
    let (codec, own_payload) = rtp_codec(kind);
    let mut media = MediaEngine::default();
    media
        .register_codec(
            RTCRtpCodecParameters {
                rtp_codec: codec.clone(),
                payload_type: own_payload,
            },
            RtpCodecKind::Video,
        )
        .map_err(rtc_error("registering the video codec"))?;
    let registry = register_default_interceptors(Registry::new(), &mut media)
        .map_err(rtc_error("interceptors"))?;
    // Keyframe requests (PLI, FIR) from the browser reach this code, and then the encoder.
    let registry = registry.with(
        rtc::interceptor::Slot::from(14_000),
        KeyframeRequests::default(),
    );
    let settings = SettingEngineBuilder::new()
        .with_multicast_dns_mode(rtc::ice::mdns::MulticastDnsMode::Disabled)
        .build();
    let (gathered_tx, mut gathered) = mpsc::channel(1);
    let (state_tx, mut state) = mpsc::channel(16);
    let runtime = webrtc::runtime::default_runtime()
        .ok_or_else(|| Error::Internal("no WebRTC runtime".into()))?;
    let pc = PeerConnectionBuilder::new()
        .with_configuration(RTCConfigurationBuilder::new().build())
        .with_media_engine(media)
        .with_setting_engine(settings)
        .with_interceptor_registry(registry)
        .with_handler(Arc::new(Handler {
            gathered: gathered_tx,
            state: state_tx,
        }))
        .with_runtime(runtime)
        .with_udp_addrs(udp_addrs.to_vec())
        .build()
        .await
        .map_err(|e| Error::Unavailable(format!("a WebRTC connection on {udp_addrs:?}: {e}")))?;
    let ssrc = rand::random::<u32>();
    let track = Arc::new(
        TrackLocalStaticSample::new(
            Instant::now(),
            MediaStreamTrack::new(
                "tandem-desktop".to_string(),
                "tandem-desktop-video".to_string(),
                "desktop".to_string(),
                RtpCodecKind::Video,
                vec![RTCRtpEncodingParameters {
                    rtp_coding_parameters: RTCRtpCodingParameters {
                        ssrc: Some(ssrc),
                        ..Default::default()
                    },
                    codec,
                    ..Default::default()
                }],
            ),
        )
        .map_err(rtc_error("the video track"))?,
    );
    let sender = pc
        .add_track(Arc::clone(&track) as Arc<dyn TrackLocal>)
        .await
        .map_err(rtc_error("adding the video track"))?;
    let offer = RTCSessionDescription::offer(offer_sdp).map_err(rtc_error("the offer"))?;
    pc.set_remote_description(offer)
        .await
        .map_err(rtc_error("the offer"))?;
    let answer = pc
        .create_answer(None)
        .await
        .map_err(rtc_error("answering"))?;
    pc.set_local_description(answer)
        .await
        .map_err(rtc_error("answering"))?;
    tokio::time::timeout(CONNECT_TIMEOUT, gathered.recv())
        .await
        .map_err(|_| Error::Unavailable("gathering WebRTC candidates took too long".into()))?;
    let sdp = pc
        .local_description()
        .await
        .ok_or_else(|| Error::Internal("no local description".into()))?
        .sdp;

    let task = tokio::spawn(async move {
        // Connected, or give up.
        let connected = tokio::time::timeout(CONNECT_TIMEOUT, async {
            while let Some(s) = state.recv().await {
                match s {
                    RTCPeerConnectionState::Connected => return true,
                    RTCPeerConnectionState::Failed | RTCPeerConnectionState::Closed => {
                        return false;
                    }
                    _ => {}
                }
            }
            false
        })
        .await
        .unwrap_or(false);
        if !connected {
            let _ = pc.close().await;
            return;
        }
        let payload_type = match sender.get_parameters().await {
            Ok(p) => p
                .rtp_parameters
                .codecs
                .first()
                .map(|c| c.payload_type)
                .unwrap_or(own_payload),
            Err(_) => own_payload,
        };
        keyframe();
        let mut started = false;
        // The RTP clock advances by each frame's true length (33.3 ms at 30 fps, not 33).
        let frame_duration = Duration::from_nanos(1_000_000_000 / u64::from(fps.max(1)));
        loop {
            tokio::select! {
                f = frames.recv() => match f {
                    Ok(frame) => {
                        // A viewer starts, and restarts after falling behind, at a keyframe.
                        if !started && !frame.key {
                            continue;
                        }
                        started = true;
                        let sample = Sample { data: frame.data.clone(), duration: frame_duration, ..Sample::new(Instant::now()) };
                        if track.sample_writer(ssrc, payload_type).write_sample(&sample).await.is_err() {
                            break;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        started = false;
                        keyframe();
                    }
                    Err(broadcast::error::RecvError::Closed) => break,
                },
                s = state.recv() => match s {
                    Some(RTCPeerConnectionState::Failed | RTCPeerConnectionState::Closed | RTCPeerConnectionState::Disconnected) | None => break,
                    _ => {}
                },
                ev = track.poll() => match ev {
                    Some(webrtc::media_stream::track_local::TrackLocalEvent::OnRtcpPacket(_)) => keyframe(),
                    Some(_) => {}
                    None => break,
                },
            }
        }
        let _ = pc.close().await;
    });
    Ok((sdp, Viewer { task }))
}

/// Passes the browser's keyframe requests (PLI, FIR) on to the application (the viewer's task
/// asks the encoder); every other inbound RTCP packet is the other interceptors' business.
#[derive(Default)]
struct KeyframeRequests {
    read: std::collections::VecDeque<rtc::interceptor::TaggedPacket>,
    write: std::collections::VecDeque<rtc::interceptor::TaggedPacket>,
}

impl rtc::sansio::Protocol<rtc::interceptor::TaggedPacket, rtc::interceptor::TaggedPacket, ()>
    for KeyframeRequests
{
    type Rout = rtc::interceptor::TaggedPacket;
    type Wout = rtc::interceptor::TaggedPacket;
    type Eout = ();
    type Error = rtc::shared::error::Error;
    type Time = Instant;

    fn handle_read(
        &mut self,
        mut msg: rtc::interceptor::TaggedPacket,
    ) -> std::result::Result<(), Self::Error> {
        use rtc::rtcp::payload_feedbacks::full_intra_request::FullIntraRequest;
        use rtc::rtcp::payload_feedbacks::picture_loss_indication::PictureLossIndication;
        if let rtc::interceptor::Packet::Rtcp(packets) = &msg.message.packet {
            let asks: Vec<Box<dyn rtc::rtcp::Packet>> = packets
                .iter()
                .filter(|p| {
                    p.as_any().is::<PictureLossIndication>() || p.as_any().is::<FullIntraRequest>()
                })
                .cloned()
                .collect();
            if asks.is_empty() {
                return Ok(());
            }
            msg.message.packet = rtc::interceptor::Packet::Rtcp(asks);
            msg.message
                .add(rtc::interceptor::Attribute::DeliverToApplication);
        }
        self.read.push_back(msg);
        Ok(())
    }

    fn poll_read(&mut self) -> Option<Self::Rout> {
        self.read.pop_front()
    }

    fn handle_write(
        &mut self,
        msg: rtc::interceptor::TaggedPacket,
    ) -> std::result::Result<(), Self::Error> {
        self.write.push_back(msg);
        Ok(())
    }

    fn poll_write(&mut self) -> Option<Self::Wout> {
        self.write.pop_front()
    }
}

impl rtc::interceptor::Interceptor for KeyframeRequests {
    fn bind_local_stream(&mut self, _info: &rtc::interceptor::StreamInfo) {}
    fn unbind_local_stream(&mut self, _info: &rtc::interceptor::StreamInfo) {}
    fn bind_remote_stream(&mut self, _info: &rtc::interceptor::StreamInfo) {}
    fn unbind_remote_stream(&mut self, _info: &rtc::interceptor::StreamInfo) {}
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_an_offer_with_h264_as_we_send_it_counts() {
        let chrome = "v=0\r\nm=video 9 UDP/TLS/RTP/SAVPF 96 102 127\r\na=rtpmap:96 VP8/90000\r\n\
                      a=rtpmap:102 H264/90000\r\n\
                      a=fmtp:102 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f\r\n\
                      a=rtpmap:127 H264/90000\r\n\
                      a=fmtp:127 level-asymmetry-allowed=1;packetization-mode=0;profile-level-id=42001f\r\n";
        assert!(super::offers_h264(chrome));
        let vp8_only = "v=0\r\na=rtpmap:96 VP8/90000\r\n";
        assert!(!super::offers_h264(vp8_only));
        // H.264 only in mode 0, or only the high profile: not what the encoder sends.
        let mode0 = "a=rtpmap:127 H264/90000\r\na=fmtp:127 packetization-mode=0;profile-level-id=42e01f\r\n";
        assert!(!super::offers_h264(mode0));
        let high = "a=rtpmap:100 H264/90000\r\na=fmtp:100 packetization-mode=1;profile-level-id=640c1f\r\n";
        assert!(!super::offers_h264(high));
        // Parameters of another payload type do not count.
        let crossed = "a=rtpmap:96 VP8/90000\r\na=rtpmap:100 H264/90000\r\n\
                       a=fmtp:96 packetization-mode=1;profile-level-id=42e01f\r\n";
        assert!(!super::offers_h264(crossed));
    }
}
