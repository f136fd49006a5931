//! One live container filling a pool slot: its identity, its link, what it is doing, and
//! whether it has been condemned. A slot outlives its members; a member is never revived, a
//! replacement is a new member.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::link::Link;
use crate::restart::RestartReason;
use crate::room::Room;

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
    /// The cause, as counted (planned or not) and shown in `ps`.
    pub(crate) cause: RestartReason,
    /// The sentence for the log and `last_error` (exit code, which task, ...).
    pub(crate) reason: String,
}

impl Retirement {
    pub(crate) fn new(cause: RestartReason, reason: impl Into<String>) -> Self {
        Self { cause, reason: reason.into() }
    }

    /// A failure (crash, OOM, unanswered ping, operator kill) counts towards the replacement
    /// back-off; a planned recycle (task count, timeout, operator restart) does not.
    pub(crate) fn failure(&self) -> bool {
        !self.cause.is_planned()
    }
}

#[derive(Debug)]
pub(crate) struct Member {
    pub(crate) container_id: String,
    pub(crate) short_id: String,
    pub(crate) ip: Option<IpAddr>,
    pub(crate) started: Instant,
    pub(crate) link: Arc<Link>,
    pub(crate) tasks_served: AtomicU64,
    /// Tasks this container serves before it is recycled (see [`task_budget`]).
    pub(crate) task_budget: u64,
    /// Set once the container has answered anything after becoming ready: a member that dies
    /// before that is a failed start as far as back-off is concerned.
    pub(crate) proven: AtomicBool,
    current_task: Mutex<Option<CurrentTask>>,
    retirement: Mutex<Option<Retirement>>,
    /// The room this container belongs to; `None` while it is blank. Set once, by the first
    /// task it is handed, never changed (a container never crosses rooms).
    room: Mutex<Option<Room>>,
    /// When it last became idle (for the idle limit and for picking the container a room
    /// gives up when blanks are short: the longest idle).
    idle_since: Mutex<Instant>,
}

impl Member {
    pub(crate) fn new(
        container_id: String,
        ip: Option<IpAddr>,
        started: Instant,
        link: Arc<Link>,
        task_budget: u64,
    ) -> Self {
        Self {
            task_budget,
            short_id: container_id.chars().take(12).collect(),
            container_id,
            ip,
            started,
            link,
            tasks_served: AtomicU64::new(0),
            proven: AtomicBool::new(false),
            current_task: Mutex::new(None),
            retirement: Mutex::new(None),
            room: Mutex::new(None),
            idle_since: Mutex::new(started),
        }
    }

    /// The room this container belongs to, `None` while blank.
    pub(crate) fn room(&self) -> Option<Room> {
        self.room.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// `true` when the container belongs to `room`.
    pub(crate) fn in_room(&self, room: &Room) -> bool {
        self.room.lock().unwrap_or_else(|e| e.into_inner()).as_ref() == Some(room)
    }

    pub(crate) fn is_blank(&self) -> bool {
        self.room.lock().unwrap_or_else(|e| e.into_inner()).is_none()
    }

    /// Binds a blank container to `room`; `false` (nothing changed) when it belongs to a room
    /// already, whichever.
    pub(crate) fn bind(&self, room: &Room) -> bool {
        let mut bound = self.room.lock().unwrap_or_else(|e| e.into_inner());
        if bound.is_some() {
            return false;
        }
        *bound = Some(room.clone());
        true
    }

    pub(crate) fn idle_since(&self) -> Instant {
        *self.idle_since.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn mark_idle(&self) {
        *self.idle_since.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    pub(crate) fn current_task(&self) -> Option<CurrentTask> {
        self.current_task.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(crate) fn set_current_task(&self, task: Option<CurrentTask>) {
        *self.current_task.lock().unwrap_or_else(|e| e.into_inner()) = task;
    }

    /// Condemns the member (the first call wins) and fails its link so that anyone waiting on
    /// it hears the reason now, not after the replacement.
    pub(crate) fn retire(&self, retirement: Retirement) -> bool {
        let reason = retirement.reason.clone();
        let cause = retirement.cause.clone();
        if !self.condemn(retirement) {
            return false;
        }
        self.link.fail_because(Some(cause), &reason);
        true
    }

    /// Condemns the member (the first call wins) without failing its link yet: for a kill,
    /// whose waiter must learn the cause from the retirement however the link then dies.
    pub(crate) fn condemn(&self, retirement: Retirement) -> bool {
        let mut slot = self.retirement.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_some() {
            return false;
        }
        *slot = Some(retirement);
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

    /// `true` when the task about to start is the last of its budget.
    pub(crate) fn on_last_task(&self) -> bool {
        self.tasks_served.load(Ordering::Relaxed) + 1 >= self.task_budget
    }

    pub(crate) fn mark_proven(&self) {
        self.proven.store(true, Ordering::Relaxed);
    }

    /// `true` when `target` names this container: its full id or a prefix of at least 4.
    pub(crate) fn matches(&self, target: &str) -> bool {
        target.len() >= 4 && self.container_id.starts_with(target)
    }
}

/// How many tasks a new container serves before it is recycled: `max` less a random share of
/// up to a quarter of it (never below 1), so that containers started together do not all
/// reach the limit together and leave the pool empty while they are replaced. `random` is any
/// random number.
pub(crate) fn task_budget(max: u64, random: u64) -> u64 {
    let spread = max / 4;
    max.saturating_sub(random % (spread + 1)).max(1)
}

/// [`task_budget`] with a fresh random number.
pub(crate) fn random_task_budget(max: u64) -> u64 {
    task_budget(max, uuid::Uuid::new_v4().as_u128() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_spread_over_the_top_quarter_and_never_reach_zero() {
        // Every random number lands in [max - max/4, max], and every value there is reached.
        let mut seen = std::collections::BTreeSet::new();
        for random in 0..1_000u64 {
            let budget = task_budget(100, random.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            assert!((75..=100).contains(&budget), "{budget}");
            seen.insert(budget);
        }
        assert_eq!(seen.len(), 26, "{seen:?}");
        for random in [0, 1, u64::MAX] {
            assert_eq!(task_budget(1, random), 1);
            assert!((1..=3).contains(&task_budget(3, random)));
            assert!((6..=8).contains(&task_budget(8, random)));
        }
        assert_eq!(task_budget(u64::MAX, 0), u64::MAX);
    }

    #[test]
    fn containers_started_together_get_different_budgets() {
        // A pool of 8 started at once: with 26 possible budgets, all equal has odds ~1e-10.
        let budgets: std::collections::BTreeSet<u64> =
            (0..8).map(|_| random_task_budget(100)).collect();
        assert!(budgets.len() > 1, "{budgets:?}");
        // Over many containers the whole quarter is used, not just one end of it.
        let many: Vec<u64> = (0..2_000).map(|_| random_task_budget(100)).collect();
        assert!(many.iter().all(|b| (75..=100).contains(b)));
        assert!(many.iter().any(|b| *b <= 78) && many.iter().any(|b| *b >= 97), "{many:?}");
        let mean = many.iter().sum::<u64>() as f64 / many.len() as f64;
        assert!((85.0..=90.0).contains(&mean), "mean {mean}");
    }
}
