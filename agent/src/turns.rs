//! Admission of turns: the one owner of "which turn runs in which chat".
//!
//! Why one piece: turns come from several producers (a chat's messages through the bus, the
//! scheduler's jobs, the heartbeat's checks). Each of them must wait for the chat's one turn
//! slot (two turns of one chat at once would interleave its history), count against the
//! daemon's limit of turns running at once (`bus.max_parallel_turns`), and be visible to
//! `/stop` and `/status` while it runs. When each producer did its own part of that, a
//! scheduled job ran beside the limit, `/stop` answered "Nothing to stop." while it ran, and
//! `/status` did not see it. [`Turns::admit`] does all three, in this order: the chat's slot
//! first (a chat waiting for its own turn holds no global permit), then a permit.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nexbot_core::ChatRef;
use tokio::sync::{OwnedMutexGuard, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

/// Turns running at once across all chats unless `bus.max_parallel_turns` says otherwise.
pub const DEFAULT_MAX_PARALLEL_TURNS: usize = 4;

/// Who started a turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnOrigin {
    /// A message of the chat (through the bus), and who wrote it: the Telegram user (in a
    /// group, the member), `None` where the chat is its user (the console).
    /// `message` is the channel's id of the message (Telegram's update id), the same when a
    /// restart handles a message again: what the turn stores can be told apart by it.
    Message { user: Option<i64>, message: u64 },
    /// A scheduled job's run.
    Job { id: i64, name: String },
    /// A heartbeat check.
    Heartbeat { name: String },
}

impl fmt::Display for TurnOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Message { .. } => f.write_str("a message"),
            Self::Job { id, name } => write!(f, "scheduled job #{id} «{name}»"),
            Self::Heartbeat { name } => write!(f, "heartbeat check «{name}»"),
        }
    }
}

/// The turn running in a chat, as `/status` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningTurn {
    pub origin: TurnOrigin,
    pub running_for: Duration,
}

/// The running turn's handles.
#[derive(Debug, Clone)]
struct Current {
    origin: TurnOrigin,
    started: Instant,
    /// Cancels this turn only (a child of what its producer passed in).
    cancel: CancellationToken,
    /// Set by [`Turns::stop`]: the turn was stopped by the chat, not by its producer.
    stopped: Arc<std::sync::atomic::AtomicBool>,
}

#[derive(Debug, Default)]
struct ChatSlot {
    /// Held for the whole turn.
    turn: Arc<tokio::sync::Mutex<()>>,
    current: Mutex<Option<Current>>,
}

/// Every chat's turn slot, the global permits and the registry of running turns.
#[derive(Debug)]
pub struct Turns {
    permits: Arc<Semaphore>,
    chats: Mutex<HashMap<ChatRef, Arc<ChatSlot>>>,
}

/// A turn admitted to run: while it lives, the chat's slot and one permit are held and the
/// turn is registered. Dropping it ends all three, however the turn ended.
#[derive(Debug)]
pub struct Admitted {
    slot: Arc<ChatSlot>,
    cancel: CancellationToken,
    stopped: Arc<std::sync::atomic::AtomicBool>,
    _turn: OwnedMutexGuard<()>,
    _permit: OwnedSemaphorePermit,
}

