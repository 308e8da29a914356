//! A page's context with a prompt (the Chrome extension's): bounded and checked as the hostile
//! input it is — the outer HTML cut and flagged, a screenshot that is no PNG or too large
//! refused with nothing stored, oversized bodies refused — its screenshots served as the
//! session's artifacts to whoever sees the session (an extension token too), and the URL
//! rules an admin sets.

use std::io::Write;

use axum::http::{Method, StatusCode};
use base64::Engine;
use serde_json::{Value, json};

use crate::harness::{TestServer, make_repo};
use crate::matrix;
use crate::people::invite;

/// A `width` × `height` PNG, one colour.
pub fn png(width: u32, height: u32) -> Vec<u8> {
    fn chunk(out: &mut Vec<u8>, kind: &[u8], data: &[u8]) {
        out.extend((data.len() as u32).to_be_bytes());
        let mut crc = crc32fast::Hasher::new();
        crc.update(kind);
        crc.update(data);
        out.extend(kind);
        out.extend(data);
        out.extend(crc.finalize().to_be_bytes());
    }
    let mut ihdr = Vec::new();
    ihdr.extend(width.to_be_bytes());
    ihdr.extend(height.to_be_bytes());
    ihdr.extend([8, 2, 0, 0, 0]);
    // Each row: filter byte 0, then RGB pixels.
    let row: Vec<u8> = std::iter::once(0)
        .chain((0..width).flat_map(|_| [47, 111, 235]))
        .collect();
    let raw = row.repeat(height as usize);
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
    z.write_all(&raw).unwrap();
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    chunk(&mut out, b"IHDR", &ihdr);
    chunk(&mut out, b"IDAT", &z.finish().unwrap());
    chunk(&mut out, b"IEND", &[]);
    out
}

pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A page context as the extension sends it: a picked button with a 40 KB outer HTML.
pub fn page(element_png: &[u8], view_png: &[u8]) -> Value {
    let html = format!("<button id=\"buy\">{}</button>", "x".repeat(40_000));
    json!({
        "url": "http://shop.test/cart?step=2",
        "title": "Cart — Shop",
        "element": {
            "selector": "#buy",
            "outer_html": html,
            "outer_html_bytes": html.len(),
            "text": "Buy now",
            "rect": { "x": 10, "y": 20, "width": 120, "height": 32 },
            "device_pixel_ratio": 1.0,
            "components": ["App", "Checkout", "BuyButton"],
        },
        "screenshots": [
            { "kind": "element", "png_base64": b64(element_png) },
            { "kind": "view", "png_base64": b64(view_png) },
        ],
        "console_errors": ["TypeError: total is undefined\n    at cart.js:12"],
    })
}

matrix!(a_pages_context_is_bounded_kept_and_served_to_those_who_see_the_session);
async fn a_pages_context_is_bounded_kept_and_served_to_those_who_see_the_session(s: TestServer) {
    let repo = make_repo(&s, "acme/shop").await;
    let element = png(120, 32);
    let made = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo, "prompt": "The buy button does nothing", "context": page(&element, &png(800, 600)) }),
        )
        .send()
        .await;
    assert_eq!(
        made.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&made.body)
    );
    let detail = made.json();
    let id = detail["session"]["id"].as_str().unwrap().to_string();
    let c = &detail["prompts"][0]["context"];
    assert_eq!(c["url"], "http://shop.test/cart?step=2");
    assert_eq!(c["element"]["selector"], "#buy");
    assert_eq!(c["element"]["outer_html_cut"], true);
    assert_eq!(
        c["element"]["outer_html"].as_str().unwrap().len(),
        32 * 1024,
        "cut to its bound"
    );
    assert_eq!(c["element"]["outer_html_bytes"], 40_000 + 26);
    let shots = c["screenshots"].as_array().unwrap();
    assert_eq!(shots.len(), 2);
    assert_eq!(
        (
            shots[0]["kind"].as_str(),
            shots[0]["width"].as_u64(),
            shots[0]["height"].as_u64()
        ),
        (Some("element"), Some(120), Some(32))
    );
    // The timeline's event carries it too.
    let events = s
        .get(&format!("/api/sessions/{id}/events"))
        .send()
        .await
        .json();
    let queued = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "prompt_queued")
        .unwrap()
        .clone();
    assert_eq!(queued["context"]["element"]["selector"], "#buy");

    // The screenshot is served as the PNG that was sent, as an image and nothing else.
    let artifact = shots[0]["artifact"].as_str().unwrap();
    let path = format!("/api/sessions/{id}/artifacts/{artifact}");
    let got = s.get(&path).send().await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.body, element);
    assert_eq!(got.headers["content-type"], "image/png");
    assert_eq!(got.headers["x-content-type-options"], "nosniff");

    // The extension's token reads it as its person; a member who cannot see the repo cannot.
    let mia = invite(&s, "mia", false).await;
    let token = crate::extension::pair(&s, &mia).await;
    let theirs = s
        .post(
            "/api/sessions",
            json!({ "repo_id": repo, "prompt": "Fix it", "context": page(&element, &png(4, 4)) }),
        )
        .bearer(&token)
        .send()
        .await;
    assert_eq!(
        theirs.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&theirs.body)
    );
    let theirs = theirs.json();
    let sid = theirs["session"]["id"].as_str().unwrap();
    let art = theirs["prompts"][0]["context"]["screenshots"][0]["artifact"]
        .as_str()
        .unwrap();
    let read = s
        .get(&format!("/api/sessions/{sid}/artifacts/{art}"))
        .bearer(&token)
        .send()
        .await;
    assert_eq!(read.status, StatusCode::OK);
    assert_eq!(read.body, element);
    let follow = s
        .post(
            &format!("/api/sessions/{sid}/prompts"),
            json!({ "text": "And the total", "context": { "url": "http://shop.test/cart", "console_errors": ["boom"] } }),
        )
        .bearer(&token)
        .send()
        .await;
    assert_eq!(follow.status, StatusCode::CREATED);
    assert_eq!(follow.json()["context"]["console_errors"], json!(["boom"]));
    s.req(Method::PUT, &format!("/api/repos/{repo}/access"))
        .bearer(&s.admin_token)
        .json(&json!({ "access": "members", "grants": [] }))
        .send()
        .await;
    s.get(&path)
        .bearer(&token)
        .send()
        .await
        .assert_error(StatusCode::NOT_FOUND, "not_found");
}

