//! GitHub's JSON shapes: users, repositories, installations, pull requests, issues, labels and
//! comments, with every field octocrab's models require and every URL under the fake's base URL.
//!
//! Invariant: these functions only read the world; they never change it.

use base64::Engine;
use serde_json::{Value, json};

use crate::state::{Actor, Comment, Installation, Issue, Pull, Repo, Thread, World};
pub(crate) use crate::time::{now, parse_timestamp, timestamp};

/// GitHub's error documentation link, as its error bodies carry it.
pub(crate) const DOCS: &str = "https://docs.github.com/rest";

/// GitHub's global node id, old style: base64 of `0<len>:<Type><id>` (`MDQ6VXNlcjE=` is user 1).
pub(crate) fn node_id(kind: &str, id: u64) -> String {
    base64::engine::general_purpose::STANDARD.encode(format!("0{}:{kind}{id}", kind.len()))
}

fn time_or_null(secs: Option<u64>) -> Value {
    secs.map_or(Value::Null, |s| json!(timestamp(s)))
}

/// A login as it appears in a URL path (`[` and `]` of bot logins escaped, as GitHub does).
fn path_login(login: &str) -> String {
    login.replace('[', "%5B").replace(']', "%5D")
}

/// A user, bot or organization as GitHub embeds it (`owner`, `user`, `sender`, `account`).
pub(crate) fn user(base: &str, actor: &Actor) -> Value {
    let login = &actor.login;
    let api = format!("{base}/users/{}", path_login(login));
    let html = match login.strip_suffix("[bot]") {
        Some(slug) => format!("{base}/apps/{slug}"),
        None => format!("{base}/{login}"),
    };
    json!({
        "login": login,
        "id": actor.id,
        "node_id": node_id(&actor.kind, actor.id),
        "avatar_url": format!("{base}/avatars/u/{}?v=4", actor.id),
        "gravatar_id": "",
        "url": api,
        "html_url": html,
        "followers_url": format!("{api}/followers"),
        "following_url": format!("{api}/following{{/other_user}}"),
        "gists_url": format!("{api}/gists{{/gist_id}}"),
        "starred_url": format!("{api}/starred{{/owner}}{{/repo}}"),
        "subscriptions_url": format!("{api}/subscriptions"),
        "organizations_url": format!("{api}/orgs"),
        "repos_url": format!("{api}/repos"),
        "events_url": format!("{api}/events{{/privacy}}"),
        "received_events_url": format!("{api}/received_events"),
        "type": actor.kind,
        "user_view_type": "public",
        "site_admin": false,
    })
}

/// The signed-in user's full profile (`GET /user`), octocrab's `UserProfile` and `Author`.
pub(crate) fn profile(base: &str, actor: &Actor, name: &str, email: &str, created: u64) -> Value {
    let mut v = user(base, actor);
    let extra = json!({
        "name": name, "company": null, "blog": "", "location": null, "email": email, "hireable": null,
        "bio": null, "twitter_username": null, "notification_email": email, "public_repos": 0,
        "public_gists": 0, "followers": 0, "following": 0,
        "created_at": timestamp(created), "updated_at": timestamp(created),
    });
    merge(&mut v, extra);
    v
}

fn merge(into: &mut Value, from: Value) {
    if let (Value::Object(into), Value::Object(from)) = (into, from) {
        into.extend(from);
    }
}

