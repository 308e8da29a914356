//! The gateway's git relay: the workspace's git reaches its one GitHub repository through the
//! server, with a short-lived per-workspace secret its credential helper gets from the gateway;
//! the relay adds the session's token and refuses pushes to anything but the session's branch.

use super::*;

/// The session's GitHub credential, for its git credential helper (an installation token for
/// the session's repository only; asking again renews it near expiry).
/// The credential the workspace's git sends to the relay: an opaque secret of this workspace
/// (an HMAC of its id under the agent key, so nothing is stored), good for this gateway only.
/// No GitHub token ever enters a workspace: the relay puts the real one on the upstream
/// request.
pub fn git_secret(host: &Host, wid: &str) -> String {
    format!(
        "{GIT_SECRET_PREFIX}{}",
        crate::workspace_agent::token(&host.agent_key, &format!("git-credential\0{wid}"))
    )
}

/// Prefix of [`git_secret`]s (so one is recognised if it ever shows up somewhere).
pub const GIT_SECRET_PREFIX: &str = "tgw_";

/// How long the workspace's git may cache the credential (it is re-asked after).
pub(super) const GIT_SECRET_TTL_SECS: i64 = 3600;

pub(super) async fn git_credential(State(g): State<Gw>) -> Result<Json<agent::GitCredential>> {
    let session = g.session().await?;
    let gh = crate::github::pr::github(&g.app)?;
    // Only for a session linked to a GitHub repository.
    crate::github::credentials::linked(gh, session).await?;
    let host = g.app.workspaces()?;
    Ok(Json(agent::GitCredential {
        username: "x-access-token".into(),
        password: git_secret(&host, &g.wid),
        expires_at: crate::now_ms() / 1000 + GIT_SECRET_TTL_SECS,
    }))
}

/// Checks the workspace's git sent this workspace's [`git_secret`] (Basic auth, any user).
pub(super) fn check_git_secret(req: &axum::extract::Request, expected: &str) -> Result<()> {
    use base64::Engine;
    let Some(value) = req.headers().get(axum::http::header::AUTHORIZATION) else {
        // git asks its credential helper after a 401.
        return Err(Error::Unauthorized("git needs its credential".into()));
    };
    let given = value
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Basic "))
        .and_then(|b| {
            base64::engine::general_purpose::STANDARD
                .decode(b.trim())
                .ok()
        })
        .and_then(|d| String::from_utf8(d).ok())
        .and_then(|up| up.split_once(':').map(|(_, p)| p.to_string()))
        .unwrap_or_default();
    // Compared as digests: how long a comparison takes says nothing about the secret.
    use sha2::Digest;
    if sha2::Sha256::digest(given.as_bytes()) != sha2::Sha256::digest(expected.as_bytes()) {
        return Err(Error::Forbidden(
            "this is not the workspace's git credential".into(),
        ));
    }
    Ok(())
}

/// git's smart HTTP to the session's own GitHub repository and nowhere else: the workspace has
/// no network, so its git reaches GitHub through here. git sends the workspace's opaque
/// credential (from its helper); the relay checks it and sends the session's installation
/// token upstream in its place.
pub(super) async fn git_relay(
    State(g): State<Gw>,
    Path((owner, repo, rest)): Path<(String, String, String)>,
    req: axum::extract::Request,
) -> Result<Response> {
    let session = g.session().await?;
    let slot = g.slot().await?;
    let gh = crate::github::pr::github(&g.app)?;
    let linked = crate::github::credentials::linked(gh, session).await?;
    let name = repo.strip_suffix(".git").unwrap_or(&repo);
    if !owner.eq_ignore_ascii_case(&linked.owner) || !name.eq_ignore_ascii_case(&linked.name) {
        return Err(Error::Forbidden(format!(
            "this workspace may reach {} only",
            linked.full_name()
        )));
    }
    if !matches!(
        rest.as_str(),
        "info/refs" | "git-upload-pack" | "git-receive-pack" | "HEAD"
    ) {
        return Err(Error::NotFound("not a git smart HTTP path".into()));
    }
    let query = match req.uri().query() {
        None => String::new(),
        Some(q @ ("service=git-upload-pack" | "service=git-receive-pack")) => format!("?{q}"),
        Some(_) => {
            return Err(Error::BadRequest(
                "only ?service=git-upload-pack or git-receive-pack".into(),
            ));
        }
    };
    let host = g.app.workspaces()?;
    if let Err(e) = check_git_secret(&req, &git_secret(&host, &g.wid)) {
        return Ok(match e {
            Error::Unauthorized(m) => Response::builder()
                .status(StatusCode::UNAUTHORIZED)
                .header("www-authenticate", "Basic realm=\"GitHub\"")
                .body(Body::from(m))
                .map_err(|e| Error::Internal(e.to_string()))?,
            other => return Err(other),
        });
    }
    let (_, token) = crate::github::credentials::for_session(gh, session).await?;
    let upstream_auth = {
        use base64::Engine;
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD
                .encode(format!("x-access-token:{}", token.token))
        )
    };
    let url = format!(
        "{}/{}/{}.git/{rest}{query}",
        gh.config.web_url, linked.owner, linked.name
    );
    let method = reqwest::Method::from_bytes(req.method().as_str().as_bytes())
        .map_err(|_| Error::BadRequest("method".into()))?;
    let mut up = g
        .app
        .gateways
        .git_http
        .request(method, &url)
        .header("authorization", upstream_auth);
    for h in [
        "content-type",
        "content-encoding",
        "accept",
        "git-protocol",
        "user-agent",
    ] {
        if let Some(v) = req.headers().get(h) {
            up = up.header(h, v.as_bytes());
        }
    }
    // A push may update the session's own branch only: its commands are read before anything
    // is sent on.
    let mut data = req.into_body().into_data_stream();
    let mut head = bytes::BytesMut::new();
    if rest == "git-receive-pack" {
        let allowed = crate::github::pr::session_branch(&g.app, session).await?;
        let refs = receive_pack_refs(&mut data, &mut head).await?;
        if let Some(other) = refs
            .iter()
            .find(|r| r.strip_prefix("refs/heads/") != Some(allowed.as_str()))
        {
            return Err(Error::Forbidden(format!(
                "a session may push only its own branch {allowed}, not {other}"
            )));
        }
        g.gate(session, "push", serde_json::json!({ "refs": refs }))
            .await?;
    }
    let head = head.freeze();
    let body = futures::StreamExt::chain(
        futures::stream::iter((!head.is_empty()).then(|| Ok::<_, std::io::Error>(head))),
        futures::StreamExt::map(data, |r| r.map_err(std::io::Error::other)),
    );
    let res = up
        .body(reqwest::Body::wrap_stream(body))
        .send()
        .await
        .map_err(|e| {
            Error::BadGateway(format!(
                "GitHub is not reachable for git: {}",
                e.without_url()
            ))
        })?;
    let status = StatusCode::from_u16(res.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut out = Response::builder().status(status);
    for h in [
        "content-type",
        "www-authenticate",
        "cache-control",
        "expires",
        "pragma",
    ] {
        if let Some(v) = res.headers().get(h) {
            out = out.header(h, v.as_bytes());
        }
    }
    let stream = futures::StreamExt::map(res.bytes_stream(), move |r| {
        let _held = &slot;
        r.map_err(std::io::Error::other)
    });
    out.body(Body::from_stream(stream))
        .map_err(|e| Error::Internal(e.to_string()))
}

