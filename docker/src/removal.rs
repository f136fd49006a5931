//! Containers the pool let go of but could not remove yet.
//!
//! A retired container is removed in the background, off the supervisor's path. When the
//! engine is away (stopped, restarting, killed) that removal fails with "client error
//! (Connect)"; tried once, the container would stay behind, `exited`, for as long as the
//! daemon lives. So every removal is kept in a pending set until the engine confirms the
//! container gone, and retried with a bounded back-off (1 s doubling to 30 s) — sooner when
//! the engine is seen answering again (a replacement came up, another removal went through).
//! `subagents ps` and `/metrics` count the set, so leftovers are visible while they wait.
//!
//! The retries stop with the pool: its shutdown removes every container of the run by label,
//! and the next start reaps what a dead run left.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::error::PoolError;

/// The wait after a removal's first failure; it doubles with each further failure.
pub(crate) const RETRY_FIRST: Duration = Duration::from_secs(1);
/// The longest wait between two attempts: once the engine is back, a leftover is gone within
/// this (sooner when the pool sees the engine answer).
pub(crate) const RETRY_MAX: Duration = Duration::from_secs(30);

/// The one operation the retries need from the engine: remove container `id`, by force,
/// counting "no such container" as done. A seam, so the retry policy is tested without an
/// engine.
pub(crate) trait Remove: Send + Sync {
    fn try_remove(&self, id: &str) -> impl Future<Output = Result<(), PoolError>> + Send;
}

/// The wait before the next attempt after `failures` failed ones (at least one).
pub(crate) fn retry_delay(failures: u32) -> Duration {
    let factor = 1u32.checked_shl(failures.saturating_sub(1)).unwrap_or(u32::MAX);
    RETRY_FIRST.saturating_mul(factor).min(RETRY_MAX)
}

/// One container waiting to be removed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pending {
    /// Failed attempts so far.
    failures: u32,
    /// What the engine (or the client) said the last time.
    last_error: String,
}

/// The pool's containers pending removal, and the signal that wakes their retries.
#[derive(Debug, Default)]
pub(crate) struct Removals {
    pending: Mutex<HashMap<String, Pending>>,
    /// Fired when the engine is seen answering: every waiting retry tries again at once.
    engine_back: Notify,
}

impl Removals {
    /// How many containers are waiting to be removed.
    pub(crate) fn pending(&self) -> usize {
        self.lock().len()
    }

    /// Tells the waiting retries that the engine answers again, so they need not sit out
    /// their back-off.
    pub(crate) fn engine_answered(&self) {
        self.engine_back.notify_waiters();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pending>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Removes container `id` through `engine`, retrying with back-off until the engine
    /// confirms it gone or `stop` fires (the pool's shutdown then removes it by label). The
    /// container counts as pending from the first failure until then.
    pub(crate) async fn remove_until_gone<R: Remove>(
        &self,
        engine: &R,
        id: &str,
        stop: &CancellationToken,
    ) {
        let short: String = id.chars().take(12).collect();
        loop {
            // Armed before the attempt: an "engine is back" that comes while it runs counts.
            let woken = self.engine_back.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let error = match engine.try_remove(id).await {
                Ok(()) => {
                    if self.lock().remove(id).is_some() {
                        tracing::info!(container = %short, "removed a container left while the engine was away");
                        // The engine answers: the other leftovers need not wait either.
                        self.engine_answered();
                    }
                    return;
                }
                Err(e) => e.to_string(),
            };
            let failures = {
                let mut pending = self.lock();
                let entry = pending
                    .entry(id.to_owned())
                    .or_insert_with(|| Pending { failures: 0, last_error: String::new() });
                entry.failures += 1;
                entry.last_error = error.clone();
                entry.failures
            };
            let delay = retry_delay(failures);
            tracing::warn!(
                container = %short,
                failures,
                retry_in_ms = delay.as_millis() as u64,
                "could not remove container, will retry: {error}"
            );
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(delay) => {}
                _ = woken => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    use tokio::time::Instant;

    use super::*;

    /// Refuses the first `fail` removals the way an absent engine does, then succeeds.
    struct Flaky {
        fail: u32,
        calls: AtomicU32,
    }

    impl Remove for Flaky {
        async fn try_remove(&self, _id: &str) -> Result<(), PoolError> {
            let call = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
            if call <= self.fail {
                Err(PoolError::EngineTimeout { action: "remove a container".into(), secs: 20 })
            } else {
                Ok(())
            }
        }
    }

    #[test]
    fn the_delay_doubles_from_one_second_to_a_cap_of_thirty() {
        let secs: Vec<u64> = (1..=8).map(|f| retry_delay(f).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 30, 30, 30]);
        assert_eq!(retry_delay(u32::MAX), RETRY_MAX);
    }

    #[tokio::test(start_paused = true)]
    async fn a_removal_that_fails_is_kept_pending_and_retried_until_it_goes_through() {
        let removals = Arc::new(Removals::default());
        let engine = Arc::new(Flaky { fail: 3, calls: AtomicU32::new(0) });
        let stop = CancellationToken::new();
        let started = Instant::now();
        let task = tokio::spawn({
            let (removals, engine, stop) = (removals.clone(), engine.clone(), stop.clone());
            async move { removals.remove_until_gone(&*engine, "c0ffee", &stop).await }
        });
        // The first attempt fails at once: the container is pending.
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(engine.calls.load(Ordering::SeqCst), 1);
        assert_eq!(removals.pending(), 1);
        let entry = removals.lock().get("c0ffee").cloned().unwrap();
        assert_eq!(entry.failures, 1);
        assert!(entry.last_error.contains("did not remove a container within 20 s"), "{entry:?}");
        // Failures 1, 2, 3 wait 1 + 2 + 4 s; the fourth attempt goes through.
        task.await.unwrap();
        assert_eq!(engine.calls.load(Ordering::SeqCst), 4);
        assert_eq!(removals.pending(), 0);
        assert_eq!(started.elapsed().as_secs(), 7);
    }

    #[tokio::test(start_paused = true)]
    async fn the_engine_answering_again_cuts_the_wait_short() {
        let removals = Arc::new(Removals::default());
        // Enough failures for a long wait, then the engine is back.
        let engine = Arc::new(Flaky { fail: 6, calls: AtomicU32::new(0) });
        let stop = CancellationToken::new();
        let task = tokio::spawn({
            let (removals, engine, stop) = (removals.clone(), engine.clone(), stop.clone());
            async move { removals.remove_until_gone(&*engine, "c0ffee", &stop).await }
        });
        // 1 + 2 + 4 + 8 + 16 s: six failed attempts, now waiting 30 s.
        tokio::time::sleep(Duration::from_millis(31_500)).await;
        assert_eq!(engine.calls.load(Ordering::SeqCst), 6);
        assert_eq!(removals.pending(), 1);
        let before = Instant::now();
        removals.engine_answered();
        task.await.unwrap();
        assert_eq!(before.elapsed(), Duration::ZERO, "the retry waited out its back-off");
        assert_eq!(removals.pending(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stopping_pool_stops_the_retries() {
        let removals = Removals::default();
        let engine = Flaky { fail: u32::MAX, calls: AtomicU32::new(0) };
        let stop = CancellationToken::new();
        stop.cancel();
        removals.remove_until_gone(&engine, "c0ffee", &stop).await;
        assert_eq!(engine.calls.load(Ordering::SeqCst), 1);
    }
}
