//! A fake github.com for tests. On one loopback port it serves the REST endpoints the Tandem
//! server calls (app installations and their tokens, repositories, the signed-in user, pull
//! requests, issues and their comments), git smart HTTP through real `git http-backend`, and the
//! OAuth web flow; it also delivers signed webhooks. It checks credentials the way GitHub does
//! (an RS256 app JWT, `ghs_` installation tokens, `gho_` user tokens) and records every token it
//! mints, pull request, issue, comment (with its edits) and request, so a test can assert what
//! the production code did. It speaks the real wire formats over real HTTP, so octocrab and git
//! cannot tell it from GitHub.
//!
//! The server runs on a thread and runtime of its own, so a test that blocks (a synchronous
//! `git` command, say) cannot stall it; dropping the [`FakeGithub`] stops it.
//!
//! What it does not model: forks, reviews, closing issues, labels on pull requests, pagination
//! of anything but an issue's comments (other lists come back whole). A user's own permission on
//! a repository is admin unless a test sets it (`set_permission`; `none` hides the repository
//! from every endpoint); installation tokens reach exactly what they were minted for.
#![forbid(unsafe_code)]

mod auth;
mod bare_repo;
mod error;
mod git_http;
mod oauth;
mod rest;
mod shapes;
mod state;
mod time;
mod webhook;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use axum::Router;
use jsonwebtoken::DecodingKey;
use serde_json::{Value, json};

pub use state::{CommentRecord, MintedToken, PullRecord, RequestRecord};

use crate::shapes::now;
use crate::state::{Actor, Issue, Repo, Shared, Thread, User, World};

/// The app's slug; its bot, which acts for installation tokens, is `tandem-test[bot]`.
pub const APP_SLUG: &str = "tandem-test";

/// A test app's private key, PKCS#1 PEM as GitHub hands them out. For tests only.
pub const APP_PRIVATE_KEY_PEM: &str = include_str!("app-key.pem");
/// The public half of [`APP_PRIVATE_KEY_PEM`], to pass to [`FakeGithub::start`].
pub const APP_PUBLIC_KEY_PEM: &str = include_str!("app-key.pub.pem");

/// A running fake GitHub on `127.0.0.1`.
pub struct FakeGithub {
    shared: Arc<Shared>,
    /// Dropping it stops the server.
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl FakeGithub {
    /// Starts on `127.0.0.1:0`; bare repos live under `root/<owner>/<name>.git`. App JWTs must
    /// be signed by the key whose public half is `app_public_key_pem` and name `app_id` as `iss`.
    pub async fn start(root: &Path, app_id: u64, app_public_key_pem: &str) -> FakeGithub {
        let app_key = DecodingKey::from_rsa_pem(app_public_key_pem.as_bytes())
            .expect("the app's public key is RSA PEM");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let url = format!("http://{}", listener.local_addr().expect("bound"));
        let shared = Arc::new(Shared {
            url,
            root: root.to_path_buf(),
            app_id,
            app_key,
            world: Mutex::new(World::default()),
        });
        let app = app(shared.clone());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("fake-github".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("a runtime");
                runtime.block_on(async move {
                    let listener =
                        tokio::net::TcpListener::from_std(listener).expect("adopt the listener");
                    tokio::select! {
                        _ = axum::serve(listener, app) => {}
                        _ = stopped => {}
                    }
                });
                // In-flight git backends are killed with their tasks (`kill_on_drop`).
                runtime.shutdown_background();
            })
            .expect("spawn the server thread");
        FakeGithub {
            shared,
            _stop: stop,
        }
    }

    /// `http://127.0.0.1:PORT`: the API base, the git host and the OAuth pages alike.
    pub fn url(&self) -> String {
        self.shared.url.clone()
    }

    /// Creates a bare repo (`git init --bare -b default_branch`, pushes over HTTP allowed) and
    /// returns its path. The repo is private: only tokens that cover it can see it.
    pub fn add_repo(&self, owner: &str, name: &str, default_branch: &str) -> PathBuf {
        let path = self.shared.repo_path(owner, name);
        let full = format!("{owner}/{name}");
        assert!(
            !self.shared.world().repos.contains_key(&full),
            "add_repo: {full} already exists"
        );
        bare_repo::create(&path, default_branch);
        let mut world = self.shared.world();
        world.ensure_account(owner);
        let repo = Repo {
            id: world.next_id(),
            owner: owner.into(),
            name: name.into(),
            default_branch: default_branch.into(),
            created: now(),
            next_number: 1,
            labels: Default::default(),
            protected: Vec::new(),
        };
        world.repos.insert(full, repo);
        path
    }

