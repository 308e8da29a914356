//! The pull request on GitHub: a client as the asking person (or the App), and creating and
//! updating the pull request.

use super::*;

/// An API client acting for `by`: their own GitHub token when they signed in with GitHub (the
/// pull request is theirs, so they cannot approve it themselves), else the session's App token.
pub(super) async fn client_for(
    app: &AppState,
    gh: &GitHub,
    session: SessionId,
    by: &Author,
) -> Result<(octocrab::Octocrab, bool)> {
    // A person prompting from Slack or the extension is that person too.
    if matches!(
        by.kind,
        AuthorKind::User | AuthorKind::Slack | AuthorKind::Extension
    ) && let Some(user) = by.user_id
        && let Some(token) = crate::identity::github::person_token(app, gh, user, false).await?
    {
        return Ok((gh.client(&token)?, true));
    }
    Ok((app_client(gh, session).await?, false))
}

pub(super) async fn app_client(gh: &GitHub, session: SessionId) -> Result<octocrab::Octocrab> {
    let (_, token) = credentials::for_session(gh, session).await?;
    gh.client(&token.token)
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn create(
    app: &AppState,
    gh: &GitHub,
    repo: &LinkedRepo,
    session: SessionId,
    by: &Author,
    title: &str,
    branch: &str,
    base: &str,
    draft: bool,
    head_sha: &str,
    body: String,
) -> Result<PullRequest> {
    let (client, personal) = client_for(app, gh, session, by).await?;
    let mut pulls = client.pulls(&repo.owner, &repo.name);
    let mut made = pulls
        .create(title, branch, base)
        .body(body.clone())
        .draft(Some(draft))
        .send()
        .await;
    // The person's GitHub token was refused (expired early, or revoked): refreshed once and
    // tried again; failing that, the App opens it.
    let fallback;
    if personal
        && matches!(&made, Err(e) if status_of(e) == Some(401))
        && let Some(user) = by.user_id
    {
        fallback = match crate::identity::github::person_token(app, gh, user, true).await? {
            Some(token) => gh.client(&token)?,
            None => {
                tracing::info!(%session, "the person's GitHub token was refused; the App opens the pull request");
                app_client(gh, session).await?
            }
        };
        pulls = fallback.pulls(&repo.owner, &repo.name);
        made = pulls
            .create(title, branch, base)
            .body(body.clone())
            .draft(Some(draft))
            .send()
            .await;
        if matches!(&made, Err(e) if status_of(e) == Some(401)) {
            tracing::info!(%session, "the person's refreshed GitHub token was refused too; the App opens the pull request");
            let app_only = app_client(gh, session).await?;
            made = app_only
                .pulls(&repo.owner, &repo.name)
                .create(title, branch, base)
                .body(body.clone())
                .draft(Some(draft))
                .send()
                .await;
        }
    }
    let made = match made {
        Ok(pr) => pr,
        // One already exists for the branch (opened by hand, or an answer lost on the way):
        // adopt it.
        Err(e) if status_of(&e) == Some(422) => {
            let page = pulls
                .list()
                .head(format!("{}:{branch}", repo.owner))
                .state(octocrab::params::State::Open)
                .send()
                .await
                .map_err(|e| upstream("listing pull requests", &e))?;
            let found = page
                .items
                .into_iter()
                .next()
                .ok_or_else(|| upstream("opening the pull request", &e))?;
            pulls
                .update(found.number)
                .body(body)
                .send()
                .await
                .map_err(|e| upstream("updating the pull request", &e))?
        }
        Err(e) => return Err(upstream("opening the pull request", &e)),
    };
    let now = now_ms();
    let pr = PullRequest {
        session_id: session,
        number: made.number as i64,
        url: made.html_url.map(|u| u.to_string()).unwrap_or_default(),
        branch: branch.to_string(),
        base: base.to_string(),
        state: PrState::Open,
        // GitHub's word for the head (what webhooks name), else what was pushed.
        head_sha: Some(made.head.sha.clone())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| head_sha.to_string()),
        opened_by: made
            .user
            .map(|u| u.login)
            .unwrap_or_else(|| format!("{}[bot]", gh.config.app_slug)),
        created_at: Timestamp(now),
        updated_at: Timestamp(now),
    };
    let mut tx = app.db.begin().await?;
    db::github::insert_pull_request(&mut tx, repo_id(app, session).await?, &pr).await?;
    db::events::append(
        &mut tx,
        session,
        now,
        EventKind::PrOpened {
            number: pr.number,
            url: pr.url.clone(),
            branch: pr.branch.clone(),
            opened_by: pr.opened_by.clone(),
        },
    )
    .await?;
    tx.commit().await?;
    Ok(pr)
}

pub(super) async fn update(
    app: &AppState,
    gh: &GitHub,
    repo: &LinkedRepo,
    pr: PullRequest,
    head_sha: &str,
    body: String,
) -> Result<PullRequest> {
    let (_, token) = credentials::for_session(gh, pr.session_id).await?;
    let client = gh.client(&token.token)?;
    client
        .pulls(&repo.owner, &repo.name)
        .update(pr.number as u64)
        .body(body)
        .send()
        .await
        .map_err(|e| upstream("updating the pull request", &e))?;
    if pr.head_sha == head_sha {
        return Ok(pr);
    }
    let now = now_ms();
    let mut tx = app.db.begin().await?;
    db::github::set_pull_request_head(&mut tx, pr.session_id, head_sha, now).await?;
    db::events::append(
        &mut tx,
        pr.session_id,
        now,
        EventKind::PrUpdated {
            number: pr.number,
            head_sha: head_sha.to_string(),
        },
    )
    .await?;
    tx.commit().await?;
    Ok(PullRequest {
        head_sha: head_sha.to_string(),
        updated_at: Timestamp(now),
        ..pr
    })
}
