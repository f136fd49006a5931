//! The pool as a whole, in numbers: how many containers are up, how many tasks wait, how
//! tasks ended, which slots are backing off, and how often containers were replaced. For
//! `nexbot-ctl` and the daemon's status; every counter is monotonic for the pool's life, so a
//! reader may subtract two samples.

use std::sync::atomic::{AtomicU64, Ordering};

use nexbot_protocol::{Response, ResponseBody};
use serde::Serialize;

use crate::error::PoolError;

/// A sample of the pool's state and counters ([`crate::Pool::stats`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PoolStats {
    /// Containers the pool is configured to keep.
    pub size: usize,
    /// Containers up and able to serve (idle or busy), not being replaced.
    pub warm: usize,
    /// Containers serving a task right now.
    pub busy: usize,
    /// Tasks waiting in the queue for a container.
    pub queue_depth: usize,
    /// How the tasks given to the pool ended.
    pub tasks: TaskCounts,
    /// Slots whose containers keep failing to start, waiting before the next attempt.
    pub backoff: Vec<SlotBackoff>,
    /// Sum of the slots' `restarts`: containers that died, were OOM-killed, stopped answering
    /// or were killed by the operator.
    pub unplanned_restarts_total: u64,
    /// Sum of the slots' `planned_replacements`: routine recycling and operator restarts.
    pub planned_replacements_total: u64,
    /// Containers up and never used (no room yet).
    pub blank: usize,
    /// Containers up that belong to a room.
    pub bound: usize,
    /// Blanks taken, waits for a blank, and containers retired for their room.
    pub rooms: RoomCounts,
    /// Containers let go of but not removed yet, because the engine could not (it was
    /// away); they are retried until gone. Not a counter: it falls back to 0.
    pub pending_removal: usize,
}

/// How the rooms used the pool since it started ([`crate::Pool::stats`]); monotonic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RoomCounts {
    /// Tasks that took a blank container (their room's first task on it).
    pub blanks_taken: u64,
    /// Tasks that found no blank ready although their room could take one, and waited.
    pub blank_empty_waits: u64,
    /// Idle containers removed because their room left them idle past `room_idle_secs`.
    pub idle_retired: u64,
    /// Idle containers removed to make way for a blank another room needed.
    pub yielded: u64,
}

/// The live counters behind [`RoomCounts`].
#[derive(Debug, Default)]
pub(crate) struct RoomCounters {
    blanks_taken: AtomicU64,
    blank_empty_waits: AtomicU64,
    idle_retired: AtomicU64,
    yielded: AtomicU64,
}

impl RoomCounters {
    pub(crate) fn record_blank_taken(&self) {
        self.blanks_taken.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn record_blank_empty_wait(&self) {
        self.blank_empty_waits.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn record_idle_retired(&self) {
        self.idle_retired.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn record_yielded(&self) {
        self.yielded.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn sample(&self) -> RoomCounts {
        RoomCounts {
            blanks_taken: self.blanks_taken.load(Ordering::Relaxed),
            blank_empty_waits: self.blank_empty_waits.load(Ordering::Relaxed),
            idle_retired: self.idle_retired.load(Ordering::Relaxed),
            yielded: self.yielded.load(Ordering::Relaxed),
        }
    }
}

/// Tasks by how they ended. Each task given to [`crate::Pool::run_task`] (or `execute`) is
/// counted once, when it ends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TaskCounts {
    /// Answered `success`.
    pub succeeded: u64,
    /// Answered `error` (and not because the caller cancelled it).
    pub failed: u64,
    /// Answered `timeout`: the subagent's own timeout or the host's hard limit.
    pub timed_out: u64,
    /// Cancelled by the caller: in the queue, or on a container (answered or not).
    pub cancelled: u64,
    /// Stopped because the operator killed its container.
    pub killed: u64,
    /// Its container died, was OOM-killed, stopped answering or was replaced under it.
    pub container_failed: u64,
    /// Refused at once: every container busy and the queue full.
    pub busy_refused: u64,
    /// Waited in the queue past the queue timeout.
    pub queue_timed_out: u64,
    /// Refused before it ran for another reason: an invalid or too large request, or a pool
    /// shutting down.
    pub rejected: u64,
    /// Its caller went away (dropped the future) while it ran on a container.
    pub abandoned: u64,
}

/// A slot backing off between failed attempts to start a container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SlotBackoff {
    /// Slot id (`<pool>-<index>`).
    pub slot: String,
    /// Consecutive failures so far.
    pub failures: u32,
    /// Milliseconds left before the next attempt.
    pub wait_ms: u64,
    /// Why the last attempt failed.
    pub last_error: Option<String>,
}

/// The live counters behind [`TaskCounts`].
#[derive(Debug, Default)]
pub(crate) struct TaskCounters {
    succeeded: AtomicU64,
    failed: AtomicU64,
    timed_out: AtomicU64,
    cancelled: AtomicU64,
    killed: AtomicU64,
    container_failed: AtomicU64,
    busy_refused: AtomicU64,
    queue_timed_out: AtomicU64,
    rejected: AtomicU64,
    abandoned: AtomicU64,
}

impl TaskCounters {
    /// Counts a task that ended with `result`; `cancelled` says whether its caller had asked
    /// for a cancel (an `error` answer to a cancel is a cancellation, not a failure).
    pub(crate) fn record(&self, result: Result<&Response, &PoolError>, cancelled: bool) {
        let counter = match result {
            Ok(response) => match &response.body {
                ResponseBody::Success { .. } => &self.succeeded,
                ResponseBody::Timeout { .. } => &self.timed_out,
                _ if cancelled => &self.cancelled,
                _ => &self.failed,
            },
            Err(PoolError::Cancelled { .. }) => &self.cancelled,
            Err(PoolError::KilledByOperator { .. }) => &self.killed,
            Err(PoolError::ContainerFailed { .. }) => &self.container_failed,
            Err(PoolError::Busy { .. }) => &self.busy_refused,
            Err(PoolError::QueueTimeout { .. }) => &self.queue_timed_out,
            Err(_) => &self.rejected,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn record_abandoned(&self) {
        self.abandoned.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn sample(&self) -> TaskCounts {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        TaskCounts {
            succeeded: get(&self.succeeded),
            failed: get(&self.failed),
            timed_out: get(&self.timed_out),
            cancelled: get(&self.cancelled),
            killed: get(&self.killed),
            container_failed: get(&self.container_failed),
            busy_refused: get(&self.busy_refused),
            queue_timed_out: get(&self.queue_timed_out),
            rejected: get(&self.rejected),
            abandoned: get(&self.abandoned),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_are_counted_by_outcome() {
        let counters = TaskCounters::default();
        let ok = Response::success("t", None, "done".into(), Default::default(), 1, 1);
        let err = Response::error("t", None, "no", None);
        counters.record(Ok(&ok), false);
        counters.record(Ok(&ok), true);
        counters.record(Ok(&err), false);
        counters.record(Ok(&err), true);
        counters.record(Err(&PoolError::Busy { size: 1, queue: 0 }), false);
        let killed = PoolError::KilledByOperator { task_id: "t".into(), container: "c".into() };
        counters.record(Err(&killed), false);
        counters.record(Err(&PoolError::ShuttingDown), false);
        counters.record_abandoned();
        let counts = counters.sample();
        assert_eq!(
            counts,
            TaskCounts {
                succeeded: 2,
                failed: 1,
                cancelled: 1,
                busy_refused: 1,
                killed: 1,
                rejected: 1,
                abandoned: 1,
                ..TaskCounts::default()
            }
        );
    }
}
