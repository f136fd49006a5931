//! The status board: one line per running part (the pool, each channel), read by `/status`
//! (and later the control API). Parts add a line source when they start; the board knows no
//! part's type.

use std::sync::{Arc, RwLock};

type LineSource = Arc<dyn Fn() -> String + Send + Sync>;
type ProblemSource = Arc<dyn Fn() -> Option<String> + Send + Sync>;

/// Cheap to clone; every clone is the same board.
#[derive(Clone, Default)]
pub struct StatusBoard {
    lines: Arc<RwLock<Vec<(&'static str, LineSource)>>>,
    problems: Arc<RwLock<Vec<(&'static str, ProblemSource)>>>,
}

impl std::fmt::Debug for StatusBoard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.lines().iter().map(|(name, _)| name)).finish()
    }
}

impl StatusBoard {
    /// Adds (or replaces) the line named `name`.
    pub fn add(&self, name: &'static str, line: impl Fn() -> String + Send + Sync + 'static) {
        let mut lines = self.lines.write().unwrap_or_else(|p| p.into_inner());
        lines.retain(|(n, _)| *n != name);
        lines.push((name, Arc::new(line)));
    }

    /// Adds (or replaces) what makes the part `name` degraded right now (`None`: nothing),
    /// read by `/status`, the control API's health and so `make up`.
    pub fn add_problem(
        &self,
        name: &'static str,
        problem: impl Fn() -> Option<String> + Send + Sync + 'static,
    ) {
        let mut problems = self.problems.write().unwrap_or_else(|p| p.into_inner());
        problems.retain(|(n, _)| *n != name);
        problems.push((name, Arc::new(problem)));
    }

    /// The degraded parts now, each with what is wrong, in the order added.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let sources: Vec<(&'static str, ProblemSource)> =
            self.problems.read().unwrap_or_else(|p| p.into_inner()).clone();
        sources.into_iter().filter_map(|(name, problem)| Some((name, problem()?))).collect()
    }

    /// Every line, in the order added.
    pub fn lines(&self) -> Vec<(&'static str, String)> {
        let sources: Vec<(&'static str, LineSource)> =
            self.lines.read().unwrap_or_else(|p| p.into_inner()).clone();
        sources.into_iter().map(|(name, line)| (name, line())).collect()
    }
}
