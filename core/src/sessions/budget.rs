//! A session tree's model budget, and the one answer to "may this session make one more model
//! request, and whose budget refused it". A budget belongs to the root of a session tree (an
//! automation's run: its automation's `max_model_requests`; any other root: the server's
//! `max_model_requests_per_session`), and every session of the tree (the children its agent
//! spawns, forks, and theirs) draws on it. It is counted in the store, so it holds across
//! restarts and across a cluster's servers.

use tandem_protocol::SessionId;

use crate::db::{self, Db};
use crate::{Error, Result};

/// Whose limit a tree's budget is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Whose {
    /// The automation whose run is the tree's root (its `max_model_requests`).
    Automation,
    /// The server's `max_model_requests_per_session` under `[agents]`.
    Server,
}

/// A session tree's model budget as it stands.
#[derive(Clone, Copy, Debug)]
pub struct ModelBudget {
    /// The tree's root, which holds the count.
    pub root: SessionId,
    /// Model requests the whole tree made.
    pub used: i64,
    /// Most the whole tree may make.
    pub limit: i64,
    pub whose: Whose,
}

impl ModelBudget {
    fn new(tree: db::trees::TreeBudget, cap: u32) -> Self {
        let cap = i64::from(cap);
        let (limit, whose) = match tree.budget.filter(|n| *n < cap) {
            Some(n) => (n, Whose::Automation),
            None => (cap, Whose::Server),
        };
        Self {
            root: tree.root,
            used: tree.used,
            limit,
            whose,
        }
    }

    /// What the agent is told when its tree's budget refuses a request: whose budget it was,
    /// and what lifts it.
    pub fn refusal(&self) -> String {
        let (whose, fix) = match self.whose {
            Whose::Automation => (
                "its automation's budget",
                "raise the automation's Max model requests, or start a new run",
            ),
            Whose::Server => (
                "the server's limit",
                "an admin raises max_model_requests_per_session under [agents] in tandem.toml, or start a new session",
            ),
        };
        let n = self.limit;
        let requests = if n == 1 { "request" } else { "requests" };
        format!(
            "this session's model budget is used up: {n} model {requests}, {whose}, shared by every session of its tree (the run or session it started from, its child sessions and forks). To go on, {fix}."
        )
    }
}

/// The model budget session `id` draws on; `cap` is the server's limit.
pub async fn model_budget(db: &Db, cap: u32, id: SessionId) -> Result<ModelBudget> {
    let tree = db::trees::tree_budget(db, id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("no session {id}")))?;
    Ok(ModelBudget::new(tree, cap))
}

/// Takes one model request for session `id` from its tree's budget. Past the budget it is
/// refused (429) with whose budget it was; two sessions of a tree racing for its last request
/// never both get it.
pub async fn take_model_request(db: &Db, cap: u32, id: SessionId) -> Result<()> {
    if db::trees::count_model_request(db, id, cap.into())
        .await?
        .is_some()
    {
        return Ok(());
    }
    Err(Error::TooMany(model_budget(db, cap, id).await?.refusal()))
}

/// Gives back a model request of session `id` that never reached the model (its endpoint could
/// not be connected to). One the provider answered, even with an error (429, 5xx), counts.
pub async fn give_back_model_request(db: &Db, id: SessionId) -> Result<()> {
    Ok(db::trees::give_back_model_request(db, id).await?)
}

#[cfg(test)]
mod tests {
    use tandem_protocol::SessionId;

    use super::{ModelBudget, Whose};

    #[test]
    fn the_refusal_says_whose_budget_and_what_lifts_it() {
        let budget = |limit, whose| ModelBudget {
            root: SessionId(uuid::Uuid::nil()),
            used: limit,
            limit,
            whose,
        };
        let one = budget(1, Whose::Automation).refusal();
        assert!(one.contains("1 model request,"), "{one}");
        assert!(
            one.contains("raise the automation's Max model requests, or start a new run"),
            "{one}"
        );
        let many = budget(2000, Whose::Server).refusal();
        assert!(many.contains("2000 model requests,"), "{many}");
        assert!(
            many.contains("an admin raises max_model_requests_per_session under [agents]"),
            "{many}"
        );
    }
}
