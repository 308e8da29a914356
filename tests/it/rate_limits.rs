//! Starting an OpenID Connect sign-in needs no credential, so it is limited per client address
//! (`server/src/rate_limit.rs`); pairing starts are tested with the pairing (`extension.rs`).

use axum::http::{Method, StatusCode};

use crate::harness::TestServer;
use crate::matrix;

matrix!(a_flood_of_sign_in_starts_from_one_address_is_refused_and_others_still_start);
async fn a_flood_of_sign_in_starts_from_one_address_is_refused_and_others_still_start(
    s: TestServer,
) {
    // No provider is configured: each start within the limit is answered "unknown provider";
    // the limit is checked first, so the flood is refused before anything else happens.
    let start_from = |addr: &'static str| {
        s.req(Method::GET, "/api/auth/oidc/corp")
            .header("x-forwarded-for", addr)
    };
    let mut refused = None;
    for _ in 0..100 {
        let res = start_from("198.51.100.20").send().await;
        if res.status == StatusCode::TOO_MANY_REQUESTS {
            refused = Some(res);
            break;
        }
        assert_ne!(res.status, StatusCode::OK);
    }
    let refused = refused.expect("a flood of sign-in starts from one address is refused");
    assert!(refused.headers.contains_key("retry-after"));
    let page = String::from_utf8_lossy(&refused.body);
    assert!(
        page.contains("too many sign-in starts") && page.contains("try again in"),
        "{page}"
    );
    let other = start_from("203.0.113.20").send().await;
    assert_ne!(other.status, StatusCode::TOO_MANY_REQUESTS);
}