/// The repository API URLs GitHub lists, as suffixes of the repository's API URL.
const REPO_API_URLS: &[(&str, &str)] = &[
    ("forks_url", "/forks"),
    ("keys_url", "/keys{/key_id}"),
    ("collaborators_url", "/collaborators{/collaborator}"),
    ("teams_url", "/teams"),
    ("hooks_url", "/hooks"),
    ("issue_events_url", "/issues/events{/number}"),
    ("events_url", "/events"),
    ("assignees_url", "/assignees{/user}"),
    ("branches_url", "/branches{/branch}"),
    ("tags_url", "/tags"),
    ("blobs_url", "/git/blobs{/sha}"),
    ("git_tags_url", "/git/tags{/sha}"),
    ("git_refs_url", "/git/refs{/sha}"),
    ("trees_url", "/git/trees{/sha}"),
    ("statuses_url", "/statuses/{sha}"),
    ("languages_url", "/languages"),
    ("stargazers_url", "/stargazers"),
    ("contributors_url", "/contributors"),
    ("subscribers_url", "/subscribers"),
    ("subscription_url", "/subscription"),
    ("commits_url", "/commits{/sha}"),
    ("git_commits_url", "/git/commits{/sha}"),
    ("comments_url", "/comments{/number}"),
    ("issue_comment_url", "/issues/comments{/number}"),
    ("contents_url", "/contents/{+path}"),
    ("compare_url", "/compare/{base}...{head}"),
    ("merges_url", "/merges"),
    ("archive_url", "/{archive_format}{/ref}"),
    ("downloads_url", "/downloads"),
    ("issues_url", "/issues{/number}"),
    ("pulls_url", "/pulls{/number}"),
    ("milestones_url", "/milestones{/number}"),
    (
        "notifications_url",
        "/notifications{?since,all,participating}",
    ),
    ("labels_url", "/labels{/name}"),
    ("releases_url", "/releases{/id}"),
    ("deployments_url", "/deployments"),
];

/// A full repository object (`GET /repos/{owner}/{repo}`, and wherever GitHub embeds one).
pub(crate) fn repo(base: &str, world: &World, repo: &Repo) -> Value {
    let (o, r) = (&repo.owner, &repo.name);
    let api = format!("{base}/repos/{o}/{r}");
    let html = format!("{base}/{o}/{r}");
    let host = base
        .trim_start_matches("http://")
        .trim_start_matches("https://");
    // GitHub counts open pull requests among a repository's open issues.
    let open = world
        .pulls
        .iter()
        .filter(|p| p.record.owner == *o && p.record.repo == *r && p.record.state == "open")
        .count()
        + world
            .issues
            .iter()
            .filter(|i| i.owner == *o && i.repo == *r && i.state == "open")
            .count();
    let pushed = world
        .pulls
        .iter()
        .filter(|p| p.record.owner == *o && p.record.repo == *r)
        .map(|p| p.updated)
        .max()
        .unwrap_or(repo.created);
    let mut v = json!({
        "id": repo.id,
        "node_id": node_id("Repository", repo.id),
        "name": r,
        "full_name": format!("{o}/{r}"),
        "private": true,
        "owner": user(base, &world.actor(o)),
        "html_url": html,
        "description": null,
        "fork": false,
        "url": api,
        "created_at": timestamp(repo.created),
        "updated_at": timestamp(repo.created),
        "pushed_at": timestamp(pushed),
        "git_url": format!("git://{host}/{o}/{r}.git"),
        "ssh_url": format!("git@{}:{o}/{r}.git", host.split(':').next().unwrap_or(host)),
        "clone_url": format!("{html}.git"),
        "svn_url": html,
        "default_branch": repo.default_branch,
        "visibility": "private",
        "open_issues_count": open,
        "open_issues": open,
        "permissions": { "admin": false, "maintain": false, "push": true, "triage": true, "pull": true },
    });
    // The counters and settings of a plain private repository.
    merge(
        &mut v,
        json!({
            "homepage": null,
            "size": 0,
            "stargazers_count": 0,
            "watchers_count": 0,
            "language": null,
            "has_issues": true,
            "has_projects": true,
            "has_downloads": true,
            "has_wiki": false,
            "has_pages": false,
            "has_discussions": false,
            "forks_count": 0,
            "mirror_url": null,
            "archived": false,
            "disabled": false,
            "license": null,
            "allow_forking": true,
            "is_template": false,
            "web_commit_signoff_required": false,
            "topics": [],
            "forks": 0,
            "watchers": 0,
        }),
    );
    for (field, suffix) in REPO_API_URLS {
        v[*field] = json!(format!("{api}{suffix}"));
    }
    v
}

