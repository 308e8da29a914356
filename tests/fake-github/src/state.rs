//! The fake's world — repositories, installations, users, tokens, pull requests, issues,
//! comments — and the records a test reads back. Plain data behind one mutex.
//!
//! Invariant: the mutex is never held across an `.await` or while git runs.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use jsonwebtoken::DecodingKey;
use rand::Rng;
use rand::distr::Alphanumeric;

/// An installation token the fake minted (`POST /app/installations/{id}/access_tokens`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MintedToken {
    /// The secret itself (`ghs_…`).
    pub token: String,
    pub installation_id: u64,
    /// The repositories it reaches, as `owner/name`.
    pub repos: Vec<String>,
    /// Permission name to level (`"contents"` → `"write"`); always includes `metadata: read`.
    pub permissions: BTreeMap<String, String>,
    /// Set by `DELETE /installation/token`.
    pub revoked: bool,
    /// RFC 3339, an hour after minting (as GitHub's are).
    pub expires_at: String,
}

/// A pull request as the fake holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PullRecord {
    pub number: u64,
    pub owner: String,
    pub repo: String,
    pub title: String,
    pub body: Option<String>,
    /// The head branch name (no `owner:` prefix).
    pub head: String,
    pub base: String,
    pub draft: bool,
    /// `"open"` or `"closed"`.
    pub state: String,
    pub merged: bool,
    /// The opener's login: a user's, or `"<APP_SLUG>[bot]"` for an installation token.
    pub opened_by: String,
}

/// An issue comment, on an issue or on a pull request, as it stands now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommentRecord {
    pub id: u64,
    pub owner: String,
    pub repo: String,
    /// The issue's or pull request's number.
    pub number: u64,
    /// The latest body (after any edits).
    pub body: String,
    /// The author's login (`"<APP_SLUG>[bot]"` for an installation token).
    pub author: String,
    /// Whether the App wrote it (an installation token's bot).
    pub by_app: bool,
    /// How many times it was edited since it was posted.
    pub edits: u32,
}

/// One HTTP request the fake received (REST, git or OAuth).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestRecord {
    pub method: String,
    /// The path with its query string.
    pub path: String,
    /// `"app"`, `"installation:<id>"`, `"user:<login>"`, or `"anonymous"` (also for credentials
    /// that were refused).
    pub who: String,
    /// The status the fake answered with.
    pub status: u16,
}

/// A GitHub account as it appears in JSON.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Actor {
    pub login: String,
    pub id: u64,
    /// `"User"`, `"Organization"` or `"Bot"`.
    pub kind: String,
}

pub(crate) struct Repo {
    pub id: u64,
    pub owner: String,
    pub name: String,
    pub default_branch: String,
    pub created: u64,
    /// Pull requests and issues share one numbering per repository.
    pub next_number: u64,
    /// Label name → id; GitHub creates a label the first time one is added to an issue.
    pub labels: BTreeMap<String, u64>,
    /// Branch-name globs the `update` hook refuses.
    pub protected: Vec<String>,
}

#[derive(Clone)]
pub(crate) struct Installation {
    pub id: u64,
    pub account: String,
    /// `owner/name` of each repository the app may reach.
    pub repos: Vec<String>,
    pub created: u64,
}

pub(crate) struct User {
    pub id: u64,
    pub name: String,
    pub email: String,
    pub created: u64,
}

pub(crate) struct Token {
    pub minted: MintedToken,
    pub expires: u64,
}

pub(crate) struct Pull {
    pub record: PullRecord,
    pub id: u64,
    /// GitHub gives the issue behind a pull request an id of its own.
    pub issue_id: u64,
    pub opener: Actor,
    /// Kept up to date with the branch while the pull request is open.
    pub head_sha: String,
    pub base_sha: String,
    pub created: u64,
    pub updated: u64,
    pub closed: Option<u64>,
    pub merged: Option<u64>,
    pub merged_by: Option<Actor>,
    pub merge_commit_sha: Option<String>,
    pub comments: u64,
}

