//! The CLI's subcommands below the top level: repos, sessions, snapshots, people, tokens,
//! secrets and images.

use clap::Subcommand;

use crate::{LocalArgs, Remote};

#[derive(Subcommand)]
pub(crate) enum SecretCommand {
    /// Store a secret (e.g. `model_api_key`) from standard input.
    Set {
        name: String,
        #[command(flatten)]
        remote: Remote,
    },
}

#[derive(Subcommand)]
pub(crate) enum ImageCommand {
    /// Build an image from its recipe (default: the built-in base image), unless already built.
    Build {
        #[command(flatten)]
        local: LocalArgs,
    },
}
#[derive(Subcommand)]
pub(crate) enum RepoCommand {
    /// Register a git remote.
    Add {
        /// Short unique name, e.g. acme/web.
        name: String,
        /// The git remote URL.
        #[arg(value_name = "GIT_URL")]
        git_url: String,
        /// The default branch (default: main).
        #[arg(long)]
        branch: Option<String>,
        /// Started workspaces to keep ready for new sessions (default 0).
        #[arg(long)]
        warm_pool: Option<i64>,
        #[command(flatten)]
        remote: Remote,
    },
    /// List repos.
    Ls {
        #[command(flatten)]
        remote: Remote,
    },
    /// Import a GitHub repository the server's GitHub App is installed on.
    Import {
        /// owner/name on GitHub.
        full_name: String,
        #[command(flatten)]
        remote: Remote,
    },
    /// List the GitHub repositories the App is installed on (and which are imported).
    Github {
        #[command(flatten)]
        remote: Remote,
    },
}

#[derive(Subcommand)]
pub(crate) enum SessionCommand {
    /// Start a session with a first prompt.
    New {
        /// Repo name or id.
        #[arg(long, short)]
        repo: String,
        /// Branch to start from (default: the repo's default branch).
        #[arg(long)]
        branch: Option<String>,
        /// builtin, opencode or none (default: the server's default agent).
        #[arg(long)]
        agent: Option<String>,
        /// A CLI agent's command template with {prompt}, e.g. "aider --message {prompt}".
        #[arg(long, conflicts_with = "agent")]
        command: Option<String>,
        /// The first prompt (none only with --agent none).
        prompt: Option<String>,
        #[command(flatten)]
        remote: Remote,
    },
    /// Queue a prompt in a session (or steer the running turn with --steer).
    Prompt {
        id: String,
        text: String,
        /// Deliver it into the running turn at its next tool boundary.
        #[arg(long)]
        steer: bool,
        #[command(flatten)]
        remote: Remote,
    },
    /// Stop the session's running turn (the session and its queue stay).
    StopTurn {
        id: String,
        #[command(flatten)]
        remote: Remote,
    },
    /// Open the session's GitHub pull request (or push its new commits to it).
    Pr {
        id: String,
        /// Default: the session's title.
        #[arg(long)]
        title: Option<String>,
        #[arg(long)]
        draft: bool,
        /// When the base branch moved: rebase onto it first.
        #[arg(long, conflicts_with = "no_rebase")]
        rebase: bool,
        /// When the base branch moved: open it as is.
        #[arg(long)]
        no_rebase: bool,
        #[command(flatten)]
        remote: Remote,
    },
    /// List a session's child sessions.
    Children {
        id: String,
        #[command(flatten)]
        remote: Remote,
    },
    /// List sessions, newest first.
    Ls {
        /// Only this repo (name or id).
        #[arg(long, short)]
        repo: Option<String>,
        #[command(flatten)]
        remote: Remote,
    },
    /// Show one session with its prompts and events.
    Show {
        id: String,
        #[command(flatten)]
        remote: Remote,
    },
    /// Stop a session: its workspace goes, its diff stays.
    Stop {
        id: String,
        #[command(flatten)]
        remote: Remote,
    },
    /// Suspend a session: processes end, files stay.
    Suspend {
        id: String,
        #[command(flatten)]
        remote: Remote,
    },
    /// Resume a suspended session.
    Resume {
        id: String,
        #[command(flatten)]
        remote: Remote,
    },
    /// Fork a running session into N new ones from identical copies.
    Fork {
        id: String,
        /// How many.
        #[arg(long, short = 'n', default_value_t = 1)]
        count: i64,
        #[command(flatten)]
        remote: Remote,
    },
    /// Print the session's changes as a patch.
    Diff {
        id: String,
        #[command(flatten)]
        remote: Remote,
    },
}

#[derive(Subcommand)]
pub(crate) enum SnapshotCommand {
    /// Build a snapshot of a repo now and follow it to the end.
    Build {
        /// Repo name or id.
        #[arg(long, short)]
        repo: String,
        /// Return once the build has started instead of following it.
        #[arg(long)]
        no_wait: bool,
        #[command(flatten)]
        remote: Remote,
    },
    /// List a repo's snapshots, newest first.
    Ls {
        /// Repo name or id.
        #[arg(long, short)]
        repo: String,
        #[command(flatten)]
        remote: Remote,
    },
}

#[derive(Subcommand)]
pub(crate) enum UserCommand {
    /// Invite someone: prints their one-time sign-up link (shown once).
    Invite {
        /// Their login name.
        name: String,
        #[arg(long)]
        email: Option<String>,
        /// Make them an admin.
        #[arg(long)]
        admin: bool,
        /// How long the link holds, in seconds (default 7 days).
        #[arg(long)]
        expires_in: Option<i64>,
        #[command(flatten)]
        remote: Remote,
    },
    /// List people, their role and how they sign in.
    Ls {
        #[command(flatten)]
        remote: Remote,
    },
    /// Make someone an admin or a member.
    SetRole {
        /// Name or id.
        name: String,
        #[arg(value_parser = ["admin", "member"])]
        role: String,
        #[command(flatten)]
        remote: Remote,
    },
    /// Deactivate someone: every token, cookie and link of theirs stops at once.
    Deactivate {
        /// Name or id.
        name: String,
        /// Reactivate instead.
        #[arg(long)]
        undo: bool,
        #[command(flatten)]
        remote: Remote,
    },
}

#[derive(Subcommand)]
pub(crate) enum TokenCommand {
    /// Create an API token. With TANDEM_TOKEN set it asks the server for one for that token's
    /// user; without, it mints one for the admin directly in the local data dir.
    Create {
        /// What the token is for.
        #[arg(long, default_value = "cli")]
        name: String,
        /// Lifetime in seconds (default: no expiry).
        #[arg(long)]
        expires_in: Option<i64>,
        #[command(flatten)]
        remote: Remote,
        #[command(flatten)]
        local: LocalArgs,
    },
}
