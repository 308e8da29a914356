//! Where a workspace's start spends its time, step by step (the start benchmark prints it).

/// Times the steps of a start.
pub(super) struct Phases {
    at: std::time::Instant,
    pub(super) done: Vec<(&'static str, f64)>,
}

impl Default for Phases {
    fn default() -> Self {
        Self {
            at: std::time::Instant::now(),
            done: Vec::new(),
        }
    }
}

impl Phases {
    pub(super) fn end(&mut self, phase: &'static str) {
        let now = std::time::Instant::now();
        self.done
            .push((phase, (now - self.at).as_secs_f64() * 1000.0));
        self.at = now;
    }
}
