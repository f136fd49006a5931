//! A container's stderr log lines: re-emitted through `tracing` with the container's id (so
//! the host's log tells which container said what), and the most recent ones kept in memory
//! for the operator's `logs` command. Kept per pool slot so that, after a crash, the lines
//! that explain it are still there next to the replacement's.

use std::collections::VecDeque;
use std::sync::Mutex;

use serde::Deserialize;

/// The fields of a subagent log line (`docs/protocol-limits.md#logs`) that the host's log
/// carries over.
#[derive(Deserialize)]
struct LogLine {
    #[serde(default)]
    level: String,
    #[serde(default)]
    message: String,
    #[serde(default)]
    task_id: Option<String>,
    #[serde(default)]
    metadata: Option<serde_json::Value>,
}

/// The last `capacity` log lines of one slot, oldest first.
#[derive(Debug)]
pub(crate) struct LogRing {
    lines: Mutex<VecDeque<String>>,
    capacity: usize,
}

impl LogRing {
    pub(crate) fn new(capacity: usize) -> Self {
        Self { lines: Mutex::new(VecDeque::with_capacity(capacity.min(1024))), capacity }
    }

    pub(crate) fn push(&self, line: String) {
        if self.capacity == 0 {
            return;
        }
        let mut lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        while lines.len() >= self.capacity {
            lines.pop_front();
        }
        lines.push_back(line);
    }

    pub(crate) fn snapshot(&self) -> Vec<String> {
        self.lines.lock().unwrap_or_else(|e| e.into_inner()).iter().cloned().collect()
    }

    /// Records a line the pool itself writes about the slot (e.g. why a container was
    /// replaced), in the same JSON shape as the subagent's own lines.
    pub(crate) fn note(&self, level: &str, container: &str, message: &str) {
        let line = serde_json::json!({
            "time": unix_time(),
            "level": level,
            "message": message,
            "metadata": {"event": "pool", "container": container},
        });
        self.push(line.to_string());
    }
}

fn unix_time() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Re-emits one stderr line of `container` in the host's log and keeps it in `ring`. A line
/// that is not the expected JSON is still kept and logged, as plain text. Its control
/// characters are shown, not kept ([`nexbot_core::text::visible_controls`]): the ring is what
/// `logs` answers and `nexbot-ctl` prints, and a container (an MCP server, a subagent) is not
/// trusted to write to the operator's terminal.
pub(crate) fn record(ring: &LogRing, container: &str, line: String) {
    if line.trim().is_empty() {
        return;
    }
    let line = match nexbot_core::text::visible_controls(&line) {
        std::borrow::Cow::Borrowed(_) => line,
        std::borrow::Cow::Owned(shown) => shown,
    };
    match serde_json::from_str::<LogLine>(&line) {
        Ok(log) => {
            let task_id = log.task_id.as_deref().unwrap_or("");
            let event = log
                .metadata
                .as_ref()
                .and_then(|m| m.get("event"))
                .and_then(|e| e.as_str())
                .unwrap_or("");
            // A JSON string may hold escapes as `\u001b`: shown once decoded too.
            let message = nexbot_core::text::visible_controls(&log.message);
            macro_rules! emit {
                ($level:ident) => {
                    tracing::$level!(
                        target: "nexbot_docker::subagent",
                        container,
                        task_id,
                        event,
                        "{message}"
                    )
                };
            }
            match log.level.to_ascii_lowercase().as_str() {
                "error" | "fatal" => emit!(error),
                "warn" | "warning" => emit!(warn),
                "debug" => emit!(debug),
                "trace" => emit!(trace),
                _ => emit!(info),
            }
        }
        Err(_) => tracing::info!(target: "nexbot_docker::subagent", container, "stderr: {line}"),
    }
    ring.push(line);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_keeps_the_last_lines_in_order() {
        let ring = LogRing::new(3);
        for i in 0..5 {
            record(&ring, "c1", format!(r#"{{"level":"info","message":"m{i}"}}"#));
        }
        let lines = ring.snapshot();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].contains("m2") && lines[2].contains("m4"), "{lines:?}");
    }

    #[test]
    fn non_json_and_notes_are_kept_blank_lines_are_not() {
        let ring = LogRing::new(10);
        record(&ring, "c1", "plain text".into());
        record(&ring, "c1", "   ".into());
        ring.note("warn", "c1", "replaced: exited with code 137");
        let lines = ring.snapshot();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0], "plain text");
        let note: serde_json::Value = serde_json::from_str(&lines[1]).unwrap();
        assert_eq!(note["level"], "warn");
        assert_eq!(note["metadata"]["container"], "c1");
    }

    #[test]
    fn control_characters_of_a_line_are_shown_not_kept() {
        let ring = LogRing::new(10);
        record(&ring, "c1", "evil\x1b[2J\x1b]0;owned\x07\rline\u{9b}".into());
        record(&ring, "c1", r#"{"level":"info","message":"a\u001b[2Jb"}"#.into());
        let lines = ring.snapshot();
        assert_eq!(lines[0], "evil␛[2J␛]0;owned␇␍line\u{FFFD}");
        // Escaped inside JSON it is plain text already: kept as it was.
        assert_eq!(lines[1], r#"{"level":"info","message":"a\u001b[2Jb"}"#);
    }

    #[test]
    fn zero_capacity_keeps_nothing() {
        let ring = LogRing::new(0);
        ring.push("x".into());
        assert!(ring.snapshot().is_empty());
    }
}
