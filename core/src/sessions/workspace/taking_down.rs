//! Sessions whose workspace one of their own verbs (stop, suspend) is taking down: their
//! init's exit is expected, and the supervisor does not take it for a death
//! ([`crate::supervisor::look_for_deaths`]). Process-wide: session ids are unique.

use std::collections::BTreeMap;
use std::sync::Mutex;

use tandem_protocol::SessionId;

/// How many verbs are taking each session's workspace down (two stops of one session may run
/// at once: the first to end must not clear the second's mark).
static TAKING_DOWN: Mutex<BTreeMap<SessionId, usize>> = Mutex::new(BTreeMap::new());

/// Held for the whole verb, from before its runtime stops the workspace until the session
/// says what it is now.
pub struct TakingDown(SessionId);

impl TakingDown {
    pub fn new(id: SessionId) -> Self {
        *TAKING_DOWN
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(id)
            .or_default() += 1;
        Self(id)
    }
}

impl Drop for TakingDown {
    fn drop(&mut self) {
        let mut all = TAKING_DOWN.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = all.get_mut(&self.0) {
            *n -= 1;
            if *n == 0 {
                all.remove(&self.0);
            }
        }
    }
}

/// True while a verb of the session's own is taking its workspace down.
pub fn taking_down(id: SessionId) -> bool {
    TAKING_DOWN
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains_key(&id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mark_stays_until_the_last_verb_ends() {
        let id = SessionId(uuid::Uuid::new_v4());
        let first = TakingDown::new(id);
        let second = TakingDown::new(id);
        drop(first);
        assert!(taking_down(id), "the second verb still takes it down");
        drop(second);
        assert!(!taking_down(id));
    }
}
