//! The soak's model: the scripted server answers each kind of message in one fixed way, so
//! every answer names the message it answers (`answer m<N>`), and the fault injector can make
//! it fail (HTTP 500) or stall for a while.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::scripted_llm::{is_main, last_user, tool_results, Step};

/// What the model does now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Normal = 0,
    /// Every call answers HTTP 500.
    Failing = 1,
    /// Every call answers only after [`STALL`] (past the daemon's model timeout).
    Stalling = 2,
}

/// How long a stalled call waits before it answers.
pub const STALL: Duration = Duration::from_secs(20);

/// The model's mode, switched by the fault injector.
#[derive(Debug, Clone, Default)]
pub struct ModelSwitch(Arc<AtomicU8>);

impl ModelSwitch {
    pub fn set(&self, mode: Mode) {
        self.0.store(mode as u8, Ordering::SeqCst);
    }

    fn get(&self) -> Mode {
        match self.0.load(Ordering::SeqCst) {
            1 => Mode::Failing,
            2 => Mode::Stalling,
            _ => Mode::Normal,
        }
    }
}

/// The number `N` of the first `<prefix>N` in `text`.
pub fn number_after(text: &str, prefix: &str) -> Option<u64> {
    text.match_indices(prefix).find_map(|(at, _)| {
        let digits: String =
            text[at + prefix.len()..].chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    })
}

/// The answer to one request of the daemon.
pub fn respond(switch: &ModelSwitch, body: &Value) -> Step {
    let step = script(body);
    match switch.get() {
        Mode::Normal => step,
        Mode::Failing => Step::status(500, r#"{"error":{"message":"soak: the model is down"}}"#),
        Mode::Stalling => step.delayed(STALL),
    }
}

fn script(body: &Value) -> Step {
    let said = last_user(body);
    // A subagent's request is its task's; the main agent's always holds the user's message
    // (a main agent that lost its delegation tool would not pass for a subagent).
    if !is_main(body) && said.contains("work for m") {
        // The subagent of a delegated task: one step of work, then its answer.
        return match tool_results(body) {
            0 => Step::tool_call("list_dir", json!({})),
            _ => Step::text("sub done"),
        };
    }
    if let Some(n) = number_after(&said, "fire job-m") {
        return Step::text(&format!("job m{n} fired"));
    }
    let Some(n) = number_after(&said, "] m") else {
        return Step::text("soak: a message without a number");
    };
    if tool_results(body) > 0 {
        return Step::text(&format!("answer m{n}"));
    }
    if said.contains("[task]") {
        Step::tool_call("delegate_to_sub_agent", json!({"task": format!("work for m{n}")}))
    } else if said.contains("[job]") {
        Step::tool_call(
            "schedule_task",
            json!({"action": "create", "task": format!("fire job-m{n}"), "at": "in 5s"}),
        )
    } else {
        Step::text(&format!("answer m{n}"))
    }
}

#[cfg(test)]
mod tests {
    use super::number_after;

    #[test]
    fn numbers_are_read_after_their_prefix() {
        assert_eq!(number_after("[plain] m12 hello", "] m"), Some(12));
        assert_eq!(number_after("please fire job-m7 now", "fire job-m"), Some(7));
        assert_eq!(number_after("] mx ] m3", "] m"), Some(3));
        assert_eq!(number_after("nothing", "] m"), None);
    }
}
