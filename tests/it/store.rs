//! Store invariants that hold on both databases.

use tandem_protocol::{Author, AuthorKind, CreateSession, EventKind, RepoId, SessionState};
use tandem_server::{now_ms, sessions};
use tandem_store as db;

use crate::harness::{TestServer, make_repo};
use crate::matrix;

/// A session (prompt "go") on a new repo `acme/web`, by `kind`.
async fn new_session(s: &TestServer, kind: AuthorKind) -> tandem_protocol::SessionId {
    let repo: RepoId = make_repo(s, "acme/web").await.parse().unwrap();
    let author = Author {
        kind,
        user_id: None,
        name: "test".into(),
    };
    let detail = sessions::create(
        &s.state.db,
        author,
        CreateSession {
            repo_id: repo,
            prompt: "go".into(),
            branch: None,
            agent: None,
            context: None,
        },
        &tandem_protocol::AgentSpec::Builtin,
    )
    .await
    .unwrap();
    detail.session.id
}

async fn events_are_append_only_and_gap_free_under_concurrency(s: TestServer) {
    let id = new_session(&s, AuthorKind::Automation).await;
    // 40 concurrent appenders, each in its own transaction.
    let mut tasks = Vec::new();
    for i in 0..40 {
        let dbh = s.state.db.clone();
        tasks.push(tokio::spawn(async move {
            let mut tx = dbh.begin().await.unwrap();
            let e = db::events::append(
                &mut tx,
                id,
                now_ms(),
                EventKind::StateChanged {
                    from: SessionState::Queued,
                    to: SessionState::Queued,
                    reason: Some(format!("n{i}")),
                },
            )
            .await
            .unwrap();
            tx.commit().await.unwrap();
            e.seq
        }));
    }
    let mut seqs = Vec::new();
    for t in tasks {
        seqs.push(t.await.unwrap());
    }
    seqs.sort();
    seqs.dedup();
    assert_eq!(seqs.len(), 40, "sequence numbers are unique");
    // Gap-free, with whatever else wrote meanwhile (the scheduler says the session waits).
    let page = sessions::events(&s.state.db, id, Default::default())
        .await
        .unwrap();
    let all: Vec<i64> = page.events.iter().map(|e| e.seq).collect();
    assert_eq!(all, (1..=all.len() as i64).collect::<Vec<_>>());
    assert!(seqs.iter().all(|q| all.contains(q)));
    assert!(
        page.events
            .iter()
            .filter(|e| !seqs.contains(&e.seq) && e.seq > 2)
            .all(|e| matches!(e.kind, EventKind::Waiting { .. })),
        "only the scheduler's note besides the test's own"
    );

    let upd = sqlx::query("UPDATE events SET payload = '{}' WHERE session_id = $1")
        .bind(id.to_string())
        .execute(s.state.db.raw_pool())
        .await;
    assert!(upd.unwrap_err().to_string().contains("append-only"));
    let del = sqlx::query("DELETE FROM events WHERE session_id = $1")
        .bind(id.to_string())
        .execute(s.state.db.raw_pool())
        .await;
    assert!(del.unwrap_err().to_string().contains("append-only"));
}
matrix!(events_are_append_only_and_gap_free_under_concurrency);

async fn actions_are_audited(s: TestServer) {
    make_repo(&s, "acme/web").await;
    let recent = db::audit::recent(&s.state.db, 10).await.unwrap();
    assert!(recent.iter().any(|(a, _)| a == "repo.create"), "{recent:?}");
    assert!(
        recent.iter().any(|(a, _)| a == "token.create"),
        "{recent:?}"
    );
}
matrix!(actions_are_audited);