/// An installation of the app (`GET /app/installations`), octocrab's `Installation`.
pub(crate) fn installation(base: &str, world: &World, app_id: u64, inst: &Installation) -> Value {
    let account = world.actor(&inst.account);
    let html = if account.kind == "Organization" {
        format!(
            "{base}/organizations/{}/settings/installations/{}",
            inst.account, inst.id
        )
    } else {
        format!("{base}/settings/installations/{}", inst.id)
    };
    json!({
        "id": inst.id,
        "client_id": format!("Iv23fake{app_id}"),
        "account": user(base, &account),
        "repository_selection": "selected",
        "access_tokens_url": format!("{base}/app/installations/{}/access_tokens", inst.id),
        "repositories_url": format!("{base}/installation/repositories"),
        "html_url": html,
        "app_id": app_id,
        "app_slug": crate::APP_SLUG,
        "target_id": account.id,
        "target_type": account.kind,
        "permissions": crate::state::installation_permissions(),
        "events": ["issue_comment", "issues", "pull_request", "push"],
        "created_at": timestamp(inst.created),
        "updated_at": timestamp(inst.created),
        "single_file_name": null,
        "has_multiple_single_files": false,
        "single_file_paths": [],
        "suspended_by": null,
        "suspended_at": null,
    })
}

/// The short installation object webhook payloads carry (octocrab's `EventInstallationId`
/// needs both fields, or the whole event fails to parse).
pub(crate) fn event_installation(id: u64) -> Value {
    json!({ "id": id, "node_id": node_id("IntegrationInstallation", id) })
}

fn branch(base: &str, world: &World, repo: &Repo, name: &str, sha: &str) -> Value {
    json!({
        "label": format!("{}:{name}", repo.owner),
        "ref": name,
        "sha": sha,
        "user": user(base, &world.actor(&repo.owner)),
        "repo": self::repo(base, world, repo),
    })
}

/// A pull request in full (`GET /repos/{owner}/{repo}/pulls/{n}`, webhook `pull_request`),
/// octocrab's `PullRequest`.
pub(crate) fn pull(base: &str, world: &World, repo: &Repo, pull: &Pull) -> Value {
    let r = &pull.record;
    let api = format!("{base}/repos/{}/{}", repo.owner, repo.name);
    let url = format!("{api}/pulls/{}", r.number);
    let html = format!("{base}/{}/{}/pull/{}", repo.owner, repo.name, r.number);
    let issue = format!("{api}/issues/{}", r.number);
    let statuses = format!("{api}/statuses/{}", pull.head_sha);
    let mut v = json!({
        "url": url,
        "id": pull.id,
        "node_id": node_id("PullRequest", pull.id),
        "html_url": html,
        "diff_url": format!("{html}.diff"),
        "patch_url": format!("{html}.patch"),
        "issue_url": issue,
        "commits_url": format!("{url}/commits"),
        "review_comments_url": format!("{url}/comments"),
        "review_comment_url": format!("{api}/pulls/comments{{/number}}"),
        "comments_url": format!("{issue}/comments"),
        "statuses_url": statuses,
        "number": r.number,
        "state": r.state,
        "locked": false,
        "title": r.title,
        "user": user(base, &pull.opener),
        "body": r.body,
        "labels": [],
        "milestone": null,
        "active_lock_reason": null,
        "created_at": timestamp(pull.created),
        "updated_at": timestamp(pull.updated),
        "closed_at": time_or_null(pull.closed),
        "merged_at": time_or_null(pull.merged),
        "merge_commit_sha": pull.merge_commit_sha,
        "assignee": null,
        "assignees": [],
        "requested_reviewers": [],
        "requested_teams": [],
    });
    let links = json!({
        "self": { "href": url },
        "html": { "href": html },
        "issue": { "href": issue },
        "comments": { "href": format!("{issue}/comments") },
        "review_comments": { "href": format!("{url}/comments") },
        "review_comment": { "href": format!("{api}/pulls/comments{{/number}}") },
        "commits": { "href": format!("{url}/commits") },
        "statuses": { "href": statuses },
    });
    merge(
        &mut v,
        json!({
            "head": branch(base, world, repo, &r.head, &pull.head_sha),
            "base": branch(base, world, repo, &r.base, &pull.base_sha),
            "_links": links,
            "author_association": association(repo, &pull.opener),
            "auto_merge": null,
            "draft": r.draft,
            "merged": r.merged,
            "mergeable": null,
            "rebaseable": null,
            "mergeable_state": "unknown",
            "merged_by": pull.merged_by.as_ref().map(|a| user(base, a)),
            "comments": pull.comments,
            "review_comments": 0,
            "maintainer_can_modify": false,
        }),
    );
    v
}