/// Largest command section of a push (its ref updates) read before deciding.
pub(super) const MAX_PUSH_COMMANDS_BYTES: usize = 64 * 1024;

/// Reads the ref-update commands at the start of a receive-pack request (pkt-lines up to the
/// first flush), keeping the bytes read in `head`; the refs they name.
pub(super) async fn receive_pack_refs(
    data: &mut (impl futures::Stream<Item = std::result::Result<Bytes, axum::Error>> + Unpin),
    head: &mut bytes::BytesMut,
) -> Result<Vec<String>> {
    let bad = |why: &str| Error::BadRequest(format!("not a git push: {why}"));
    let mut refs = Vec::new();
    let mut at = 0;
    loop {
        while head.len() < at + 4 {
            let chunk = futures::StreamExt::next(data)
                .await
                .ok_or_else(|| bad("it ended early"))?
                .map_err(|e| bad(&e.to_string()))?;
            head.extend_from_slice(&chunk);
            if head.len() > MAX_PUSH_COMMANDS_BYTES {
                return Err(Error::TooLarge(
                    "a push updates too many refs at once".into(),
                ));
            }
        }
        let len = std::str::from_utf8(&head[at..at + 4])
            .ok()
            .and_then(|h| usize::from_str_radix(h, 16).ok())
            .ok_or_else(|| bad("bad pkt-line length"))?;
        if len == 0 {
            return Ok(refs);
        }
        if len < 4 {
            return Err(bad("bad pkt-line length"));
        }
        while head.len() < at + len {
            let chunk = futures::StreamExt::next(data)
                .await
                .ok_or_else(|| bad("it ended early"))?
                .map_err(|e| bad(&e.to_string()))?;
            head.extend_from_slice(&chunk);
            if head.len() > MAX_PUSH_COMMANDS_BYTES {
                return Err(Error::TooLarge(
                    "a push updates too many refs at once".into(),
                ));
            }
        }
        let line = String::from_utf8_lossy(&head[at + 4..at + len]).to_string();
        let line = line.split('\0').next().unwrap_or_default().trim_end();
        // `<old> <new> <ref>`; a signed push (`push-cert`) or anything else is refused.
        let mut parts = line.splitn(3, ' ');
        match (parts.next(), parts.next(), parts.next()) {
            (Some(old), Some(new), Some(r)) if old.len() >= 40 && new.len() >= 40 => {
                refs.push(r.to_string())
            }
            (Some("shallow"), Some(_), None) => {}
            _ => return Err(bad(&format!("unexpected command {line:?}"))),
        }
        at += len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkt(s: &str) -> String {
        format!("{:04x}{s}", s.len() + 4)
    }

    #[tokio::test]
    async fn push_commands_are_read_before_the_pack() {
        let zero = "0".repeat(40);
        let one = "1".repeat(40);
        let body = format!(
            "{}{}0000PACK...",
            pkt(&format!(
                "{zero} {one} refs/heads/tandem/x\0report-status\n"
            )),
            pkt(&format!("{one} {zero} refs/heads/main\n"))
        );
        let (a, b) = body.split_at(7);
        let mut data = futures::stream::iter(vec![
            Ok(Bytes::from(a.to_string())),
            Ok(Bytes::from(b.to_string())),
        ]);
        let mut head = bytes::BytesMut::new();
        let refs = receive_pack_refs(&mut data, &mut head).await.unwrap();
        assert_eq!(refs, ["refs/heads/tandem/x", "refs/heads/main"]);
        assert!(
            String::from_utf8_lossy(&head).starts_with(&body[..20]),
            "what was read is kept to send on"
        );
        let mut junk = futures::stream::iter(vec![Ok(Bytes::from_static(b"zzzz"))]);
        assert!(
            receive_pack_refs(&mut junk, &mut bytes::BytesMut::new())
                .await
                .is_err()
        );
    }
}