/// The session lock: with two prompts queued, many claimers from two "processes" (two pools,
/// two runner ids) racing on one session get exactly one turn; the next claim waits until that
/// turn ends.
async fn one_turn_per_session_whichever_process_claims(s: TestServer) {
    use tandem_protocol::{AgentSpec, CreatePrompt, PromptMode, PromptState, Usage};
    use tandem_server::turns::{self, Claim};
    let repo: RepoId = make_repo(&s, "acme/lock").await.parse().unwrap();
    let author = Author {
        kind: AuthorKind::Automation,
        user_id: None,
        name: "test".into(),
    };
    let create = CreateSession {
        repo_id: repo,
        prompt: "one".into(),
        branch: None,
        agent: None,
        context: None,
    };
    let id = sessions::create(&s.state.db, author.clone(), create, &AgentSpec::Builtin)
        .await
        .unwrap()
        .session
        .id;
    sessions::prompts::submit(
        &s.state.db,
        id,
        author,
        CreatePrompt {
            text: "two".into(),
            mode: PromptMode::Queue,
            agent: None,
            context: None,
        },
    )
    .await
    .unwrap();
    let mut tx = s.state.db.begin().await.unwrap();
    db::sessions::transition(&mut tx, id, SessionState::Ready, None, now_ms())
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let other = db::Db::connect(&s.state.config.database_url).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..16 {
        let (dbh, runner) = if i % 2 == 0 {
            (s.state.db.clone(), "process-a")
        } else {
            (other.clone(), "process-b")
        };
        tasks.push(tokio::spawn(async move {
            turns::claim(&dbh, id, runner).await.unwrap()
        }));
    }
    let mut won = Vec::new();
    for t in tasks {
        if let Claim::Turn(p, _) = t.await.unwrap() {
            won.push(p);
        }
    }
    assert_eq!(won.len(), 1, "exactly one claimer runs a turn");
    assert_eq!(won[0].text, "one", "the first prompt first");
    assert!(matches!(
        turns::claim(&other, id, "process-b").await.unwrap(),
        Claim::Empty { was_running: true }
    ));
    let mut tx = s.state.db.begin().await.unwrap();
    // Only the runner that claimed it can end it.
    let p = won[0].id;
    let by_x = db::prompts::finish(
        &mut tx,
        p,
        Some("process-x"),
        PromptState::Done,
        Usage::default(),
        now_ms(),
    )
    .await
    .unwrap();
    assert!(!by_x, "a runner that did not claim the prompt ended it");
    let by_a = db::prompts::finish(
        &mut tx,
        p,
        Some("process-a"),
        PromptState::Done,
        Usage::default(),
        now_ms(),
    )
    .await
    .unwrap();
    let by_b = db::prompts::finish(
        &mut tx,
        p,
        Some("process-b"),
        PromptState::Done,
        Usage::default(),
        now_ms(),
    )
    .await
    .unwrap();
    assert!(by_a ^ by_b, "exactly the claiming runner ends its turn");
    tx.commit().await.unwrap();
    match turns::claim(&other, id, "process-b").await.unwrap() {
        Claim::Turn(p, _) => assert_eq!(p.text, "two"),
        _ => panic!("the next prompt is claimable once the turn ended"),
    }
    let turns_started = sessions::events(&s.state.db, id, Default::default())
        .await
        .unwrap()
        .events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::TurnStarted { .. }))
        .count();
    assert_eq!(turns_started, 2, "no losing claimer left an event behind");
}
matrix!(one_turn_per_session_whichever_process_claims);

/// The GitHub tables: a session's token is live until taken, an ended session's live token is
/// found by the sweep, deliveries are recorded once, a pull request's state changes once.
async fn github_credentials_deliveries_and_pull_requests(s: TestServer) {
    use tandem_protocol::github::{PrState, PullRequest};
    use tandem_protocol::{SessionId, Timestamp};
    let repo: RepoId = make_repo(&s, "acme/gh").await.parse().unwrap();
    let author = Author {
        kind: AuthorKind::Automation,
        user_id: None,
        name: "test".into(),
    };
    let req = CreateSession {
        repo_id: repo,
        prompt: "go".into(),
        branch: None,
        agent: None,
        context: None,
    };
    let id: SessionId = sessions::create(
        &s.state.db,
        author,
        req,
        &tandem_protocol::AgentSpec::Builtin,
    )
    .await
    .unwrap()
    .session
    .id;
    let pool = &s.state.db;

    db::github::put_credential(pool, id, "sealed-1", 1000)
        .await
        .unwrap();
    db::github::put_credential(pool, id, "sealed-2", 2000)
        .await
        .unwrap();
    assert_eq!(
        db::github::credential(pool, id).await.unwrap(),
        Some(("sealed-2".into(), 2000)),
        "renewal replaces"
    );
    assert!(
        db::github::ended_with_credentials(pool)
            .await
            .unwrap()
            .is_empty(),
        "a live session's token is not swept"
    );
    let mut tx = s.state.db.begin().await.unwrap();
    db::sessions::transition(&mut tx, id, SessionState::Failed, None, now_ms())
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(
        db::github::ended_with_credentials(pool).await.unwrap(),
        [id]
    );
    assert!(
        !db::github::take_credential(pool, id, "sealed-1", now_ms())
            .await
            .unwrap(),
        "an older token does not revoke the newer"
    );
    assert!(
        db::github::take_credential(pool, id, "sealed-2", now_ms())
            .await
            .unwrap()
    );
    assert!(
        !db::github::take_credential(pool, id, "sealed-2", now_ms())
            .await
            .unwrap(),
        "taken once"
    );
    assert!(db::github::credential(pool, id).await.unwrap().is_none());
    assert!(
        db::github::ended_with_credentials(pool)
            .await
            .unwrap()
            .is_empty()
    );

    assert!(
        db::github::first_delivery(pool, "d-1", "pull_request", 1)
            .await
            .unwrap()
    );
    assert!(
        !db::github::first_delivery(pool, "d-1", "pull_request", 2)
            .await
            .unwrap(),
        "a redelivery"
    );

    let pr = PullRequest {
        session_id: id,
        number: 7,
        url: "https://github.example/acme/gh/pull/7".into(),
        branch: "tandem/x".into(),
        base: "main".into(),
        state: PrState::Open,
        head_sha: "abc".into(),
        opened_by: "alice".into(),
        created_at: Timestamp(1),
        updated_at: Timestamp(1),
    };
    db::github::insert_pull_request(pool, repo, &pr)
        .await
        .unwrap();
    assert!(
        db::github::set_pull_request_state(pool, id, PrState::Merged, 2)
            .await
            .unwrap()
    );
    assert!(
        !db::github::set_pull_request_state(pool, id, PrState::Merged, 3)
            .await
            .unwrap(),
        "unchanged"
    );
    let found = db::github::pull_request_by_number(pool, repo, 7)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (found.state, found.head_sha.as_str()),
        (PrState::Merged, "abc")
    );
    assert_eq!(
        db::github::pull_requests_by_head(pool, repo, "abc")
            .await
            .unwrap()
            .len(),
        1
    );
}
matrix!(github_credentials_deliveries_and_pull_requests);

