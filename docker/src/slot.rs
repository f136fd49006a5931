//! A pool slot: one place in the pool, filled by a succession of containers (members). The
//! slot carries what must survive a replacement — its state for `ps`, the replacement counts
//! and their last reason, the recent log lines — and the snapshot type the operator sees.

use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;
use tokio::sync::Notify;

use crate::error::PoolError;
use crate::logs::LogRing;
use crate::member::Member;
use crate::restart::RestartReason;

/// What a slot is doing, as `ps` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SlotState {
    /// The first container is being created.
    Starting,
    /// Ready for a task.
    Idle,
    /// Serving a task.
    Busy,
    /// Its container failed; waiting (back-off) before the next attempt.
    Unhealthy,
    /// Its container is being replaced.
    Restarting,
    /// The pool is shutting down; no new tasks.
    Draining,
}

impl SlotState {
    /// The state's name, as `ps`, `/status` and the metrics show it (and serde writes it).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Idle => "idle",
            Self::Busy => "busy",
            Self::Unhealthy => "unhealthy",
            Self::Restarting => "restarting",
            Self::Draining => "draining",
        }
    }
}

/// How many slots of `snapshot` are in each state, by [`SlotState::as_str`].
pub fn count_by_state(
    snapshot: &[ContainerSnapshot],
) -> std::collections::BTreeMap<&'static str, usize> {
    let mut states = std::collections::BTreeMap::new();
    for slot in snapshot {
        *states.entry(slot.state.as_str()).or_default() += 1;
    }
    states
}

/// One line of `nexbot-ctl subagents ps`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContainerSnapshot {
    /// Stable slot id (`<pool>-<index>`); survives container replacement.
    pub id: String,
    /// Short (12-character) id of the current container, if any.
    pub container: Option<String>,
    /// Full id of the current container, if any.
    pub container_id: Option<String>,
    pub state: SlotState,
    /// Seconds since the current container started.
    pub uptime_secs: Option<u64>,
    /// Tasks the current container has served.
    pub tasks_served: u64,
    /// Tasks the current container serves before it is recycled (a little below the
    /// configured maximum, different per container, so they are not all replaced at once).
    pub task_budget: Option<u64>,
    /// The task being served, and for how long (milliseconds).
    pub current_task: Option<String>,
    pub current_task_age_ms: Option<u64>,
    /// Round trip of the last health ping, microseconds.
    pub last_ping_us: Option<u64>,
    /// Seconds since the last health ping was answered (a busy container answers too); a
    /// value well above the ping interval means the pings are not getting through.
    pub last_ping_age_secs: Option<u64>,
    /// Unplanned replacements of this slot's container since the pool started: deaths, OOM
    /// kills, unanswered pings, operator kills. Routine recycling is not counted here (see
    /// `planned_replacements`), so a non-zero value always deserves a look.
    pub restarts: u64,
    /// Planned replacements since the pool started: task budget spent, not clean after a
    /// task, a task timed out or abandoned, operator restart.
    pub planned_replacements: u64,
    /// Why the last container of this slot was replaced (planned or not).
    pub last_restart: Option<RestartReason>,
    /// Memory in use (bytes, page cache excluded) at the last health check.
    pub memory_bytes: Option<u64>,
    /// The container's address on the internal network.
    pub ip: Option<IpAddr>,
    /// The room (chat) the current container belongs to; `None` while it is blank.
    pub room: Option<String>,
    /// Why the last container was replaced or the last attempt failed, in words.
    pub last_error: Option<String>,
}

/// A slot waiting before its next attempt to start a container, because the last ones failed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Backoff {
    pub(crate) until: Instant,
    /// Consecutive failures so far.
    pub(crate) failures: u32,
}

#[derive(Debug)]
pub(crate) struct SlotInner {
    pub(crate) state: SlotState,
    pub(crate) member: Option<Arc<Member>>,
    /// Unplanned replacements.
    pub(crate) restarts: u64,
    pub(crate) planned: u64,
    pub(crate) last_restart: Option<RestartReason>,
    pub(crate) last_ping: Option<Duration>,
    pub(crate) last_ping_at: Option<Instant>,
    pub(crate) backoff: Option<Backoff>,
    pub(crate) memory: Option<u64>,
    /// Why the last container was replaced or the last attempt failed (`ps` shows it).
    pub(crate) last_error: Option<String>,
    /// When `last_error` says the engine could not be reached: since when it has said so
    /// without a break (the first failed attempt of the run). The pool's engine outage is
    /// read from here ([`crate::outage`]); cleared by any other error and by a container
    /// coming up.
    pub(crate) engine_unreachable_since: Option<SystemTime>,
}

