//! How the Telegram channel is doing, for `/status`, the logs and the control API.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The polling loop's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PollState {
    Starting,
    Polling,
    /// Waiting before the next try after an error (network, Bot API down, 429).
    BackingOff {
        reason: String,
    },
    /// Telegram answered 409: another process polls this token.
    Conflict,
    /// The channel gave up (the token was refused); the daemon serves on without it.
    Stopped {
        reason: String,
    },
}

#[derive(Debug)]
struct State {
    poll: PollState,
    since: Instant,
    bot_username: Option<String>,
    last_poll_ok: Option<Instant>,
    /// Since when `getUpdates` fails to reach the Bot API (network, 5xx, an unreadable
    /// answer); `None` once a poll works again.
    unreachable_since: Option<Instant>,
    /// Since when updates cannot be recorded (the ledger fails: a full disk), and why;
    /// `None` once one is recorded again.
    unrecorded_since: Option<(Instant, String)>,
    conflicts: u64,
    rate_limited: u64,
    poll_errors: u64,
    updates: u64,
    delivery_failures: u64,
}

/// A shared, cheap-to-clone view of the channel's health.
#[derive(Debug, Clone)]
pub struct ChannelHealth(Arc<Mutex<State>>);

impl Default for ChannelHealth {
    fn default() -> Self {
        Self(Arc::new(Mutex::new(State {
            poll: PollState::Starting,
            since: Instant::now(),
            bot_username: None,
            last_poll_ok: None,
            unreachable_since: None,
            unrecorded_since: None,
            conflicts: 0,
            rate_limited: 0,
            poll_errors: 0,
            updates: 0,
            delivery_failures: 0,
        })))
    }
}

/// A copy of the counters, for assertions and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthSnapshot {
    pub poll: PollState,
    pub bot_username: Option<String>,
    pub conflicts: u64,
    pub rate_limited: u64,
    pub poll_errors: u64,
    pub updates: u64,
    pub delivery_failures: u64,
}

impl ChannelHealth {
    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }

    pub(crate) fn set(&self, poll: PollState) {
        self.with(|s| {
            if s.poll != poll {
                s.poll = poll;
                s.since = Instant::now();
            }
        });
    }

    pub(crate) fn poll_ok(&self, updates: usize) {
        self.with(|s| {
            s.last_poll_ok = Some(Instant::now());
            s.unreachable_since = None;
            s.updates += updates as u64;
        });
        self.set(PollState::Polling);
    }

    pub(crate) fn count_conflict(&self) {
        self.with(|s| s.conflicts += 1);
        self.set(PollState::Conflict);
    }

    /// A `getUpdates` that did not reach the Bot API (or got no usable answer from it).
    pub(crate) fn count_unreachable(&self, reason: String) {
        self.with(|s| {
            s.unreachable_since.get_or_insert_with(Instant::now);
        });
        self.count_poll_error(reason);
    }

    /// An update that could not be recorded (it waits at Telegram).
    pub(crate) fn count_record_failure(&self, reason: String) {
        self.with(|s| match &mut s.unrecorded_since {
            Some((_, why)) => *why = reason.clone(),
            None => s.unrecorded_since = Some((Instant::now(), reason.clone())),
        });
        self.count_poll_error(reason);
    }

    /// An update was recorded: recording works.
    pub(crate) fn recorded(&self) {
        self.with(|s| s.unrecorded_since = None);
    }

    pub(crate) fn count_rate_limited(&self) {
        self.with(|s| s.rate_limited += 1);
    }

    pub(crate) fn count_poll_error(&self, reason: String) {
        self.with(|s| s.poll_errors += 1);
        self.set(PollState::BackingOff { reason });
    }

    pub(crate) fn count_delivery_failure(&self) {
        self.with(|s| s.delivery_failures += 1);
    }

    pub(crate) fn set_username(&self, name: String) {
        self.with(|s| s.bot_username = Some(name));
    }

    pub fn snapshot(&self) -> HealthSnapshot {
        self.with(|s| HealthSnapshot {
            poll: s.poll.clone(),
            bot_username: s.bot_username.clone(),
            conflicts: s.conflicts,
            rate_limited: s.rate_limited,
            poll_errors: s.poll_errors,
            updates: s.updates,
            delivery_failures: s.delivery_failures,
        })
    }

    /// What makes the channel a degraded part of the daemon, if anything: the token refused
    /// (the channel stopped), the Bot API out of reach (messages do not come in), or updates
    /// that cannot be recorded (they wait at Telegram, unanswered).
    pub fn problem(&self) -> Option<String> {
        self.with(|s| match (&s.poll, s.unreachable_since, &s.unrecorded_since) {
            (PollState::Stopped { reason }, _, _) => Some(format!("STOPPED: {reason}")),
            (_, _, Some((since, why))) => Some(format!(
                "cannot record incoming updates for {}s ({why}); they wait at Telegram and are \
                 answered once they can be recorded",
                since.elapsed().as_secs()
            )),
            (PollState::BackingOff { reason }, Some(since), None) => {
                let last = s
                    .last_poll_ok
                    .map_or("never".to_owned(), |t| format!("{}s ago", t.elapsed().as_secs()));
                Some(format!(
                    "cannot reach the Bot API for {}s ({reason}); last good poll {last}",
                    since.elapsed().as_secs()
                ))
            }
            _ => None,
        })
    }

    /// One line for `/status`.
    pub fn summary(&self) -> String {
        self.with(|s| {
            let for_secs = |d: Duration| format!("{}s", d.as_secs());
            let state = match &s.poll {
                PollState::Starting => "starting".to_owned(),
                PollState::Polling => "polling".to_owned(),
                PollState::BackingOff { reason } => {
                    format!("backing off for {} ({reason})", for_secs(s.since.elapsed()))
                }
                PollState::Conflict => format!(
                    "CONFLICT for {}: another process polls this bot token (409)",
                    for_secs(s.since.elapsed())
                ),
                PollState::Stopped { reason } => format!("STOPPED: {reason}"),
            };
            let last = s
                .last_poll_ok
                .map_or("never".to_owned(), |t| format!("{} ago", for_secs(t.elapsed())));
            let name = s.bot_username.as_deref().map(|n| format!("@{n} ")).unwrap_or_default();
            format!(
                "{name}{state}; last good poll {last}; {} updates, {} delivery failures, {} \
                 conflicts, {} rate limits",
                s.updates, s.delivery_failures, s.conflicts, s.rate_limited
            )
        })
    }
}
