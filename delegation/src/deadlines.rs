//! The one place that computes a delegated task's deadlines, so that no waiting step can eat
//! another's time without anyone noticing.
//!
//! A delegated task passes through these limits, each measured from its own start:
//!
//! | limit | who enforces it | value |
//! |---|---|---|
//! | soft timeout | the subagent (`execute.timeout`): answers `timeout` with a report | `timeout_secs` of the call, clamped to `1..=subagent.task_timeout_secs` |
//! | queue wait | the pool, before a container is free | [`queue_wait`]: what the turn leaves after the longest task, at most 600 s |
//! | hard limit | the pool, from dispatch: kills the task, recycles the container | soft + `hard_limit_grace_secs` (30 s) |
//! | cancel grace | the pool, after `cancel` | `cancel_grace_ms` (5 s) |
//! | the tool's own limit | the delegation tool, from its call: cancels, answers "did not answer" | queue wait + hard limit + cancel grace + [`MARGIN`] |
//! | agent per-tool timeout | the agent loop: drops the tool's future | the tool's own limit + [`MARGIN`] |
//! | turn timeout | the agent loop: cancels the turn | `agent.turn_timeout_secs` |
//!
//! Before, the delegation tool gave up `timeout + 60 s` after its call, queue wait included:
//! a task that waited 40 s for a container lost most of its grace silently. Now each limit
//! encloses the ones it must outlast; [`warnings`] names a configuration where the turn ends
//! before a task could (said once at start).

use std::time::Duration;

/// The longest a task waits for a free container.
pub const MAX_QUEUE_WAIT: Duration = Duration::from_secs(600);
/// The shortest queue wait, whatever the turn leaves.
pub const MIN_QUEUE_WAIT: Duration = Duration::from_secs(5);
/// Room between a limit and the one that encloses it (answering `cancel`, recording the task).
pub const MARGIN: Duration = Duration::from_secs(10);

/// The configured numbers the deadlines are computed from. The host builds it from its
/// configuration (`agent.turn_timeout_secs`, `subagent.task_timeout_secs`) and the pool's
/// graces (`nexbot-docker`'s `PoolConfig`), and hands the queue wait back to the pool: this
/// crate knows neither.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskLimits {
    /// `agent.turn_timeout_secs`: the turn a delegation runs in.
    pub turn_timeout_secs: u64,
    /// `subagent.task_timeout_secs`: the longest soft timeout a task may ask for.
    pub task_timeout_secs: u64,
    /// The pool's hard limit after the soft timeout.
    pub hard_limit_grace_secs: u64,
    /// The pool's wait for a `cancel`'s answer.
    pub cancel_grace_ms: u64,
}

/// The deadlines of one delegated task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskDeadlines {
    /// Sent to the subagent as `execute.timeout`.
    pub soft: Duration,
    /// The pool's queue wait.
    pub queue_wait: Duration,
    /// The pool's hard limit, from dispatch.
    pub hard: Duration,
    /// After a `cancel`, how long its answer is awaited.
    pub cancel_grace: Duration,
}

impl TaskDeadlines {
    /// The deadlines of a task that asked for `requested_secs` (the default when `None`).
    pub fn plan(limits: &TaskLimits, requested_secs: Option<u64>) -> Self {
        let max = limits.task_timeout_secs.max(1);
        let soft = Duration::from_secs(requested_secs.unwrap_or(max).clamp(1, max));
        Self::with_queue_wait(limits, queue_wait(limits), soft)
    }

    fn with_queue_wait(limits: &TaskLimits, queue_wait: Duration, soft: Duration) -> Self {
        Self {
            soft,
            queue_wait: Duration::from_secs(queue_wait.as_secs()),
            hard: soft + Duration::from_secs(limits.hard_limit_grace_secs),
            cancel_grace: Duration::from_millis(limits.cancel_grace_ms),
        }
    }

    /// The deadlines of a task of the same configuration that asked for `requested_secs`:
    /// `self` is the longest a task may have ([`TaskDeadlines::plan`] with `None`).
    pub fn for_request(&self, requested_secs: Option<u64>) -> Self {
        let max = self.soft.as_secs().max(1);
        let soft = Duration::from_secs(requested_secs.unwrap_or(max).clamp(1, max));
        Self { soft, hard: self.hard - self.soft + soft, ..*self }
    }

    /// The soft timeout in whole seconds, as the wire carries it.
    pub fn soft_secs(&self) -> u64 {
        self.soft.as_secs()
    }