/// An issue that is not a pull request.
pub(crate) struct Issue {
    pub owner: String,
    pub repo: String,
    pub number: u64,
    pub id: u64,
    pub title: String,
    /// `None` for an empty body, as GitHub answers `null`.
    pub body: Option<String>,
    pub author: Actor,
    /// Label names, in the order they were added.
    pub labels: Vec<String>,
    /// `"open"` (the fake does not close issues).
    pub state: String,
    pub created: u64,
    pub updated: u64,
    pub comments: u64,
}

/// Where an issue number leads: a pull request or a plain issue, by index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Thread {
    Pull(usize),
    Issue(usize),
}

/// An issue comment with what its JSON needs besides the record.
pub(crate) struct Comment {
    pub record: CommentRecord,
    pub author: Actor,
    /// On a pull request (its `html_url` is under `/pull/`), not a plain issue.
    pub on_pull: bool,
    pub created: u64,
    pub updated: u64,
}

pub(crate) struct OAuthCode {
    pub login: String,
    pub redirect_uri: String,
    pub expires: u64,
}

#[derive(Default)]
pub(crate) struct World {
    /// By `owner/name`.
    pub repos: BTreeMap<String, Repo>,
    pub installations: BTreeMap<u64, Installation>,
    /// By login.
    pub users: BTreeMap<String, User>,
    /// Ids handed to accounts that were never added as users (repository owners, orgs).
    pub account_ids: BTreeMap<String, u64>,
    pub browser_user: Option<String>,
    /// `(login, owner/name)` → `none`, `read`, `triage`, `write`, `maintain` or `admin`; a user
    /// not listed has admin on every repository.
    pub user_permissions: BTreeMap<(String, String), String>,
    /// `(client_id, client_secret)`.
    pub oauth_client: Option<(String, String)>,
    /// Unused authorization codes.
    pub oauth_codes: HashMap<String, OAuthCode>,
    /// User access token → login.
    pub user_tokens: HashMap<String, String>,
    /// User access token → when it expires (seconds; GitHub Apps' user tokens last 8 hours).
    pub user_token_expiry: HashMap<String, u64>,
    /// Refresh token → login (each is good once).
    pub refresh_tokens: HashMap<String, String>,
    /// Refresh grants answered.
    pub refreshes: usize,
    pub tokens: Vec<Token>,
    pub pulls: Vec<Pull>,
    pub issues: Vec<Issue>,
    /// Oldest first, across every repository.
    pub comments: Vec<Comment>,
    pub requests: Vec<RequestRecord>,
    next_id: u64,
}

