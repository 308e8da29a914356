//! Pull requests: create (with GitHub's validation errors), get, list, update.

use super::*;

/// The JSON of pull request `number` of `owner/repo`.
pub(super) fn pull_json(s: &Shared, world: &World, full: &str, number: u64) -> Option<Value> {
    let repo = world.repos.get(full)?;
    let pull = world.pulls.iter().find(|p| {
        p.record.number == number && p.record.owner == repo.owner && p.record.repo == repo.name
    })?;
    Some(shapes::pull(&s.url, world, repo, pull))
}

pub(super) fn invalid(field: &str) -> Error {
    Error::Validation(vec![
        json!({ "resource": "PullRequest", "field": field, "code": "invalid" }),
    ])
}

pub(super) fn missing(field: &str) -> Error {
    Error::Validation(vec![
        json!({ "resource": "PullRequest", "field": field, "code": "missing_field" }),
    ])
}

pub(super) fn custom(message: String) -> Error {
    Error::Validation(vec![
        json!({ "resource": "PullRequest", "code": "custom", "message": message }),
    ])
}

pub(super) fn already_exists(owner: &str, head: &str) -> Error {
    custom(format!("A pull request already exists for {owner}:{head}."))
}

/// Whether another open pull request (not number `except`) goes from `head` into `base`.
pub(super) fn open_pull_exists(
    world: &World,
    owner: &str,
    repo: &str,
    head: &str,
    base: &str,
    except: Option<u64>,
) -> bool {
    world.pulls.iter().any(|p| {
        let r = &p.record;
        r.owner == owner
            && r.repo == repo
            && r.head == head
            && r.base == base
            && r.state == "open"
            && Some(r.number) != except
    })
}

#[derive(Deserialize)]
pub(super) struct NewPull {
    title: Option<String>,
    head: Option<String>,
    base: Option<String>,
    body: Option<String>,
    #[serde(default)]
    draft: bool,
}

pub(super) async fn create_pull(
    State(s): State<Arc<Shared>>,
    Extension(caller): Extension<Caller>,
    Path((owner, name)): Path<(String, String)>,
    body: Bytes,
) -> Result<Response> {
    reach(&s, &caller, &owner, &name, &["pull_requests"], "write")?;
    let ask: NewPull = parse_json(&body)?;
    let title = ask
        .title
        .filter(|t| !t.trim().is_empty())
        .ok_or_else(|| missing("title"))?;
    let head = ask
        .head
        .filter(|h| !h.is_empty())
        .ok_or_else(|| missing("head"))?;
    let base = ask
        .base
        .filter(|b| !b.is_empty())
        .ok_or_else(|| missing("base"))?;
    // `owner:branch` names a branch of this repository; another owner would be a fork.
    let head = match head.split_once(':') {
        Some((o, branch)) if o == owner => branch.to_string(),
        Some(_) => return Err(invalid("head")),
        None => head,
    };
    let path = s.repo_path(&owner, &name);
    let tips = bare_repo::tips(&path).await;
    let head_sha = tips.get(&head).cloned().ok_or_else(|| invalid("head"))?;
    let base_sha = tips.get(&base).cloned().ok_or_else(|| invalid("base"))?;
    if bare_repo::commits_ahead(&path, &base_sha, &head_sha).await == 0 {
        return Err(custom(format!("No commits between {base} and {head}")));
    }
    let full = format!("{owner}/{name}");
    let mut world = s.world();
    world.sync_tips(&full, &tips);
    if open_pull_exists(&world, &owner, &name, &head, &base, None) {
        return Err(already_exists(&owner, &head));
    }
    let opener = actor(&world, &caller);
    let repo = world.repos.get_mut(&full).ok_or(Error::NotFound)?;
    let number = repo.next_number;
    repo.next_number += 1;
    let (id, issue_id, at) = (world.next_id(), world.next_id(), now());
    let record = PullRecord {
        number,
        owner: owner.clone(),
        repo: name.clone(),
        title,
        body: ask.body,
        head,
        base,
        draft: ask.draft,
        state: "open".into(),
        merged: false,
        opened_by: opener.login.clone(),
    };
    world.pulls.push(Pull {
        record,
        id,
        issue_id,
        opener,
        head_sha,
        base_sha,
        created: at,
        updated: at,
        closed: None,
        merged: None,
        merged_by: None,
        merge_commit_sha: None,
        comments: 0,
    });
    let json = pull_json(&s, &world, &full, number).ok_or(Error::NotFound)?;
    let location = format!("{}/repos/{full}/pulls/{number}", s.url);
    Ok((StatusCode::CREATED, [("location", location)], Json(json)).into_response())
}

