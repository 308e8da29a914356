//! The Slack app against a stand-in for Slack that speaks its wire protocol (signed deliveries
//! in, Web API calls out): a whole conversation on a real workspace — mention, session, status
//! kept up to date, the reply, follow-ups, the pull request, Stop — and the deliveries refused
//! (forged, stale, replayed), account linking, the repo menu and channel defaults, on both
//! databases.

use axum::http::{Method, StatusCode};
use fake_slack::{BOT_USER_ID, FakeSlack, Message};
use scripted_model::Reply;
use serde_json::json;
use tandem_protocol::github::PullRequest;
use tandem_protocol::*;

use crate::harness::{Backend, TestServer, Transport, make_repo};
use crate::people::invite;

const SIGNING_SECRET: &str = "slack-signing-test-8d0c";
const BOT_TOKEN: &str = "xoxb-tandem-test-5521";
const CHANNEL: &str = "C0WEB";

fn slack_config(fake: &FakeSlack) -> tandem_server::config::SlackConfig {
    tandem_server::config::SlackConfig {
        api_url: fake.api_url(),
        files_url: fake.url(),
        signing_secret: "slack_signing_secret".into(),
        bot_token: "slack_bot_token".into(),
        allowed_teams: Vec::new(),
    }
}

async fn store_secrets(s: &TestServer) {
    for (name, value) in [
        ("slack_signing_secret", SIGNING_SECRET),
        ("slack_bot_token", BOT_TOKEN),
    ] {
        let res = s
            .req(Method::PUT, &format!("/api/secrets/{name}"))
            .bearer(&s.admin_token)
            .json(&json!({ "value": value }))
            .send()
            .await;
        assert_eq!(res.status, StatusCode::NO_CONTENT);
    }
}

fn mention(text: &str) -> String {
    format!("<@{BOT_USER_ID}> {text}")
}

/// The bot's messages in thread `ts` (not the ephemeral ones), oldest first.
fn in_thread(f: &FakeSlack, ts: &str) -> Vec<Message> {
    f.messages()
        .into_iter()
        .filter(|m| m.bot && m.ephemeral_to.is_none() && m.thread_ts.as_deref() == Some(ts))
        .collect()
}

/// The newest message only `user` sees that contains `text`.
async fn told(f: &FakeSlack, user: &str, text: &str) -> Message {
    f.wait_for(&format!("{user} to be told {text:?}"), |f| {
        f.messages()
            .into_iter()
            .rev()
            .find(|m| m.ephemeral_to.as_deref() == Some(user) && m.text.contains(text))
    })
    .await
}

/// Links a Slack account as a browser does, as the person whose token `token` is: the one-time
/// link's page (its form's state, and the cookie binding it to this browser), then its form.
async fn link_as(s: &TestServer, path: &str, token: &str) -> crate::harness::Res {
    let page = s.req(Method::GET, path).bearer(token).send().await;
    assert_eq!(page.status, StatusCode::OK);
    let html = String::from_utf8_lossy(&page.body).to_string();
    let state = html
        .split("name=\"state\" value=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("the form's state");
    let binding = page
        .headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("tandem_flow="))
        .and_then(|v| v.split(';').next())
        .expect("the binding cookie")
        .to_string();
    s.req(Method::POST, "/api/slack/link")
        .bearer(token)
        .header("cookie", &binding)
        .raw_body(
            "application/x-www-form-urlencoded",
            format!("state={state}").into_bytes(),
        )
        .send()
        .await
}

fn has_button(m: &Message, action: &str) -> bool {
    m.blocks.to_string().contains(&format!("\"{action}\""))
}

async fn sessions(s: &TestServer) -> Vec<Session> {
    s.get("/api/sessions").send().await.parse()
}

#[tokio::test]
async fn a_slack_thread_is_a_sessions_conversation_on_sqlite() {
    conversation(Backend::Sqlite).await;
}

#[tokio::test]
async fn a_slack_thread_is_a_sessions_conversation_on_postgres() {
    conversation(Backend::Postgres).await;
}

