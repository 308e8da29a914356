//! Issues and their comments: get an issue (a pull request's number gives its issue side), list
//! its comments a page at a time with GitHub's `Link` header, comment, and read or edit one
//! comment — each with GitHub's auth rules.

use axum::http::HeaderValue;
use axum::http::header::LINK;

use super::*;
use crate::state::Thread;

/// GitHub's page size when `per_page` is not given.
const DEFAULT_PER_PAGE: usize = 30;
/// The largest page GitHub serves; a bigger `per_page` is cut down to it.
const MAX_PER_PAGE: usize = 100;

/// What reaches a thread's issue side: a plain issue needs `issues`, while a pull request's
/// takes either grant, as on GitHub.
fn permissions(on_pull: bool) -> &'static [&'static str] {
    if on_pull {
        &["issues", "pull_requests"]
    } else {
        &["issues"]
    }
}

/// Checks `caller` may `need` (read or write) thread `owner/name#number` (not knowing whether
/// it exists yet: a stranger gets the same answer either way).
fn reach_thread(
    s: &Shared,
    caller: &Caller,
    owner: &str,
    name: &str,
    number: u64,
    need: &str,
) -> Result<()> {
    // Looked up before `reach`, which takes the lock itself; threads are never removed.
    let on_pull = matches!(s.world().thread(owner, name, number), Some(Thread::Pull(_)));
    reach(s, caller, owner, name, permissions(on_pull), need)
}

/// Where comment `id` of `owner/name` is in `world.comments`.
fn comment_index(world: &World, owner: &str, name: &str, id: u64) -> Option<usize> {
    world
        .comments
        .iter()
        .position(|c| c.record.id == id && c.record.owner == owner && c.record.repo == name)
}

/// Checks `caller` may `need` comment `id` of `owner/name`, as [`reach_thread`] does.
fn reach_comment(
    s: &Shared,
    caller: &Caller,
    owner: &str,
    name: &str,
    id: u64,
    need: &str,
) -> Result<()> {
    let on_pull = {
        let world = s.world();
        comment_index(&world, owner, name, id).is_some_and(|at| world.comments[at].on_pull)
    };
    reach(s, caller, owner, name, permissions(on_pull), need)
}

pub(super) async fn get_issue(
    State(s): State<Arc<Shared>>,
    Extension(caller): Extension<Caller>,
    Path((owner, name, number)): Path<(String, String, u64)>,
) -> Result<Json<Value>> {
    reach_thread(&s, &caller, &owner, &name, number, "read")?;
    let world = s.world();
    let thread = world.thread(&owner, &name, number).ok_or(Error::NotFound)?;
    let repo = world
        .repos
        .get(&format!("{owner}/{name}"))
        .ok_or(Error::NotFound)?;
    Ok(Json(shapes::thread(&s.url, &world, repo, thread)))
}

/// A positive number from the query, if one is given.
fn positive(query: &HashMap<String, String>, key: &str) -> Option<usize> {
    query
        .get(key)
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| *n > 0)
}

/// GitHub's `Link` header for page `page` of `last` at `url` (`keep`: other query parameters,
/// encoded, each followed by `&`); none when there is nowhere else to go.
fn link_header(url: &str, keep: &str, per_page: usize, page: usize, last: usize) -> Option<String> {
    let at = |p: usize| format!("<{url}?{keep}per_page={per_page}&page={p}>");
    let mut links = Vec::new();
    if page > 1 {
        links.push(format!("{}; rel=\"prev\"", at((page - 1).min(last))));
    }
    if page < last {
        links.push(format!("{}; rel=\"next\"", at(page + 1)));
        links.push(format!("{}; rel=\"last\"", at(last)));
    }
    if page > 1 {
        links.push(format!("{}; rel=\"first\"", at(1)));
    }
    (!links.is_empty()).then(|| links.join(", "))
}