impl Admitted {
    /// The turn's cancellation: its producer's token or the chat's `/stop`.
    pub fn cancel(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Whether the chat stopped this turn (`/stop`), as opposed to its producer cancelling it.
    pub fn stopped_by_chat(&self) -> bool {
        self.stopped.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        *lock(&self.slot.current) = None;
    }
}

impl Turns {
    /// At most `max_parallel` turns run at once across all chats (at least one).
    pub fn new(max_parallel: usize) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(max_parallel.max(1))),
            chats: Mutex::new(HashMap::new()),
        }
    }

    /// Waits for `chat`'s turn slot, then for a permit, and registers the turn; `None` when
    /// `cancel` fires first (nothing is held then).
    pub async fn admit(
        &self,
        chat: &ChatRef,
        origin: TurnOrigin,
        cancel: &CancellationToken,
    ) -> Option<Admitted> {
        let slot = {
            let mut chats = lock(&self.chats);
            if chats.len() >= 1024 {
                // Slots nobody holds or waits for (only the map refers to them) go.
                chats.retain(|_, slot| Arc::strong_count(slot) > 1);
            }
            chats.entry(chat.clone()).or_default().clone()
        };
        let turn = tokio::select! {
            guard = slot.turn.clone().lock_owned() => guard,
            () = cancel.cancelled() => return None,
        };
        let permit = tokio::select! {
            permit = self.permits.clone().acquire_owned() => permit.ok()?,
            () = cancel.cancelled() => return None,
        };
        let current = Current {
            origin,
            started: Instant::now(),
            cancel: cancel.child_token(),
            stopped: Arc::default(),
        };
        let (turn_cancel, stopped) = (current.cancel.clone(), current.stopped.clone());
        *lock(&slot.current) = Some(current);
        Some(Admitted { slot, cancel: turn_cancel, stopped, _turn: turn, _permit: permit })
    }

    /// Cancels `chat`'s running turn, whoever started it; `false` when none runs.
    pub fn stop(&self, chat: &ChatRef) -> bool {
        let Some(current) = self.current(chat) else { return false };
        current.stopped.store(true, std::sync::atomic::Ordering::Relaxed);
        current.cancel.cancel();
        true
    }

    /// `chat`'s running turn, if one runs.
    pub fn running(&self, chat: &ChatRef) -> Option<RunningTurn> {
        self.current(chat)
            .map(|c| RunningTurn { origin: c.origin, running_for: c.started.elapsed() })
    }

    /// How many turns run now (the tests' view; `/status` asks per chat).
    #[cfg(test)]
    fn running_count(&self) -> usize {
        lock(&self.chats).values().filter(|slot| lock(&slot.current).is_some()).count()
    }

    fn current(&self, chat: &ChatRef) -> Option<Current> {
        let slot = lock(&self.chats).get(chat).cloned()?;
        let current = lock(&slot.current).clone();
        current
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(n: i64) -> ChatRef {
        ChatRef::Telegram(n)
    }

    #[tokio::test]
    async fn one_turn_per_chat_and_the_limit_across_chats() {
        let turns = Arc::new(Turns::new(2));
        let never = CancellationToken::new();
        let a = turns
            .admit(&chat(1), TurnOrigin::Message { user: None, message: 0 }, &never)
            .await
            .unwrap();
        // The same chat waits for its slot, whoever asks.
        let job = TurnOrigin::Job { id: 7, name: "digest".into() };
        let waiting = {
            let turns = turns.clone();
            tokio::spawn(async move {
                let never = CancellationToken::new();
                turns.admit(&chat(1), job, &never).await.map(|t| t.cancel().is_cancelled())
            })
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "a second turn of one chat waits");
        let b = turns
            .admit(&chat(2), TurnOrigin::Message { user: None, message: 0 }, &never)
            .await
            .unwrap();
        assert_eq!(turns.running_count(), 2);
        // The limit of 2 is reached: a third chat waits; cancelling its wait holds nothing.
        let give_up = CancellationToken::new();
        let three = chat(3);
        let third = turns.admit(&three, TurnOrigin::Message { user: None, message: 0 }, &give_up);
        give_up.cancel();
        assert!(third.await.is_none());
        assert_eq!(turns.running(&chat(3)), None);
        drop(a);
        assert_eq!(waiting.await.unwrap(), Some(false), "the job ran once the message's ended");
        drop(b);
        assert_eq!(turns.running_count(), 0);
    }

    #[tokio::test]
    async fn stop_reaches_a_turn_whoever_started_it() {
        let turns = Turns::new(4);
        let producer = CancellationToken::new();
        let origin = TurnOrigin::Heartbeat { name: "disk".into() };
        let t = turns.admit(&chat(5), origin.clone(), &producer).await.unwrap();
        assert_eq!(turns.running(&chat(5)).map(|r| r.origin), Some(origin));
        assert!(!turns.stop(&chat(6)), "nothing runs in another chat");
        assert!(turns.stop(&chat(5)));
        assert!(t.cancel().is_cancelled() && t.stopped_by_chat());
        assert!(!producer.is_cancelled(), "/stop ends the turn, not its producer");
        drop(t);
        assert!(!turns.stop(&chat(5)), "the ended turn is no longer registered");
    }
}
