//! Store: a session tree's root where an older server left it out (a session with a parent but
//! no `root_id`, written during a rolling upgrade), and migration 0028's backfill of existing
//! trees.

use tandem_protocol::{AgentSpec, Author, AuthorKind, CreateSession, RepoId, SessionId};
use tandem_server::sessions::budget;

use crate::harness::{Backend, TestServer};
use crate::matrix;

async fn create(s: &TestServer, repo: RepoId, parent: Option<SessionId>) -> SessionId {
    let req = CreateSession {
        repo_id: repo,
        prompt: String::new(),
        branch: None,
        agent: None,
        context: None,
    };
    let author = Author {
        kind: AuthorKind::Automation,
        user_id: None,
        name: "test".into(),
    };
    tandem_server::sessions::create_with_parent(
        &s.state.db,
        author,
        req,
        &AgentSpec::Builtin,
        parent,
        Some("t".into()),
    )
    .await
    .unwrap()
    .session
    .id
}

async fn stored_root(s: &TestServer, id: SessionId) -> Option<String> {
    sqlx::query_scalar("SELECT root_id FROM sessions WHERE id = $1")
        .bind(id.to_string())
        .fetch_one(s.state.db.raw_pool())
        .await
        .unwrap()
}

/// A child and grandchild an older server wrote (no `root_id`) still draw on their root's
/// budget (the root found through their parents), a session made under them joins the same
/// root, and the repair at start fills their `root_id` in.
async fn a_session_without_its_root_still_draws_on_its_trees_budget(s: TestServer) {
    let repo: RepoId = crate::harness::make_repo(&s, "acme/legacy")
        .await
        .parse()
        .unwrap();
    let db = &s.state.db;
    let root = create(&s, repo, None).await;
    let child = create(&s, repo, Some(root)).await;
    let grandchild = create(&s, repo, Some(child)).await;
    sqlx::query("UPDATE sessions SET root_id = NULL WHERE id IN ($1, $2)")
        .bind(child.to_string())
        .bind(grandchild.to_string())
        .execute(db.raw_pool())
        .await
        .unwrap();
    tandem_store::sessions::set_model_budget(db, root, 2)
        .await
        .unwrap();
    let cap = 100;
    budget::take_model_request(db, cap, grandchild)
        .await
        .unwrap();
    budget::take_model_request(db, cap, child).await.unwrap();
    let b = budget::model_budget(db, cap, grandchild).await.unwrap();
    assert_eq!((b.root, b.used, b.limit), (root, 2, 2), "the root's budget");
    let err = budget::take_model_request(db, cap, grandchild)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("its automation's budget"), "{err}");
    let later = create(&s, repo, Some(grandchild)).await;
    assert_eq!(stored_root(&s, later).await, Some(root.to_string()));
    assert_eq!(
        tandem_store::trees::repair_roots(db).await.unwrap(),
        2,
        "the two rows without their root"
    );
    for id in [child, grandchild] {
        assert_eq!(stored_root(&s, id).await, Some(root.to_string()));
    }
    assert_eq!(stored_root(&s, root).await, None, "a root stays a root");
    assert_eq!(tandem_store::trees::repair_roots(db).await.unwrap(), 0);
}
matrix!(a_session_without_its_root_still_draws_on_its_trees_budget);

/// Migration 0028 on a database with trees in it: every descendant gets its root, and each
/// root's total is its own requests plus its tree's.
async fn migration_0028_backfills_roots_and_totals(backend: Backend) {
    let dir = crate::harness::test_dir();
    let Some(url) = crate::harness::fresh_database(backend, dir.path()).await else {
        return;
    };
    let d = tandem_store::Db::connect(&url).await.unwrap();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../migrations")
        .join(match backend {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        });
    let mut before = sqlx::migrate::Migrator::new(path).await.unwrap();
    before.migrations = before
        .migrations
        .iter()
        .filter(|m| m.version < 28)
        .cloned()
        .collect::<Vec<_>>()
        .into();
    before.run(d.raw_pool()).await.unwrap();
    for sql in [
        "INSERT INTO users (id, name, is_admin, created_at) VALUES ('u1', 'ann', 1, 1)",
        "INSERT INTO repos (id, name, url, default_branch, created_by, created_at) VALUES ('r1', 'acme/web', 'https://example.test/acme/web.git', 'main', 'u1', 1)",
    ] {
        sqlx::query(sql).execute(d.raw_pool()).await.unwrap();
    }
    // Two trees: a (b (c), d) and e alone; (id, parent, requests made).
    let rows = [
        ("a", None, 1),
        ("b", Some("a"), 2),
        ("c", Some("b"), 4),
        ("d", Some("a"), 8),
        ("e", None, 16),
    ];
    for (id, parent, n) in rows {
        sqlx::query(
            "INSERT INTO sessions (id, repo_id, state, title, branch, author_kind, author_name, created_at, updated_at, parent_id, model_requests)
             VALUES ($1, 'r1', 'stopped', 't', 'main', 'automation', 'test', 1, 1, $2, $3)",
        )
        .bind(id)
        .bind(parent)
        .bind(i64::from(n))
        .execute(d.raw_pool())
        .await
        .unwrap();
    }
    d.migrate().await.unwrap();
    let got: Vec<(String, Option<String>, i64)> =
        sqlx::query_as("SELECT id, root_id, tree_model_requests FROM sessions ORDER BY id")
            .fetch_all(d.raw_pool())
            .await
            .unwrap();
    let want = [
        ("a", None, 15),
        ("b", Some("a"), 0),
        ("c", Some("a"), 0),
        ("d", Some("a"), 0),
        ("e", None, 16),
    ]
    .map(|(id, root, n)| (id.to_string(), root.map(String::from), n))
    .to_vec();
    assert_eq!(got, want);
}

#[tokio::test]
async fn migration_0028_backfills_roots_and_totals_sqlite() {
    migration_0028_backfills_roots_and_totals(Backend::Sqlite).await
}

#[tokio::test]
async fn migration_0028_backfills_roots_and_totals_postgres() {
    migration_0028_backfills_roots_and_totals(Backend::Postgres).await
}
