//! Fuzzes webhook deliveries (`POST /api/github/webhook` is open to the internet, so anyone may
//! send any headers and body): the `X-Hub-Signature-256` check must never panic and must reject
//! everything but the body's own HMAC; the body, once signed, is parsed as `receive` reads it
//! (JSON, then the fields it looks at, then a comment's mention of the App), from arbitrary bytes
//! and from mutated payloads of the shapes GitHub sends (`tests/fake-github/src/shapes.rs`).

use hmac::{Hmac, Mac};
use proptest::collection::vec;
use proptest::prelude::*;
use serde_json::{Value, json};
use sha2::Sha256;

use super::{MAX_COMMENT_PROMPT_CHARS, decode_hex, mentions, strip_mention, verify};
use crate::fuzz_support::{config, json as any_json, mutate, mutations};

/// The body's HMAC under `secret`, in lowercase hex (as GitHub sends it).
fn mac_hex(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(body);
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Whether `header` is the body's signature: `sha256=` and the HMAC in hex (either case).
fn is_the_signature(secret: &str, body: &[u8], header: &str) -> bool {
    header
        .strip_prefix("sha256=")
        .is_some_and(|h| h.to_ascii_lowercase() == mac_hex(secret, body))
}

/// Field names and values of the events `receive` handles.
const WORDS: &[&str] = &[
    "action",
    "sender",
    "login",
    "repository",
    "owner",
    "name",
    "pull_request",
    "number",
    "merged",
    "closed",
    "opened",
    "reopened",
    "submitted",
    "created",
    "review",
    "user",
    "state",
    "body",
    "check_run",
    "status",
    "conclusion",
    "pull_requests",
    "head_sha",
    "sha",
    "context",
    "issue",
    "comment",
    "id",
    "@tandem-test",
];

const EVENTS: &[&str] = &[
    "pull_request",
    "pull_request_review",
    "check_run",
    "status",
    "issue_comment",
    "ping",
    "",
];

const SLUG: &str = "tandem-test";

/// Text with what makes mention handling hard: the mention in any case, handle characters
/// around it, and letters whose lowercase has another length in UTF-8 (`İ` grows, `K` (Kelvin),
/// `Ω` (Ohm) and `ẞ` shrink).
fn comment_text() -> impl Strategy<Value = String> {
    vec(
        prop_oneof![
            3 => "[a-z ,:.@_-]{0,4}",
            2 => proptest::sample::select(vec![
                "@tandem-test", "@Tandem-Test", "@TANDEM-TEST", "@tandem-test-bot", "x@tandem-test",
            ])
            .prop_map(str::to_string),
            2 => proptest::sample::select(vec!["İ", "K", "Ω", "ẞ", "Ⱥ", "Σ", "é", "ß", "\u{307}"])
                .prop_map(str::to_string),
            1 => any::<String>(),
        ],
        0..8,
    )
    .prop_map(|parts| parts.concat())
}

/// A payload shaped like one GitHub sends for `event` (the fields `receive` reads, and some
/// it does not).
fn payload() -> impl Strategy<Value = (&'static str, Value)> {
    let login = prop_oneof!["[a-z0-9-]{1,12}", "[a-z]{1,8}\\[bot\\]", any::<String>()];
    let repository = (login.clone(), "[a-z0-9._-]{1,12}").prop_map(|(owner, name)| {
        json!({
            "id": 1, "name": name, "full_name": format!("{owner}/{name}"), "private": false,
            "owner": { "login": owner, "id": 7, "type": "User" },
        })
    });
    let sender = (login.clone(), any::<i64>()).prop_map(|(l, id)| json!({ "login": l, "id": id }));
    let number = prop_oneof![
        any::<i64>().prop_map(Value::from),
        Just(json!("1")),
        Just(Value::Null)
    ];
    let action = proptest::sample::select(vec![
        "opened",
        "closed",
        "reopened",
        "submitted",
        "created",
        "edited",
        "synchronize",
    ]);
    (
        proptest::sample::select(EVENTS),
        action,
        repository,
        sender,
        number,
        any::<bool>(),
        comment_text(),
        login,
        any::<i64>(),
        "[0-9a-f]{40}",
    )
        .prop_map(
            |(event, action, repository, sender, number, flag, text, login, id, sha)| {
                let body = match event {
                    "pull_request" => json!({
                        "action": action, "number": number, "repository": repository, "sender": sender,
                        "pull_request": { "number": number, "merged": flag, "state": "open",
                            "head": { "sha": sha }, "title": text },
                    }),
                    "pull_request_review" => json!({
                        "action": action, "repository": repository, "sender": sender,
                        "pull_request": { "number": number },
                        "review": { "user": { "login": login }, "state": if flag { "APPROVED" } else { "changes_requested" },
                            "body": text },
                    }),
                    "check_run" => json!({
                        "action": action, "repository": repository, "sender": sender,
                        "check_run": { "name": text, "status": "completed", "conclusion": if flag { json!("success") } else { Value::Null },
                            "head_sha": sha, "pull_requests": if flag { json!([{ "number": number }]) } else { json!([]) } },
                    }),
                    "status" => json!({
                        "sha": sha, "context": text, "state": "failure", "repository": repository, "sender": sender,
                    }),
                    _ => json!({
                        "action": action, "repository": repository, "sender": sender,
                        "issue": if flag { json!({ "number": number, "pull_request": { "url": "u" } }) } else { json!({ "number": number }) },
                        "comment": { "id": id, "body": text, "user": { "login": login, "id": id } },
                    }),
                };
                (event, body)
            },
        )
}

/// What `receive` reads of a signed body: JSON or `Err`; then (whatever its shape) the fields
/// it looks at and, for a comment, the mention and the prompt text.
fn check_signed(secret: &str, event: &str, body: &[u8]) {
    let sig = format!("sha256={}", mac_hex(secret, body));
    assert!(verify(secret, body, Some(&sig)));
    let Ok(p) = serde_json::from_slice::<Value>(body) else {
        return;
    };
    let _ = (
        p["action"].as_str(),
        p["sender"]["login"].as_str(),
        p["repository"]["owner"]["login"].as_str(),
        p["repository"]["name"].as_str(),
        p["pull_request"]["number"].as_i64(),
        p["pull_request"]["merged"].as_bool(),
        p["issue"].get("pull_request").is_some(),
        p["issue"]["number"].as_i64(),
        p["check_run"]["pull_requests"]
            .get(0)
            .and_then(|x| x["number"].as_i64()),
        p["check_run"]["head_sha"].as_str(),
        p["sha"].as_str(),
        p["comment"]["id"].as_i64(),
        p["comment"]["user"]["id"].as_i64(),
    );
    if event == "pull_request_review"
        && let Some(b) = p["review"]["body"].as_str()
    {
        assert!(b.chars().take(2000).count() <= 2000);
        let _ = p["review"]["state"].as_str().map(str::to_lowercase);
    }
    let text = p["comment"]["body"].as_str().unwrap_or_default();
    check_comment(text, &format!("@{SLUG}"));
}

/// The mention and the prompt taken from a comment: no panic, never longer than the comment,
/// a comment without the mention comes back as it was (trimmed).
fn check_comment(body: &str, mention: &str) {
    let said = mentions(body, mention);
    let stripped = strip_mention(body, mention);
    if said {
        assert!(body.to_lowercase().contains(mention));
    }
    assert!(
        stripped.len() <= body.len(),
        "{body:?} grew to {stripped:?}"
    );
    if !body.to_lowercase().contains(mention) && !body.contains(mention) {
        assert_eq!(stripped, body.trim().trim_start_matches([',', ':']).trim());
    }
    let prompt: String = stripped.chars().take(MAX_COMMENT_PROMPT_CHARS).collect();
    assert!(prompt.chars().count() <= MAX_COMMENT_PROMPT_CHARS);
}

/// A signature header: near misses of the right one, and anything.
fn header(good: String) -> impl Strategy<Value = String> {
    let hex = good.strip_prefix("sha256=").unwrap().to_string();
    let n = hex.len();
    prop_oneof![
        Just(good.clone()),
        Just(good.to_uppercase()),
        Just(format!("sha256={}", hex.to_uppercase())),
        Just(hex.clone()),
        Just(format!("sha1={hex}")),
        Just(format!("sha256={hex}\n")),
        Just(format!("sha256= {hex}")),
        Just(format!("sha256={}", &hex[..n - 2])),
        Just(format!("sha256={hex}00")),
        // One character changed, among them to a sign or a non-ASCII letter.
        (
            0..n,
            proptest::sample::select(vec!['+', '-', ' ', 'g', 'A', '0', 'f', 'é', 'İ'])
        )
            .prop_map(move |(i, c)| {
                let mut h: Vec<char> = hex.chars().collect();
                h[i] = c;
                format!("sha256={}", h.into_iter().collect::<String>())
            }),
        any::<String>().prop_map(|s| format!("sha256={s}")),
        any::<String>(),
    ]
}

proptest! {
    #![proptest_config(config(2000))]

    #[test]
    fn signatures_are_accepted_only_when_they_are_the_bodys(
        (secret, body, header) in (any::<String>(), vec(any::<u8>(), 0..128))
            .prop_flat_map(|(secret, body)| {
                let good = format!("sha256={}", mac_hex(&secret, &body));
                (Just(secret), Just(body), header(good))
            }),
        tamper in proptest::option::of(mutations()),
    ) {
        // The header against its body, or against another body.
        let body = match &tamper {
            Some(m) => mutate(&body, m),
            None => body,
        };
        let ok = verify(&secret, &body, Some(&header));
        prop_assert_eq!(ok, is_the_signature(&secret, &body, &header), "header {:?}", header);
        prop_assert!(!verify(&secret, &body, None));
    }

    #[test]
    fn hex_decodes_only_hex(s in "[0-9a-fA-F+\\- xé]{0,10}") {
        match decode_hex(&s) {
            Some(bytes) => {
                let again: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
                prop_assert_eq!(again, s.to_ascii_lowercase());
            }
            None => prop_assert!(s.len() % 2 == 1 || !s.bytes().all(|b| b.is_ascii_hexdigit())),
        }
    }

    #[test]
    fn signed_bodies_of_any_bytes_are_handled(event in proptest::sample::select(EVENTS), body in vec(any::<u8>(), 0..256)) {
        check_signed("s3cret", event, &body);
    }

    #[test]
    fn signed_random_json_is_handled(event in proptest::sample::select(EVENTS), v in any_json(WORDS)) {
        check_signed("s3cret", event, &serde_json::to_vec(&v).unwrap());
    }

    #[test]
    fn signed_payloads_are_handled((event, p) in payload()) {
        check_signed("s3cret", event, &serde_json::to_vec(&p).unwrap());
    }

    #[test]
    fn mutated_signed_payloads_are_handled((event, p) in payload(), muts in mutations()) {
        let body = mutate(&serde_json::to_vec(&p).unwrap(), &muts);
        check_signed("s3cret", event, &body);
        // Mutated after signing: refused.
        let sig = format!("sha256={}", mac_hex("s3cret", &serde_json::to_vec(&p).unwrap()));
        prop_assert_eq!(verify("s3cret", &body, Some(&sig)), body == serde_json::to_vec(&p).unwrap());
    }

    #[test]
    fn comment_mentions_never_panic(body in comment_text(), slug in prop_oneof![Just(SLUG.to_string()), "[a-z-]{1,6}"]) {
        check_comment(&body, &format!("@{}", slug.to_lowercase()));
    }
}

#[test]
fn deeply_nested_bodies_are_refused_without_exhausting_the_stack() {
    // An axum `Bytes` body may be 2 MiB of brackets.
    let depth = 1 << 20;
    let body = crate::fuzz_support::nested(depth);
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            check_signed("s3cret", "issue_comment", body.as_bytes());
            assert!(serde_json::from_str::<Value>(&body).is_err());
        })
        .unwrap()
        .join()
        .unwrap();
}

