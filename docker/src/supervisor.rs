//! Keeping the pool at strength: one supervisor task per slot watches its container (link
//! closed, condemned by someone, health pings), replaces it when it has to go — with
//! exponential back-off while replacements keep failing — and one task per pool listens to
//! the engine's events for OOM kills and deaths the attach stream might report late.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bollard::query_parameters::EventsOptionsBuilder;
use futures_util::StreamExt;

use tokio::task::JoinHandle;

use crate::error::PoolError;
use crate::member::{Member, Retirement};
use crate::pool::Inner;
use crate::restart::RestartReason;
use crate::slot::{Backoff, SlotState};
use crate::spec::{LABEL_INSTANCE, LABEL_POOL};

/// Delay before the next attempt after `failures` consecutive failures: none for the first
/// (a single crash is replaced at once), then `initial`, doubling up to `max`.
pub(crate) fn backoff(failures: u32, initial_ms: u64, max_ms: u64) -> Duration {
    if failures <= 1 {
        return Duration::ZERO;
    }
    let factor = 1u64.checked_shl(failures - 2).unwrap_or(u64::MAX);
    Duration::from_millis(initial_ms.saturating_mul(factor).min(max_ms))
}

/// A container being brought up ahead of need for a slot.
type Successor = JoinHandle<Result<Arc<Member>, PoolError>>;

/// Runs for the life of the pool: watch the member, replace it when it must go.
///
/// The slot stays filled as much as it can: a member's successor is brought up while the
/// member serves the last task of its budget (and installed the moment it is done), and the
/// old container is removed in the background rather than before its successor starts.
pub(crate) async fn supervise(inner: Arc<Inner>, index: usize, mut member: Arc<Member>) {
    let engine = inner.engine.clone();
    let config = &engine.config;
    let slot = &inner.slots[index];
    let mut failures: u32 = 0;
    let mut successor: Option<Successor> = None;
    loop {
        let retirement = watch(&inner, index, &member, &mut successor).await;
        // A pool that stops (dropped, or shut down) leaves its containers as they are: the
        // shutdown removes them, or the next owner of the name reaps them.
        let Some(retirement) = retirement.filter(|_| !engine.stop.is_cancelled()) else {
            if let Some(successor) = successor {
                successor.abort();
            }
            return;
        };
        member.retire(retirement.clone());
        let retirement = member.retirement().unwrap_or(retirement);
        let failure = retirement.failure();
        failures = match (failure, member.proven.load(std::sync::atomic::Ordering::Relaxed)) {
            (false, _) => 0,
            (true, true) => 1,
            (true, false) => failures + 1,
        };
        slot.count_replacement(&retirement.cause, &retirement.reason);
        slot.lock().state = if failure { SlotState::Unhealthy } else { SlotState::Restarting };
        let level = if failure { "warn" } else { "info" };
        slot.logs.note(
            level,
            &member.short_id,
            &format!("replacing container: {}", retirement.reason),
        );
        if failure {
            tracing::warn!(slot = %slot.id, container = %member.short_id, "replacing container: {}", retirement.reason);
        } else {
            tracing::info!(slot = %slot.id, container = %member.short_id, "replacing container: {}", retirement.reason);
        }
        if retirement.cause == RestartReason::Recycled {
            // Routine: its removal waits for a pause in dispatch, as its successor's start
            // does (`pool/pause.rs`).
            inner.remove_after_pause(&member.container_id);
        } else {
            engine.remove_in_background(&member.container_id);
        }

        let ready = match successor.take() {
            Some(mut handle) => tokio::select! {
                _ = engine.stop.cancelled() => {
                    handle.abort();
                    return;
                }
                result = &mut handle => match result {
                    Ok(Ok(fresh)) if !fresh.link.is_closed() => Some(fresh),
                    Ok(Ok(fresh)) => {
                        engine.remove_in_background(&fresh.container_id);
                        None
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(slot = %slot.id, "successor brought up ahead failed: {e}");
                        None
                    }
                    Err(_) => None,
                },
            },
            None => None,
        };
        if let Some(fresh) = ready {
            slot.record_container_up();
            engine.removals.engine_answered();
            inner.install(index, fresh.clone());
            member = fresh;
            continue;
        }

        member = loop {
            let delay = backoff(failures, config.backoff_initial_ms, config.backoff_max_ms);
            if !delay.is_zero() {
                {
                    let mut s = slot.lock();
                    s.state = SlotState::Unhealthy;
                    s.backoff = Some(Backoff { until: Instant::now() + delay, failures });
                }
                tokio::select! {
                    _ = engine.stop.cancelled() => return,
                    _ = tokio::time::sleep(delay) => {}
                }
            }
            {
                let mut s = slot.lock();
                s.backoff = None;
                s.state = SlotState::Restarting;
            }
            let startup = Duration::from_secs(config.startup_timeout_secs);
            // The engine itself may hang; the attempt is bounded like the pool's start-up.
            let bounded =
                tokio::time::timeout(startup, engine.bring_up(index, slot.logs.clone(), startup));
            let attempt = tokio::select! {
                _ = engine.stop.cancelled() => return,
                attempt = bounded => attempt.unwrap_or_else(|_| Err(PoolError::StartupTimeout {
                    secs: startup.as_secs(),
                    detail: format!("container for {} was not ready", slot.id),
                })),
            };
            match attempt {
                Ok(fresh) => break fresh,
                Err(e) => {
                    failures += 1;
                    let message = format!("replacement failed (attempt {failures}): {e}");
                    tracing::warn!(slot = %slot.id, "{message}");
                    slot.logs.note("error", "", &message);
                    slot.record_failed_attempt(message, &e);
                }
            }
        };
        slot.record_container_up();
        engine.removals.engine_answered();
        inner.install(index, member.clone());
    }
}

