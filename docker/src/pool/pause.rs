//! Recycling waits for a pause. A container that has served its task budget is retired at
//! once (it runs no further task), but the engine's work of replacing it, its successor's
//! start and its removal, waits until the pool's dispatch pauses (`recycle_pause_ms`, 50 ms
//! by default, with no task dispatched), or until a task needs the capacity, or at most
//! [`LONGEST`].
//!
//! Why: a container's start and removal are about half a second of dockerd, containerd and
//! runc here. Done at once, during a run of quick tasks on two cores, they competed with every
//! task of the run: with the default budget of 100, 300 back-to-back one-step tasks had an
//! execute overhead of 2.59 / 25.4 ms (p50 / p99) against 1.54 / 2.86 ms without recycling
//! (pool bench, 2026-12-02). What needs the capacity does not wait for the pause: a task
//! queued for a container, or a pool left with no idle blank (the successor is one), starts
//! the work at once, as before.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::slot::SlotState;

use super::Inner;

/// The longest the replacement's work waits for a pause (a steady stream of quick tasks
/// never pauses).
pub(crate) const LONGEST: Duration = Duration::from_secs(10);

/// When the pool last dispatched a task, and a wake-up for tasks that queue.
#[derive(Debug)]
pub(crate) struct Pause {
    base: Instant,
    /// Microseconds from `base` to the last dispatch.
    last: AtomicU64,
    /// Notified when a task queues for a container.
    demand: Notify,
    /// Successors started because the pool needed one (see [`Inner::successor_needed`]).
    needed_starting: AtomicUsize,
}

impl Default for Pause {
    fn default() -> Self {
        Self {
            base: Instant::now(),
            last: AtomicU64::new(0),
            demand: Notify::new(),
            needed_starting: AtomicUsize::new(0),
        }
    }
}

impl Pause {
    /// A task is being dispatched now.
    pub(crate) fn dispatched(&self) {
        let now = u64::try_from(self.base.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.last.store(now, Ordering::Relaxed);
    }

    /// A task queued for a container: work waiting for a pause starts now.
    pub(crate) fn demanded(&self) {
        self.demand.notify_waiters();
    }

    /// How long no task has been dispatched.
    fn quiet_for(&self) -> Duration {
        let last = Duration::from_micros(self.last.load(Ordering::Relaxed));
        self.base.elapsed().saturating_sub(last)
    }
}

impl Inner {
    /// Returns once dispatch has paused for `recycle_pause_ms`, a task waits for a container,
    /// `needed` holds, [`LONGEST`] has passed, or the pool stops; `true` when it was `needed`.
    pub(crate) async fn pause_or(&self, needed: impl Fn(&Inner) -> bool) -> bool {
        let pause = Duration::from_millis(self.engine.config.recycle_pause_ms);
        let until = tokio::time::Instant::now() + LONGEST;
        loop {
            // Armed before the checks, so a task that queues between them still wakes us.
            let demand = self.pause.demand.notified();
            tokio::pin!(demand);
            demand.as_mut().enable();
            let quiet = self.pause.quiet_for();
            if quiet >= pause || self.has_waiters() {
                return false;
            }
            if needed(self) {
                return true;
            }
            let wake = (tokio::time::Instant::now() + (pause - quiet)).min(until);
            tokio::select! {
                _ = self.engine.stop.cancelled() => return false,
                _ = &mut demand => return false,
                _ = tokio::time::sleep_until(wake) => {}
            }
            if tokio::time::Instant::now() >= until {
                return false;
            }
        }
    }

    /// Whether slot `index`'s successor is needed now: no other slot has an idle blank (what
    /// a new chat's first task, or the next task of the chat whose container this was, takes),
    /// and no other successor is already starting for that reason: one at a time, so a pool
    /// whose blanks run out during a run of quick tasks meets one container start, not one per
    /// spent container. `true` claims that one start; a [`NeededStart`] releases it.
    pub(crate) fn successor_needed(&self, index: usize) -> bool {
        let blank_left = self.slots.iter().enumerate().any(|(i, slot)| {
            let s = slot.lock();
            i != index
                && s.state == SlotState::Idle
                && s.member.as_ref().is_some_and(|m| m.is_blank() && !m.is_retired())
        });
        !blank_left
            && self
                .pause
                .needed_starting
                .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
    }

    /// Removes a recycled container once dispatch pauses (the pool's stop leaves it to the
    /// shutdown, which removes every container of the pool).
    pub(crate) fn remove_after_pause(self: &Arc<Self>, id: &str) {
        let (inner, id) = (self.clone(), id.to_owned());
        tokio::spawn(async move {
            inner.pause_or(|_| false).await;
            if !inner.engine.stop.is_cancelled() {
                inner.engine.remove_in_background(&id);
            }
        });
    }
}

/// The one start [`Inner::successor_needed`] claimed, released when dropped (the successor up,
/// failed, or aborted with the pool).
pub(crate) struct NeededStart(pub(crate) Arc<Inner>);

impl Drop for NeededStart {
    fn drop(&mut self) {
        self.0.pause.needed_starting.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_counts_from_the_last_dispatch() {
        let pause = Pause::default();
        std::thread::sleep(Duration::from_millis(20));
        assert!(pause.quiet_for() >= Duration::from_millis(20));
        pause.dispatched();
        assert!(pause.quiet_for() < Duration::from_millis(20));
    }
}
