//! The status board: one line per running part (the pool, each channel), read by `/status`
//! and the control API's health (here because both read it and neither depends on the
//! other). Parts add a line source when they start; the board knows no part's type.

use std::sync::{Arc, RwLock};

use crate::ChatRef;

type LineSource = Arc<dyn Fn() -> String + Send + Sync>;
type ChatLineSource = Arc<dyn Fn(&ChatRef) -> Option<String> + Send + Sync>;
type ProblemSource = Arc<dyn Fn() -> Option<String> + Send + Sync>;

/// Cheap to clone; every clone is the same board.
#[derive(Clone, Default)]
pub struct StatusBoard {
    lines: Arc<RwLock<Vec<(&'static str, LineSource)>>>,
    problems: Arc<RwLock<Vec<(&'static str, ProblemSource)>>>,
    /// Lines that depend on the chat asking (`/status` only; the control API has its own
    /// answers for these parts).
    chat_lines: Arc<RwLock<Vec<(&'static str, ChatLineSource)>>>,
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

    /// Adds (or replaces) the line named `name` that `/status` shows a chat, worded for that
    /// chat (`None`: no line for it).
    pub fn add_for_chat(
        &self,
        name: &'static str,
        line: impl Fn(&ChatRef) -> Option<String> + Send + Sync + 'static,
    ) {
        let mut lines = self.chat_lines.write().unwrap_or_else(|p| p.into_inner());
        lines.retain(|(n, _)| *n != name);
        lines.push((name, Arc::new(line)));
    }

    /// The lines for `chat`, in the order added.
    pub fn chat_lines(&self, chat: &ChatRef) -> Vec<(&'static str, String)> {
        let sources: Vec<(&'static str, ChatLineSource)> =
            self.chat_lines.read().unwrap_or_else(|p| p.into_inner()).clone();
        sources.into_iter().filter_map(|(name, line)| Some((name, line(chat)?))).collect()
    }

    /// Every line, in the order added.
    pub fn lines(&self) -> Vec<(&'static str, String)> {
        let sources: Vec<(&'static str, LineSource)> =
            self.lines.read().unwrap_or_else(|p| p.into_inner()).clone();
        sources.into_iter().map(|(name, line)| (name, line())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chat_line_is_worded_for_the_chat_asking_or_absent() {
        let board = StatusBoard::default();
        board.add("pool", || "2 containers".to_owned());
        board.add_for_chat("mcp", |chat| match chat {
            ChatRef::Telegram(7) => Some("everything (13 tools)".to_owned()),
            _ => None,
        });
        assert_eq!(
            board.chat_lines(&ChatRef::Telegram(7)),
            [("mcp", "everything (13 tools)".into())]
        );
        assert!(board.chat_lines(&ChatRef::Telegram(8)).is_empty());
        // Not among the lines every chat (and the control API) shares.
        assert_eq!(board.lines(), [("pool", "2 containers".to_owned())]);
    }
}
