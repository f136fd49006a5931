//! The update ledger: every Telegram update the bot fetched, and what became of it.
//!
//! Why: Telegram forgets an update once `getUpdates` is called with a higher offset. If the
//! offset moved before the update was written down, a crash would lose the message; if the
//! update were handled before the offset moved, a restart would answer it twice. So the
//! channel records an update and moves the offset past it in one step ([`Ledger::receive`]),
//! and settles it ([`Ledger::settle`]) once it is answered, refused or failed. After a
//! restart, what was received but never settled is handled again ([`Ledger::unsettled`]).
//!
//! The channel owns the rules; the storage is the host's (its SQLite store implements the
//! trait), so this crate needs no database.

use nexbot_core::{BoxFuture, ChatRef};
use thiserror::Error;

/// An update as the ledger keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedUpdate {
    pub update_id: i64,
    /// The chat it came from (`telegram:<chat id>`).
    pub chat: ChatRef,
    pub user_id: Option<i64>,
    /// Telegram's id of the user's message, to reply to it.
    pub message_id: Option<i32>,
    /// The text to handle. A `/secret` message is kept redacted (its value never reaches
    /// the ledger); an update that was refused may keep a short description instead.
    pub text: String,
    /// The file it carried, as [`crate::policy::FileRef::to_ledger`] writes it: fetched again
    /// when the update is handled after a restart.
    pub file: Option<String>,
}

/// How an update ended: exactly one of these is recorded for each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settlement {
    /// Answered; the ids of the messages the bot sent as the answer.
    Answered { message_ids: Vec<i32> },
    /// Not handled, by the rule named (`not-allowed`, `group-not-addressed`, …).
    Refused { rule: String },
    /// Handled, but the answer could not be delivered (or the handling failed).
    Failed { error: String },
}

impl Settlement {
    /// The state's name as stored: `answered`, `refused` or `failed`.
    pub fn state(&self) -> &'static str {
        match self {
            Self::Answered { .. } => "answered",
            Self::Refused { .. } => "refused",
            Self::Failed { .. } => "failed",
        }
    }
}

/// The storage's failure, with its own words.
#[derive(Debug, Clone, Error)]
#[error("the Telegram update ledger failed: {message}")]
pub struct LedgerError {
    pub message: String,
    /// The storage is out of space (SQLite's `SQLITE_FULL`, the OS's ENOSPC): the channel
    /// tells the user so (once per update) instead of staying silent, and the update waits at
    /// Telegram until space returns (see `disk_full.rs`).
    pub disk_full: bool,
}

impl LedgerError {
    /// Any failure but a full disk.
    pub fn new(message: impl Into<String>) -> Self {
        Self { message: message.into(), disk_full: false }
    }

    /// The storage is out of space.
    pub fn disk_full(message: impl Into<String>) -> Self {
        Self { message: message.into(), disk_full: true }
    }
}

/// Where the channel writes down updates (the host's store).
pub trait Ledger: Send + Sync + std::fmt::Debug {
    /// The offset to poll from: one past the newest update ever received, if any.
    fn next_offset(&self) -> BoxFuture<'_, Result<Option<i64>, LedgerError>>;

    /// Records `update` (as pending, or already settled with `settled`) and moves the offset
    /// past it, atomically. Returns false when the update was recorded before (Telegram sent
    /// it again): the caller must not handle it twice.
    fn receive(
        &self,
        update: ReceivedUpdate,
        settled: Option<Settlement>,
    ) -> BoxFuture<'_, Result<bool, LedgerError>>;

    /// Records how a pending update ended. Settling an update twice keeps the first.
    fn settle(
        &self,
        update_id: i64,
        settlement: Settlement,
    ) -> BoxFuture<'_, Result<(), LedgerError>>;

    /// Updates received but not settled (the daemon stopped while handling them), oldest
    /// first.
    fn unsettled(&self) -> BoxFuture<'_, Result<Vec<ReceivedUpdate>, LedgerError>>;

    /// Records that the answer to pending update `update_id` is being sent now: if this run
    /// dies before [`Ledger::settle`], the next one must not answer it again
    /// ([`Ledger::cut_off`]). The default keeps nothing.
    fn sending(&self, update_id: i64) -> BoxFuture<'_, Result<(), LedgerError>> {
        let _ = update_id;
        Box::pin(async { Ok(()) })
    }

    /// Updates whose answer was being sent when the last run stopped (not in
    /// [`Ledger::unsettled`]): whether it arrived is unknown. The default has none.
    fn cut_off(&self) -> BoxFuture<'_, Result<Vec<ReceivedUpdate>, LedgerError>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    /// Records `message_id` as the message showing delegated task `task_id`'s progress, so
    /// that the next run can say in it that the task was interrupted if this one dies first.
    /// The default keeps nothing (a ledger without task records).
    fn task_message(
        &self,
        task_id: &str,
        message_id: i32,
    ) -> BoxFuture<'_, Result<(), LedgerError>> {
        let _ = (task_id, message_id);
        Box::pin(async { Ok(()) })
    }
}
