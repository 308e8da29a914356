//! Whether this server can start sessions and run their agents right now, and if not, why and
//! what to do, said the same way everywhere a person looks: `/api/health`, `tandem doctor`, the
//! dashboard's banner, a waiting session's page and its events.
//!
//! The host's basics (root, an OCI runtime) are probed at start and again every few seconds
//! while they are missing; what only starting needs (the image, the workspace agent binary) is
//! checked at each start, so a server whose image is missing still lists, stops, suspends and
//! attaches to the workspaces it runs, and a fix takes effect without a restart.

use std::sync::{Arc, RwLock};

use tandem_protocol::{Problem, ProblemKind, WorkspacesHealth};

use crate::Host;

/// The workspaces of this server, or the problem that keeps it from having any.
pub struct Slot(RwLock<Result<Arc<Host>, Problem>>);

impl Slot {
    pub fn new(initial: Result<Host, Problem>) -> Self {
        Self(RwLock::new(initial.map(Arc::new)))
    }

    /// The workspaces, or why there are none.
    pub fn get(&self) -> Result<Arc<Host>, Problem> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// True once the host can run workspaces.
    pub fn is_ok(&self) -> bool {
        self.0.read().unwrap_or_else(|e| e.into_inner()).is_ok()
    }

    /// Puts workspaces in place (a later probe found the host able); false if they already were.
    pub fn fill(&self, host: Host) -> Option<Arc<Host>> {
        let mut slot = self.0.write().unwrap_or_else(|e| e.into_inner());
        if slot.is_ok() {
            return None;
        }
        let host = Arc::new(host);
        *slot = Ok(host.clone());
        Some(host)
    }

    /// Records the newest probe's problem while there are still no workspaces.
    pub fn still_missing(&self, problem: Problem) {
        let mut slot = self.0.write().unwrap_or_else(|e| e.into_inner());
        if slot.is_err() {
            *slot = Err(problem);
        }
    }
}

/// A problem of `kind`.
pub fn problem(kind: ProblemKind, message: impl Into<String>, fix: impl Into<String>) -> Problem {
    Problem {
        kind,
        message: message.into(),
        fix: fix.into(),
    }
}

/// What stops a session from starting on this server now (none: it can start).
pub fn start_problem(slot: &Slot) -> Option<Problem> {
    match slot.get() {
        Err(p) => Some(p),
        Ok(host) => host.start_problem(),
    }
}

/// Everything that stops sessions or the default agent here, most basic first.
pub fn health(state: &crate::Engine) -> WorkspacesHealth {
    let mut problems: Vec<Problem> = start_problem(&state.workspaces).into_iter().collect();
    problems.extend(
        state
            .settings
            .model_problem(&state.settings.default_agent()),
    );
    WorkspacesHealth {
        ready: problems.is_empty(),
        problems,
    }
}

/// What is unsafe in this server's configuration though sessions run (`/api/health`'s
/// `warnings`, `tandem doctor`, the dashboard's banner).
pub fn warnings(config: &crate::config::Config) -> Vec<Problem> {
    code_origin_problem(config)
        .into_iter()
        .chain(tandem_origin_problem(config))
        .collect()
}

/// The URL Tandem takes as its own: the public URL, else `http://<listen>`.
fn public_url(config: &crate::config::Config) -> String {
    config
        .public_url
        .clone()
        .unwrap_or_else(|| format!("http://{}", config.listen))
}

/// A `code_url` on the same site (registrable domain) as the public URL: pages a workspace
/// serves could set cookies Tandem's origin receives and make same-site requests to it.
pub fn code_origin_problem(config: &crate::config::Config) -> Option<Problem> {
    let public_url = public_url(config);
    let code = config.code_url.as_ref()?;
    code.same_site_as(&public_url).then(|| {
        problem(
            ProblemKind::CodeOrigin,
            format!(
                "code_url ({}) is on the same site ({}) as Tandem's public URL ({public_url}): a page a workspace serves could set cookies Tandem receives and send it same-site requests",
                code.wildcard(),
                code.site()
            ),
            "serve VS Code from a separate registrable domain (as GitHub serves user content from another domain), e.g. code_url = \"https://{session}.tandem-usercontent.example\"; to keep this one anyway, set unsafe_same_site_code_url = true in tandem.toml",
        )
    })
}

/// VS Code served on Tandem's own origin (`unsafe_code_on_tandem_origin`, no `code_url`): the
/// pages a workspace serves then run beside Tandem's own, with its sign-in.
pub fn tandem_origin_problem(config: &crate::config::Config) -> Option<Problem> {
    (config.code_url.is_none() && config.unsafe_code_on_tandem_origin).then(|| {
        problem(
            ProblemKind::CodeOrigin,
            format!(
                "VS Code runs on Tandem's own origin ({}): pages a workspace serves (VS Code, its extensions, whatever the agent writes) run beside Tandem's own pages, with the sign-in of whoever opens them",
                public_url(config)
            ),
            "set code_url to a wildcard name on a separate registrable domain (e.g. code_url = \"https://{session}.tandem-usercontent.example\") and remove unsafe_code_on_tandem_origin from tandem.toml",
        )
    })
}

/// Why `tandem serve` refuses to start with this configuration's VS Code origin, if it does
/// (`tandem doctor` says the same): a same-site `code_url` unless the admin insists, and never
/// on an http public URL (its cookies cannot be `__Host-`, so a sibling origin may set them
/// whatever the admin says); a `code_url` without a `public_url` on a server listening beyond
/// loopback (Tandem's own site is unknown, so whether VS Code's shares it cannot be checked).
pub fn code_url_refusal(config: &crate::config::Config) -> Option<String> {
    if config.code_url.is_some() && config.public_url.is_none() && !config.listen.ip().is_loopback()
    {
        return Some(format!(
            "code_url is set but public_url is not, and the server listens on {} (not loopback): Tandem cannot check that VS Code's origin is on another site than its own; set public_url in tandem.toml to the address people open (https://tandem.example.com)",
            config.listen
        ));
    }
    let p = code_origin_problem(config)?;
    if !public_url(config).starts_with("https://") {
        return Some(format!(
            "{}; the public URL is http, where Tandem's cookies cannot be __Host- (a page on a sibling origin could set them), so unsafe_same_site_code_url cannot allow this: serve Tandem over https, or VS Code from another registrable domain",
            p.message
        ));
    }
    (!config.unsafe_same_site_code_url).then(|| format!("{}; {}", p.message, p.fix))
}

/// The problem as one line for logs and API errors.
pub fn sentence(p: &Problem) -> String {
    p.to_string()
}
