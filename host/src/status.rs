//! The status board: one line per running part (the pool, each channel), read by `/status`
//! (and later the control API). Parts add a line source when they start; the board knows no
//! part's type.

use std::sync::{Arc, RwLock};

type LineSource = Arc<dyn Fn() -> String + Send + Sync>;

/// Cheap to clone; every clone is the same board.
#[derive(Clone, Default)]
pub struct StatusBoard(Arc<RwLock<Vec<(&'static str, LineSource)>>>);

impl std::fmt::Debug for StatusBoard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.lines().iter().map(|(name, _)| name)).finish()
    }
}

impl StatusBoard {
    /// Adds (or replaces) the line named `name`.
    pub fn add(&self, name: &'static str, line: impl Fn() -> String + Send + Sync + 'static) {
        let mut lines = self.0.write().unwrap_or_else(|p| p.into_inner());
        lines.retain(|(n, _)| *n != name);
        lines.push((name, Arc::new(line)));
    }

    /// Every line, in the order added.
    pub fn lines(&self) -> Vec<(&'static str, String)> {
        let sources: Vec<(&'static str, LineSource)> =
            self.0.read().unwrap_or_else(|p| p.into_inner()).clone();
        sources.into_iter().map(|(name, line)| (name, line())).collect()
    }
}
