//! What the workspace e2e tests need: the test image and a small git repo.

use std::path::PathBuf;

const TEST_RECIPE: &str = include_str!("../images/test/image.toml");

/// The images dir holding the (built) test image, or `None` with the reason printed where
/// this host cannot run workspaces.
pub async fn test_images() -> Option<PathBuf> {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIP (e2e workspaces): workspaces need root");
        return None;
    }
    let images = std::env::var_os("TANDEM_TEST_IMAGES_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("tandem-test-images"));
    tandem_host::images::build(&images, TEST_RECIPE, |_| {})
        .await
        .expect("the test image builds");
    Some(images)
}

/// The test image's recipe file.
pub fn test_recipe() -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../images/test/image.toml")
}

/// A git repo on `main` with one commit holding a README.
pub fn git_repo() -> tempfile::TempDir {
    let src = tempfile::tempdir().unwrap();
    std::fs::write(src.path().join("README.md"), "hello\n").unwrap();
    for args in [
        &["init", "-q"][..],
        &["add", "-A"][..],
        &["commit", "-qm", "init"][..],
    ] {
        let ok = std::process::Command::new("git")
            .args([
                "-c",
                "user.name=T",
                "-c",
                "user.email=t@example.invalid",
                "-c",
                "init.defaultBranch=main",
            ])
            .args(args)
            .current_dir(src.path())
            .status()
            .unwrap()
            .success();
        assert!(ok, "git {args:?}");
    }
    src
}

/// Commits everything in `dir` (a repo from [`git_repo`]).
pub fn commit_all(dir: &std::path::Path) {
    for args in [&["add", "-A"][..], &["commit", "-qm", "more"][..]] {
        let ok = std::process::Command::new("git")
            .args(["-c", "user.name=T", "-c", "user.email=t@example.invalid"])
            .args(args)
            .current_dir(dir)
            .status()
            .unwrap()
            .success();
        assert!(ok, "git {args:?}");
    }
}

/// A repo holding `files` (besides the README), added to the server behind `api` as `name`;
/// the checkout lives as long as the returned directory.
pub async fn repo_with(
    api: &tandem_server::client::Client,
    name: &str,
    files: &[(&str, &str)],
) -> (tempfile::TempDir, tandem_protocol::Repo) {
    let src = git_repo();
    if !files.is_empty() {
        for (path, text) in files {
            std::fs::write(src.path().join(path), text).unwrap();
        }
        commit_all(src.path());
    }
    let repo = api
        .create_repo(&tandem_protocol::CreateRepo {
            name: name.into(),
            url: src.path().to_string_lossy().into(),
            default_branch: None,
            warm_pool: None,
        })
        .await
        .unwrap();
    (src, repo)
}
