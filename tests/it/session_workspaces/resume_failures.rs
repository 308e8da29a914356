//! A resumed session whose workspace cannot start loses nothing: its layer stays, its diff is
//! readable, the timeline and the answer say why, and a resume works again once the cause is
//! gone. A suspended session shows its diff.

use std::path::{Path, PathBuf};

use super::*;

/// What keeps a resume from starting, each one a test can cause and take away again.
#[derive(Clone, Copy, Debug)]
enum Cause {
    /// The agent binary bound into the workspace never answers.
    SilentAgent,
    /// The OCI runtime refuses to run the container (it finds one of that id already there).
    RuntimeRefuses,
    /// The workspace's disk cannot be attached (its image is immutable).
    DiskRefused,
}

/// Where one test's server keeps things, and how each cause is made.
struct Scene {
    /// The agent binary the server binds into workspaces (a copy this test may replace).
    agent: PathBuf,
    /// The real agent, kept beside it.
    real_agent: PathBuf,
    /// The workspace's directory (its disk image inside).
    dir: PathBuf,
    /// The runtime's state directory of this workspace id.
    runtime_state: PathBuf,
}

impl Scene {
    fn cause(&self, c: Cause) {
        match c {
            Cause::SilentAgent => {
                let tmp = self.agent.with_extension("new");
                std::fs::write(&tmp, "#!/bin/sh\nexec sleep 600\n").unwrap();
                std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                    .unwrap();
                std::fs::rename(&tmp, &self.agent).unwrap();
            }
            Cause::RuntimeRefuses => std::fs::create_dir_all(&self.runtime_state).unwrap(),
            Cause::DiskRefused => chattr(&self.dir.join("disk.img"), "+i"),
        }
    }

    fn mend(&self, c: Cause) {
        match c {
            Cause::SilentAgent => std::fs::copy(&self.real_agent, &self.agent)
                .map(drop)
                .unwrap(),
            // The runtime's own cleanup of the failed start may have taken it already.
            Cause::RuntimeRefuses => {
                let _ = std::fs::remove_dir_all(&self.runtime_state);
            }
            Cause::DiskRefused => chattr(&self.dir.join("disk.img"), "-i"),
        }
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        // An immutable file would outlive the test's temp dir.
        if !self.dir.join("disk.img").is_file() {
            return;
        }
        let _ = std::process::Command::new("chattr")
            .arg("-i")
            .arg(self.dir.join("disk.img"))
            .status();
    }
}

fn chattr(file: &Path, flag: &str) {
    let ok = std::process::Command::new("chattr")
        .arg(flag)
        .arg(file)
        .status()
        .unwrap()
        .success();
    assert!(ok, "chattr {flag} {}", file.display());
}

async fn post(s: &TestServer, id: SessionId, action: &str) -> crate::harness::Res {
    s.req(Method::POST, &format!("/api/sessions/{id}/{action}"))
        .bearer(&s.admin_token)
        .send()
        .await
}

async fn diff(s: &TestServer, id: SessionId) -> Diff {
    s.get(&format!("/api/sessions/{id}/diff"))
        .send()
        .await
        .parse()
}

#[track_caller]
fn assert_has_work(diff: &Diff, when: &str) {
    assert!(
        diff.files.iter().any(|f| f == "work.txt") && diff.patch.contains("+the person's work"),
        "{when}: the diff lost the session's work: {diff:?}"
    );
}

