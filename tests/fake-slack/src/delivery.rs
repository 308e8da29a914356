//! Deliveries to the app as Slack makes them: one POST per event, interaction or command,
//! signed with `X-Slack-Request-Timestamp` and `X-Slack-Signature` (`v0=` + hex HMAC-SHA256 of
//! `v0:{timestamp}:{body}` under the signing secret).

use std::time::Duration;

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// How long Slack waits for the app to acknowledge a delivery before it gives up on it.
pub(crate) const DELIVERY_TIMEOUT: Duration = Duration::from_secs(3);

/// The `User-Agent` Slack's deliveries carry.
const USER_AGENT: &str = "Slackbot 1.0 (+https://api.slack.com/robots)";

/// `v0=<hex HMAC-SHA256 of "v0:{timestamp}:{body}" under secret>`.
pub(crate) fn signature(secret: &str, timestamp: &str, body: &str) -> String {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key length");
    mac.update(format!("v0:{timestamp}:{body}").as_bytes());
    let digest = mac.finalize().into_bytes();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("v0={hex}")
}

/// POSTs `body` to `url` with the signature headers given (a `None` is left out); returns the
/// status and the response body. Panics if the app does not answer within [`DELIVERY_TIMEOUT`].
pub(crate) async fn post(
    url: &str,
    content_type: &str,
    body: &str,
    timestamp: Option<&str>,
    signature: Option<&str>,
) -> (u16, String) {
    // A fresh client each time: a test's runtime ends with the test, and pooled connections
    // must not outlive it. No proxy: the app listens on loopback.
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(DELIVERY_TIMEOUT)
        .build()
        .expect("an HTTP client");
    let mut request = client
        .post(url)
        .header("content-type", content_type)
        .header("user-agent", USER_AGENT)
        .header("accept", "*/*")
        .body(body.to_string());
    if let Some(timestamp) = timestamp {
        request = request.header("x-slack-request-timestamp", timestamp);
    }
    if let Some(signature) = signature {
        request = request.header("x-slack-signature", signature);
    }
    let response = request.send().await.unwrap_or_else(|e| {
        if e.is_timeout() {
            panic!("deliver: {url} did not answer within Slack's {DELIVERY_TIMEOUT:?}")
        }
        panic!("deliver: POST {url}: {e}")
    });
    let status = response.status().as_u16();
    let text = response
        .text()
        .await
        .unwrap_or_else(|e| panic!("deliver: read the answer from {url}: {e}"));
    (status, text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_matches_slacks_documented_example() {
        // From Slack's "Verifying requests from Slack".
        let body = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
        assert_eq!(
            signature("8f742231b10e8888abcd99yyyzzz85a5", "1531420618", body),
            "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
        );
    }
}