/// Mention → session → status edited as it works → reply → follow-up and steer → the pull
/// request → Stop (refused to a watcher, done by the owner).
async fn conversation(backend: Backend) {
    let script = vec![
        Reply::tool(
            "edit_file",
            json!({ "path": "calc.sh", "old_text": "2 - 2", "new_text": "2 + 2" }),
        )
        .for_prompt("fix the sum")
        .at_step(0),
        Reply::text("Fixed it <!channel>, see <https://evil.example|the docs> & <@U0BOSS>")
            .for_prompt("fix the sum")
            .at_step(1),
        Reply::text("Added notes.")
            .for_last_prompt("also add notes")
            .at_step(2),
    ];
    let fake = FakeSlack::start(SIGNING_SECRET, BOT_TOKEN).await;
    let config = slack_config(&fake);
    let Some(w) = crate::github::world_on(backend, script, move |c| c.slack = Some(config)).await
    else {
        return;
    };
    w.model.fallback(Reply::text("Nothing else to do."));
    store_secrets(&w.s).await;
    let repo = crate::github::import(&w).await;
    // Every person may work on it (not only those GitHub says may).
    let res =
        w.s.req(Method::PUT, &format!("/api/repos/{repo}/access"))
            .bearer(&w.s.admin_token)
            .json(&json!({ "access": "everyone", "grants": [] }))
            .send()
            .await;
    assert_eq!(
        res.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&res.body)
    );
    let alice = invite(&w.s, "alice", false).await;
    let bob = invite(&w.s, "bob", false).await;
    fake.add_user("U1ALICE", "alice", Some("alice@acme.test"));
    fake.add_user("U2BOB", "bob", None);
    fake.add_channel(CHANNEL, "web");
    let events = format!("{}/api/slack/events", w.s.url);
    let clicks = format!("{}/api/slack/interactivity", w.s.url);

    // Alice mentions the app with a screenshot; Slack sends the message as `app_mention` and
    // as `message`.
    let shot = crate::page_context::png(40, 30);
    let ask = fake.post_with_image(
        "U1ALICE",
        CHANNEL,
        None,
        &mention("fix the sum in calc.sh repo=calc"),
        "wrong total.png",
        "image/png",
        shot.clone(),
    );
    for as_mention in [true, false] {
        let (status, body) = fake
            .send_event(&events, &fake.event_for(CHANNEL, &ask, as_mention))
            .await;
        assert_eq!(status, 200, "{body}");
    }
    let status = fake
        .wait_for("the status message in the thread", |f| {
            in_thread(f, &ask).into_iter().next()
        })
        .await;
    assert!(
        has_button(&status, "tandem_stop") && status.blocks.to_string().contains("View session")
    );
    let list = sessions(&w.s).await;
    assert_eq!(list.len(), 1, "one session for one message");
    let id = list[0].id;
    crate::surfaces::assert_opens_as_rest_does(&w.s, &id.to_string(), &json!(alice.id), 1).await;
    let detail: SessionDetail = w.s.get(&format!("/api/sessions/{id}")).send().await.parse();
    let first = &detail.prompts[0];
    assert_eq!(
        (
            first.author.kind,
            first.author.name.as_str(),
            first.text.as_str()
        ),
        (AuthorKind::Slack, "alice", "fix the sum in calc.sh"),
        "the prompt is Alice's (linked by her Slack email), without the mention or repo="
    );
    assert!(
        status.text.contains("fix the sum in calc.sh"),
        "{}",
        status.text
    );

    // The screenshot went to the model with the prompt, and into the session's timeline.
    let first_request = crate::github::wait_for("the model's first request", async || {
        w.model.requests().into_iter().next()
    })
    .await;
    let images = first_request.images();
    assert_eq!(images.len(), 1, "the message's image goes to the model");
    let data = images[0]
        .strip_prefix("data:image/png;base64,")
        .expect("a PNG data URL");
    assert_eq!(
        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, data).unwrap(),
        shot
    );
    assert!(
        first_request
            .user_messages()
            .join("\n")
            .contains("\"wrong total.png\" (40×30 px): attached."),
        "{:?}",
        first_request.user_messages()
    );
    let evs = crate::session_workspaces::events(&w.s, id).await;
    assert!(
        evs.iter().any(
            |e| matches!(&e.kind, EventKind::Attachment { name, .. } if name == "attached.png")
        )
    );

    // The reply lands in the thread, escaped: it pings no one and dresses up no link.
    let reply = fake
        .wait_for("the agent's reply", |f| {
            in_thread(f, &ask)
                .into_iter()
                .find(|m| m.text.starts_with("Fixed it"))
        })
        .await;
    assert_eq!(
        reply.text,
        "Fixed it &lt;!channel&gt;, see &lt;https://evil.example|the docs&gt; &amp; &lt;@U0BOSS&gt;"
    );
    fake.wait_for("a check on the message that asked, the eyes gone", |f| {
        let r = f.reactions(CHANNEL, &ask);
        (r.contains(&"white_check_mark".to_string()) && !r.contains(&"eyes".to_string()))
            .then_some(())
    })
    .await;
    let calls = fake.calls();
    assert!(
        calls
            .iter()
            .any(|c| c.method == "reactions.add" && c.params["name"] == "eyes"),
        "eyes while it worked"
    );
    let status = fake
        .wait_for("the status to say it waits", |f| {
            f.messages()
                .into_iter()
                .find(|m| m.ts == status.ts && m.text.contains("Waiting for you"))
        })
        .await;
    assert!(
        status.edits >= 2,
        "edited in place as it went: {} edits",
        status.edits
    );
    assert_eq!(
        in_thread(&fake, &ask)
            .iter()
            .filter(|m| m.has_stop())
            .count(),
        1,
        "one status message"
    );

    // Made private, the session's thread gets its state and a link from now on, never the
    // agent's words: a Slack channel is not the session's access list.
    let res =
        w.s.req(Method::PUT, &format!("/api/sessions/{id}/visibility"))
            .bearer(&w.s.admin_token)
            .json(&json!({ "private": true }))
            .send()
            .await;
    assert_eq!(
        res.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&res.body)
    );

    // A later message in the thread, no mention needed, is a follow-up; `steer:` steers.
    // A photo that is not a PNG is not given to the agent, and its sender is told.
    let more = fake.post_with_image(
        "U1ALICE",
        CHANNEL,
        Some(&ask),
        "also add notes",
        "photo.jpg",
        "image/jpeg",
        vec![0xff, 0xd8, 0xff, 0xe0],
    );
    assert_eq!(
        fake.send_event(&events, &fake.event_for(CHANNEL, &more, false))
            .await
            .0,
        200
    );
    let link = fake
        .wait_for("the follow-up's reply, as a link", |f| {
            in_thread(f, &ask)
                .into_iter()
                .find(|m| m.text.starts_with(":speech_balloon: The agent replied."))
        })
        .await;
    assert!(
        link.text.contains(&format!("/sessions/{id}")),
        "{}",
        link.text
    );
    assert!(
        !in_thread(&fake, &ask)
            .iter()
            .any(|m| m.text.contains("Added notes.")),
        "a private session's reply reached the Slack thread"
    );
    told(
        &fake,
        "U1ALICE",
        "photo.jpg (only PNG images are given to the agent)",
    )
    .await;
    let steer = fake.post_as("U1ALICE", CHANNEL, Some(&ask), "steer: keep it short");
    assert_eq!(
        fake.send_event(&events, &fake.event_for(CHANNEL, &steer, false))
            .await
            .0,
        200
    );
    let detail = crate::github::wait_for("the steering prompt", async || {
        let d: SessionDetail = w.s.get(&format!("/api/sessions/{id}")).send().await.parse();
        d.prompts
            .iter()
            .any(|p| p.text == "keep it short")
            .then_some(d)
    })
    .await;
    let modes: Vec<(PromptMode, &str)> = detail
        .prompts
        .iter()
        .map(|p| (p.mode, p.text.as_str()))
        .collect();
    assert!(
        modes.contains(&(PromptMode::Queue, "also add notes")),
        "{modes:?}"
    );
    assert!(
        modes.contains(&(PromptMode::Steer, "keep it short")),
        "{modes:?}"
    );
    assert_eq!(sessions(&w.s).await.len(), 1, "follow-ups start no session");
    // Recorded as Alice's REST follow-up and steer are: one command submits for every surface.
    for (text, mode) in [
        ("also add notes, by REST", "queue"),
        ("keep it short, by REST", "steer"),
    ] {
        let res =
            w.s.req(Method::POST, &format!("/api/sessions/{id}/prompts"))
                .bearer(&alice.token)
                .json(&json!({ "text": text, "mode": mode }))
                .send()
                .await;
        assert_eq!(
            res.status,
            StatusCode::CREATED,
            "{}",
            String::from_utf8_lossy(&res.body)
        );
    }
    let session = id.to_string();
    for (slack, rest) in [
        ("also add notes", "also add notes, by REST"),
        ("keep it short", "keep it short, by REST"),
    ] {
        let said =
            crate::surfaces::assert_submits_as_rest_does(&w.s, &session, slack, rest, "slack")
                .await;
        assert_eq!(said.person, json!(alice.id), "{said:?}");
    }

    // Bob has no Slack email. Talking in the thread he is not heard (nor answered); when he
    // mentions the app he gets a one-time link, and nothing is prompted.
    let chat = fake.post_as("U2BOB", CHANNEL, Some(&ask), "nice work");
    fake.send_event(&events, &fake.event_for(CHANNEL, &chat, false))
        .await;
    let bobs = fake.post_as("U2BOB", CHANNEL, Some(&ask), &mention("delete the tests"));
    fake.send_event(&events, &fake.event_for(CHANNEL, &bobs, false))
        .await;
    let link = told(&fake, "U2BOB", "one-time link").await;
    let url = link
        .text
        .split('<')
        .nth(1)
        .unwrap()
        .split('|')
        .next()
        .unwrap()
        .to_string();
    let path = url
        .strip_prefix(&w.s.url)
        .expect("the link is to this server")
        .to_string();
    let page = w.s.req(Method::GET, &path).bearer(&bob.token).send().await;
    assert_eq!(page.status, StatusCode::OK);
    let html = String::from_utf8_lossy(&page.body).to_string();
    assert!(
        html.contains("<b id=\"slack-handle\">@bob</b>") && html.contains("U2BOB"),
        "the page says which Slack account it links: {html}"
    );
    assert_eq!(
        fake.messages()
            .iter()
            .filter(|m| m.ephemeral_to.as_deref() == Some("U2BOB"))
            .count(),
        1,
        "talk in the thread was not answered"
    );
    // Opened from Slack (no cookie rides along), the page loads itself once, then says to sign in.
    let bare = w.s.req(Method::GET, &path).send().await;
    assert!(String::from_utf8_lossy(&bare.body).contains("again=1"));
    let bare =
        w.s.req(Method::GET, &format!("{path}&again=1"))
            .send()
            .await;
    assert_eq!(bare.status, StatusCode::UNAUTHORIZED);
    let linked = link_as(&w.s, &path, &bob.token).await;
    assert_eq!(
        linked.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&linked.body)
    );
    let again =
        w.s.req(Method::GET, &path)
            .bearer(&alice.token)
            .send()
            .await;
    assert_eq!(again.status, StatusCode::NOT_FOUND, "a link works once");
    // Linked now, Bob (no right to drive Alice's session) is refused; his words go nowhere.
    let bobs = fake.post_as("U2BOB", CHANNEL, Some(&ask), &mention("delete the tests"));
    fake.send_event(&events, &fake.event_for(CHANNEL, &bobs, false))
        .await;
    told(&fake, "U2BOB", "not prompt it").await;
    let d: SessionDetail = w.s.get(&format!("/api/sessions/{id}")).send().await.parse();
    assert!(
        !d.prompts
            .iter()
            .any(|p| p.text.contains("delete the tests"))
    );

    // The pull request shows up in the thread and in the status.
    crate::session_workspaces::wait_state(&w.s, id, &[SessionState::Idle]).await;
    let res =
        w.s.req(Method::POST, &format!("/api/sessions/{id}/pr"))
            .bearer(&alice.token)
            .json(&json!({ "title": "Fix the sum" }))
            .send()
            .await;
    assert_eq!(
        res.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&res.body)
    );
    let pr: PullRequest = res.parse();
    fake.wait_for("the pull request in the thread", |f| {
        in_thread(f, &ask)
            .into_iter()
            .find(|m| m.text.contains(&format!("|#{}>", pr.number)) && m.text.contains(&pr.url))
    })
    .await;
    fake.wait_for("the pull request in the status", |f| {
        f.messages().into_iter().find(|m| {
            m.ts == status.ts && m.blocks.to_string().contains(&format!("#{}", pr.number))
        })
    })
    .await;

    // Stop: Bob may not; Alice (the owner) may, and the status says so without the button.
    let (code, _) = fake
        .click(&clicks, "U2BOB", CHANNEL, &status.ts, "tandem_stop")
        .await;
    assert_eq!(code, 200);
    told(&fake, "U2BOB", "only the session's owner").await;
    let s: SessionDetail = w.s.get(&format!("/api/sessions/{id}")).send().await.parse();
    assert_ne!(s.session.state, SessionState::Stopped);
    let (code, _) = fake
        .click(&clicks, "U1ALICE", CHANNEL, &status.ts, "tandem_stop")
        .await;
    assert_eq!(code, 200);
    crate::session_workspaces::wait_state(&w.s, id, &[SessionState::Stopped]).await;
    let last = fake
        .wait_for("the status to say stopped", |f| {
            f.messages()
                .into_iter()
                .find(|m| m.ts == status.ts && m.text.contains("Stopped"))
        })
        .await;
    assert!(
        !has_button(&last, "tandem_stop"),
        "no Stop button on a stopped session"
    );
    // A message in the ended session's thread says so.
    let late = fake.post_as("U1ALICE", CHANNEL, Some(&ask), "one more thing");
    fake.send_event(&events, &fake.event_for(CHANNEL, &late, false))
        .await;
    told(&fake, "U1ALICE", "has ended").await;
}