pub(super) async fn list_comments(
    State(s): State<Arc<Shared>>,
    Extension(caller): Extension<Caller>,
    Path((owner, name, number)): Path<(String, String, u64)>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response> {
    reach_thread(&s, &caller, &owner, &name, number, "read")?;
    let per_page = positive(&query, "per_page").map_or(DEFAULT_PER_PAGE, |n| n.min(MAX_PER_PAGE));
    let page = positive(&query, "page").unwrap_or(1);
    let since = match query.get("since") {
        None => None,
        Some(text) => Some(shapes::parse_timestamp(text).ok_or_else(|| {
            Error::Validation(vec![
                json!({ "resource": "IssueComment", "field": "since", "code": "invalid" }),
            ])
        })?),
    };
    let world = s.world();
    world.thread(&owner, &name, number).ok_or(Error::NotFound)?;
    let repo = world
        .repos
        .get(&format!("{owner}/{name}"))
        .ok_or(Error::NotFound)?;
    // `since` is about the last update, so an edited comment counts from its edit.
    let matching: Vec<_> = world
        .comments
        .iter()
        .filter(|c| c.record.owner == owner && c.record.repo == name && c.record.number == number)
        .filter(|c| since.is_none_or(|t| c.updated >= t))
        .collect();
    let last = matching.len().div_ceil(per_page).max(1);
    let items: Vec<Value> = matching
        .iter()
        .skip((page - 1).saturating_mul(per_page))
        .take(per_page)
        .map(|c| shapes::comment(&s.url, repo, c))
        .collect();
    let keep = query
        .get("since")
        .map(|t| format!("since={}&", shapes::percent_encode(t)))
        .unwrap_or_default();
    let url = format!("{}/repos/{owner}/{name}/issues/{number}/comments", s.url);
    let mut response = Json(Value::Array(items)).into_response();
    // Always ASCII: the repository's name is, and `since` went through `percent_encode`.
    if let Some(Ok(value)) =
        link_header(&url, &keep, per_page, page, last).map(|l| HeaderValue::from_str(&l))
    {
        response.headers_mut().insert(LINK, value);
    }
    Ok(response)
}

#[derive(Deserialize)]
pub(super) struct CommentBody {
    body: Option<String>,
}

/// The comment text a create or edit must carry (GitHub's 422 without one).
fn comment_text(body: &[u8]) -> Result<String> {
    let ask: CommentBody = parse_json(body)?;
    ask.body.filter(|b| !b.is_empty()).ok_or_else(|| {
        Error::Validation(vec![
            json!({ "resource": "IssueComment", "field": "body", "code": "missing_field" }),
        ])
    })
}

pub(super) async fn create_comment(
    State(s): State<Arc<Shared>>,
    Extension(caller): Extension<Caller>,
    Path((owner, name, number)): Path<(String, String, u64)>,
    body: Bytes,
) -> Result<Response> {
    reach_thread(&s, &caller, &owner, &name, number, "write")?;
    let text = comment_text(&body)?;
    let full = format!("{owner}/{name}");
    let mut world = s.world();
    let thread = world.thread(&owner, &name, number).ok_or(Error::NotFound)?;
    let author = actor(&world, &caller);
    let (id, time) = (world.next_id(), now());
    let at = world.record_comment(thread, id, &author, &text, time);
    let repo = world.repos.get(&full).ok_or(Error::NotFound)?;
    let json = shapes::comment(&s.url, repo, &world.comments[at]);
    let location = format!("{}/repos/{full}/issues/comments/{id}", s.url);
    Ok((StatusCode::CREATED, [("location", location)], Json(json)).into_response())
}

pub(super) async fn get_comment(
    State(s): State<Arc<Shared>>,
    Extension(caller): Extension<Caller>,
    Path((owner, name, id)): Path<(String, String, u64)>,
) -> Result<Json<Value>> {
    reach_comment(&s, &caller, &owner, &name, id, "read")?;
    let world = s.world();
    let at = comment_index(&world, &owner, &name, id).ok_or(Error::NotFound)?;
    let repo = world
        .repos
        .get(&format!("{owner}/{name}"))
        .ok_or(Error::NotFound)?;
    Ok(Json(shapes::comment(&s.url, repo, &world.comments[at])))
}

/// `PATCH` as GitHub documents it, and `POST`, which GitHub also takes and octocrab's
/// `update_comment` sends. Only the comment's author may edit it here.
pub(super) async fn update_comment(
    State(s): State<Arc<Shared>>,
    Extension(caller): Extension<Caller>,
    Path((owner, name, id)): Path<(String, String, u64)>,
    body: Bytes,
) -> Result<Json<Value>> {
    reach_comment(&s, &caller, &owner, &name, id, "write")?;
    let text = comment_text(&body)?;
    let mut world = s.world();
    let at = comment_index(&world, &owner, &name, id).ok_or(Error::NotFound)?;
    // The App's bot may edit the bot's comments, a person their own; anyone else's is refused
    // the way GitHub refuses an integration (user tokens here are the App's, too).
    if world.comments[at].author.login != actor(&world, &caller).login {
        return Err(Error::Forbidden(NOT_ACCESSIBLE.into()));
    }
    let comment = &mut world.comments[at];
    comment.record.body = text;
    comment.record.edits += 1;
    comment.updated = now();
    let repo = world
        .repos
        .get(&format!("{owner}/{name}"))
        .ok_or(Error::NotFound)?;
    Ok(Json(shapes::comment(&s.url, repo, &world.comments[at])))
}
