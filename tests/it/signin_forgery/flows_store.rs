//! The sign-in flow table on both databases: a browser and a person keep a few flows each,
//! signed-out flows in flight are capped all together, expired ones go, and a flow is taken
//! exactly once however many callbacks race; and migration 0025 leaves no pre-namespacing
//! OpenID data (bare groups, bare group grants, emails OpenID alone recorded).

use std::sync::Arc;

use tandem_protocol::UserId;
use tandem_server::db::{self, flows};

use crate::harness::{Backend, TestServer, Transport};

fn key<'a>(state: &'a str, binding: &'a str) -> flows::Key<'a> {
    flows::Key {
        state_hash: state,
        binding_hash: binding,
        kind: "github",
    }
}

async fn insert(
    d: &db::Db,
    state: &str,
    binding: &str,
    by: Option<UserId>,
    now: i64,
) -> flows::Inserted {
    flows::insert(d, &key(state, binding), by, "{}", now, now + 600_000)
        .await
        .unwrap()
}

/// One browser starting flow after flow keeps its newest five; a person starting from ever new
/// browsers keeps five too; past the cap of signed-out flows a signed-out start is refused and
/// a signed-in one is not; expired flows are pruned.
pub(super) async fn flows_in_flight_are_bounded(backend: Backend) {
    let Some(s) = TestServer::start(backend, Transport::Oneshot).await else {
        return;
    };
    let d = &s.state.db;
    let t0 = tandem_server::now_ms();
    for i in 0..12 {
        let st = format!("b{i}");
        assert_eq!(
            insert(d, &st, "browser-a", None, t0 + i).await,
            flows::Inserted::Stored
        );
    }
    assert_eq!(
        flows::count(d, Some("browser-a")).await.unwrap(),
        flows::MAX_PER_BINDING
    );
    // The newest stay, the oldest went.
    let at = t0 + 20;
    assert!(
        flows::find(d, &key("b11", "browser-a"), at)
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        flows::find(d, &key("b7", "browser-a"), at)
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        flows::find(d, &key("b6", "browser-a"), at)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        flows::find(d, &key("b0", "browser-a"), at)
            .await
            .unwrap()
            .is_none()
    );

    // A signed-in person, each start from a fresh binding.
    let admin = tandem_server::identity::auth::local_admin(d).await.unwrap();
    for i in 0..9 {
        insert(
            d,
            &format!("p{i}"),
            &format!("fresh-{i}"),
            Some(admin.id),
            t0 + i,
        )
        .await;
    }
    let mut theirs = Vec::new();
    for i in 0..9 {
        let (st, b) = (format!("p{i}"), format!("fresh-{i}"));
        if flows::find(d, &key(&st, &b), at).await.unwrap().is_some() {
            theirs.push(i);
        }
    }
    assert_eq!(
        theirs,
        vec![4, 5, 6, 7, 8],
        "a person keeps their newest five"
    );

    // Expired flows go at the next start.
    flows::insert(
        d,
        &key("old", "browser-b"),
        None,
        "{}",
        t0 - 700_000,
        t0 - 100_000,
    )
    .await
    .unwrap();
    assert_eq!(flows::count(d, Some("browser-b")).await.unwrap(), 1);
    insert(d, "new", "browser-c", None, t0).await;
    assert_eq!(
        flows::count(d, Some("browser-b")).await.unwrap(),
        0,
        "pruned"
    );

    // Fill the signed-out flows up to the cap in one statement (each a browser of its own).
    let missing = flows::MAX_SIGNED_OUT
        - sqlx::query_scalar::<_, i64>(
            "SELECT COUNT(*) FROM signin_flows WHERE started_by IS NULL",
        )
        .fetch_one(d.raw_pool())
        .await
        .unwrap();
    sqlx::query(&format!(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {missing})
         INSERT INTO signin_flows (state_hash, binding_hash, kind, started_by, data, created_at, expires_at)
         SELECT 'fill-' || i, 'fill-' || i, 'github', NULL, '{{}}', {t0}, {}
         FROM n",
        t0 + 600_000
    ))
    .execute(d.raw_pool())
    .await
    .unwrap();
    assert_eq!(
        insert(d, "one-more", "browser-d", None, t0 + 1).await,
        flows::Inserted::Full,
        "no signed-out flow past the cap"
    );
    assert!(
        flows::find(d, &key("one-more", "browser-d"), at)
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        insert(d, "linking", "browser-e", Some(admin.id), t0 + 30).await,
        flows::Inserted::Stored,
        "a signed-in start is bounded per person instead"
    );
    // Once they expire, signed-out starts are stored again.
    let later = t0 + 600_001;
    assert_eq!(
        insert(d, "after", "browser-f", None, later).await,
        flows::Inserted::Stored
    );
}