/// How `actor` relates to the repository, as GitHub's `author_association` says it.
pub(crate) fn association(repo: &Repo, actor: &Actor) -> &'static str {
    if actor.login == repo.owner {
        "OWNER"
    } else if actor.kind == "Bot" {
        "NONE"
    } else {
        "COLLABORATOR"
    }
}

/// What GitHub's issue JSON is made of, from a plain issue or a pull request's issue side.
struct IssueParts<'a> {
    id: u64,
    number: u64,
    title: &'a str,
    body: Option<&'a str>,
    user: &'a Actor,
    labels: &'a [String],
    state: &'a str,
    comments: u64,
    created: u64,
    updated: u64,
    closed: Option<u64>,
    /// `pull` or `issues`: where its page is on github.com.
    page: &'a str,
}

fn issue_json(base: &str, repo: &Repo, i: IssueParts<'_>) -> Value {
    let api = format!("{base}/repos/{}/{}", repo.owner, repo.name);
    let url = format!("{api}/issues/{}", i.number);
    let html = format!(
        "{base}/{}/{}/{}/{}",
        repo.owner, repo.name, i.page, i.number
    );
    json!({
        "url": url,
        "repository_url": api,
        "labels_url": format!("{url}/labels{{/name}}"),
        "comments_url": format!("{url}/comments"),
        "events_url": format!("{url}/events"),
        "timeline_url": format!("{url}/timeline"),
        "html_url": html,
        "id": i.id,
        "node_id": node_id("Issue", i.id),
        "number": i.number,
        "title": i.title,
        "user": user(base, i.user),
        "labels": i.labels.iter().map(|name| label(base, repo, name)).collect::<Vec<_>>(),
        "state": i.state,
        "state_reason": null,
        "locked": false,
        "assignee": null,
        "assignees": [],
        "milestone": null,
        "comments": i.comments,
        "created_at": timestamp(i.created),
        "updated_at": timestamp(i.updated),
        "closed_at": time_or_null(i.closed),
        "closed_by": null,
        "author_association": association(repo, i.user),
        "active_lock_reason": null,
        "body": i.body,
        "reactions": reactions(&format!("{url}/reactions")),
        "performed_via_github_app": null,
    })
}

/// The issue side of a pull request (`GET …/issues/{n}` for a pull request's number, and
/// `issue_comment` events on one), octocrab's `Issue` with its `pull_request` link.
pub(crate) fn issue(base: &str, repo: &Repo, pull: &Pull) -> Value {
    let r = &pull.record;
    let mut v = issue_json(
        base,
        repo,
        IssueParts {
            id: pull.issue_id,
            number: r.number,
            title: &r.title,
            body: r.body.as_deref(),
            user: &pull.opener,
            labels: &[],
            state: &r.state,
            comments: pull.comments,
            created: pull.created,
            updated: pull.updated,
            closed: pull.closed,
            page: "pull",
        },
    );
    let html = format!("{base}/{}/{}/pull/{}", repo.owner, repo.name, r.number);
    merge(
        &mut v,
        json!({
            "draft": r.draft,
            "pull_request": {
                "url": format!("{base}/repos/{}/{}/pulls/{}", repo.owner, repo.name, r.number),
                "html_url": html,
                "diff_url": format!("{html}.diff"),
                "patch_url": format!("{html}.patch"),
                "merged_at": time_or_null(pull.merged),
            },
        }),
    );
    v
}

