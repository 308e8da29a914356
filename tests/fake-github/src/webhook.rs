//! Webhook delivery as GitHub's hookshot does it: one signed JSON POST per event.

use bytes::Bytes;
use hmac::{Hmac, Mac};
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use sha2::Sha256;

/// How long a delivery may take, as GitHub gives up after ten seconds.
const DELIVERY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// `sha256=<hex HMAC-SHA256 of body under secret>`, GitHub's `X-Hub-Signature-256`.
pub(crate) fn signature(secret: &str, body: &[u8]) -> String {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key length");
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    format!(
        "sha256={}",
        digest
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    )
}

/// POSTs `payload` to `url` (plain `http://host:port/path`) as event `event`; returns the status.
pub(crate) async fn deliver(
    url: &str,
    secret: &str,
    event: &str,
    payload: &serde_json::Value,
) -> u16 {
    let rest = url
        .strip_prefix("http://")
        .unwrap_or_else(|| panic!("deliver_webhook: {url} is not an http:// URL"));
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let body = serde_json::to_vec(payload).expect("serialize the payload");
    let request = hyper::Request::post(path)
        .header("host", authority)
        .header("user-agent", "GitHub-Hookshot/fake")
        .header("accept", "*/*")
        .header("content-type", "application/json")
        .header("x-github-event", event)
        .header("x-github-delivery", uuid::Uuid::new_v4().to_string())
        .header("x-github-hook-id", "1")
        .header("x-hub-signature-256", signature(secret, &body))
        .body(Full::new(Bytes::from(body)))
        .expect("a valid request");
    let send = async {
        let stream = tokio::net::TcpStream::connect(authority)
            .await
            .unwrap_or_else(|e| panic!("deliver_webhook: connect to {authority}: {e}"));
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .expect("HTTP/1 handshake");
        tokio::spawn(connection);
        sender
            .send_request(request)
            .await
            .expect("send the webhook")
            .status()
            .as_u16()
    };
    tokio::time::timeout(DELIVERY_TIMEOUT, send)
        .await
        .unwrap_or_else(|_| panic!("deliver_webhook: {url} did not answer in {DELIVERY_TIMEOUT:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_matches_githubs_documented_example() {
        // From GitHub's "Validating webhook deliveries".
        assert_eq!(
            signature("It's a Secret to Everybody", b"Hello, World!"),
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
        );
    }
}