/// A progress follower is held by one process at a time: another takes it over only once the
/// holder's claim lapsed, from the last event the holder reported; the old holder's late report
/// then changes nothing; a done follower is never claimed again.
async fn a_progress_follower_has_one_holder_and_is_taken_over_where_it_stopped(s: TestServer) {
    let id = new_session(&s, AuthorKind::Slack).await;
    let d = &s.state.db;
    // Kinds the server's own sweeper does not know, so it leaves these rows alone.
    let t = 1_000_000;
    db::followers::insert(d, id, "test-thread").await.unwrap();
    db::followers::insert(d, id, "test-thread").await.unwrap();
    assert_eq!(
        db::followers::unclaimed(d, t).await.unwrap(),
        vec![(id, "test-thread".to_string())]
    );
    // A holds it until t + 30 s; B cannot take it before then.
    assert_eq!(
        db::followers::claim(d, id, "test-thread", "A", t, t + 30_000)
            .await
            .unwrap(),
        Some(0)
    );
    assert_eq!(
        db::followers::claim(d, id, "test-thread", "B", t + 1, t + 30_001)
            .await
            .unwrap(),
        None
    );
    assert!(db::followers::unclaimed(d, t + 1).await.unwrap().is_empty());
    db::followers::reported(d, id, "test-thread", "A", 7, false)
        .await
        .unwrap();
    // A renews; then stops renewing. Once its claim lapsed, B takes over from event 7.
    assert_eq!(
        db::followers::claim(d, id, "test-thread", "A", t + 10_000, t + 40_000)
            .await
            .unwrap(),
        Some(7)
    );
    assert_eq!(
        db::followers::claim(d, id, "test-thread", "B", t + 39_999, t + 70_000)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        db::followers::claim(d, id, "test-thread", "B", t + 40_001, t + 70_001)
            .await
            .unwrap(),
        Some(7)
    );
    // A's late report (it was stuck) is not B's: nothing changes.
    db::followers::reported(d, id, "test-thread", "A", 99, true)
        .await
        .unwrap();
    assert_eq!(
        db::followers::claim(d, id, "test-thread", "B", t + 40_002, t + 70_002)
            .await
            .unwrap(),
        Some(7)
    );
    // B finishes: nobody claims it again.
    db::followers::reported(d, id, "test-thread", "B", 12, true)
        .await
        .unwrap();
    assert_eq!(
        db::followers::claim(d, id, "test-thread", "B", t + 40_003, t + 70_003)
            .await
            .unwrap(),
        None
    );
    assert!(
        db::followers::unclaimed(d, t + 999_999)
            .await
            .unwrap()
            .is_empty()
    );
    // A process that stops lets go of its claims at once.
    db::followers::insert(d, id, "test-comment").await.unwrap();
    assert_eq!(
        db::followers::claim(d, id, "test-comment", "A", t, t + 30_000)
            .await
            .unwrap(),
        Some(0)
    );
    db::followers::release(d, "A").await.unwrap();
    assert_eq!(
        db::followers::claim(d, id, "test-comment", "B", t + 1, t + 30_001)
            .await
            .unwrap(),
        Some(0)
    );
}

matrix!(a_progress_follower_has_one_holder_and_is_taken_over_where_it_stopped);