/// Starts bringing up a container for slot `index` ahead of need: once dispatch pauses, or
/// at once when the pool needs it (`pool/pause.rs`).
fn bring_up_successor(inner: &Arc<Inner>, index: usize) -> Successor {
    let (inner, engine) = (inner.clone(), inner.engine.clone());
    let logs = inner.slots[index].logs.clone();
    tokio::spawn(async move {
        let needed = inner.pause_or(|inner| inner.successor_needed(index)).await;
        // The claim `successor_needed` took, released however this ends (up, failed, or
        // aborted with the pool).
        let _claim = needed.then(|| crate::pool::NeededStart(inner.clone()));
        let startup = Duration::from_secs(engine.config.startup_timeout_secs);
        tokio::time::timeout(startup, engine.bring_up(index, logs, startup)).await.unwrap_or_else(
            |_| {
                Err(PoolError::StartupTimeout {
                    secs: startup.as_secs(),
                    detail: format!("successor for slot {index} was not ready"),
                })
            },
        )
    })
}

/// Waits until `member` has to go and says why; `None` when the pool stops. Meanwhile it
/// starts the member's `successor` when the member begins its last task.
async fn watch(
    inner: &Arc<Inner>,
    index: usize,
    member: &Arc<Member>,
    successor: &mut Option<Successor>,
) -> Option<Retirement> {
    let engine = &inner.engine;
    let slot = &inner.slots[index];
    let interval = engine.config.ping_interval();
    let mut next_ping = tokio::time::Instant::now() + interval;
    loop {
        tokio::select! {
            // First: a pool that stops closes every link too, which is no reason to replace.
            biased;
            _ = engine.stop.cancelled() => return None,
            _ = member.link.closed() => {
                return Some(member.retirement().unwrap_or_else(|| {
                    let reason = member.link.reason();
                    let cause = member
                        .link
                        .cause()
                        .unwrap_or_else(|| RestartReason::Other { detail: reason.clone() });
                    Retirement::new(cause, reason)
                }));
            }
            _ = slot.wake.notified() => {
                if let Some(retirement) = member.retirement() {
                    return Some(retirement);
                }
            }
            // A permit left from an earlier member is stale: its successor was installed.
            _ = slot.prewarm.notified(), if successor.is_none() => {
                if member.on_last_task() && !member.is_retired() {
                    *successor = Some(bring_up_successor(inner, index));
                }
            }
            _ = tokio::time::sleep_until(next_ping) => {
                next_ping = tokio::time::Instant::now() + interval;
                if inner.retire_if_idle_too_long(index, member) {
                    // The next turn sees the retirement through the closed link.
                    continue;
                }
                match inner.ping(slot, member).await {
                    Ok(_) => sample_memory(inner.clone(), index, member.clone()),
                    Err(crate::PoolError::PingTimeout { timeout_ms, .. }) => {
                        return Some(Retirement::new(
                            RestartReason::Hung,
                            format!("container stopped answering: no pong within {timeout_ms} ms"),
                        ));
                    }
                    // The link is closed: the next turn of the loop says why.
                    Err(_) => {}
                }
            }
        }
    }
}

