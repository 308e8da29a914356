//! What this process knows of the sessions it boots: which are booting here, and what each
//! waiting one was last told (so a session hears a cause once, not at every retry).

use std::collections::{HashMap, HashSet};

use tandem_protocol::{EventKind, Problem, SessionId};

use crate::Engine;
use crate::Result;
use crate::db;
use crate::sessions::workspace;

/// Sessions this process is booting, and what each waiting one was last told.
#[derive(Default)]
pub struct Boots(std::sync::Mutex<BootsInner>);

#[derive(Default)]
struct BootsInner {
    booting: HashSet<SessionId>,
    /// The problem message each waiting session's last `waiting` event gave.
    told: HashMap<SessionId, String>,
    /// Live sessions whose next turn waits for a model.
    model: HashSet<SessionId>,
}

impl Boots {
    fn lock(&self) -> std::sync::MutexGuard<'_, BootsInner> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Marks `id` as booting here; false if it already is.
    pub(crate) fn begin(&self, id: SessionId) -> bool {
        self.lock().booting.insert(id)
    }

    pub(crate) fn is_booting(&self, id: SessionId) -> bool {
        self.lock().booting.contains(&id)
    }

    pub(crate) fn end(&self, id: SessionId) {
        self.lock().booting.remove(&id);
    }

    /// True when `id` has not yet been told `message` (and records that it now is).
    pub(crate) fn tell(&self, id: SessionId, message: &str) -> bool {
        let mut inner = self.lock();
        if inner.told.get(&id).is_some_and(|m| m == message) {
            return false;
        }
        inner.told.insert(id, message.to_string());
        true
    }

    /// Its cause went away: the next problem is told again.
    pub(crate) fn forget(&self, id: SessionId) {
        self.lock().told.remove(&id);
    }

    /// Notes that `id`'s next turn waits for a model.
    pub fn wait_for_model(&self, id: SessionId) {
        self.lock().model.insert(id);
    }

    pub(crate) fn take_model_waiters(&self) -> Vec<SessionId> {
        let mut inner = self.lock();
        let ids: Vec<SessionId> = inner.model.drain().collect();
        for id in &ids {
            inner.told.remove(id);
        }
        ids
    }
}

/// Appends a `waiting` event saying why `id` cannot go on, unless the session was already told
/// that.
pub async fn tell_waiting(state: &Engine, id: SessionId, problem: &Problem) -> Result<()> {
    if !state.boots.tell(id, &problem.message) {
        return Ok(());
    }
    // Told already by an earlier process (a restart): the log says it last.
    if let Some(last) = db::events::last(&state.db, id).await?
        && matches!(&last.kind, EventKind::Waiting { problem: p } if p.message == problem.message)
    {
        return Ok(());
    }
    tracing::info!(session = %id, "waiting: {}", crate::availability::sentence(problem));
    workspace::event(
        &state.db,
        id,
        EventKind::Waiting {
            problem: problem.clone(),
        },
    )
    .await
    .map(|_| ())
}