impl World {
    /// A fresh id for a repository, pull request, comment or account (one sequence, as GitHub's
    /// ids never collide within a kind).
    pub fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        1_000 + self.next_id
    }

    /// The account called `login`: a user added by the test, the app's bot, or an organization.
    pub fn actor(&self, login: &str) -> Actor {
        if let Some(u) = self.users.get(login) {
            return Actor {
                login: login.into(),
                id: u.id,
                kind: "User".into(),
            };
        }
        if login == bot_login() {
            return bot();
        }
        let id = self.account_ids.get(login).copied().unwrap_or(0);
        Actor {
            login: login.into(),
            id,
            kind: "Organization".into(),
        }
    }

    /// Makes sure `login` has an id (for accounts that were never added as users).
    pub fn ensure_account(&mut self, login: &str) {
        if !self.users.contains_key(login) && !self.account_ids.contains_key(login) {
            let id = self.next_id();
            self.account_ids.insert(login.into(), id);
        }
    }

    /// `login` acting on github.com (commenting, opening an issue): given an id if it has none,
    /// and a person — a `User`, not the organization an unknown login otherwise reads as.
    pub fn person(&mut self, login: &str) -> Actor {
        self.ensure_account(login);
        let mut actor = self.actor(login);
        if actor.kind == "Organization" {
            actor.kind = "User".into();
        }
        actor
    }

    pub fn token(&self, secret: &str) -> Option<&Token> {
        self.tokens.iter().find(|t| t.minted.token == secret)
    }

    /// Moves the open pull requests of `full_name` to their branches' current commits (GitHub
    /// follows pushes; a closed pull request keeps the commits it closed with).
    pub fn sync_tips(&mut self, full_name: &str, tips: &HashMap<String, String>) {
        for pull in self.pulls.iter_mut().filter(|p| {
            p.record.state == "open" && format!("{}/{}", p.record.owner, p.record.repo) == full_name
        }) {
            if let Some(sha) = tips.get(&pull.record.head) {
                pull.head_sha.clone_from(sha);
            }
            if let Some(sha) = tips.get(&pull.record.base) {
                pull.base_sha.clone_from(sha);
            }
        }
    }

    /// The pull request or issue `owner/repo#number`.
    pub fn thread(&self, owner: &str, repo: &str, number: u64) -> Option<Thread> {
        if let Some(at) = self.pulls.iter().position(|p| {
            p.record.owner == owner && p.record.repo == repo && p.record.number == number
        }) {
            return Some(Thread::Pull(at));
        }
        self.issues
            .iter()
            .position(|i| i.owner == owner && i.repo == repo && i.number == number)
            .map(Thread::Issue)
    }

    /// Adds comment `id` by `author` to `thread`; returns its index in `comments`.
    pub fn record_comment(
        &mut self,
        thread: Thread,
        id: u64,
        author: &Actor,
        body: &str,
        time: u64,
    ) -> usize {
        let (owner, repo, number) = match thread {
            Thread::Pull(at) => {
                let pull = &mut self.pulls[at];
                pull.comments += 1;
                pull.updated = time;
                let r = &pull.record;
                (r.owner.clone(), r.repo.clone(), r.number)
            }
            Thread::Issue(at) => {
                let issue = &mut self.issues[at];
                issue.comments += 1;
                issue.updated = time;
                (issue.owner.clone(), issue.repo.clone(), issue.number)
            }
        };
        let record = CommentRecord {
            id,
            owner,
            repo,
            number,
            body: body.into(),
            author: author.login.clone(),
            by_app: *author == bot(),
            edits: 0,
        };
        self.comments.push(Comment {
            record,
            author: author.clone(),
            on_pull: matches!(thread, Thread::Pull(_)),
            created: time,
            updated: time,
        });
        self.comments.len() - 1
    }

    /// The installation that covers `full_name`, if any.
    pub fn installation_for(&self, full_name: &str) -> Option<&Installation> {
        self.installations
            .values()
            .find(|i| i.repos.iter().any(|r| r == full_name))
    }
}

/// The app's bot account, which acts for installation tokens.
pub(crate) fn bot() -> Actor {
    Actor {
        login: bot_login(),
        id: 9_000_001,
        kind: "Bot".into(),
    }
}

pub(crate) fn bot_login() -> String {
    format!("{}[bot]", crate::APP_SLUG)
}

/// What the app is granted on every installation.
pub(crate) fn installation_permissions() -> BTreeMap<String, String> {
    [
        ("contents", "write"),
        ("issues", "write"),
        ("metadata", "read"),
        ("pull_requests", "write"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// Orders GitHub's permission levels; an unknown level ranks lowest.
pub(crate) fn level(name: &str) -> u8 {
    match name {
        "read" => 1,
        "write" => 2,
        "admin" => 3,
        _ => 0,
    }
}

/// `n` random letters and digits (the body of a token or an OAuth code).
pub(crate) fn random_text(n: usize) -> String {
    rand::rng()
        .sample_iter(&Alphanumeric)
        .take(n)
        .map(char::from)
        .collect()
}

/// Everything the handlers and the test-facing handle share.
pub(crate) struct Shared {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// Bare repositories live at `root/<owner>/<name>.git`.
    pub root: PathBuf,
    pub app_id: u64,
    pub app_key: DecodingKey,
    pub world: Mutex<World>,
}

impl Shared {
    pub fn world(&self) -> MutexGuard<'_, World> {
        // A panicking test thread must not wedge the server for the other tests' assertions.
        self.world.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn repo_path(&self, owner: &str, name: &str) -> PathBuf {
        self.root.join(owner).join(format!("{name}.git"))
    }
}
