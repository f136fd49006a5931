//! One live container filling a pool slot: its identity, its link, what it is doing, and
//! whether it has been condemned. A slot outlives its members; a member is never revived, a
//! replacement is a new member.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::link::Link;

/// The task a member is serving.
#[derive(Debug, Clone)]
pub(crate) struct CurrentTask {
    pub(crate) id: String,
    pub(crate) started: Instant,
    /// When the host's hard limit runs out.
    pub(crate) hard_deadline: Instant,
}

/// Why a member is being replaced.
#[derive(Debug, Clone)]
pub(crate) struct Retirement {
    pub(crate) reason: String,
    /// A failure (crash, OOM, unanswered ping) counts towards the replacement back-off; a
    /// planned recycle (task count, timeout, operator restart) does not.
    pub(crate) failure: bool,
}

#[derive(Debug)]
pub(crate) struct Member {
    pub(crate) container_id: String,
    pub(crate) short_id: String,
    pub(crate) ip: Option<IpAddr>,
    pub(crate) started: Instant,
    pub(crate) link: Arc<Link>,
    pub(crate) tasks_served: AtomicU64,
    /// Set once the container has answered anything after becoming ready: a member that dies
    /// before that is a failed start as far as back-off is concerned.
    pub(crate) proven: AtomicBool,
    current_task: Mutex<Option<CurrentTask>>,
    retirement: Mutex<Option<Retirement>>,
}

impl Member {
    pub(crate) fn new(
        container_id: String,
        ip: Option<IpAddr>,
        started: Instant,
        link: Arc<Link>,
    ) -> Self {
        Self {
            short_id: container_id.chars().take(12).collect(),
            container_id,
            ip,
            started,
            link,
            tasks_served: AtomicU64::new(0),
            proven: AtomicBool::new(false),
            current_task: Mutex::new(None),
            retirement: Mutex::new(None),
        }
    }

    pub(crate) fn current_task(&self) -> Option<CurrentTask> {
        self.current_task.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(crate) fn set_current_task(&self, task: Option<CurrentTask>) {
        *self.current_task.lock().unwrap_or_else(|e| e.into_inner()) = task;
    }

    /// Condemns the member (the first call wins) and fails its link so that anyone waiting on
    /// it hears `reason` now, not after the replacement.
    pub(crate) fn retire(&self, reason: &str, failure: bool) -> bool {
        let mut slot = self.retirement.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_some() {
            return false;
        }
        *slot = Some(Retirement { reason: reason.to_owned(), failure });
        drop(slot);
        self.link.fail(reason);
        true
    }

    pub(crate) fn retirement(&self) -> Option<Retirement> {
        self.retirement.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(crate) fn is_retired(&self) -> bool {
        self.retirement.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }

    pub(crate) fn count_task(&self) -> u64 {
        self.tasks_served.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub(crate) fn mark_proven(&self) {
        self.proven.store(true, Ordering::Relaxed);
    }

    /// `true` when `target` names this container: its full id or a prefix of at least 4.
    pub(crate) fn matches(&self, target: &str) -> bool {
        target.len() >= 4 && self.container_id.starts_with(target)
    }
}