    /// How long the delegation tool waits for the pool's answer, from its call: the pool
    /// always answers before this (queue timeout, hard limit, cancel), so reaching it means
    /// the pool itself is stuck.
    pub fn tool_limit(&self) -> Duration {
        self.queue_wait + self.hard + self.cancel_grace + MARGIN
    }

    /// The agent's per-tool timeout for the delegation tool: outlasts [`Self::tool_limit`]
    /// and the cancel that follows it, so the tool reports first.
    pub fn agent_limit(&self) -> Duration {
        self.tool_limit() + self.cancel_grace + MARGIN
    }
}

/// The pool's queue wait: what the turn leaves once the longest task, its grace and the
/// margins are taken out, within [`MIN_QUEUE_WAIT`]..=[`MAX_QUEUE_WAIT`] (the pool's
/// `queue_timeout_secs`, in whole seconds).
pub fn queue_wait(limits: &TaskLimits) -> Duration {
    let turn = Duration::from_secs(limits.turn_timeout_secs);
    let soft = Duration::from_secs(limits.task_timeout_secs);
    let longest = TaskDeadlines::with_queue_wait(limits, Duration::ZERO, soft);
    turn.saturating_sub(longest.agent_limit()).clamp(MIN_QUEUE_WAIT, MAX_QUEUE_WAIT)
}

/// What is wrong with the configured limits, in words for the operator (said once at start).
pub fn warnings(limits: &TaskLimits) -> Vec<String> {
    let longest = TaskDeadlines::plan(limits, None);
    let turn = Duration::from_secs(limits.turn_timeout_secs);
    let needed = longest.agent_limit() - longest.queue_wait + MIN_QUEUE_WAIT;
    if turn < needed {
        vec![format!(
            "agent.turn_timeout_secs = {} is shorter than a delegated task may take \
             (subagent.task_timeout_secs = {} plus {}s of grace, queue and cancel): turns will \
             cut such tasks short; raise agent.turn_timeout_secs to at least {} or lower \
             subagent.task_timeout_secs",
            turn.as_secs(),
            longest.soft_secs(),
            (needed - longest.soft).as_secs(),
            needed.as_secs()
        )]
    } else {
        Vec::new()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The limits of a default configuration: a 900 s turn, 300 s tasks, the pool's graces.
    pub(crate) fn defaults() -> TaskLimits {
        TaskLimits {
            turn_timeout_secs: 900,
            task_timeout_secs: 300,
            hard_limit_grace_secs: 30,
            cancel_grace_ms: 5_000,
        }
    }

    #[test]
    fn each_limit_encloses_the_one_it_must_outlast() {
        let limits = defaults();
        for requested in [None, Some(1), Some(60), Some(100_000)] {
            let d = TaskDeadlines::plan(&limits, requested);
            assert!(d.soft <= Duration::from_secs(limits.task_timeout_secs));
            assert!(d.soft >= Duration::from_secs(1));
            assert_eq!(d.queue_wait, queue_wait(&limits));
            assert!(d.hard > d.soft);
            // The tool waits for the queue AND the hard limit AND the cancel: a long queue
            // no longer eats the task's grace.
            assert!(d.tool_limit() >= d.queue_wait + d.hard + d.cancel_grace);
            assert!(d.agent_limit() > d.tool_limit() + d.cancel_grace);
            assert_eq!(TaskDeadlines::plan(&limits, None).for_request(requested), d);
        }
        // Defaults: a 300 s task fits the 900 s turn, with the queue wait what is left.
        let longest = TaskDeadlines::plan(&limits, None);
        assert!(longest.agent_limit() <= Duration::from_secs(limits.turn_timeout_secs));
        assert!(warnings(&limits).is_empty(), "{:?}", warnings(&limits));
    }

    #[test]
    fn a_turn_too_short_for_a_task_is_named() {
        let short = TaskLimits { turn_timeout_secs: 120, ..defaults() };
        let d = TaskDeadlines::plan(&short, None);
        assert_eq!(d.queue_wait, MIN_QUEUE_WAIT);
        let warnings = warnings(&short);
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("agent.turn_timeout_secs = 120"), "{}", warnings[0]);
        let fits = TaskLimits { task_timeout_secs: 30, ..short };
        assert!(super::warnings(&fits).is_empty(), "{:?}", super::warnings(&fits));
    }
}