trait StatusMessage {
    fn has_stop(&self) -> bool;
}

impl StatusMessage for Message {
    /// The status message is the one with buttons.
    fn has_stop(&self) -> bool {
        self.blocks.to_string().contains("View session")
    }
}

#[tokio::test]
async fn slack_deliveries_are_signed_fresh_and_handled_once_on_sqlite() {
    deliveries_are_signed_fresh_and_handled_once(Backend::Sqlite).await;
}

#[tokio::test]
async fn slack_deliveries_are_signed_fresh_and_handled_once_on_postgres() {
    deliveries_are_signed_fresh_and_handled_once(Backend::Postgres).await;
}

/// Forged signatures and stale timestamps are refused before anything is read; a replay of a
/// delivery within the window is handled once; an unlinked person gets a one-time link; the
/// repo comes from `repo=`, the channel's default, an admin's keyword rule, or a menu.
async fn deliveries_are_signed_fresh_and_handled_once(backend: Backend) {
    let fake = FakeSlack::start(SIGNING_SECRET, BOT_TOKEN).await;
    let config = slack_config(&fake);
    let Some(s) =
        TestServer::start_with(backend, Transport::Socket, move |c| c.slack = Some(config)).await
    else {
        return;
    };
    let events = format!("{}/api/slack/events", s.url);
    let clicks = format!("{}/api/slack/interactivity", s.url);
    let commands = format!("{}/api/slack/commands", s.url);
    fake.add_user("U1ALICE", "alice", Some("alice@acme.test"));
    fake.add_user("U3EVE", "eve", None);
    fake.add_channel(CHANNEL, "web");
    fake.add_channel("C1OPS", "ops");

    // Before the secrets are stored, a delivery is refused saying what to set.
    let ts = fake.post_as("U3EVE", CHANNEL, None, &mention("hello"));
    let (code, body) = fake
        .send_event(&events, &fake.event_for(CHANNEL, &ts, true))
        .await;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("slack_signing_secret"), "{body}");
    store_secrets(&s).await;
    let deps = make_repo(&s, "acme/deps").await;
    let web = make_repo(&s, "acme/web").await;
    invite(&s, "alice", false).await;

    // Forged, unsigned, stale and future deliveries are refused.
    let event = fake.event_for(CHANNEL, &ts, true).to_string();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let forged = FakeSlack::sign("not-the-secret", &now.to_string(), &event);
    let cases = [
        (Some(now.to_string()), Some(forged), "signature"),
        (Some(now.to_string()), None, "not signed"),
        (
            Some((now - 400).to_string()),
            Some(FakeSlack::sign(
                SIGNING_SECRET,
                &(now - 400).to_string(),
                &event,
            )),
            "5 minutes",
        ),
        (
            Some((now + 400).to_string()),
            Some(FakeSlack::sign(
                SIGNING_SECRET,
                &(now + 400).to_string(),
                &event,
            )),
            "5 minutes",
        ),
    ];
    for (stamp, sig, why) in cases {
        for url in [&events, &clicks, &commands] {
            let (code, body) = FakeSlack::deliver_raw(
                url,
                "application/json",
                &event,
                stamp.as_deref(),
                sig.as_deref(),
            )
            .await;
            assert_eq!(code, 401, "{url} {why}: {body}");
            assert!(body.contains(why), "{body}");
        }
    }
    // A body changed after signing is forged too.
    let sig = FakeSlack::sign(SIGNING_SECRET, &now.to_string(), &event);
    let tampered = event.replace("hello", "delete everything");
    let (code, _) = FakeSlack::deliver_raw(
        &events,
        "application/json",
        &tampered,
        Some(&now.to_string()),
        Some(&sig),
    )
    .await;
    assert_eq!(code, 401);
    assert!(
        fake.calls().is_empty(),
        "nothing refused reached Slack's API"
    );

    // The URL check Slack makes when the app is set up.
    let check = fake.url_verification();
    let (code, body) = fake.send_event(&events, &check).await;
    assert_eq!(code, 200);
    assert!(
        body.contains(check["challenge"].as_str().unwrap()),
        "{body}"
    );

    // Eve has no Slack email: she gets a one-time link; the same delivery replayed (signed
    // afresh, within the window) is handled once.
    let envelope = fake.event_for(CHANNEL, &ts, true);
    assert_eq!(fake.send_event(&events, &envelope).await.0, 200);
    told(&fake, "U3EVE", "one-time link").await;
    let (code, body) = fake.send_event(&events, &envelope).await;
    assert_eq!(code, 200);
    assert!(body.contains("duplicate"), "{body}");
    let links = |f: &FakeSlack| {
        f.messages()
            .iter()
            .filter(|m| m.ephemeral_to.as_deref() == Some("U3EVE"))
            .count()
    };
    assert_eq!(links(&fake), 1, "a replay is not handled again");
    // Another Slack workspace (the app installed elsewhere, a shared channel) is not taken.
    let mut elsewhere = fake.event_for(
        CHANNEL,
        &fake.post_as("U1ALICE", CHANNEL, None, &mention("fix it repo=acme/deps")),
        true,
    );
    elsewhere["team_id"] = json!("T0ELSEWHERE");
    let (code, body) = fake.send_event(&events, &elsewhere).await;
    assert_eq!(code, 200);
    assert!(body.contains("not allowed"), "{body}");

    // Alice (linked by email): no repo named, none for the channel, no rule: a menu of hers.
    let ask = fake.post_as("U1ALICE", CHANNEL, None, &mention("bump the lockfile"));
    fake.send_event(&events, &fake.event_for(CHANNEL, &ask, true))
        .await;
    let menu = told(&fake, "U1ALICE", "Which repo").await;
    let blocks = menu.blocks.to_string();
    assert!(
        blocks.contains("acme/deps") && blocks.contains("acme/web"),
        "{blocks}"
    );
    // Eve never sees Alice's menu; a choice in her name, signed as Slack would, does nothing.
    let pending = menu.blocks[0]["block_id"].as_str().unwrap().to_string();
    let payload = json!({
        "type": "block_actions",
        "team": { "id": fake_slack::TEAM_ID, "domain": "acme" },
        "user": { "id": "U3EVE", "username": "eve", "name": "eve", "team_id": fake_slack::TEAM_ID },
        "api_app_id": fake_slack::APP_ID,
        "container": { "type": "message", "message_ts": menu.ts, "channel_id": CHANNEL, "is_ephemeral": true },
        "trigger_id": "1111.2222.eve",
        "channel": { "id": CHANNEL, "name": "web" },
        "actions": [{
            "type": "static_select", "action_id": "tandem_repo", "block_id": pending,
            "selected_option": { "text": { "type": "plain_text", "text": "acme/web" }, "value": web },
            "action_ts": "1.2"
        }]
    });
    let form: String = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("payload", &payload.to_string())
        .finish();
    let (code, _) = fake
        .deliver(&clicks, "application/x-www-form-urlencoded", &form)
        .await;
    assert_eq!(code, 200);
    told(&fake, "U3EVE", "only the person who asked").await;
    assert!(sessions(&s).await.is_empty());
    // Alice's choice starts the session in the thread of her message.
    let (code, _) = fake
        .choose(&clicks, "U1ALICE", CHANNEL, &menu.ts, "tandem_repo", &deps)
        .await;
    assert_eq!(code, 200);
    fake.wait_for("the status message", |f| {
        in_thread(f, &ask).into_iter().next()
    })
    .await;
    let list = sessions(&s).await;
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].repo_id.to_string(), deps);
    // The same choice delivered again starts nothing more.
    fake.choose(&clicks, "U1ALICE", CHANNEL, &menu.ts, "tandem_repo", &deps)
        .await;
    told(&fake, "U1ALICE", "made already").await;
    assert_eq!(sessions(&s).await.len(), 1);

    // Only an admin gives the channel a default, and only in the web app: from Slack nobody
    // acts as an admin. Alice may not; Eve, whose Slack account is linked to the admin's (the
    // one-time link she got), may not either.
    let set = fake.post_as("U1ALICE", CHANNEL, None, &mention("settings repo=acme/web"));
    fake.send_event(&events, &fake.event_for(CHANNEL, &set, true))
        .await;
    told(&fake, "U1ALICE", "from Slack nobody acts as a Tandem admin").await;
    let link = told(&fake, "U3EVE", "one-time link").await;
    let url = link
        .text
        .split('<')
        .nth(1)
        .unwrap()
        .split('|')
        .next()
        .unwrap()
        .to_string();
    let path = url.strip_prefix(&s.url).unwrap().to_string();
    let linked = link_as(&s, &path, &s.admin_token).await;
    assert_eq!(
        linked.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&linked.body)
    );
    // Linked to an admin, Eve still acts as no admin from Slack: the web app sets it.
    let set = fake.post_as("U3EVE", CHANNEL, None, &mention("settings repo=acme/web"));
    fake.send_event(&events, &fake.event_for(CHANNEL, &set, true))
        .await;
    told(&fake, "U3EVE", "in Tandem's web app (Settings").await;
    let res = s
        .req(Method::PUT, &format!("/api/slack/channels/{CHANNEL}"))
        .bearer(&s.admin_token)
        .json(&json!({ "repo_id": web }))
        .send()
        .await;
    assert_eq!(res.status, StatusCode::OK);
    let ask = fake.post_as("U1ALICE", CHANNEL, None, &mention("fix the header"));
    fake.send_event(&events, &fake.event_for(CHANNEL, &ask, true))
        .await;
    fake.wait_for("the second status message", |f| {
        in_thread(f, &ask).into_iter().next()
    })
    .await;
    let list = sessions(&s).await;
    assert_eq!(
        list.iter().filter(|x| x.repo_id.to_string() == web).count(),
        1
    );

    // An admin's keyword rule picks the repo in a channel with no default.
    let res = s
        .req(Method::PUT, "/api/slack/settings")
        .bearer(&s.admin_token)
        .json(&json!([{ "keyword": "Lockfile", "repo_id": deps }]))
        .send()
        .await;
    assert_eq!(
        res.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&res.body)
    );
    assert_eq!(
        res.json()["rules"],
        json!([{ "keyword": "lockfile", "repo_id": deps, "repo_name": "acme/deps" }])
    );
    let twice = s
        .req(Method::PUT, "/api/slack/settings")
        .bearer(&s.admin_token)
        .json(&json!([{ "keyword": "x", "repo_id": deps }]))
        .send()
        .await;
    assert_eq!(
        twice.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "a one-letter keyword would match everything"
    );
    // A channel's repo set in the web app (admins) holds for the channel in any workspace.
    let res = s
        .req(Method::PUT, "/api/slack/channels/c2docs")
        .bearer(&s.admin_token)
        .json(&json!({ "repo_id": web }))
        .send()
        .await;
    assert_eq!(
        res.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&res.body)
    );
    let shown: tandem_protocol::slack::SlackSettings =
        s.get("/api/slack/settings").send().await.parse();
    assert!(shown.configured);
    assert!(
        shown
            .channels
            .iter()
            .any(|c| c.channel_id == "C2DOCS" && c.team_id == "*" && c.repo_name == "acme/web"),
        "{shown:?}"
    );
    let ask = fake.post_as("U1ALICE", "C1OPS", None, &mention("the Lockfile is stale"));
    fake.send_event(&events, &fake.event_for("C1OPS", &ask, true))
        .await;
    fake.wait_for("the ops status message", |f| {
        in_thread(f, &ask).into_iter().next()
    })
    .await;
    let list = sessions(&s).await;
    assert_eq!(
        list.iter()
            .filter(|x| x.repo_id.to_string() == deps)
            .count(),
        2
    );

    // The slash command: help, and a task started in the channel.
    let (code, body) = fake
        .slash(&commands, "U1ALICE", CHANNEL, "/tandem", "help")
        .await;
    assert_eq!(code, 200);
    assert!(
        body.contains("ephemeral") && body.contains("Mention me"),
        "{body}"
    );
    let (code, body) = fake
        .slash(&commands, "U1ALICE", CHANNEL, "/tandem", "tidy the README")
        .await;
    assert_eq!(code, 200);
    assert!(body.contains("On it"), "Slack is answered at once: {body}");
    told(&fake, "U1ALICE", "Started").await;
    let root = fake
        .messages()
        .into_iter()
        .find(|m| m.bot && m.thread_ts.is_none() && m.text.contains("asked: tidy the README"))
        .expect("the thread's first message");
    fake.wait_for("the command's status message", |f| {
        in_thread(f, &root.ts).into_iter().next()
    })
    .await;
    assert_eq!(sessions(&s).await.len(), 4);
}