/// A plain issue (`GET …/issues/{n}`, `issues` and `issue_comment` events), octocrab's `Issue`
/// with no `pull_request` key — that key's absence is how GitHub tells the two apart.
pub(crate) fn plain_issue(base: &str, repo: &Repo, issue: &Issue) -> Value {
    issue_json(
        base,
        repo,
        IssueParts {
            id: issue.id,
            number: issue.number,
            title: &issue.title,
            body: issue.body.as_deref(),
            user: &issue.author,
            labels: &issue.labels,
            state: &issue.state,
            comments: issue.comments,
            created: issue.created,
            updated: issue.updated,
            closed: None,
            page: "issues",
        },
    )
}

/// The issue behind `thread`, whichever kind it is.
pub(crate) fn thread(base: &str, world: &World, repo: &Repo, thread: Thread) -> Value {
    match thread {
        Thread::Pull(at) => issue(base, repo, &world.pulls[at]),
        Thread::Issue(at) => plain_issue(base, repo, &world.issues[at]),
    }
}

/// A repository's label (octocrab's `Label`); the fake gives every label GitHub's grey.
pub(crate) fn label(base: &str, repo: &Repo, name: &str) -> Value {
    let id = repo.labels.get(name).copied().unwrap_or(0);
    json!({
        "id": id,
        "node_id": node_id("Label", id),
        "url": format!("{base}/repos/{}/{}/labels/{}", repo.owner, repo.name, percent_encode(name)),
        "name": name,
        "color": "ededed",
        "default": false,
        "description": null,
    })
}

/// `text` percent-encoded for one URL path segment or query value (a label's name may hold
/// spaces or `/`, a time `:` and `+`).
pub(crate) fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn reactions(url: &str) -> Value {
    json!({
        "url": url,
        "total_count": 0, "+1": 0, "-1": 0, "laugh": 0, "hooray": 0,
        "confused": 0, "heart": 0, "rocket": 0, "eyes": 0,
    })
}

/// An issue comment (`…/issues/{n}/comments`, `…/issues/comments/{id}`, webhook
/// `issue_comment`), octocrab's `Comment`.
pub(crate) fn comment(base: &str, repo: &Repo, c: &Comment) -> Value {
    let (r, id) = (&c.record, c.record.id);
    let api = format!("{base}/repos/{}/{}", repo.owner, repo.name);
    let page = if c.on_pull { "pull" } else { "issues" };
    json!({
        "url": format!("{api}/issues/comments/{id}"),
        "html_url": format!("{base}/{}/{}/{page}/{}#issuecomment-{id}", repo.owner, repo.name, r.number),
        "issue_url": format!("{api}/issues/{}", r.number),
        "id": id,
        "node_id": node_id("IssueComment", id),
        "user": user(base, &c.author),
        "created_at": timestamp(c.created),
        "updated_at": timestamp(c.updated),
        "author_association": association(repo, &c.author),
        "body": r.body,
        "reactions": reactions(&format!("{api}/issues/comments/{id}/reactions")),
        "performed_via_github_app": null,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(timestamp(0), "1970-01-01T00:00:00Z");
        assert_eq!(timestamp(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(timestamp(1_714_564_800 + 3_723), "2024-05-01T13:02:03Z");
    }

    #[test]
    fn query_times_read_back_as_written() {
        for secs in [0, 951_782_400, 1_714_564_800 + 3_723, 4_102_444_799] {
            assert_eq!(parse_timestamp(&timestamp(secs)), Some(secs));
        }
        // What octocrab sends for `since`: chrono's RFC 3339, with a fraction.
        assert_eq!(
            parse_timestamp("2024-05-01T13:02:03.123456789Z"),
            Some(1_714_568_523)
        );
        assert_eq!(
            parse_timestamp("2024-05-01T15:02:03+02:00"),
            Some(1_714_568_523)
        );
        for bad in [
            "",
            "yesterday",
            "2024-05-01",
            "2024-13-01T00:00:00Z",
            "2024-05-01T24:00:00Z",
            "2024-05-01T00:00:00.Z",
            "2024-05-01T00:00:00",
            "1969-12-31T23:59:59Z",
        ] {
            assert_eq!(parse_timestamp(bad), None, "{bad}");
        }
    }

    #[test]
    fn node_ids_are_githubs_old_style() {
        assert_eq!(node_id("User", 1), "MDQ6VXNlcjE=");
    }
}