#[derive(Debug)]
pub(crate) struct Slot {
    pub(crate) index: usize,
    pub(crate) id: String,
    pub(crate) logs: Arc<LogRing>,
    /// Wakes the slot's supervisor when someone condemned its member.
    pub(crate) wake: Notify,
    /// Tells the slot's supervisor that its member started its last task: time to bring up
    /// the successor, so the slot is not empty while it is replaced.
    pub(crate) prewarm: Notify,
    inner: Mutex<SlotInner>,
}

impl Slot {
    pub(crate) fn new(pool: &str, index: usize, log_lines: usize) -> Self {
        Self {
            index,
            id: format!("{pool}-{index}"),
            logs: Arc::new(LogRing::new(log_lines)),
            wake: Notify::new(),
            prewarm: Notify::new(),
            inner: Mutex::new(SlotInner {
                state: SlotState::Starting,
                member: None,
                restarts: 0,
                planned: 0,
                last_restart: None,
                last_ping: None,
                last_ping_at: None,
                backoff: None,
                memory: None,
                last_error: None,
                engine_unreachable_since: None,
            }),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, SlotInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn member(&self) -> Option<Arc<Member>> {
        self.lock().member.clone()
    }

    /// `true` when `target` names this slot: its id, its index, or its container's id prefix.
    pub(crate) fn matches(&self, target: &str) -> bool {
        target == self.id
            || target == self.index.to_string()
            || self.member().is_some_and(|m| m.matches(target))
    }

    /// Counts a replacement of this slot's container, planned or not, and remembers why.
    pub(crate) fn count_replacement(&self, cause: &RestartReason, reason: &str) {
        let mut s = self.lock();
        if cause.is_planned() {
            s.planned += 1;
        } else {
            s.restarts += 1;
        }
        s.last_restart = Some(cause.clone());
        s.last_error = Some(reason.to_owned());
        s.engine_unreachable_since = None;
    }

    /// Records a failed attempt to start this slot's container: `message` for `ps`, and,
    /// when `error` says the engine is out of reach, since when (kept from the first such
    /// failure in a row).
    pub(crate) fn record_failed_attempt(&self, message: String, error: &PoolError) {
        let mut s = self.lock();
        s.engine_unreachable_since = if crate::outage::engine_unreachable(error) {
            s.engine_unreachable_since.or_else(|| Some(SystemTime::now()))
        } else {
            None
        };
        s.last_error = Some(message);
    }

    /// Records that a container of this slot came up: the engine answers.
    pub(crate) fn record_container_up(&self) {
        let mut s = self.lock();
        s.memory = None;
        s.engine_unreachable_since = None;
    }

    pub(crate) fn snapshot(&self) -> ContainerSnapshot {
        let inner = self.lock();
        let member = inner.member.as_ref();
        let task = member.and_then(|m| m.current_task());
        let now = Instant::now();
        ContainerSnapshot {
            id: self.id.clone(),
            container: member.map(|m| m.short_id.clone()),
            container_id: member.map(|m| m.container_id.clone()),
            state: inner.state,
            uptime_secs: member.map(|m| now.duration_since(m.started).as_secs()),
            tasks_served: member
                .map(|m| m.tasks_served.load(std::sync::atomic::Ordering::Relaxed))
                .unwrap_or(0),
            task_budget: member.map(|m| m.task_budget),
            current_task_age_ms: task
                .as_ref()
                .map(|t| now.duration_since(t.started).as_millis() as u64),
            current_task: task.map(|t| t.id),
            last_ping_us: inner.last_ping.map(|d| d.as_micros() as u64),
            last_ping_age_secs: inner.last_ping_at.map(|at| now.duration_since(at).as_secs()),
            restarts: inner.restarts,
            planned_replacements: inner.planned,
            last_restart: inner.last_restart.clone(),
            memory_bytes: inner.memory,
            ip: member.and_then(|m| m.ip),
            room: member.and_then(|m| m.room()).map(|r| r.to_string()),
            last_error: inner.last_error.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::SlotState::*;

    #[test]
    fn state_names_are_the_serde_names() {
        for state in [Starting, Idle, Busy, Unhealthy, Restarting, Draining] {
            assert_eq!(serde_json::to_value(state).unwrap(), state.as_str());
        }
    }
}
