//! Which workspaces the runtime is stopping now: their pods are going on purpose, not dying.

/// Marks a workspace as being stopped for as long as it lives.
pub(super) struct Stopping<'a> {
    set: &'a std::sync::Mutex<std::collections::HashSet<String>>,
    id: String,
}

impl<'a> Stopping<'a> {
    pub(super) fn new(
        set: &'a std::sync::Mutex<std::collections::HashSet<String>>,
        id: &str,
    ) -> Self {
        set.lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.to_string());
        Self {
            set,
            id: id.to_string(),
        }
    }
}

impl Drop for Stopping<'_> {
    fn drop(&mut self) {
        self.set
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
    }
}

impl super::KubernetesRuntime {
    /// Whether this runtime is stopping workspace `id` now.
    pub(super) fn is_stopping(&self, id: &str) -> bool {
        self.stopping
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(id)
    }
}