    /// Installs the app for `account` with these repos (`owner/name`, each already added).
    pub fn install(&self, installation_id: u64, account: &str, repos: &[&str]) {
        let mut world = self.shared.world();
        for r in repos {
            assert!(world.repos.contains_key(*r), "install: add_repo {r} first");
        }
        world.ensure_account(account);
        let installation = state::Installation {
            id: installation_id,
            account: account.into(),
            repos: repos.iter().map(|r| r.to_string()).collect(),
            created: now(),
        };
        world.installations.insert(installation_id, installation);
    }

    /// Adds a GitHub user (its profile is what `GET /user` answers with a token of theirs).
    pub fn add_user(&self, login: &str, id: u64, name: &str, email: &str) {
        let mut world = self.shared.world();
        world.account_ids.remove(login);
        world.users.insert(
            login.into(),
            User {
                id,
                name: name.into(),
                email: email.into(),
                created: now(),
            },
        );
    }

    /// What `login` may do on `full_name` (`none`, `read`, `triage`, `write`, `maintain`,
    /// `admin`): what `GET /repos/{owner}/{repo}` answers with their token (`none`: a 404 there
    /// and from every other endpoint of the repository).
    pub fn set_permission(&self, login: &str, full_name: &str, level: &str) {
        self.shared
            .world()
            .user_permissions
            .insert((login.into(), full_name.into()), level.into());
    }

    /// The user signed in to the "browser": OAuth `authorize` signs in as them.
    pub fn set_browser_user(&self, login: &str) {
        let mut world = self.shared.world();
        assert!(
            world.users.contains_key(login),
            "set_browser_user: add_user {login} first"
        );
        world.browser_user = Some(login.into());
    }

    /// The app's OAuth client credentials.
    pub fn set_oauth_client(&self, client_id: &str, client_secret: &str) {
        self.shared.world().oauth_client = Some((client_id.into(), client_secret.into()));
    }

    /// Every installation token minted so far, in order.
    pub fn minted_tokens(&self) -> Vec<MintedToken> {
        self.shared
            .world()
            .tokens
            .iter()
            .map(|t| t.minted.clone())
            .collect()
    }

    /// Makes an installation token expire now (to test refreshing).
    pub fn expire_token(&self, token: &str) {
        let mut world = self.shared.world();
        let t = world
            .tokens
            .iter_mut()
            .find(|t| t.minted.token == token)
            .expect("expire_token: no such token");
        t.expires = now();
        t.minted.expires_at = shapes::timestamp(t.expires);
    }

    /// Makes every user access token of `login` expire now (their refresh tokens still work).
    pub fn expire_user_tokens(&self, login: &str) {
        let mut world = self.shared.world();
        let theirs: Vec<String> = world
            .user_tokens
            .iter()
            .filter(|(_, l)| *l == login)
            .map(|(t, _)| t.clone())
            .collect();
        for t in theirs {
            world.user_token_expiry.insert(t, now());
        }
    }

    /// Refresh grants answered so far.
    pub fn refreshes(&self) -> usize {
        self.shared.world().refreshes
    }

    /// Every pull request, in the order they were opened.
    pub fn pulls(&self) -> Vec<PullRecord> {
        self.shared
            .world()
            .pulls
            .iter()
            .map(|p| p.record.clone())
            .collect()
    }

    /// Every issue comment on every issue and pull request, oldest first (those made through
    /// the API and by the `…_payload` methods), as they stand now.
    pub fn comments(&self) -> Vec<CommentRecord> {
        self.shared
            .world()
            .comments
            .iter()
            .map(|c| c.record.clone())
            .collect()
    }

    /// Every comment on issue (or pull request) `owner/repo#number`, oldest first, as it stands
    /// now: latest body, edit count, author. Panics if there is no such issue.
    pub fn issue_comments(&self, owner: &str, repo: &str, number: u64) -> Vec<CommentRecord> {
        let world = self.shared.world();
        assert!(
            world.thread(owner, repo, number).is_some(),
            "issue_comments: no issue or pull request {owner}/{repo}#{number}"
        );
        world
            .comments
            .iter()
            .map(|c| &c.record)
            .filter(|r| r.owner == owner && r.repo == repo && r.number == number)
            .cloned()
            .collect()
    }