/// Sixteen callbacks taking the same flow at once: exactly one gets it.
pub(super) async fn a_flow_is_taken_once_under_racing_takes(backend: Backend) {
    let Some(s) = TestServer::start(backend, Transport::Oneshot).await else {
        return;
    };
    let d = Arc::new(s.state.db.clone());
    let t0 = tandem_server::now_ms();
    for round in 0..3 {
        let st = format!("race-{round}");
        insert(&d, &st, "browser", None, t0).await;
        let barrier = Arc::new(tokio::sync::Barrier::new(16));
        let tasks: Vec<_> = (0..16)
            .map(|_| {
                let (d, st, barrier) = (d.clone(), st.clone(), barrier.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    flows::take(&*d, &key(&st, "browser"), t0 + 1)
                        .await
                        .unwrap()
                        .is_some()
                })
            })
            .collect();
        let mut won = 0;
        for t in tasks {
            won += usize::from(t.await.unwrap());
        }
        assert_eq!(won, 1, "round {round}: exactly one take wins");
    }
}

/// Data from before OpenID groups were namespaced, migrated: bare groups and group grants are
/// gone, an email from the person's invite stays, one only OpenID recorded goes.
pub(super) async fn migration_0025_drops_pre_namespacing_openid_data(backend: Backend) {
    let dir = crate::harness::test_dir();
    let Some(url) = crate::harness::fresh_database(backend, dir.path()).await else {
        return;
    };
    let d = db::Db::connect(&url).await.unwrap();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../migrations")
        .join(backend_dir(backend));
    let mut before = sqlx::migrate::Migrator::new(path).await.unwrap();
    before.migrations = before
        .migrations
        .iter()
        .filter(|m| m.version < 25)
        .cloned()
        .collect::<Vec<_>>()
        .into();
    before.run(d.raw_pool()).await.unwrap();
    let exec = async |sql: &str| {
        sqlx::query(sql).execute(d.raw_pool()).await.unwrap();
    };
    for (id, name, email, groups) in [
        (
            "u-invited",
            "ivy",
            Some("ivy@acme.test"),
            r#"["engineering"]"#,
        ),
        (
            "u-oidc",
            "olga",
            Some("olga@acme.test"),
            r#"["acme:ops","eng"]"#,
        ),
        ("u-none", "nina", None, "[]"),
    ] {
        let email = email.map_or("NULL".to_string(), |e| format!("'{e}'"));
        exec(&format!(
            "INSERT INTO users (id, name, is_admin, created_at, email, groups) VALUES ('{id}', '{name}', 0, 1, {email}, '{groups}')"
        ))
        .await;
    }
    exec("INSERT INTO invites (id, code_hash, name, email, is_admin, created_by, created_at, expires_at, used_at, used_by)
          VALUES ('inv1', 'h1', 'ivy', 'Ivy@acme.test', 0, 'u-invited', 1, 2, 1, 'u-invited')")
    .await;
    exec("INSERT INTO repos (id, name, url, default_branch, created_by, created_at) VALUES ('r1', 'acme/web', 'https://example.test/acme/web.git', 'main', 'u-none', 1)").await;
    for (kind, who) in [
        ("group", "engineering"),
        ("group", "acme:eng"),
        ("user", "u-none"),
    ] {
        exec(&format!(
            "INSERT INTO repo_grants (repo_id, kind, who, role, created_at) VALUES ('r1', '{kind}', '{who}', 'read', 1)"
        ))
        .await;
    }

    d.migrate().await.unwrap();
    let rows: Vec<(String, Option<String>, String)> =
        sqlx::query_as("SELECT id, email, groups FROM users ORDER BY id")
            .fetch_all(d.raw_pool())
            .await
            .unwrap();
    assert_eq!(
        rows,
        vec![
            (
                "u-invited".into(),
                Some("ivy@acme.test".into()),
                "[]".into()
            ),
            ("u-none".into(), None, "[]".into()),
            ("u-oidc".into(), None, "[]".into()),
        ],
        "groups cleared, an invite's email kept, OpenID's alone dropped"
    );
    let grants: Vec<(String, String)> =
        sqlx::query_as("SELECT kind, who FROM repo_grants ORDER BY who")
            .fetch_all(d.raw_pool())
            .await
            .unwrap();
    assert_eq!(grants, vec![("user".into(), "u-none".into())]);
}

fn backend_dir(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => "sqlite",
        Backend::Postgres => "postgres",
    }
}
