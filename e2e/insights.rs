//! The insights page with a realistic month (3,000 generated sessions from every surface,
//! agent and model, their pull requests, costs and sandbox time): its totals, charts and table
//! agree with the API, grouping by person reshapes the table, and the CSV link asks for the
//! same numbers. The screenshot is the book's.

use fantoccini::Locator;
use tandem_protocol::spend::Insights;
use tandem_protocol::*;

use crate::browser::{Browser, web_dir};
use crate::harness::{Backend, TestServer, Transport};

#[tokio::test]
async fn the_insights_page_shows_a_month_of_sessions_as_tiles_charts_and_a_table() {
    let Some(web) = web_dir() else { return };
    let Some(s) = TestServer::start_with(Backend::Sqlite, Transport::Socket, move |c| {
        c.web_dir = Some(web);
    })
    .await
    else {
        return;
    };
    let me: User = reqwest::Client::new()
        .get(format!("{}/api/me", s.url))
        .bearer_auth(&s.admin_token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    tandem_store::fixture::insert_month(
        &s.state.db,
        &tandem_store::fixture::Month {
            sessions: 3_000,
            repos: 5,
            people: 8,
            now: tandem_server::now_ms(),
            days: 30,
            seed: 11,
        },
        me.id,
    )
    .await
    .unwrap();
    let api: Insights = reqwest::Client::new()
        .get(format!("{}/api/insights", s.url))
        .bearer_auth(&s.admin_token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(api.total.sessions, 3_000);

    let b = Browser::start("insights").await;
    b.sign_in(&s.url, &s.first_login_code).await;
    b.client.set_window_size(1280, 1100).await.unwrap();
    b.client.goto(&format!("{}/insights", s.url)).await.unwrap();
    let tiles = b.wait_text("#insights-tiles", "3,000").await;
    let merged = format!(
        "{} of {}",
        api.total.pull_requests_merged, api.total.pull_requests_opened
    );
    assert!(tiles.contains(&merged), "{tiles}");
    assert!(
        tiles.contains(&tandem_protocol::spend::dollars(api.total.cost_micros)),
        "{tiles}"
    );
    // A bar per day of the period in each chart.
    let bars = b
        .client
        .find_all(Locator::Css("#chart-cost rect.bar"))
        .await
        .unwrap();
    assert_eq!(bars.len(), api.days.len());
    // A row per repo, costliest first.
    let first = b.wait_text("#insights-table tbody tr", "acme/").await;
    assert!(first.starts_with(&api.rows[0].key), "{first}");
    let rows = b
        .client
        .find_all(Locator::Css("#insights-table tbody tr"))
        .await
        .unwrap();
    assert_eq!(rows.len(), api.rows.len());
    b.screenshot("insights").await;

    // By person: the table's keys are people.
    b.client
        .find(Locator::Css("#insights-group"))
        .await
        .unwrap()
        .select_by_value("person")
        .await
        .unwrap();
    b.wait_text("#insights-table thead", "person").await;
    let table = b.wait_text("#insights-table tbody", "ada").await;
    assert!(!table.contains("acme/"), "{table}");
    let csv = b
        .client
        .find(Locator::Css("#insights-csv"))
        .await
        .unwrap()
        .attr("href")
        .await
        .unwrap()
        .unwrap();
    assert!(csv.contains("group_by=person"), "{csv}");
    b.close().await;
}