/// An approval card in the session's Slack thread: the tool, its arguments, who started the
/// turn, and buttons; a watcher's click is refused, the owner's approves, the card then says
/// who answered and the call runs.
#[tokio::test]
async fn an_approval_is_answered_from_the_slack_thread_by_the_sessions_driver_only() {
    let Some(mcp) = crate::approvals::servers_dir() else {
        return;
    };
    let script = vec![
        Reply::tool(
            "everything__gzip-file-as-resource",
            json!({ "name": "notes.gz", "data": "data:text/plain;base64,aGVsbG8=", "outputType": "resource" }),
        )
        .for_prompt("compress the notes")
        .at_step(0),
    ];
    let fake = FakeSlack::start(SIGNING_SECRET, BOT_TOKEN).await;
    let config = slack_config(&fake);
    let Some(w) = crate::github::world_on(Backend::Sqlite, script, move |c| {
        c.slack = Some(config);
    })
    .await
    else {
        return;
    };
    w.model.fallback(Reply::text("Compressed."));
    store_secrets(&w.s).await;
    let server = crate::approvals::Everything::start(&mcp).await;
    let put =
        w.s.req(Method::PUT, "/api/mcp/servers/everything").bearer(&w.s.admin_token)
            .json(&json!({ "url": server.url, "secret": "everything_token", "secret_value": crate::approvals::SECRET }))
            .send()
            .await;
    assert_eq!(
        put.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&put.body)
    );
    let repo = crate::github::import(&w).await;
    let res =
        w.s.req(Method::PUT, &format!("/api/repos/{repo}/access"))
            .bearer(&w.s.admin_token)
            .json(&json!({ "access": "everyone", "grants": [] }))
            .send()
            .await;
    assert_eq!(res.status, StatusCode::OK);
    invite(&w.s, "alice", false).await;
    invite(&w.s, "bob", false).await;
    fake.add_user("U1ALICE", "alice", Some("alice@acme.test"));
    fake.add_user("U2BOB", "bob", Some("bob@acme.test"));
    fake.add_channel(CHANNEL, "web");
    let events = format!("{}/api/slack/events", w.s.url);
    let clicks = format!("{}/api/slack/interactivity", w.s.url);
    let ask = fake.post_as(
        "U1ALICE",
        CHANNEL,
        None,
        &mention("compress the notes repo=calc"),
    );
    fake.send_event(&events, &fake.event_for(CHANNEL, &ask, true))
        .await;
    // The workspace boots and the agent reaches the call first (slow on a busy machine).
    let id = crate::github::wait_for("the session", async || {
        sessions(&w.s).await.first().map(|s| s.id)
    })
    .await;
    crate::agent_runs::wait_events(&w.s, id, |e| {
        e.iter()
            .any(|e| matches!(e.kind, EventKind::ApprovalAsked { .. }))
    })
    .await;
    let card = fake
        .wait_for("the approval card in the thread", |f| {
            in_thread(f, &ask)
                .into_iter()
                .find(|m| has_button(m, "tandem_approve"))
        })
        .await;
    let shown = card.blocks.to_string();
    assert!(
        shown.contains("gzip-file-as-resource")
            && shown.contains("notes.gz")
            && shown.contains("alice"),
        "the card shows the tool, its arguments and whose turn: {shown}"
    );
    assert!(has_button(&card, "tandem_approve_session") && has_button(&card, "tandem_deny"));

    // Bob watches (the session is Alice's): his click changes nothing and he is told why.
    let (code, _) = fake
        .click(&clicks, "U2BOB", CHANNEL, &card.ts, "tandem_approve")
        .await;
    assert_eq!(code, 200);
    told(&fake, "U2BOB", "viewer").await;
    let pending: Vec<approval::Approval> =
        w.s.get(&format!("/api/sessions/{id}/approvals"))
            .send()
            .await
            .parse();
    assert_eq!(pending[0].state, approval::ApprovalState::Pending);

    // Alice approves: the card says so (its buttons gone) and the call runs.
    let (code, _) = fake
        .click(&clicks, "U1ALICE", CHANNEL, &card.ts, "tandem_approve")
        .await;
    assert_eq!(code, 200);
    crate::agent_runs::wait_events(&w.s, id, |e| {
        e.iter().any(|e| matches!(&e.kind, EventKind::ApprovalAnswered { by: Some(by), .. } if by.name == "alice"))
    })
    .await;
    fake.wait_for("the card to say who approved", |f| {
        f.messages().into_iter().find(|m| {
            m.ts == card.ts
                && m.text.contains("alice approved it")
                && !has_button(m, "tandem_approve")
        })
    })
    .await;
    let evs = crate::agent_runs::wait_events(&w.s, id, |e| {
        e.iter()
            .any(|e| matches!(e.kind, EventKind::TurnEnded { .. }))
    })
    .await;
    assert!(evs.iter().any(|e| matches!(&e.kind,
        EventKind::ToolResult { name, is_error: false, .. } if name == "everything__gzip-file-as-resource")));
}

