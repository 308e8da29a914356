//! The fake at its boundary: every Web API method driven through slack-morphism's own client
//! over real HTTP, and every delivery received by a real HTTP app that checks its signature with
//! slack-morphism's verifier and reads it with slack-morphism's types (`SlackPushEvent`,
//! `SlackInteractionEvent`, `SlackCommandEvent`). A shape the fake gets wrong fails here.

use std::collections::HashMap;

use axum::Router;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::IntoResponse;
use fake_slack::{APP_ID, BOT_ID, BOT_USER_ID, FakeSlack, TEAM_ID};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};
use slack_morphism::errors::SlackClientError;
use slack_morphism::prelude::*;
use slack_morphism::signature_verifier::SlackEventSignatureVerifier;
use tokio::sync::mpsc;

const SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
const TOKEN: &str = "xoxb-1234-5678-tandemtesttoken";
const ALICE: &str = "U0ALICE";
const BOB: &str = "U0BOB";
const GENERAL: &str = "C0GENERAL";
const DM: &str = "D0ALICE";

type Client = SlackClient<SlackClientHyperConnector<HttpConnector>>;

/// A fake with two people (Alice has an email, Bob none), a channel and a DM.
async fn fake() -> FakeSlack {
    let fake = FakeSlack::start(SECRET, TOKEN).await;
    fake.add_user(ALICE, "alice", Some("alice@example.com"));
    fake.add_user(BOB, "bob", None);
    fake.add_channel(GENERAL, "general");
    fake.add_channel(DM, "alice");
    fake
}

/// slack-morphism's client pointed at the fake. Its default connector (`new()`) is HTTPS-only,
/// so a plain-HTTP one reaches the loopback port.
fn client(fake: &FakeSlack) -> Client {
    SlackClient::new(
        SlackClientHyperConnector::with_connector(HttpConnector::new())
            .with_slack_api_url(&fake.api_url()),
    )
}

fn token(value: &str) -> SlackApiToken {
    SlackApiToken::new(SlackApiTokenValue::new(value.into()))
}

fn api_error(result: Result<impl std::fmt::Debug, SlackClientError>) -> String {
    match result {
        Err(SlackClientError::ApiError(e)) => e.code,
        other => panic!("expected a Slack API error, got {other:?}"),
    }
}

fn blocks(v: Value) -> Vec<SlackBlock> {
    serde_json::from_value(v).expect("Block Kit blocks")
}

/// A message with a button and a select, the blocks given without ids for some.
fn approval_blocks() -> Vec<SlackBlock> {
    blocks(json!([
        { "type": "section", "text": { "type": "mrkdwn", "text": "*Run the tests?*" } },
        { "type": "actions", "block_id": "decide", "elements": [
            { "type": "button", "action_id": "approve", "value": "session-1",
              "text": { "type": "plain_text", "text": "Approve" }, "style": "primary" },
            { "type": "static_select", "action_id": "model",
              "placeholder": { "type": "plain_text", "text": "Model" },
              "options": [
                { "text": { "type": "plain_text", "text": "Fast" }, "value": "fast" },
                { "text": { "type": "plain_text", "text": "Careful" }, "value": "careful" },
              ] },
        ] },
    ]))
}

fn is_slack_ts(ts: &str) -> bool {
    let (secs, micros) = ts.split_once('.').unwrap_or(("", ""));
    secs.len() == 10
        && micros.len() == 6
        && secs
            .bytes()
            .chain(micros.bytes())
            .all(|b| b.is_ascii_digit())
}

// ---- an app that receives deliveries ---------------------------------------------------------

/// One delivery the app accepted (its signature verified).
struct Delivery {
    content_type: String,
    body: String,
}

/// A real HTTP app: checks each delivery's signature with slack-morphism's verifier (401 if it
/// fails), answers `url_verification` with its challenge and everything else with `reply`.
struct App {
    url: String,
    deliveries: mpsc::UnboundedReceiver<Delivery>,
}