// Found by the fuzz tests above.

#[test]
fn a_signature_with_a_sign_for_a_zero_is_refused() {
    // `u8::from_str_radix("+a", 16)` is 10: `+a` passed for `0a` in the signature.
    assert_eq!(decode_hex("+a"), None);
    assert_eq!(decode_hex("-0"), None);
    let (secret, body, hex) = (0..)
        .map(|n| {
            let body = format!("{{\"n\":{n}}}");
            let hex = mac_hex("s3cret", body.as_bytes());
            ("s3cret", body, hex)
        })
        .find(|(_, _, hex)| hex.starts_with('0'))
        .unwrap();
    assert!(verify(
        secret,
        body.as_bytes(),
        Some(&format!("sha256={hex}"))
    ));
    let signed = format!("sha256=+{}", &hex[1..]);
    assert!(!verify(secret, body.as_bytes(), Some(&signed)), "{signed}");
}

#[test]
fn a_comment_whose_lowercase_keeps_its_length_but_not_its_offsets_does_not_panic() {
    // `ẞ` (3 bytes) lowercases to `ß` (2), `İ` (2) to `i̇` (3): same total length, other
    // offsets; slicing the comment at offsets of its lowercase panicked mid-character.
    for body in ["ẞ@tandem-testİ", "İ@tandem-testΩ", "@tandem-test ẞ hi İ"] {
        check_comment(body, "@tandem-test");
    }
    assert_eq!(strip_mention("ẞ@tandem-testİ", "@tandem-test"), "ẞİ");
    let p = json!({
        "action": "created",
        "issue": { "number": 1, "pull_request": {} },
        "comment": { "id": 1, "body": "ẞ@tandem-testİ", "user": { "login": "a", "id": 1 } },
    });
    check_signed("s3cret", "issue_comment", &serde_json::to_vec(&p).unwrap());
}
