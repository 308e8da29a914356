//! `POST /api/github/webhook`: what GitHub tells us about sessions' pull requests. The body's
//! HMAC-SHA256 (`X-Hub-Signature-256`) under the webhook secret is checked before anything is
//! read or recorded; each delivery is handled once (GitHub redelivers). Pull request state,
//! reviews and CI checks become session events; a comment mentioning the App by someone who may
//! drive the session becomes a follow-up prompt.

use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;
use tandem_protocol::github::PrState;
use tandem_protocol::live::Role;
use tandem_protocol::{Author, AuthorKind, CreatePrompt, EventKind, PromptMode, SessionId};

use super::GitHub;
use crate::state::AppState;
use crate::{Error, Result, db, now_ms};

/// Largest comment text taken as a prompt.
pub const MAX_COMMENT_PROMPT_CHARS: usize = 16_000;

/// Whether `signature` (`sha256=<hex>`) is the body's HMAC under `secret`, compared in constant
/// time.
pub fn verify(secret: &str, body: &[u8], signature: Option<&str>) -> bool {
    let Some(hex) = signature.and_then(|s| s.strip_prefix("sha256=")) else {
        return false;
    };
    let Some(bytes) = decode_hex(hex) else {
        return false;
    };
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key length");
    mac.update(body);
    mac.verify_slice(&bytes).is_ok()
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    // Hex digits only: `from_str_radix` also takes a sign (`+a` would pass for `0a`).
    if !s.len().is_multiple_of(2) || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// What a delivery did, for the answer (and the tests).
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Recorded,
    Duplicate,
    Ignored(&'static str),
}

/// Checks the signature, then handles one delivery.
pub async fn receive(
    app: &AppState,
    gh: &GitHub,
    event: &str,
    delivery: &str,
    signature: Option<&str>,
    body: &[u8],
) -> Result<Outcome> {
    let secret = gh
        .secret(&gh.config.webhook_secret, "webhook secret")
        .await?;
    if !verify(&secret, body, signature) {
        return Err(Error::Unauthorized(
            "the webhook's X-Hub-Signature-256 does not match its body".into(),
        ));
    }
    let payload: Value = serde_json::from_slice(body)
        .map_err(|e| Error::BadRequest(format!("the webhook body is not JSON: {e}")))?;
    if delivery.is_empty() || delivery.len() > 100 {
        return Err(Error::BadRequest("X-GitHub-Delivery is missing".into()));
    }
    if super::issues::is_about_an_issue(event, &payload) {
        if !db::github::first_delivery(&app.db, delivery, event, now_ms()).await?
            || !first_signed(app, event, body).await?
        {
            return Ok(Outcome::Duplicate);
        }
        return super::issues::received(app, gh, event, &payload).await;
    }
    let Some((session, number)) = session_of(app, event, &payload).await? else {
        return Ok(Outcome::Ignored(
            "not about a Tandem session's pull request",
        ));
    };
    if !db::github::first_delivery(&app.db, delivery, event, now_ms()).await? {
        return Ok(Outcome::Duplicate);
    }
    // The delivery id is not signed: a captured delivery replayed under a new id is the same
    // signed body, handled once.
    if !first_signed(app, event, body).await? {
        return Ok(Outcome::Duplicate);
    }
    let action = payload["action"].as_str().unwrap_or_default();
    let sender = payload["sender"]["login"].as_str().map(str::to_string);
    let kind = match event {
        "pull_request" => {
            let pr = &payload["pull_request"];
            let state = match (action, pr["merged"].as_bool().unwrap_or(false)) {
                ("closed", true) => PrState::Merged,
                ("closed", false) => PrState::Closed,
                ("reopened" | "opened", _) => PrState::Open,
                _ => return Ok(Outcome::Ignored("pull request action not tracked")),
            };
            if !db::github::set_pull_request_state(&app.db, session, state, now_ms()).await? {
                return Ok(Outcome::Ignored("state unchanged"));
            }
            EventKind::PrState {
                number,
                state,
                by: sender,
            }
        }
        "pull_request_review" if action == "submitted" => {
            let review = &payload["review"];
            EventKind::PrReview {
                number,
                reviewer: review["user"]["login"]
                    .as_str()
                    .unwrap_or("someone")
                    .to_string(),
                state: review["state"]
                    .as_str()
                    .unwrap_or("commented")
                    .to_lowercase(),
                body: review["body"]
                    .as_str()
                    .filter(|b| !b.is_empty())
                    .map(|b| b.chars().take(2000).collect()),
            }
        }
        "check_run" => {
            let run = &payload["check_run"];
            EventKind::PrCheck {
                number,
                name: run["name"].as_str().unwrap_or("check").to_string(),
                status: run["status"].as_str().unwrap_or("completed").to_string(),
                conclusion: run["conclusion"].as_str().map(str::to_string),
            }
        }
        "status" => EventKind::PrCheck {
            number,
            name: payload["context"].as_str().unwrap_or("status").to_string(),
            status: "completed".into(),
            conclusion: payload["state"].as_str().map(str::to_string),
        },
        "issue_comment" if action == "created" => {
            return comment(app, gh, session, number, &payload).await;
        }
        _ => return Ok(Outcome::Ignored("event not tracked")),
    };
    let failed = match &kind {
        EventKind::PrCheck {
            name,
            status,
            conclusion: Some(c),
            ..
        } if status == "completed" && matches!(c.as_str(), "failure" | "timed_out" | "error") => {
            Some((name.clone(), c.clone()))
        }
        _ => None,
    };
    crate::sessions::workspace::event(&app.db, session, kind).await?;
    // A failing check may send the session a follow-up (a CI-failure automation).
    if let Some((check, conclusion)) = failed
        && let Err(e) = crate::automations::ci_failed(app, session, &check, &conclusion).await
    {
        tracing::warn!(session = %session, error = %e, "a CI-failure automation did not run");
    }
    Ok(Outcome::Recorded)
}

/// Records the signed body as handled; false when it was before. Neither the delivery id nor
/// the event header is signed: a captured delivery replayed under a new id, or under another
/// event's name (a check read as a commit status), is the same signed body, handled once.
async fn first_signed(app: &AppState, event: &str, body: &[u8]) -> Result<bool> {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    h.update(body);
    let signed: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    Ok(db::github::first_delivery(&app.db, &format!("sha256-{signed}"), event, now_ms()).await?)
}

/// The session and pull request number a payload is about, if any.
async fn session_of(app: &AppState, event: &str, p: &Value) -> Result<Option<(SessionId, i64)>> {
    let (Some(owner), Some(name)) = (
        p["repository"]["owner"]["login"].as_str(),
        p["repository"]["name"].as_str(),
    ) else {
        return Ok(None);
    };
    let Some(linked) = db::github::linked_repo_by_name(&app.db, owner, name).await? else {
        return Ok(None);
    };
    let repo = linked
        .repo_id
        .parse()
        .map_err(|_| Error::Internal("stored repo id".into()))?;
    let number = match event {
        "pull_request" | "pull_request_review" => p["pull_request"]["number"].as_i64(),
        "issue_comment" if p["issue"].get("pull_request").is_some() => {
            p["issue"]["number"].as_i64()
        }
        "check_run" => p["check_run"]["pull_requests"]
            .get(0)
            .and_then(|x| x["number"].as_i64()),
        _ => None,
    };
    if let Some(n) = number {
        return Ok(db::github::pull_request_by_number(&app.db, repo, n)
            .await?
            .map(|pr| (pr.session_id, pr.number)));
    }
    // A check or status without a pull request reference: by the commit it ran on.
    let sha = p["check_run"]["head_sha"]
        .as_str()
        .or_else(|| p["sha"].as_str());
    let Some(sha) = sha else { return Ok(None) };
    Ok(db::github::pull_requests_by_head(&app.db, repo, sha)
        .await?
        .into_iter()
        .next()
        .map(|pr| (pr.session_id, pr.number)))
}

/// A comment on the pull request: a follow-up prompt when it mentions the App and its author
/// (a Tandem user through "Sign in with GitHub") may drive the session.
async fn comment(
    app: &AppState,
    gh: &GitHub,
    session: SessionId,
    number: i64,
    p: &Value,
) -> Result<Outcome> {
    let body = p["comment"]["body"].as_str().unwrap_or_default();
    let login = p["comment"]["user"]["login"]
        .as_str()
        .unwrap_or("someone")
        .to_string();
    let mention = format!("@{}", gh.config.app_slug.to_lowercase());
    if !mentions(body, &mention) || login.ends_with("[bot]") {
        return Ok(Outcome::Ignored("comment does not mention the App"));
    }
    // The same comment delivered again under another delivery id is still one prompt.
    let comment_id = p["comment"]["id"].as_i64().unwrap_or_default();
    if !db::github::first_delivery(
        &app.db,
        &format!("comment-{comment_id}"),
        "issue_comment",
        now_ms(),
    )
    .await?
    {
        return Ok(Outcome::Duplicate);
    }
    let ignored = |why: &str| EventKind::PrComment {
        number,
        author: login.clone(),
        prompt_id: None,
        ignored: Some(why.to_string()),
    };
    let github_id = p["comment"]["user"]["id"].as_i64().unwrap_or_default();
    let Some(account) = db::github::account_by_github_id(&app.db, github_id).await? else {
        let kind = ignored("the commenter has not signed in to Tandem with GitHub");
        crate::sessions::workspace::event(&app.db, session, kind).await?;
        return Ok(Outcome::Recorded);
    };
    let user_id = account
        .user_id
        .parse()
        .map_err(|_| Error::Internal("stored user id".into()))?;
    let Some(user) = crate::commands::active_person(&app.db, user_id).await? else {
        let kind = ignored("the commenter's Tandem account is deactivated");
        crate::sessions::workspace::event(&app.db, session, kind).await?;
        return Ok(Outcome::Recorded);
    };
    if crate::permissions::require(app, session, &user, Role::Driver)
        .await
        .is_err()
    {
        let kind = ignored("the commenter may not drive this session");
        crate::sessions::workspace::event(&app.db, session, kind).await?;
        return Ok(Outcome::Recorded);
    }
    let text = strip_mention(body, &mention);
    if text.is_empty() {
        crate::sessions::workspace::event(
            &app.db,
            session,
            ignored("the comment says nothing besides the mention"),
        )
        .await?;
        return Ok(Outcome::Recorded);
    }
    let author = Author {
        kind: AuthorKind::User,
        user_id: Some(user.id),
        name: user.name.clone(),
    };
    let req = CreatePrompt {
        text: text.chars().take(MAX_COMMENT_PROMPT_CHARS).collect(),
        mode: PromptMode::Queue,
        agent: None,
        context: None,
    };
    let prompt = crate::commands::submit_prompt(app, session, author, req).await?;
    crate::sessions::workspace::event(
        &app.db,
        session,
        EventKind::PrComment {
            number,
            author: login,
            prompt_id: Some(prompt.id),
            ignored: None,
        },
    )
    .await?;
    Ok(Outcome::Recorded)
}

/// Whether `body` mentions `mention` (`@slug`) as a whole handle, not inside a longer one or an
/// email address.
pub(super) fn mentions(body: &str, mention: &str) -> bool {
    let lower = body.to_lowercase();
    let handle = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '@');
    lower.match_indices(mention).any(|(i, _)| {
        let before = lower[..i].chars().next_back();
        let after = lower[i + mention.len()..].chars().next();
        !before.is_some_and(handle)
            && !after.is_some_and(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
    })
}

/// The comment without the App's mention (case-insensitive), trimmed.
pub(super) fn strip_mention(body: &str, mention: &str) -> String {
    let lower = body.to_lowercase();
    // Offsets in `lower` are offsets in `body` only if every character kept its UTF-8 length
    // (equal total lengths are not enough: `ẞ` shrinks and `İ` grows).
    let same_offsets = body
        .chars()
        .all(|c| c.to_lowercase().map(char::len_utf8).sum::<usize>() == c.len_utf8());
    if !same_offsets {
        // Lowercasing changed byte offsets (some non-ASCII letters): drop the exact mention only.
        return body
            .replace(mention, "")
            .trim()
            .trim_start_matches([',', ':'])
            .trim()
            .to_string();
    }
    let mut out = String::new();
    let mut i = 0;
    while let Some(at) = lower[i..].find(mention) {
        out.push_str(&body[i..i + at]);
        i += at + mention.len();
    }
    out.push_str(&body[i..]);
    out.trim().trim_start_matches([',', ':']).trim().to_string()
}

#[cfg(test)]
mod fuzz_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_are_checked() {
        let mut mac = Hmac::<Sha256>::new_from_slice(b"s3cret").unwrap();
        mac.update(b"{}");
        let good: String = mac
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert!(verify("s3cret", b"{}", Some(&format!("sha256={good}"))));
        assert!(
            !verify("s3cret", b"{ }", Some(&format!("sha256={good}"))),
            "another body"
        );
        assert!(
            !verify("other", b"{}", Some(&format!("sha256={good}"))),
            "another secret"
        );
        assert!(!verify("s3cret", b"{}", None));
        assert!(!verify("s3cret", b"{}", Some("sha256=zz")));
    }

    #[test]
    fn only_whole_mentions_count() {
        assert!(mentions("@Tandem-Test please", "@tandem-test"));
        assert!(mentions("hey, @tandem-test: go", "@tandem-test"));
        assert!(!mentions("@tandem-test-bot please", "@tandem-test"));
        assert!(!mentions("mail x@tandem-test.io", "@tandem-test"));
        assert!(!mentions("nothing here", "@tandem-test"));
    }

    #[test]
    fn mentions_are_stripped() {
        assert_eq!(
            strip_mention("@Tandem-Test: please add a test", "@tandem-test"),
            "please add a test"
        );
        assert_eq!(
            strip_mention("hey @tandem-test fix it", "@tandem-test"),
            "hey  fix it"
        );
    }
}