#[tokio::test]
async fn a_turn_stopped_at_a_budget_says_which_in_its_slack_thread() {
    let fake = FakeSlack::start(SIGNING_SECRET, BOT_TOKEN).await;
    let config = slack_config(&fake);
    let Some(w) = crate::github::world_on(Backend::Sqlite, vec![], move |c| {
        c.slack = Some(config);
    })
    .await
    else {
        return;
    };
    // An agent that would run `true` for ever, at $0.01 a model request (100 prompt tokens at
    // $100 per million), in session trees of at most $0.025.
    w.model
        .fallback(Reply::tool("run_command", json!({ "command": "true" })));
    store_secrets(&w.s).await;
    for (path, body) in [
        (
            "/api/spend/prices",
            json!({ "models": { "scripted-1": { "input_per_mtok": 100.0, "output_per_mtok": 0.0 } } }),
        ),
        (
            "/api/spend/budgets",
            json!({ "tree": { "cost_usd": 0.025 } }),
        ),
    ] {
        let res =
            w.s.req(Method::PUT, path)
                .bearer(&w.s.admin_token)
                .json(&body)
                .send()
                .await;
        assert_eq!(res.status, StatusCode::OK, "{path}: {}", res.json());
    }
    let repo = crate::github::import(&w).await;
    let res =
        w.s.req(Method::PUT, &format!("/api/repos/{repo}/access"))
            .bearer(&w.s.admin_token)
            .json(&json!({ "access": "everyone", "grants": [] }))
            .send()
            .await;
    assert_eq!(res.status, StatusCode::OK);
    invite(&w.s, "alice", false).await;
    fake.add_user("U1ALICE", "alice", Some("alice@acme.test"));
    fake.add_channel(CHANNEL, "web");
    let ask = fake.post_as(
        "U1ALICE",
        CHANNEL,
        None,
        &mention("loop for ever repo=calc"),
    );
    fake.send_event(
        &format!("{}/api/slack/events", w.s.url),
        &fake.event_for(CHANNEL, &ask, true),
    )
    .await;
    let id = crate::github::wait_for("the session", async || {
        sessions(&w.s).await.first().map(|s| s.id)
    })
    .await;
    crate::agent_runs::wait_events(&w.s, id, |e| {
        e.iter()
            .any(|e| matches!(e.kind, EventKind::LimitReached { .. }))
    })
    .await;
    let said = fake
        .wait_for("the budget's message in the thread", |f| {
            in_thread(f, &ask)
                .into_iter()
                .find(|m| m.text.contains("stopped at"))
        })
        .await;
    // Exactly one step past the limit: each answer is counted before the agent can ask again.
    assert!(
        said.text.contains("the session tree's budget") && said.text.contains("$0.03 of $0.025"),
        "the thread says which limit and the use against it: {}",
        said.text
    );
}