matrix!(a_hostile_pages_context_is_refused_and_nothing_is_kept);
async fn a_hostile_pages_context_is_refused_and_nothing_is_kept(s: TestServer) {
    let repo = make_repo(&s, "acme/shop").await;
    let ok = png(2, 2);
    let with = |f: &dyn Fn(&mut Value)| {
        let mut p = page(&ok, &ok);
        f(&mut p);
        json!({ "repo_id": repo, "prompt": "look", "context": p })
    };
    let cases: Vec<(&str, Value, StatusCode, &str)> = vec![
        (
            "an SVG posing as a screenshot",
            with(&|p| {
                p["screenshots"][0]["png_base64"] = json!(b64(b"<svg onload=alert(1)>"));
            }),
            StatusCode::UNPROCESSABLE_ENTITY,
            "not a PNG",
        ),
        (
            "not base64",
            with(&|p| p["screenshots"][0]["png_base64"] = json!("%%%")),
            StatusCode::UNPROCESSABLE_ENTITY,
            "not base64",
        ),
        (
            "a javascript: URL",
            with(&|p| p["url"] = json!("javascript:alert(1)")),
            StatusCode::UNPROCESSABLE_ENTITY,
            "not http",
        ),
        (
            "two element screenshots",
            with(&|p| p["screenshots"][1]["kind"] = json!("element")),
            StatusCode::UNPROCESSABLE_ENTITY,
            "two element screenshots",
        ),
        (
            "a PNG 20000 pixels wide",
            with(&|p| p["screenshots"][0]["png_base64"] = json!(b64(&png(20_000, 1)))),
            StatusCode::UNPROCESSABLE_ENTITY,
            "a side is 1 to",
        ),
        (
            "a screenshot past its byte bound",
            with(&|p| {
                p["screenshots"][0]["png_base64"] = json!("A".repeat(5 * 1024 * 1024));
            }),
            StatusCode::PAYLOAD_TOO_LARGE,
            "larger than",
        ),
        (
            "a field the server does not know",
            with(&|p| p["script"] = json!("alert(1)")),
            StatusCode::UNPROCESSABLE_ENTITY,
            "",
        ),
        (
            "a context without a prompt",
            json!({ "repo_id": repo, "prompt": "", "context": page(&ok, &ok) }),
            StatusCode::UNPROCESSABLE_ENTITY,
            "prompt is empty",
        ),
    ];
    for (what, body, status, needle) in cases {
        let res = s.post("/api/sessions", body).send().await;
        assert_eq!(
            res.status,
            status,
            "{what}: {}",
            String::from_utf8_lossy(&res.body)
        );
        let msg = res.json()["message"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(msg.contains(needle), "{what}: {msg}");
    }
    let listed = s.get("/api/sessions").send().await.json();
    assert_eq!(listed, json!([]), "no refused request left a session");

    // Bodies: past 8 MiB nowhere, past 1 MiB anywhere but a prompt.
    let huge = json!({ "repo_id": repo, "prompt": "x".repeat(9 * 1024 * 1024) });
    s.post("/api/sessions", huge)
        .send()
        .await
        .assert_error(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
    let big_name = json!({ "name": "x".repeat(2 * 1024 * 1024) });
    s.post("/api/tokens", big_name)
        .send()
        .await
        .assert_error(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
}

matrix!(admins_map_pages_to_repos_and_people_see_the_rules_of_their_repos);
async fn admins_map_pages_to_repos_and_people_see_the_rules_of_their_repos(s: TestServer) {
    let web = make_repo(&s, "acme/web").await;
    let ops = make_repo(&s, "acme/ops").await;
    let hello = s.get("/api/extension/hello").send().await.json();
    assert_eq!(hello["product"], "tandem");
    let rules = json!([
        { "pattern": "https://app.acme.com/*", "repo_id": web },
        { "pattern": "https://ops.acme.com/*", "repo_id": ops },
    ]);
    let mia = invite(&s, "mia", false).await;
    s.req(Method::PUT, "/api/extension/rules")
        .bearer(&mia.token)
        .json(&rules)
        .send()
        .await
        .assert_error(StatusCode::FORBIDDEN, "forbidden");
    for bad in [
        json!([{ "pattern": "javascript:*", "repo_id": web }]),
        json!([{ "pattern": "https://a b/*", "repo_id": web }]),
        json!([{ "pattern": "https://x/*", "repo_id": web }, { "pattern": "https://x/*", "repo_id": ops }]),
    ] {
        s.req(Method::PUT, "/api/extension/rules")
            .bearer(&s.admin_token)
            .json(&bad)
            .send()
            .await
            .assert_error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input");
    }
    let set = s
        .req(Method::PUT, "/api/extension/rules")
        .bearer(&s.admin_token)
        .json(&rules)
        .send()
        .await;
    assert_eq!(set.status, StatusCode::OK);
    assert_eq!(set.json().as_array().unwrap().len(), 2);
    // Mia may not see ops: its rule is left out of what her extension reads.
    s.req(Method::PUT, &format!("/api/repos/{ops}/access"))
        .bearer(&s.admin_token)
        .json(&json!({ "access": "members", "grants": [] }))
        .send()
        .await;
    let token = crate::extension::pair(&s, &mia).await;
    let seen = s
        .get("/api/extension/rules")
        .bearer(&token)
        .send()
        .await
        .json();
    assert_eq!(
        seen,
        json!([{ "pattern": "https://app.acme.com/*", "repo_id": web, "repo_name": "acme/web" }])
    );
    // The package asks for this server and the pages of the rules its person sees: the
    // admin's names both, mia's only hers, and nobody's comes without signing in.
    let server_hosts = json!(format!("{}/*", s.state.public_url().trim_end_matches('/')));
    let zip = s.get("/extension/tandem.zip").send().await;
    assert_eq!(zip.status, StatusCode::OK);
    assert_eq!(zip.headers["content-type"], "application/zip");
    let manifest = crate::extension::zipped_manifest(&zip.body);
    let hosts = manifest["host_permissions"].as_array().unwrap().clone();
    for want in [
        server_hosts.clone(),
        json!("https://app.acme.com/*"),
        json!("https://ops.acme.com/*"),
    ] {
        assert!(hosts.contains(&want), "{want} missing from {hosts:?}");
    }
    assert!(!hosts.contains(&json!("<all_urls>")), "{hosts:?}");
    let hers = s
        .req(Method::GET, "/extension/tandem.zip")
        .bearer(&mia.token)
        .send()
        .await;
    let hosts = crate::extension::zipped_manifest(&hers.body)["host_permissions"].clone();
    assert_eq!(hosts, json!([server_hosts, "https://app.acme.com/*"]));
    let anyone = s.req(Method::GET, "/extension/tandem.zip").send().await;
    assert_eq!(anyone.status, StatusCode::UNAUTHORIZED);

    // For policy installs: the same package signed, and the update manifest naming it by the
    // id its key gives, the same on every request.
    let xml = s.req(Method::GET, "/extension/updates.xml").send().await;
    assert_eq!(xml.status, StatusCode::OK);
    let xml = String::from_utf8(xml.body).unwrap();
    let id = xml
        .split("appid='")
        .nth(1)
        .and_then(|r| r.split('\'').next())
        .unwrap()
        .to_string();
    assert_eq!(id.len(), 32);
    assert_eq!(
        s.get("/api/extension/hello").send().await.json()["extension_id"],
        id.as_str(),
        "the install page's policy names the same id"
    );
    assert!(id.chars().all(|c| ('a'..='p').contains(&c)), "{id}");
    assert!(xml.contains(&format!(
        "codebase='{}/extension/tandem.crx'",
        s.state.public_url()
    )));
    let crx = s.req(Method::GET, "/extension/tandem.crx").send().await;
    assert_eq!(crx.status, StatusCode::OK);
    assert_eq!(&crx.body[..4], b"Cr24");
    let zip_at = crx
        .body
        .windows(4)
        .position(|w| w == b"PK\x03\x04")
        .unwrap();
    let public = crate::extension::zipped_manifest(&crx.body[zip_at..]);
    assert_eq!(
        public["host_permissions"],
        json!([server_hosts]),
        "the public package names no rule's host"
    );
    let again = String::from_utf8(s.get("/extension/updates.xml").send().await.body).unwrap();
    assert_eq!(again, xml);
}
