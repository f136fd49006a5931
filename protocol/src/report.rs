//! The partial-results report (`docs/protocol-files.md#reports`) sent with a `timeout` or failed
//! task, so the delegating agent can use what the subagent found before it stopped.

use serde::{Deserialize, Serialize};

/// The note every report carries, word for word as `docs/protocol-files.md#reports` gives it.
pub const REPORT_NOTE: &str = "Sub-agent did not finish the task. Use partial results below.";
/// How many of the most recent messages a report keeps.
pub const REPORT_RECENT_MESSAGES: usize = 6;
/// How many characters of each recent message a report keeps.
pub const REPORT_MESSAGE_CHARS: usize = 800;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReportStatus {
    Timeout,
    Error,
}

/// One entry of the subagent's todo list at the time it stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Todo {
    pub content: String,
    pub status: String,
}

/// One message of the conversation, truncated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecentMessage {
    pub role: String,
    pub content: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    pub status: ReportStatus,
    pub task_id: String,
    pub error: String,
    pub note: String,
    pub timeout_secs: u64,
    pub tokens: u64,
    #[serde(default)]
    pub todos: Vec<Todo>,
    #[serde(default)]
    pub recent_messages: Vec<RecentMessage>,
    /// Search and fetch calls the task made against its search budget
    /// (`execute.search_budget`). Additive; absent from an older subagent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub searches: Option<u32>,
}

impl Report {
    /// Builds a report from the whole conversation; only the last
    /// [`REPORT_RECENT_MESSAGES`] messages are kept, each cut to [`REPORT_MESSAGE_CHARS`].
    pub fn new<'a>(
        status: ReportStatus,
        task_id: impl Into<String>,
        error: impl Into<String>,
        timeout_secs: u64,
        tokens: u64,
        todos: Vec<Todo>,
        messages: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Self {
        Self {
            status,
            task_id: task_id.into(),
            error: error.into(),
            note: REPORT_NOTE.to_owned(),
            timeout_secs,
            tokens,
            todos,
            recent_messages: summarize_recent_messages(messages),
            searches: None,
        }
    }

    /// Applies `f` to every free-text field: used to sanitize and redact before sending.
    pub fn map_text(mut self, f: impl Fn(&str) -> String) -> Self {
        self.error = f(&self.error);
        for todo in &mut self.todos {
            todo.content = f(&todo.content);
        }
        for message in &mut self.recent_messages {
            message.content = f(&message.content);
        }
        self
    }
}

/// The last [`REPORT_RECENT_MESSAGES`] messages, each at most [`REPORT_MESSAGE_CHARS`]
/// characters (cut on a character boundary, marked with `…`).
pub fn summarize_recent_messages<'a>(
    messages: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Vec<RecentMessage> {
    let all: Vec<_> = messages.into_iter().collect();
    let skip = all.len().saturating_sub(REPORT_RECENT_MESSAGES);
    all.into_iter()
        .skip(skip)
        .map(|(role, content)| RecentMessage {
            role: role.to_owned(),
            content: truncate_chars(content, REPORT_MESSAGE_CHARS),
        })
        .collect()
}

fn truncate_chars(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars.saturating_sub(1)) {
        Some((cut, _)) if text[cut..].chars().count() > 1 => format!("{}…", &text[..cut]),
        _ => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_last_six_messages_truncated() {
        let long = "é".repeat(2000);
        let msgs: Vec<(String, String)> =
            (0..10).map(|i| ("user".to_owned(), format!("{i}{long}"))).collect();
        let report = Report::new(
            ReportStatus::Timeout,
            "t1",
            "soft timeout",
            60,
            1234,
            vec![],
            msgs.iter().map(|(r, c)| (r.as_str(), c.as_str())),
        );
        assert_eq!(report.recent_messages.len(), 6);
        assert!(report.recent_messages[0].content.starts_with('4'));
        for m in &report.recent_messages {
            assert_eq!(m.content.chars().count(), REPORT_MESSAGE_CHARS);
            assert!(m.content.ends_with('…'));
        }
        assert_eq!(report.note, REPORT_NOTE);
    }

    #[test]
    fn short_messages_are_untouched() {
        let exact = "x".repeat(REPORT_MESSAGE_CHARS);
        let out = summarize_recent_messages([("assistant", "hi"), ("tool", exact.as_str())]);
        assert_eq!(out[0].content, "hi");
        assert_eq!(out[1].content, exact);
    }

    #[test]
    fn serializes_with_seed_field_names() {
        let report = Report::new(ReportStatus::Error, "t", "boom", 5, 9, vec![], []);
        let value = serde_json::to_value(&report).unwrap();
        for key in [
            "status",
            "task_id",
            "error",
            "note",
            "timeout_secs",
            "tokens",
            "todos",
            "recent_messages",
        ] {
            assert!(value.get(key).is_some(), "missing {key}");
        }
        assert_eq!(value["status"], "error");
    }
}