pub(super) async fn get_pull(
    State(s): State<Arc<Shared>>,
    Extension(caller): Extension<Caller>,
    Path((owner, name, number)): Path<(String, String, u64)>,
) -> Result<Json<Value>> {
    reach(&s, &caller, &owner, &name, &["pull_requests"], "read")?;
    let tips = bare_repo::tips(&s.repo_path(&owner, &name)).await;
    let full = format!("{owner}/{name}");
    let mut world = s.world();
    world.sync_tips(&full, &tips);
    pull_json(&s, &world, &full, number)
        .map(Json)
        .ok_or(Error::NotFound)
}

pub(super) async fn list_pulls(
    State(s): State<Arc<Shared>>,
    Extension(caller): Extension<Caller>,
    Path((owner, name)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<Value>> {
    reach(&s, &caller, &owner, &name, &["pull_requests"], "read")?;
    let state = query.get("state").map_or("open", String::as_str);
    if !["open", "closed", "all"].contains(&state) {
        return Err(Error::Validation(vec![
            json!({ "resource": "PullRequest", "field": "state", "code": "invalid" }),
        ]));
    }
    // `head` is `owner:branch`; a bare branch name is taken as this repository's.
    let head = query.get("head").map(|h| match h.split_once(':') {
        Some((o, branch)) => (o.to_string(), branch.to_string()),
        None => (owner.clone(), h.clone()),
    });
    let base = query.get("base");
    let tips = bare_repo::tips(&s.repo_path(&owner, &name)).await;
    let full = format!("{owner}/{name}");
    let mut world = s.world();
    world.sync_tips(&full, &tips);
    let repo = world.repos.get(&full).ok_or(Error::NotFound)?;
    let mut found: Vec<&Pull> = world
        .pulls
        .iter()
        .filter(|p| p.record.owner == owner && p.record.repo == name)
        .filter(|p| state == "all" || p.record.state == state)
        .filter(|p| {
            head.as_ref()
                .is_none_or(|(o, b)| *o == owner && p.record.head == *b)
        })
        .filter(|p| base.is_none_or(|b| p.record.base == *b))
        .collect();
    // GitHub's default order: newest first.
    found.sort_by_key(|p| std::cmp::Reverse(p.record.number));
    Ok(Json(
        found
            .into_iter()
            .map(|p| shapes::pull(&s.url, &world, repo, p))
            .collect(),
    ))
}

#[derive(Deserialize)]
pub(super) struct PullChange {
    title: Option<String>,
    body: Option<String>,
    state: Option<String>,
    base: Option<String>,
}

pub(super) async fn update_pull(
    State(s): State<Arc<Shared>>,
    Extension(caller): Extension<Caller>,
    Path((owner, name, number)): Path<(String, String, u64)>,
    body: Bytes,
) -> Result<Json<Value>> {
    reach(&s, &caller, &owner, &name, &["pull_requests"], "write")?;
    let ask: PullChange = parse_json(&body)?;
    let tips = bare_repo::tips(&s.repo_path(&owner, &name)).await;
    let full = format!("{owner}/{name}");
    let mut world = s.world();
    world.sync_tips(&full, &tips);
    let at = world
        .pulls
        .iter()
        .position(|p| p.record.owner == owner && p.record.repo == name && p.record.number == number)
        .ok_or(Error::NotFound)?;
    let (head, base, merged) = {
        let r = &world.pulls[at].record;
        (
            r.head.clone(),
            ask.base.clone().unwrap_or_else(|| r.base.clone()),
            r.merged,
        )
    };
    if ask.base.is_some() && !tips.contains_key(&base) {
        return Err(invalid("base"));
    }
    match ask.state.as_deref() {
        None | Some("closed") => {}
        Some("open") if merged => {
            return Err(custom("Cannot reopen a merged pull request.".into()));
        }
        Some("open") if open_pull_exists(&world, &owner, &name, &head, &base, Some(number)) => {
            return Err(already_exists(&owner, &head));
        }
        Some("open") => {}
        Some(_) => return Err(invalid("state")),
    }
    let time = now();
    let pull = &mut world.pulls[at];
    if let Some(title) = ask.title {
        pull.record.title = title;
    }
    if let Some(body) = ask.body {
        pull.record.body = Some(body);
    }
    if let Some(sha) = ask.base.as_ref().and_then(|b| tips.get(b)) {
        pull.base_sha = sha.clone();
    }
    pull.record.base = base;
    match ask.state.as_deref() {
        Some("closed") if pull.record.state == "open" => {
            pull.record.state = "closed".into();
            pull.closed = Some(time);
        }
        Some("open") if pull.record.state == "closed" => {
            pull.record.state = "open".into();
            pull.closed = None;
        }
        _ => {}
    }
    pull.updated = time;
    pull_json(&s, &world, &full, number)
        .map(Json)
        .ok_or(Error::NotFound)
}