/// Records the member's memory use on its slot, off the supervisor's path.
pub(crate) fn sample_memory(inner: Arc<Inner>, index: usize, member: Arc<Member>) {
    tokio::spawn(async move {
        let memory = inner.engine.memory_use(&member.container_id).await;
        let mut s = inner.slots[index].lock();
        if s.member.as_ref().is_some_and(|m| Arc::ptr_eq(m, &member)) {
            s.memory = memory;
        }
    });
}

/// Listens to the engine's container events for this pool instance: an `oom` condemns the
/// container at once (even when the kernel killed only a child process, the task's state is
/// lost); a `die` fails the link if the attach stream has not already said so.
pub(crate) async fn watch_events(inner: Arc<Inner>) {
    let engine = inner.engine.clone();
    let filters = HashMap::from([
        ("type", vec!["container".to_owned()]),
        ("event", vec!["oom".to_owned(), "die".to_owned()]),
        (
            "label",
            vec![
                format!("{LABEL_POOL}={}", engine.config.name),
                format!("{LABEL_INSTANCE}={}", engine.instance),
            ],
        ),
    ]);
    loop {
        let options = EventsOptionsBuilder::default().filters(&filters).build();
        let mut events = engine.docker.events(Some(options));
        loop {
            let event = tokio::select! {
                _ = engine.stop.cancelled() => return,
                event = events.next() => event,
            };
            let event = match event {
                Some(Ok(event)) => event,
                Some(Err(e)) => {
                    tracing::warn!("Docker event stream failed, reconnecting: {e}");
                    break;
                }
                None => break,
            };
            let Some(id) = event.actor.and_then(|a| a.id) else { continue };
            let Some((index, member)) = inner.slots.iter().find_map(|slot| {
                slot.member().filter(|m| m.container_id == id).map(|m| (slot.index, m))
            }) else {
                continue;
            };
            match event.action.as_deref() {
                Some("oom")
                    if member
                        .retire(Retirement::new(RestartReason::OomKilled, engine.oom_reason())) =>
                {
                    inner.slots[index].wake.notify_one();
                }
                Some("die") if !member.link.is_closed() => {
                    let engine = engine.clone();
                    tokio::spawn(async move {
                        let (cause, reason) = engine.explain_death(&id, "container died").await;
                        member.link.fail_because(cause, &reason);
                    });
                }
                _ => {}
            }
        }
        tokio::select! {
            _ = engine.stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_immediate_once_then_doubles_to_a_cap() {
        let ms = |f| backoff(f, 250, 2_000).as_millis();
        assert_eq!(ms(0), 0);
        assert_eq!(ms(1), 0);
        assert_eq!(ms(2), 250);
        assert_eq!(ms(3), 500);
        assert_eq!(ms(4), 1_000);
        assert_eq!(ms(5), 2_000);
        assert_eq!(ms(60), 2_000);
        assert_eq!(ms(u32::MAX), 2_000);
    }
}