#[tokio::test]
async fn a_resume_that_cannot_start_keeps_the_layer_and_diff_and_a_later_resume_works() {
    let bin = tempfile::tempdir().unwrap();
    let real_agent =
        Path::new(env!("CARGO_BIN_EXE_tandem")).with_file_name("tandem-workspace-agent");
    let agent = bin.path().join("tandem-workspace-agent");
    std::fs::copy(&real_agent, &agent).unwrap();
    let a = agent.clone();
    let Some(s) = crate::workspaces::server(move |c| c.agent_bin = Some(a)).await else {
        return;
    };
    let id = ready_session(&s, "acme/resumable").await;
    let out = exec(&s, id, "echo \"the person's work\" > work.txt").await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");

    let res = post(&s, id, "suspend").await;
    assert_eq!(
        res.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&res.body)
    );
    assert_has_work(&diff(&s, id).await, "suspended");

    let host = s.state.workspaces().unwrap();
    let wid = tandem_server::sessions::workspace::workspace_id(id);
    let dir = host.runtime.local().unwrap().dir(&wid);
    let runtime_state = dir
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join("runtime")
        .join(host.runtime.name())
        .join(&wid);
    let scene = Scene {
        agent,
        real_agent,
        dir: dir.clone(),
        runtime_state,
    };

    for (cause, says) in [
        (Cause::SilentAgent, "agent did not come up"),
        (Cause::RuntimeRefuses, "already exists"),
        (Cause::DiskRefused, "attaching a workspace disk"),
    ] {
        scene.cause(cause);
        let res = post(&s, id, "resume").await;
        let message = res.assert_error(StatusCode::SERVICE_UNAVAILABLE, "unavailable");
        assert!(
            message.contains(says) && message.contains("resume it"),
            "{cause:?}: the answer says what failed and what to do: {message}"
        );
        let d: SessionDetail = s.get(&format!("/api/sessions/{id}")).send().await.parse();
        assert_eq!(
            d.session.state,
            SessionState::Suspended,
            "{cause:?}: the session can be resumed again"
        );
        assert!(
            events(&s, id).await.iter().any(|e| matches!(
                &e.kind,
                EventKind::Error { message } if message.contains(says) && message.contains("files are kept")
            )),
            "{cause:?}: the timeline says why"
        );
        assert!(
            dir.join("disk.img").is_file(),
            "{cause:?}: the workspace's disk (its layer) is kept"
        );
        assert_has_work(&diff(&s, id).await, &format!("{cause:?}"));

        scene.mend(cause);
        let res = post(&s, id, "resume").await;
        assert_eq!(
            res.status,
            StatusCode::OK,
            "{cause:?}: a resume once the cause is gone: {}",
            String::from_utf8_lossy(&res.body)
        );
        assert_eq!(
            exec(&s, id, "cat work.txt").await.stdout,
            "the person's work\n",
            "{cause:?}: the resumed workspace has the work"
        );
        assert_has_work(&diff(&s, id).await, &format!("{cause:?}, resumed"));
        let res = post(&s, id, "suspend").await;
        assert_eq!(
            res.status,
            StatusCode::OK,
            "{}",
            String::from_utf8_lossy(&res.body)
        );
    }
    // Stopped from suspended: the kept diff is the stopped session's.
    let res = post(&s, id, "stop").await;
    assert_eq!(
        res.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&res.body)
    );
    assert_has_work(&diff(&s, id).await, "stopped after a suspend");
}

/// A fork whose workspace does not start keeps its copy of the parent's layer: suspended, with
/// the reason in its timeline and the work in its diff, and resumable once the cause is gone.
#[tokio::test]
async fn a_fork_that_cannot_start_keeps_its_copy_and_resumes_later() {
    let bin = tempfile::tempdir().unwrap();
    let real_agent =
        Path::new(env!("CARGO_BIN_EXE_tandem")).with_file_name("tandem-workspace-agent");
    let agent = bin.path().join("tandem-workspace-agent");
    std::fs::copy(&real_agent, &agent).unwrap();
    let a = agent.clone();
    let Some(s) = crate::workspaces::server(move |c| c.agent_bin = Some(a)).await else {
        return;
    };
    let parent = ready_session(&s, "acme/forked").await;
    let out = exec(&s, parent, "echo \"the person's work\" > work.txt").await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    let scene = Scene {
        agent,
        real_agent,
        dir: PathBuf::new(),
        runtime_state: PathBuf::new(),
    };
    scene.cause(Cause::SilentAgent);
    let res = s
        .post(
            &format!("/api/sessions/{parent}/fork"),
            json!({ "count": 1 }),
        )
        .send()
        .await;
    assert_eq!(
        res.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&res.body)
    );
    let child = res.parse::<Vec<Session>>()[0].clone();
    assert_eq!(child.state, SessionState::Suspended, "the copy is kept");
    assert!(
        events(&s, child.id).await.iter().any(|e| matches!(
            &e.kind,
            EventKind::Error { message } if message.contains("agent did not come up")
        )),
        "the timeline says why"
    );
    assert_has_work(&diff(&s, child.id).await, "a fork that did not start");
    scene.mend(Cause::SilentAgent);
    let res = post(&s, child.id, "resume").await;
    assert_eq!(
        res.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&res.body)
    );
    assert_eq!(
        exec(&s, child.id, "cat work.txt").await.stdout,
        "the person's work\n"
    );
}