impl App {
    async fn start(reply: &'static str) -> App {
        let verifier = SlackEventSignatureVerifier::new(&SlackSigningSecret::new(SECRET.into()));
        let (tx, deliveries) = mpsc::unbounded_channel();
        let router = Router::new().fallback(move |_: Uri, headers: HeaderMap, body: String| {
            let verifier = verifier.clone();
            let tx = tx.clone();
            async move {
                let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
                let verified = match (
                    header("x-slack-signature"),
                    header("x-slack-request-timestamp"),
                ) {
                    (Some(signature), Some(ts)) => verifier.verify(signature, &body, ts).is_ok(),
                    _ => false,
                };
                if !verified {
                    return (StatusCode::UNAUTHORIZED, "bad signature").into_response();
                }
                let content_type = header("content-type").unwrap_or_default().to_string();
                let challenge = match serde_json::from_str::<SlackPushEvent>(&body) {
                    Ok(SlackPushEvent::UrlVerification(v)) => Some(v.challenge),
                    _ => None,
                };
                tx.send(Delivery { content_type, body })
                    .expect("the test is listening");
                match challenge {
                    Some(challenge) => challenge.into_response(),
                    None => reply.into_response(),
                }
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/slack", listener.local_addr().expect("bound"));
        tokio::spawn(async move { axum::serve(listener, router).await });
        App { url, deliveries }
    }

    async fn next(&mut self) -> Delivery {
        self.deliveries.recv().await.expect("a delivery")
    }
}

fn form(body: &str) -> HashMap<String, String> {
    url::form_urlencoded::parse(body.as_bytes())
        .into_owned()
        .collect()
}

/// The interaction payload of a delivery, read as slack-morphism's listener reads it.
fn interaction(d: &Delivery) -> SlackInteractionEvent {
    assert_eq!(d.content_type, "application/x-www-form-urlencoded");
    let fields = form(&d.body);
    assert_eq!(fields.len(), 1, "one field, `payload`: {fields:?}");
    let payload = fields.get("payload").expect("a payload field");
    serde_json::from_str(payload).unwrap_or_else(|e| panic!("{e}: {payload}"))
}

fn push_event(v: &Value) -> SlackPushEventCallback {
    match serde_json::from_value::<SlackPushEvent>(v.clone()) {
        Ok(SlackPushEvent::EventCallback(callback)) => callback,
        other => panic!("expected an event_callback, got {other:?} from {v}"),
    }
}

// ---- the Web API -----------------------------------------------------------------------------

#[tokio::test]
async fn auth_test_names_the_bot() {
    let fake = fake().await;
    let client = client(&fake);
    let token = token(TOKEN);
    let session = client.open_session(&token);
    let me = session.auth_test().await.expect("auth.test");
    assert_eq!(me.user_id.0, BOT_USER_ID);
    assert_eq!(me.team_id.0, TEAM_ID);
    assert_eq!(me.bot_id.map(|b| b.0).as_deref(), Some(BOT_ID));
    assert_eq!(me.user.as_deref(), Some("tandem"));
    assert_eq!(fake.calls()[0].method, "auth.test");
}

#[tokio::test]
async fn a_wrong_token_is_invalid_auth_and_none_is_not_authed() {
    let fake = fake().await;
    let client = client(&fake);
    let wrong = token("xoxb-not-the-bot");
    assert_eq!(
        api_error(client.open_session(&wrong).auth_test().await),
        "invalid_auth"
    );
    let request = SlackApiChatPostMessageRequest::new(
        GENERAL.into(),
        SlackMessageContent::new().with_text("hello".into()),
    );
    let refused = client
        .open_session(&wrong)
        .chat_post_message(&request)
        .await;
    assert_eq!(api_error(refused), "invalid_auth");
    assert!(
        fake.messages().is_empty(),
        "nothing is posted with a wrong token"
    );

    let http = reqwest::Client::new();
    let answer: Value = http
        .post(format!("{}/auth.test", fake.api_url()))
        .send()
        .await
        .expect("POST")
        .json()
        .await
        .expect("JSON");
    assert_eq!(answer, json!({ "ok": false, "error": "not_authed" }));
    let unknown: Value = http
        .post(format!("{}/chat.meMessage", fake.api_url()))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("POST")
        .json()
        .await
        .expect("JSON");
    assert_eq!(unknown, json!({ "ok": false, "error": "unknown_method" }));
    let errors: Vec<Option<String>> = fake.calls().into_iter().map(|c| c.error).collect();
    assert_eq!(
        errors,
        [
            Some("invalid_auth".into()),
            Some("invalid_auth".into()),
            Some("not_authed".into()),
            Some("unknown_method".into()),
        ]
    );
}

#[tokio::test]
async fn post_update_and_ephemeral_messages() {
    let fake = fake().await;
    let client = client(&fake);
    let token = token(TOKEN);
    let session = client.open_session(&token);

    let posted = session
        .chat_post_message(&SlackApiChatPostMessageRequest::new(
            GENERAL.into(),
            SlackMessageContent::new()
                .with_text("Run the tests?".into())
                .with_blocks(approval_blocks()),
        ))
        .await
        .expect("chat.postMessage");
    let ts = posted.ts.0.clone();
    assert!(is_slack_ts(&ts), "{ts}");
    assert_eq!(posted.channel.0, GENERAL);
    assert_eq!(
        posted.message.sender.user.as_ref().map(|u| u.0.as_str()),
        Some(BOT_USER_ID)
    );
    assert_eq!(
        posted.message.sender.bot_id.as_ref().map(|b| b.0.as_str()),
        Some(BOT_ID)
    );
    let profile = posted
        .message
        .sender
        .bot_profile
        .as_ref()
        .expect("bot_profile");
    assert_eq!(profile.app_id, APP_ID);
    let answered = posted.message.content.blocks.as_ref().expect("blocks");
    assert_eq!(answered.len(), 2);
    match &answered[0] {
        SlackBlock::Section(s) => assert!(s.block_id.is_some(), "Slack fills in block ids"),
        other => panic!("expected a section, got {other:?}"),
    }

    let reply = session
        .chat_post_message(
            &SlackApiChatPostMessageRequest::new(
                GENERAL.into(),
                SlackMessageContent::new().with_text("working on it".into()),
            )
            .with_thread_ts(ts.clone().into()),
        )
        .await
        .expect("a reply");
    assert_eq!(
        reply
            .message
            .origin
            .thread_ts
            .as_ref()
            .map(|t| t.0.as_str()),
        Some(ts.as_str())
    );
    assert!(reply.ts.0 > ts, "timestamps increase");

    let updated = session
        .chat_update(&SlackApiChatUpdateRequest::new(
            GENERAL.into(),
            SlackMessageContent::new()
                .with_text("Tests passed".into())
                .with_blocks(vec![]),
            ts.clone().into(),
        ))
        .await
        .expect("chat.update");
    assert_eq!(updated.ts.0, ts);
    assert_eq!(
        updated.message.content.text.as_deref(),
        Some("Tests passed")
    );
    assert!(updated.message.edited.is_some());

    session
        .chat_post_ephemeral(
            &SlackApiChatPostEphemeralRequest::new(
                GENERAL.into(),
                ALICE.into(),
                SlackMessageContent::new().with_text("only you".into()),
            )
            .with_thread_ts(ts.clone().into()),
        )
        .await
        .expect("chat.postEphemeral");

    let messages = fake.messages();
    assert_eq!(messages.len(), 3);
    let parent = &messages[0];
    assert_eq!(
        (parent.text.as_str(), parent.edits, parent.bot),
        ("Tests passed", 1, true)
    );
    assert_eq!(parent.blocks, json!([]), "`blocks: []` removes the blocks");
    assert_eq!(messages[1].thread_ts.as_deref(), Some(ts.as_str()));
    let ephemeral = &messages[2];
    assert_eq!(ephemeral.ephemeral_to.as_deref(), Some(ALICE));
    assert_eq!(ephemeral.thread_ts.as_deref(), Some(ts.as_str()));
    assert!(is_slack_ts(&ephemeral.ts));

    let calls = fake.calls();
    let methods: Vec<&str> = calls.iter().map(|c| c.method.as_str()).collect();
    assert_eq!(
        methods,
        [
            "chat.postMessage",
            "chat.postMessage",
            "chat.update",
            "chat.postEphemeral"
        ]
    );
    assert_eq!(calls[0].params["channel"], GENERAL);
    assert_eq!(
        calls[0].params["blocks"][1]["elements"][0]["action_id"],
        "approve"
    );
    assert_eq!(calls[3].params["user"], ALICE);
    assert!(calls.iter().all(|c| c.error.is_none()));
    assert!(calls.windows(2).all(|w| w[0].at <= w[1].at));
}

#[tokio::test]
async fn chat_refusals_are_slacks() {
    let fake = fake().await;
    let client = client(&fake);
    let token = token(TOKEN);
    let session = client.open_session(&token);
    let text = || SlackMessageContent::new().with_text("hi".into());

    let nowhere = SlackApiChatPostMessageRequest::new("C0NOWHERE".into(), text());
    assert_eq!(
        api_error(session.chat_post_message(&nowhere).await),
        "channel_not_found"
    );
    let empty = SlackApiChatPostMessageRequest::new(GENERAL.into(), SlackMessageContent::new());
    assert_eq!(
        api_error(session.chat_post_message(&empty).await),
        "no_text"
    );

    let theirs = fake.post_as(ALICE, GENERAL, None, "my own words");
    let edit_theirs = SlackApiChatUpdateRequest::new(GENERAL.into(), text(), theirs.into());
    assert_eq!(
        api_error(session.chat_update(&edit_theirs).await),
        "cant_update_message"
    );
    let edit_none = SlackApiChatUpdateRequest::new(GENERAL.into(), text(), "1.000000".into());
    assert_eq!(
        api_error(session.chat_update(&edit_none).await),
        "message_not_found"
    );
    assert_eq!(fake.messages()[0].text, "my own words");
}

#[tokio::test]
async fn reactions_are_a_set_per_message() {
    let fake = fake().await;
    let client = client(&fake);
    let token = token(TOKEN);
    let session = client.open_session(&token);
    let ts = fake.post_as(ALICE, GENERAL, None, "please look");

    let add = |name: &str| {
        SlackApiReactionsAddRequest::new(GENERAL.into(), name.into(), ts.clone().into())
    };
    let remove = |name: &str| {
        SlackApiReactionsRemoveRequest::new(name.into())
            .with_channel(GENERAL.into())
            .with_timestamp(ts.clone().into())
    };
    session
        .reactions_add(&add("eyes"))
        .await
        .expect("reactions.add");
    session
        .reactions_add(&add("hourglass"))
        .await
        .expect("reactions.add");
    assert_eq!(
        api_error(session.reactions_add(&add("eyes")).await),
        "already_reacted"
    );
    assert_eq!(fake.reactions(GENERAL, &ts), ["eyes", "hourglass"]);
    session
        .reactions_remove(&remove("eyes"))
        .await
        .expect("reactions.remove");
    assert_eq!(
        api_error(session.reactions_remove(&remove("eyes")).await),
        "no_reaction"
    );
    assert_eq!(fake.reactions(GENERAL, &ts), ["hourglass"]);

    let elsewhere =
        SlackApiReactionsAddRequest::new(GENERAL.into(), "eyes".into(), "1.000000".into());
    assert_eq!(
        api_error(session.reactions_add(&elsewhere).await),
        "message_not_found"
    );

    // conversations.replies shows them on the message.
    let thread = session
        .conversations_replies(&SlackApiConversationsRepliesRequest::new(
            GENERAL.into(),
            ts.clone().into(),
        ))
        .await
        .expect("conversations.replies");
    let reactions = thread.messages[0]
        .content
        .reactions
        .as_ref()
        .expect("reactions");
    assert_eq!(reactions.len(), 1);
    assert_eq!(reactions[0].name.0, "hourglass");
    assert_eq!(reactions[0].users[0].0, BOT_USER_ID);
}

#[tokio::test]
async fn users_info_has_an_email_only_when_there_is_one() {
    let fake = fake().await;
    let client = client(&fake);
    let token = token(TOKEN);
    let session = client.open_session(&token);
    let alice = session
        .users_info(&SlackApiUsersInfoRequest::new(ALICE.into()))
        .await
        .expect("users.info")
        .user;
    assert_eq!(alice.id.0, ALICE);
    assert_eq!(alice.name.as_deref(), Some("alice"));
    assert_eq!(alice.flags.is_bot, Some(false));
    assert_eq!(alice.deleted, Some(false));
    let profile = alice.profile.expect("a profile");
    assert_eq!(
        profile.email.map(|e| e.0).as_deref(),
        Some("alice@example.com")
    );
    assert_eq!(profile.display_name.as_deref(), Some("alice"));

    let bob = session
        .users_info(&SlackApiUsersInfoRequest::new(BOB.into()))
        .await
        .expect("users.info")
        .user;
    assert_eq!(bob.profile.expect("a profile").email, None);

    let bot = session
        .users_info(&SlackApiUsersInfoRequest::new(BOT_USER_ID.into()))
        .await
        .expect("users.info")
        .user;
    assert_eq!(bot.flags.is_bot, Some(true));

    let nobody = session
        .users_info(&SlackApiUsersInfoRequest::new("U0NOBODY".into()))
        .await;
    assert_eq!(api_error(nobody), "user_not_found");
    assert_eq!(fake.calls()[0].params, json!({ "user": ALICE }));
}

#[tokio::test]
async fn conversations_replies_lists_a_thread_with_its_files() {
    let fake = fake().await;
    let client = client(&fake);
    let token = token(TOKEN);
    let session = client.open_session(&token);
    let root = fake.post_as(ALICE, GENERAL, None, "<@U0TANDEMBOT> fix the login page");
    let png = vec![0x89, b'P', b'N', b'G', 1, 2, 3];
    let shot = fake.post_with_image(
        BOB,
        GENERAL,
        Some(&root),
        "it looks like this",
        "screen shot.png",
        "image/png",
        png.clone(),
    );
    let bot_reply = session
        .chat_post_message(
            &SlackApiChatPostMessageRequest::new(
                GENERAL.into(),
                SlackMessageContent::new().with_text("on it".into()),
            )
            .with_thread_ts(shot.clone().into()),
        )
        .await
        .expect("a reply to a reply")
        .ts;
    let unrelated = fake.post_as(BOB, GENERAL, None, "lunch?");

    // Asked by a reply's ts, Slack answers the whole thread.
    let thread = session
        .conversations_replies(&SlackApiConversationsRepliesRequest::new(
            GENERAL.into(),
            shot.clone().into(),
        ))
        .await
        .expect("conversations.replies");
    assert_eq!(thread.has_more, Some(false));
    let tss: Vec<&str> = thread
        .messages
        .iter()
        .map(|m| m.origin.ts.0.as_str())
        .collect();
    assert_eq!(tss, [root.as_str(), shot.as_str(), bot_reply.0.as_str()]);
    assert!(!tss.contains(&unrelated.as_str()));

    let parent = &thread.messages[0];
    assert_eq!(
        parent.origin.thread_ts.as_ref().map(|t| t.0.as_str()),
        Some(root.as_str())
    );
    assert_eq!(parent.parent.reply_count, Some(2));
    assert_eq!(
        parent.sender.user.as_ref().map(|u| u.0.as_str()),
        Some(ALICE)
    );
    match parent.content.blocks.as_deref() {
        Some([SlackBlock::RichText(_)]) => {}
        other => panic!("a person's message carries rich text, got {other:?}"),
    }

    let with_file = &thread.messages[1];
    assert_eq!(
        with_file.content.text.as_deref(),
        Some("it looks like this")
    );
    let files = with_file.content.files.as_ref().expect("files");
    assert_eq!(files.len(), 1);
    let file = &files[0];
    assert_eq!(file.name.as_deref(), Some("screen shot.png"));
    assert_eq!(
        file.mimetype.as_ref().map(|m| m.0.as_str()),
        Some("image/png")
    );
    assert_eq!(file.filetype.as_ref().map(|t| t.0.as_str()), Some("png"));
    let url_private = file.url_private.clone().expect("url_private");
    assert!(
        url_private.as_str().starts_with(&fake.url()),
        "{url_private}"
    );

    let bot = &thread.messages[2];
    assert_eq!(
        bot.sender.bot_id.as_ref().map(|b| b.0.as_str()),
        Some(BOT_ID)
    );
    assert_eq!(
        bot.origin.thread_ts.as_ref().map(|t| t.0.as_str()),
        Some(root.as_str())
    );

    // `oldest` narrows the thread, as Slack does.
    let newer = session
        .conversations_replies(
            &SlackApiConversationsRepliesRequest::new(GENERAL.into(), root.clone().into())
                .with_oldest(shot.clone().into()),
        )
        .await
        .expect("conversations.replies");
    assert_eq!(newer.messages.len(), 1);

    let missing = session
        .conversations_replies(&SlackApiConversationsRepliesRequest::new(
            GENERAL.into(),
            "1.000000".into(),
        ))
        .await;
    assert_eq!(api_error(missing), "thread_not_found");
}

#[tokio::test]
async fn files_are_served_to_the_bot_token_only() {
    let fake = fake().await;
    let bytes = b"\x89PNG\r\n\x1a\nnot really".to_vec();
    let ts = fake.post_with_image(
        ALICE,
        DM,
        None,
        "see",
        "shot.png",
        "image/png",
        bytes.clone(),
    );
    let url = fake.event_for(DM, &ts, false)["event"]["files"][0]["url_private"]
        .as_str()
        .expect("url_private")
        .to_string();
    let http = reqwest::Client::new();
    let anonymous = http.get(&url).send().await.expect("GET");
    assert_eq!(anonymous.status(), 403);
    let wrong = http
        .get(&url)
        .bearer_auth("xoxb-wrong")
        .send()
        .await
        .expect("GET");
    assert_eq!(wrong.status(), 403);
    let bot = http.get(&url).bearer_auth(TOKEN).send().await.expect("GET");
    assert_eq!(bot.status(), 200);
    assert_eq!(bot.headers()["content-type"], "image/png");
    assert_eq!(bot.bytes().await.expect("bytes").to_vec(), bytes);
    let other = http
        .get(format!("{}/files/F0NOTHING/shot.png", fake.url()))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("GET");
    assert_eq!(other.status(), 404);
    let downloads: Vec<Option<String>> = fake
        .calls()
        .into_iter()
        .filter(|c| c.method == "file_download")
        .map(|c| c.error)
        .collect();
    assert_eq!(
        downloads,
        [
            Some("forbidden".into()),
            Some("forbidden".into()),
            None,
            Some("not_found".into())
        ]
    );
}

#[tokio::test]
async fn form_bodies_and_query_strings_are_read_like_json() {
    let fake = fake().await;
    let http = reqwest::Client::new();
    let blocks = json!([{ "type": "section", "text": { "type": "mrkdwn", "text": "hi" } }]);
    let answer: Value = http
        .post(format!("{}/chat.postMessage", fake.api_url()))
        .form(&[
            ("token", TOKEN),
            ("channel", GENERAL),
            ("text", "hi"),
            ("blocks", &blocks.to_string()),
        ])
        .send()
        .await
        .expect("POST")
        .json()
        .await
        .expect("JSON");
    assert_eq!(answer["ok"], true, "{answer}");
    let posted = &fake.messages()[0];
    assert_eq!(posted.blocks[0]["text"]["text"], "hi");
    assert!(posted.blocks[0]["block_id"].is_string());
    let call = &fake.calls()[0];
    assert!(
        call.params.get("token").is_none(),
        "the token is not recorded"
    );
    assert!(
        call.params["blocks"].is_array(),
        "JSON-valued form fields are parsed"
    );

    let info: Value = http
        .get(format!("{}/users.info?user={ALICE}", fake.api_url()))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("GET")
        .json()
        .await
        .expect("JSON");
    assert_eq!(info["user"]["id"], ALICE);

    let broken: Value = http
        .post(format!("{}/chat.postMessage", fake.api_url()))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body("{\"channel\":")
        .send()
        .await
        .expect("POST")
        .json()
        .await
        .expect("JSON");
    assert_eq!(broken["error"], "invalid_json");
}

#[tokio::test]
async fn wait_for_wakes_on_each_recorded_call() {
    let fake = fake().await;
    let client = client(&fake);
    let posting = tokio::spawn(async move {
        let token = token(TOKEN);
        let request = SlackApiChatPostMessageRequest::new(
            GENERAL.into(),
            SlackMessageContent::new().with_text("done".into()),
        );
        client
            .open_session(&token)
            .chat_post_message(&request)
            .await
            .expect("post")
    });
    let text = fake
        .wait_for("the bot posts", |f| {
            f.messages().first().map(|m| m.text.clone())
        })
        .await;
    assert_eq!(text, "done");
    posting.await.expect("the post");
}

// ---- deliveries --------------------------------------------------------------------------------

#[tokio::test]
async fn events_parse_as_slack_push_events() {
    let fake = fake().await;
    let root = fake.post_as(ALICE, GENERAL, None, "<@U0TANDEMBOT> fix the login page");
    let mention = fake.event_for(GENERAL, &root, true);
    let callback = push_event(&mention);
    assert_eq!(callback.team_id.0, TEAM_ID);
    assert_eq!(callback.api_app_id.0, APP_ID);
    let authorization = &callback.authorizations.as_ref().expect("authorizations")[0];
    assert_eq!(authorization.user_id.0, BOT_USER_ID);
    assert_eq!(authorization.is_bot, Some(true));
    assert!(callback.event_id.0.starts_with("Ev"));
    match &callback.event {
        SlackEventCallbackBody::AppMention(e) => {
            assert_eq!(e.user.0, ALICE);
            assert_eq!(e.channel.0, GENERAL);
            assert_eq!(e.origin.ts.0, root);
            assert_eq!(
                e.content.text.as_deref(),
                Some("<@U0TANDEMBOT> fix the login page")
            );
            assert_eq!(e.origin.thread_ts, None);
        }
        other => panic!("expected an app_mention, got {other:?}"),
    }
    let again = push_event(&fake.event_for(GENERAL, &root, true));
    assert_ne!(
        again.event_id, callback.event_id,
        "each delivery has a fresh event id"
    );

    let reply = fake.post_with_image(
        BOB,
        GENERAL,
        Some(&root),
        "like this",
        "a.png",
        "image/png",
        vec![1, 2],
    );
    match push_event(&fake.event_for(GENERAL, &reply, false)).event {
        SlackEventCallbackBody::Message(e) => {
            assert_eq!(e.subtype, Some(SlackMessageEventType::FileShare));
            assert_eq!(e.sender.user.map(|u| u.0).as_deref(), Some(BOB));
            assert_eq!(e.origin.thread_ts.map(|t| t.0), Some(root.clone()));
            assert_eq!(
                e.origin.channel_type.map(|t| t.0).as_deref(),
                Some("channel")
            );
            let content = e.content.expect("content");
            assert_eq!(content.text.as_deref(), Some("like this"));
            let files = content.files.expect("files");
            assert_eq!(files[0].name.as_deref(), Some("a.png"));
        }
        other => panic!("expected a message, got {other:?}"),
    }

    let dm = fake.post_as(ALICE, DM, None, "hello");
    match push_event(&fake.event_for(DM, &dm, false)).event {
        SlackEventCallbackBody::Message(e) => {
            assert_eq!(e.subtype, None);
            assert_eq!(e.origin.channel_type.map(|t| t.0).as_deref(), Some("im"));
            assert_eq!(e.origin.channel.map(|c| c.0).as_deref(), Some(DM));
        }
        other => panic!("expected a message, got {other:?}"),
    }

    // Delivered signed, it verifies and reads the same on the app's side.
    let mut app = App::start("").await;
    let (status, _) = fake.send_event(&app.url, &mention).await;
    assert_eq!(status, 200);
    let delivery = app.next().await;
    assert_eq!(delivery.content_type, "application/json");
    let body: Value = serde_json::from_str(&delivery.body).expect("JSON");
    assert_eq!(body, mention);

    let verification = fake.url_verification();
    match serde_json::from_value::<SlackPushEvent>(verification.clone()) {
        Ok(SlackPushEvent::UrlVerification(v)) => {
            let (status, answer) = fake.send_event(&app.url, &verification).await;
            assert_eq!((status, answer), (200, v.challenge));
        }
        other => panic!("expected a url_verification, got {other:?}"),
    }
}

#[tokio::test]
async fn forged_and_stale_deliveries_fail_slack_morphisms_check() {
    let fake = fake().await;
    let app = App::start("").await;
    let body = fake.url_verification().to_string();
    let json = "application/json";
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    let fresh = now.to_string();
    let stale = (now - 600).to_string();

    let signed = FakeSlack::sign(SECRET, &fresh, &body);
    assert!(signed.starts_with("v0=") && signed.len() == 67, "{signed}");
    let ok = FakeSlack::deliver_raw(&app.url, json, &body, Some(&fresh), Some(&signed)).await;
    assert_eq!(ok.0, 200);
    let forged = FakeSlack::sign("not-the-secret", &fresh, &body);
    let refused = FakeSlack::deliver_raw(&app.url, json, &body, Some(&fresh), Some(&forged)).await;
    assert_eq!(refused.0, 401);
    let old = FakeSlack::sign(SECRET, &stale, &body);
    let refused = FakeSlack::deliver_raw(&app.url, json, &body, Some(&stale), Some(&old)).await;
    assert_eq!(refused.0, 401);
    let unsigned = FakeSlack::deliver_raw(&app.url, json, &body, Some(&fresh), None).await;
    assert_eq!(unsigned.0, 401);
    let undated = FakeSlack::deliver_raw(&app.url, json, &body, None, Some(&signed)).await;
    assert_eq!(undated.0, 401);
}

#[tokio::test]
async fn clicks_and_choices_parse_as_block_actions() {
    let fake = fake().await;
    let client = client(&fake);
    let token = token(TOKEN);
    let session = client.open_session(&token);
    let posted = session
        .chat_post_message(&SlackApiChatPostMessageRequest::new(
            GENERAL.into(),
            SlackMessageContent::new()
                .with_text("Run the tests?".into())
                .with_blocks(approval_blocks()),
        ))
        .await
        .expect("chat.postMessage")
        .ts;
    let mut app = App::start("").await;

    let (status, _) = fake
        .click(&app.url, ALICE, GENERAL, &posted.0, "approve")
        .await;
    assert_eq!(status, 200);
    let SlackInteractionEvent::BlockActions(click) = interaction(&app.next().await) else {
        panic!("expected block_actions");
    };
    assert_eq!(click.team.id.0, TEAM_ID);
    assert_eq!(click.api_app_id.0, APP_ID);
    assert_eq!(click.user.as_ref().map(|u| u.id.0.as_str()), Some(ALICE));
    assert_eq!(
        click.channel.as_ref().map(|c| c.id.0.as_str()),
        Some(GENERAL)
    );
    match &click.container {
        SlackInteractionActionContainer::Message(c) => {
            assert_eq!(c.message_ts, posted);
            assert_eq!(c.is_ephemeral, Some(false));
        }
        other => panic!("expected a message container, got {other:?}"),
    }
    let message = click.message.as_ref().expect("the message");
    assert_eq!(message.origin.ts, posted);
    assert_eq!(
        message.sender.bot_id.as_ref().map(|b| b.0.as_str()),
        Some(BOT_ID)
    );
    let action = &click.actions.as_ref().expect("actions")[0];
    assert_eq!(action.action_type.0, "button");
    assert_eq!(action.action_id.0, "approve");
    assert_eq!(
        action.block_id.as_ref().map(|b| b.0.as_str()),
        Some("decide")
    );
    assert_eq!(action.value.as_deref(), Some("session-1"));
    match &action.text {
        Some(SlackBlockText::Plain(t)) => assert_eq!(t.text, "Approve"),
        other => panic!("expected the button's text, got {other:?}"),
    }
    assert!(click.response_url.is_some());

    // A choice on an ephemeral message: no copy of the message comes back.
    session
        .chat_post_ephemeral(&SlackApiChatPostEphemeralRequest::new(
            GENERAL.into(),
            BOB.into(),
            SlackMessageContent::new()
                .with_text("pick".into())
                .with_blocks(approval_blocks()),
        ))
        .await
        .expect("chat.postEphemeral");
    let ephemeral_ts = fake
        .messages()
        .into_iter()
        .find(|m| m.ephemeral_to.as_deref() == Some(BOB))
        .expect("the ephemeral message")
        .ts;
    let (status, _) = fake
        .choose(&app.url, BOB, GENERAL, &ephemeral_ts, "model", "careful")
        .await;
    assert_eq!(status, 200);
    let SlackInteractionEvent::BlockActions(choice) = interaction(&app.next().await) else {
        panic!("expected block_actions");
    };
    match &choice.container {
        SlackInteractionActionContainer::Message(c) => {
            assert_eq!(c.message_ts.0, ephemeral_ts);
            assert_eq!(c.is_ephemeral, Some(true));
        }
        other => panic!("expected a message container, got {other:?}"),
    }
    assert_eq!(choice.message, None);
    let action = &choice.actions.as_ref().expect("actions")[0];
    assert_eq!(action.action_type.0, "static_select");
    let picked = action.selected_option.as_ref().expect("selected_option");
    assert_eq!(picked.value, "careful");
    assert_eq!(choice.trigger_id.0.split('.').count(), 3);
    assert_ne!(choice.trigger_id, click.trigger_id);
}

#[tokio::test]
async fn views_open_takes_a_delivered_trigger_once_and_submissions_parse() {
    let fake = fake().await;
    let client = client(&fake);
    let token = token(TOKEN);
    let session = client.open_session(&token);
    let view: SlackView = serde_json::from_value(json!({
        "type": "modal",
        "callback_id": "new_task",
        "private_metadata": GENERAL,
        "title": { "type": "plain_text", "text": "New task" },
        "submit": { "type": "plain_text", "text": "Start" },
        "blocks": [
            { "type": "input", "block_id": "prompt",
              "label": { "type": "plain_text", "text": "What to do" },
              "element": { "type": "plain_text_input", "action_id": "text", "multiline": true } },
            { "type": "input", "block_id": "repo",
              "label": { "type": "plain_text", "text": "Repository" },
              "element": { "type": "static_select", "action_id": "pick", "options": [
                  { "text": { "type": "plain_text", "text": "tandem/web" }, "value": "web" },
                  { "text": { "type": "plain_text", "text": "tandem/api" }, "value": "api" },
              ] } },
            { "type": "input", "block_id": "notes", "optional": true,
              "label": { "type": "plain_text", "text": "Notes" },
              "element": { "type": "plain_text_input", "action_id": "notes" } },
        ],
    }))
    .expect("a modal");

    let bogus = SlackApiViewsOpenRequest::new("123.456.abcdef".into(), view.clone());
    assert_eq!(
        api_error(session.views_open(&bogus).await),
        "invalid_trigger_id"
    );

    let mut app = App::start("").await;
    let (status, _) = fake.slash(&app.url, ALICE, GENERAL, "/tandem", "new").await;
    assert_eq!(status, 200);
    let trigger = form(&app.next().await.body)["trigger_id"].clone();
    let opened = session
        .views_open(&SlackApiViewsOpenRequest::new(
            trigger.clone().into(),
            view.clone(),
        ))
        .await
        .expect("views.open")
        .view;
    assert!(opened.state_params.id.0.starts_with('V'));
    assert_eq!(opened.state_params.team_id.0, TEAM_ID);
    assert!(
        opened
            .state_params
            .state
            .as_ref()
            .is_some_and(|s| s.values.is_empty())
    );
    let again = SlackApiViewsOpenRequest::new(trigger.into(), view);
    assert_eq!(
        api_error(session.views_open(&again).await),
        "exchanged_trigger_id"
    );
    assert_eq!(fake.views().len(), 1);
    assert_eq!(fake.views()[0]["callback_id"], "new_task");

    let (status, _) = fake
        .submit_view(
            &app.url,
            ALICE,
            &[
                ("prompt", "text", "Fix the login page"),
                ("repo", "pick", "api"),
            ],
        )
        .await;
    assert_eq!(status, 200);
    let SlackInteractionEvent::ViewSubmission(submission) = interaction(&app.next().await) else {
        panic!("expected view_submission");
    };
    assert_eq!(submission.user.id.0, ALICE);
    assert_eq!(submission.view.state_params.id, opened.state_params.id);
    let values = &submission
        .view
        .state_params
        .state
        .as_ref()
        .expect("state")
        .values;
    let value = |block: &str, action: &str| {
        &values[&SlackBlockId::new(block.into())][&SlackActionId::new(action.into())]
    };
    let prompt = value("prompt", "text");
    assert_eq!(prompt.action_type.0, "plain_text_input");
    assert_eq!(prompt.value.as_deref(), Some("Fix the login page"));
    let repo = value("repo", "pick");
    assert_eq!(
        repo.selected_option.as_ref().map(|o| o.value.as_str()),
        Some("api")
    );
    assert_eq!(value("notes", "notes").value, None, "left empty");
    match &submission.view.view {
        SlackView::Modal(modal) => {
            assert_eq!(
                modal.callback_id.as_ref().map(|c| c.0.as_str()),
                Some("new_task")
            );
            assert_eq!(modal.private_metadata.as_deref(), Some(GENERAL));
        }
        other => panic!("expected a modal, got {other:?}"),
    }
    // The submission's own trigger id opens a view too.
    let trigger = submission.trigger_id.expect("a trigger id");
    let modal: SlackView = serde_json::from_value(fake.views()[0].clone()).expect("a view");
    session
        .views_open(&SlackApiViewsOpenRequest::new(trigger, modal))
        .await
        .expect("views.open from a submission");
}

#[tokio::test]
async fn slash_commands_parse_as_command_events() {
    let fake = fake().await;
    let mut app = App::start("{\"text\":\"Starting…\"}").await;
    let (status, reply) = fake.slash(&app.url, BOB, DM, "tandem", "status all").await;
    assert_eq!((status, reply.as_str()), (200, "{\"text\":\"Starting…\"}"));
    let delivery = app.next().await;
    assert_eq!(delivery.content_type, "application/x-www-form-urlencoded");
    let fields = form(&delivery.body);
    let event: SlackCommandEvent =
        serde_json::from_value(json!(fields)).unwrap_or_else(|e| panic!("{e}: {fields:?}"));
    assert_eq!(event.team_id.0, TEAM_ID);
    assert_eq!(event.channel_id.0, DM);
    assert_eq!(event.channel_name.as_deref(), Some("directmessage"));
    assert_eq!(event.user_id.0, BOB);
    assert_eq!(event.command.0, "/tandem");
    assert_eq!(event.text.as_deref(), Some("status all"));
    assert_eq!(fields["user_name"], "bob");
    assert_eq!(fields["api_app_id"], APP_ID);
    assert_eq!(fields["token"], fake.verification_token());

    // Its response_url takes a reply, recorded as a call.
    let response_url = event.response_url.0.to_string();
    assert!(response_url.starts_with(&fake.url()), "{response_url}");
    let answer = reqwest::Client::new()
        .post(&response_url)
        .json(&json!({ "response_type": "ephemeral", "text": "3 sessions running" }))
        .send()
        .await
        .expect("POST");
    assert_eq!(answer.status(), 200);
    let call = fake
        .calls()
        .into_iter()
        .find(|c| c.method == "response_url")
        .expect("recorded");
    assert_eq!(call.params["body"]["text"], "3 sessions running");
    let stranger = reqwest::Client::new()
        .post(format!("{}/commands/{TEAM_ID}/1/nope", fake.url()))
        .json(&json!({ "text": "hi" }))
        .send()
        .await
        .expect("POST");
    assert_eq!(stranger.status(), 404);
}