    /// Every request so far (REST, git and OAuth), in the order they were answered.
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.shared.world().requests.clone()
    }

    /// Sends a webhook like GitHub does: POST `url` (`http://` only) with `X-GitHub-Event`, a
    /// fresh `X-GitHub-Delivery`, and `X-Hub-Signature-256` = `sha256=` + hex HMAC-SHA256 of
    /// the body under `secret`. Returns the receiver's HTTP status; panics if nothing answers
    /// within GitHub's ten seconds.
    pub async fn deliver_webhook(url: &str, secret: &str, event: &str, payload: &Value) -> u16 {
        webhook::deliver(url, secret, event, payload).await
    }

    /// Merges pull request `number` as GitHub's merge button does — a real merge commit on the
    /// base branch, the pull request closed and merged — and returns the `pull_request` "closed"
    /// webhook payload to deliver. Panics if it is not open or does not merge cleanly.
    pub fn merge_pull(&self, owner: &str, repo: &str, number: u64) -> Value {
        let full = format!("{owner}/{repo}");
        let path = self.shared.repo_path(owner, repo);
        let tips = bare_repo::tips_blocking(&path);
        let (at, base, base_sha, head, head_sha, title) = {
            let mut world = self.shared.world();
            world.sync_tips(&full, &tips);
            let at = pull_index(&world, owner, repo, number);
            let p = &world.pulls[at];
            assert_eq!(
                p.record.state, "open",
                "merge_pull: {full}#{number} is not open"
            );
            let r = &p.record;
            (
                at,
                r.base.clone(),
                p.base_sha.clone(),
                r.head.clone(),
                p.head_sha.clone(),
                r.title.clone(),
            )
        };
        let message = format!("Merge pull request #{number} from {owner}/{head}\n\n{title}");
        let merge_sha = bare_repo::merge(&path, &base, &base_sha, &head_sha, &message)
            .unwrap_or_else(|e| panic!("merge_pull: {full}#{number} does not merge cleanly: {e}"));
        let mut world = self.shared.world();
        let merger = world
            .browser_user
            .clone()
            .unwrap_or_else(|| owner.to_string());
        let merger = world.actor(&merger);
        let time = now();
        let pull = &mut world.pulls[at];
        pull.record.state = "closed".into();
        pull.record.merged = true;
        pull.closed = Some(time);
        pull.merged = Some(time);
        pull.updated = time;
        pull.merged_by = Some(merger.clone());
        pull.merge_commit_sha = Some(merge_sha);
        let repo_info = &world.repos[&full];
        let payload = json!({
            "action": "closed",
            "number": number,
            "pull_request": shapes::pull(&self.shared.url, &world, repo_info, &world.pulls[at]),
        });
        event(&self.shared.url, &world, &full, &merger, payload)
    }

    /// Comments `body` on pull request `number` as `login` (a person on github.com) and returns
    /// the `issue_comment` "created" webhook payload to deliver. The comment is recorded too.
    /// Panics if `number` is not a pull request ([`Self::issue_comment_payload`] takes either).
    pub fn comment_payload(
        &self,
        owner: &str,
        repo: &str,
        number: u64,
        login: &str,
        body: &str,
    ) -> Value {
        pull_index(&self.shared.world(), owner, repo, number);
        self.issue_comment_payload(owner, repo, number, login, body)
    }

    /// `login` (a person on github.com) opens issue `title`/`body` on `owner/repo`; returns its
    /// number, the next in the sequence the repository's pull requests share.
    pub fn open_issue(&self, owner: &str, repo: &str, login: &str, title: &str, body: &str) -> u64 {
        let full = format!("{owner}/{repo}");
        let mut world = self.shared.world();
        let author = world.person(login);
        let (id, time) = (world.next_id(), now());
        let r = world
            .repos
            .get_mut(&full)
            .unwrap_or_else(|| panic!("open_issue: add_repo {full} first"));
        let number = r.next_number;
        r.next_number += 1;
        world.issues.push(Issue {
            owner: owner.into(),
            repo: repo.into(),
            number,
            id,
            title: title.into(),
            body: (!body.is_empty()).then(|| body.into()),
            author,
            labels: Vec::new(),
            state: "open".into(),
            created: time,
            updated: time,
            comments: 0,
        });
        number
    }

    /// `login` (a person on github.com) comments `body` on issue or pull request `number` and
    /// returns the `issue_comment` "created" webhook payload to deliver; an issue's `issue`
    /// has no `pull_request` key. The comment is recorded too. Panics if there is no such issue.
    pub fn issue_comment_payload(
        &self,
        owner: &str,
        repo: &str,
        number: u64,
        login: &str,
        body: &str,
    ) -> Value {
        let full = format!("{owner}/{repo}");
        let mut world = self.shared.world();
        let thread = world
            .thread(owner, repo, number)
            .unwrap_or_else(|| panic!("no issue or pull request {full}#{number}"));
        let author = world.person(login);
        let (id, time) = (world.next_id(), now());
        let at = world.record_comment(thread, id, &author, body, time);
        let base = &self.shared.url;
        let repo_info = &world.repos[&full];
        let payload = json!({
            "action": "created",
            "issue": shapes::thread(base, &world, repo_info, thread),
            "comment": shapes::comment(base, repo_info, &world.comments[at]),
        });
        event(base, &world, &full, &author, payload)
    }

    /// `login` adds label `label` to issue `number` (creating the label in the repository the
    /// first time, as GitHub does) and returns the `issues` "labeled" webhook payload to
    /// deliver. Panics if `number` is not an issue (pull requests carry no labels here).
    pub fn label_payload(
        &self,
        owner: &str,
        repo: &str,
        number: u64,
        login: &str,
        label: &str,
    ) -> Value {
        let full = format!("{owner}/{repo}");
        let mut world = self.shared.world();
        let at = match world.thread(owner, repo, number) {
            Some(Thread::Issue(at)) => at,
            Some(Thread::Pull(_)) => panic!("label_payload: {full}#{number} is a pull request"),
            None => panic!("label_payload: no issue {full}#{number}"),
        };
        let sender = world.person(login);
        if !world.repos[&full].labels.contains_key(label) {
            let id = world.next_id();
            if let Some(r) = world.repos.get_mut(&full) {
                r.labels.insert(label.into(), id);
            }
        }
        let issue = &mut world.issues[at];
        if !issue.labels.iter().any(|l| l == label) {
            issue.labels.push(label.into());
        }
        issue.updated = now();
        let base = &self.shared.url;
        let repo_info = &world.repos[&full];
        let payload = json!({
            "action": "labeled",
            "issue": shapes::plain_issue(base, repo_info, &world.issues[at]),
            "label": shapes::label(base, repo_info, label),
        });
        event(base, &world, &full, &sender, payload)
    }

    /// Protects the branches of `owner/repo` matching `glob` (`main`, `release/*`): a push
    /// to one is refused with GitHub's "GH006: Protected branch update failed" message, while
    /// the other refs of the same push still land.
    pub fn protect_branch(&self, owner: &str, repo: &str, glob: &str) {
        let globs = {
            let mut world = self.shared.world();
            let r = world
                .repos
                .get_mut(&format!("{owner}/{repo}"))
                .expect("protect_branch: add_repo first");
            r.protected.push(glob.into());
            r.protected.clone()
        };
        bare_repo::write_protection_hook(&self.shared.repo_path(owner, repo), &globs);
    }
}

/// Where pull request `owner/repo#number` is; panics if there is none (a test's mistake).
fn pull_index(world: &World, owner: &str, repo: &str, number: u64) -> usize {
    world
        .pulls
        .iter()
        .position(|p| p.record.owner == owner && p.record.repo == repo && p.record.number == number)
        .unwrap_or_else(|| panic!("no pull request {owner}/{repo}#{number}"))
}

/// Completes a webhook payload with what every event carries: `repository`, `sender`, and
/// `installation` when the app is installed on the repository.
fn event(base: &str, world: &World, full: &str, sender: &Actor, mut payload: Value) -> Value {
    payload["repository"] = shapes::repo(base, world, &world.repos[full]);
    payload["sender"] = shapes::user(base, sender);
    if let Some(inst) = world.installation_for(full) {
        payload["installation"] = shapes::event_installation(inst.id);
    }
    payload
}

/// Every route, behind the middleware that authenticates and logs each request.
fn app(shared: Arc<Shared>) -> Router {
    Router::new()
        .merge(rest::router())
        .merge(oauth::router())
        .fallback(git_http::serve)
        .layer(axum::middleware::from_fn_with_state(
            shared.clone(),
            auth::observe,
        ))
        .with_state(shared)
}