/// A resume the server's restart cuts short keeps the session resumable: suspended again with
/// its layer and diff, and resumed once the server is back.
#[tokio::test]
async fn a_resume_cut_short_by_a_restart_is_suspended_again_and_resumes() {
    use tandem_protocol::ExecRequest;
    let Some(image) = crate::workspaces::image().await else {
        return;
    };
    let images = image.parent().unwrap().parent().unwrap().to_path_buf();
    let dir = crate::harness::test_dir();
    let data = dir.path().join("data");
    let _clean = crate::harness::RemoveWorkspaces(data.clone());
    let real_agent =
        Path::new(env!("CARGO_BIN_EXE_tandem")).with_file_name("tandem-workspace-agent");
    let agent = dir.path().join("tandem-workspace-agent");
    std::fs::copy(&real_agent, &agent).unwrap();
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(
        data.join("tandem.toml"),
        format!("agent_bin = {:?}\n", agent.display().to_string()),
    )
    .unwrap();
    let scene = Scene {
        agent,
        real_agent,
        dir: PathBuf::new(),
        runtime_state: PathBuf::new(),
    };
    let (mut server, url) = crate::restart::serve_with_workspaces(&data, &images).await;
    let token = crate::restart::local_token(&data).await;
    let c = tandem_server::client::Client::new(&url, Some(token.clone())).unwrap();
    let src = source_repo("[workspace]\n");
    let repo = c
        .create_repo(&CreateRepo {
            name: "acme/interrupted".into(),
            url: src.path().to_string_lossy().into(),
            default_branch: None,
            warm_pool: None,
        })
        .await
        .unwrap();
    let id = c
        .create_session(&CreateSession {
            repo_id: repo.id,
            prompt: String::new(),
            branch: None,
            agent: Some(AgentSpec::None),
            context: None,
        })
        .await
        .unwrap()
        .session
        .id;
    crate::restart::wait_for_state(&c, id, SessionState::Ready).await;
    let write = ExecRequest {
        command: "echo \"the person's work\" > work.txt".into(),
        cwd: None,
        timeout_secs: None,
    };
    assert_eq!(c.exec(id, &write).await.unwrap().exit_code, Some(0));
    c.session_action(id, "suspend").await.unwrap();

    // The resume waits for an agent that never answers; the server dies meanwhile.
    scene.cause(Cause::SilentAgent);
    let resuming = tokio::spawn({
        let c = c.clone();
        async move { c.session_action(id, "resume").await }
    });
    crate::restart::wait_for_state(&c, id, SessionState::Starting).await;
    server.kill().await.unwrap();
    let _ = resuming.await;
    scene.mend(Cause::SilentAgent);

    let (mut server, url) = crate::restart::serve_with_workspaces(&data, &images).await;
    let c = tandem_server::client::Client::new(&url, Some(token)).unwrap();
    crate::restart::wait_for_state(&c, id, SessionState::Suspended).await;
    assert_has_work(&c.diff(id).await.unwrap(), "after the restart");
    let resumed = c.session_action(id, "resume").await.unwrap();
    assert_eq!(resumed.session.state, SessionState::Ready);
    let read = ExecRequest {
        command: "cat work.txt".into(),
        cwd: None,
        timeout_secs: None,
    };
    assert_eq!(
        c.exec(id, &read).await.unwrap().stdout,
        "the person's work\n"
    );
    c.session_action(id, "stop").await.unwrap();
    server.kill().await.unwrap();
}
