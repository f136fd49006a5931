//! Why a container was replaced, as a value the operator's tools can count and sort by,
//! rather than a sentence: `ps` shows the last reason of each slot, and the pool's counters
//! split replacements into planned ones (policy) and unplanned ones (something broke).

use std::fmt;

use serde::Serialize;

/// Why a slot's container was replaced.
///
/// A replacement is *planned* when the pool chose to retire a container that was still
/// answering — its task budget is spent, its subagent did not report a clean scrub, a task on
/// it timed out or was given up, or the operator asked for a restart: the clean room between
/// tasks is kept by recycling, so these are routine. Every other replacement is *unplanned*:
/// the container died, was OOM-killed, stopped answering pings, or was killed by the
/// operator. Only unplanned ones count as `restarts` and towards the replacement back-off, so
/// a rising restart count always means something is wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RestartReason {
    /// The container's main process exited (for a crash, usually a non-zero code).
    Exited { code: i64 },
    /// The kernel's OOM killer struck inside the container (even if only a child died: the
    /// task's state is lost).
    OomKilled,
    /// The container stopped answering health pings.
    Hung,
    /// `Pool::kill`: the operator sent SIGKILL; a task it was running was stopped with it.
    KilledByOperator,
    /// `Pool::restart`: the operator asked for a fresh container.
    RestartedByOperator,
    /// The container served its task budget.
    Recycled,
    /// The subagent did not report a clean scrub after a task, so the container serves no
    /// further task.
    NotClean,
    /// A task on it timed out (the subagent's own timeout, or the host's hard limit).
    TaskTimedOut,
    /// A task on it was given up mid-run (its caller went away, or it did not stop after a
    /// cancel): what the container holds is unknown.
    TaskAbandoned,
    /// Its room left it idle longer than `room_idle_secs`: removed, a blank takes its place.
    RoomIdle,
    /// Blanks were short: its room's idle container made way for a blank another room needed.
    RoomYielded,
    /// A task in it sent a decoy secret (`Pool::kill_because`): a prompt injection was at
    /// work, so what it left in the container is not trusted.
    DecoyTripped,
    /// The owner's self-test is over (`Pool::kill_because`): what its attacks left in the
    /// container goes with it.
    SelfTestDone,
    /// Anything else (a broken stdin pipe, a death the engine could not explain); the text
    /// says what.
    Other { detail: String },
}

impl RestartReason {
    /// `true` for a replacement the pool chose (see the type's documentation).
    pub fn is_planned(&self) -> bool {
        matches!(
            self,
            Self::RestartedByOperator
                | Self::Recycled
                | Self::NotClean
                | Self::TaskTimedOut
                | Self::TaskAbandoned
                | Self::RoomIdle
                | Self::RoomYielded
                | Self::DecoyTripped
                | Self::SelfTestDone
        )
    }
}

impl fmt::Display for RestartReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Exited { code } => write!(f, "exited with code {code}"),
            Self::OomKilled => f.write_str("OOM-killed"),
            Self::Hung => f.write_str("hung (no answer to a health ping)"),
            Self::KilledByOperator => f.write_str("killed by operator"),
            Self::RestartedByOperator => f.write_str("restarted by operator"),
            Self::Recycled => f.write_str("recycled (task budget spent)"),
            Self::NotClean => f.write_str("not clean after a task"),
            Self::TaskTimedOut => f.write_str("a task timed out"),
            Self::TaskAbandoned => f.write_str("a task was abandoned"),
            Self::RoomIdle => f.write_str("idle in its room too long"),
            Self::RoomYielded => f.write_str("gave way to a blank for another room"),
            Self::DecoyTripped => f.write_str("a task in it sent a decoy secret"),
            Self::SelfTestDone => f.write_str("the owner's self-test in it is over"),
            Self::Other { detail } => f.write_str(detail),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_serialize_with_a_kind_and_read_as_words() {
        let json = |r: &RestartReason| serde_json::to_string(r).unwrap();
        assert_eq!(json(&RestartReason::Exited { code: 137 }), r#"{"kind":"exited","code":137}"#);
        assert_eq!(json(&RestartReason::KilledByOperator), r#"{"kind":"killed_by_operator"}"#);
        assert_eq!(
            json(&RestartReason::Other { detail: "stdin broke".into() }),
            r#"{"kind":"other","detail":"stdin broke"}"#
        );
        assert_eq!(RestartReason::Exited { code: 1 }.to_string(), "exited with code 1");
        assert_eq!(RestartReason::KilledByOperator.to_string(), "killed by operator");
    }

    #[test]
    fn only_policy_replacements_are_planned() {
        assert!(RestartReason::Recycled.is_planned());
        assert!(RestartReason::RestartedByOperator.is_planned());
        assert!(RestartReason::NotClean.is_planned());
        assert!(RestartReason::RoomIdle.is_planned());
        assert!(RestartReason::RoomYielded.is_planned());
        // Chosen by the daemon: an injection tripping decoys must not push a slot into back-off.
        assert!(RestartReason::DecoyTripped.is_planned());
        assert!(!RestartReason::KilledByOperator.is_planned());
        assert!(!RestartReason::Hung.is_planned());
        assert!(!RestartReason::OomKilled.is_planned());
        assert!(!RestartReason::Exited { code: 0 }.is_planned());
        assert!(!RestartReason::Other { detail: String::new() }.is_planned());
    }
}
