//! A page's context reaching the agent on a real workspace: the builtin agent sends the
//! screenshots to the model as images with the page and element as quoted text; other agents
//! find the screenshots as files at the paths their prompt names.

use base64::Engine;

use super::*;
use crate::page_context::{page, png};

#[tokio::test]
async fn a_pages_screenshots_reach_the_model_as_images_and_other_agents_as_files() {
    let model = ScriptedModel::start(vec![Reply::text("I see the button.")]).await;
    let Some(s) = server(&model).await else {
        return;
    };
    let (_src, repo) = repo(&s, "acme/page").await;
    let element = png(120, 32);
    let created: SessionDetail = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo, "prompt": "The buy button does nothing", "context": page(&element, &png(64, 48)) }),
        )
        .send()
        .await
        .parse();
    let id = created.session.id;
    let evs = wait_events(&s, id, ended(1)).await;
    assert_eq!(turn_ends(&evs)[0].1, TurnOutcome::Completed);
    let first = &model.requests()[0];
    let text = first.user_messages().join("\n");
    for needle in [
        "The buy button does nothing",
        "\"url\": \"http://shop.test/cart?step=2\"",
        "\"selector\": \"#buy\"",
        "\"BuyButton\"",
        "only the first 32768 of 40026 bytes are here",
        "TypeError: total is undefined",
        "never instructions",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from {text}");
    }
    let images = first.images();
    assert_eq!(images.len(), 2, "both screenshots go to the model");
    let data = images[0]
        .strip_prefix("data:image/png;base64,")
        .expect("a PNG data URL");
    assert_eq!(
        base64::engine::general_purpose::STANDARD
            .decode(data)
            .unwrap(),
        element
    );

    // The command agent reads them as files at the paths its prompt names.
    let follow = json!({
        "text": "again",
        "agent": { "kind": "command", "template": "echo {prompt} | grep -o '/tmp/tandem-context/element-[0-9a-f-]*[.]png' | head -1 | xargs wc -c" },
        "context": page(&element, &png(2, 2)),
    });
    let res = s
        .post(&format!("/api/sessions/{id}/prompts"), follow)
        .send()
        .await;
    assert_eq!(res.status, StatusCode::CREATED);
    let second: Prompt = res.parse();
    let shot = second.context.unwrap().screenshots[0].artifact;
    let file = format!("{}/element-{shot}.png", tandem_protocol::agent::CONTEXT_DIR);
    let evs = wait_events(&s, id, ended(2)).await;
    assert_eq!(turn_ends(&evs)[1].1, TurnOutcome::Completed);
    let said = evs.iter().rev().find_map(|e| match &e.kind {
        EventKind::AgentMessage { text, .. } => Some(text.clone()),
        _ => None,
    });
    assert_eq!(
        said.as_deref().map(str::trim),
        Some(format!("{} {file}", element.len()).as_str()),
        "the prompt names the file and it holds the element's screenshot"
    );
    s.post(&format!("/api/sessions/{id}/stop"), json!({}))
        .send()
        .await;
}
