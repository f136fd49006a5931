//! What the channel does when its ledger cannot record an update (the disk is full), and how
//! the polling loop logs a recording failure that repeats.
//!
//! The decision: an update that cannot be recorded is not handled (handling it unrecorded
//! could answer it twice after a restart, or lose it in a crash), and the offset does not
//! move past it, so Telegram keeps it and sends it again; the loop retries about once a second
//! and the update is handled, and answered exactly once, as soon as space returns. Meanwhile
//! the user is not left in silence: when the failure is a full disk, the chat gets one short
//! notice per update (kept in memory only, since nothing can be written) saying the message
//! waits. A recording failure is logged once, then once a minute with its count
//! ([`nexbot_core::repeat`]), and once more with the count when recording works again.
//!
//! Each round tries only the oldest waiting update (the loop stops at the first it cannot
//! record, so the offset never passes an unrecorded one), so the chats of later updates are
//! told when their turn comes, not all at once.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use nexbot_core::repeat::{LogDecision, RepeatFilter};

use super::Inner;
use crate::ledger::LedgerError;

/// The notice a chat gets when its message cannot be recorded for lack of space.
pub(crate) const DISK_FULL_NOTICE: &str = "I cannot take your message right now: the disk of \
     the server I run on is full. It is not lost: I will answer it as soon as space is freed.";

/// The updates whose chat was told that the disk is full (so each is told once).
#[derive(Debug, Default)]
pub(super) struct DiskFullNotices(Mutex<HashSet<i64>>);

impl DiskFullNotices {
    /// True the first time `update_id` is asked about (until [`Self::recorded`]).
    fn first(&self, update_id: i64) -> bool {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).insert(update_id)
    }

    /// `update_id` is recorded at last: nothing is kept for it any more.
    pub(super) fn recorded(&self, update_id: i64) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(&update_id);
    }
}

impl Inner {
    /// Tells `chat_id` (once for `update_id`) that its message waits for disk space, when
    /// `error` is a full disk. Sent from a task of its own: the polling loop does not wait on
    /// Telegram for it.
    pub(super) fn tell_if_disk_full(
        self: &Arc<Self>,
        error: &LedgerError,
        update_id: i64,
        chat_id: i64,
        message_id: i32,
    ) {
        if !error.disk_full || !self.disk_full.first(update_id) {
            return;
        }
        let inner = self.clone();
        tokio::spawn(async move {
            if let Err(e) = inner.deliver(chat_id, DISK_FULL_NOTICE, Some(message_id)).await {
                tracing::warn!(chat_id, update_id, error = %e, "cannot say that the disk is full");
            }
        });
    }
}

/// Logs that update `update_id` could not be recorded: the first time, then once a minute
/// with how often it failed meanwhile.
pub(super) fn log_record_failure(filter: &mut RepeatFilter, update_id: i64, error: &LedgerError) {
    let hint = if error.disk_full {
        "; free space in the data directory: the update waits at Telegram until it can be recorded"
    } else {
        "; it will be fetched again"
    };
    match filter.check(&error.message, Instant::now()) {
        LogDecision::Log => {
            tracing::error!(update_id, error = %error, "cannot record a Telegram update{hint}");
        }
        LogDecision::Repeated(repeated) => tracing::error!(
            update_id,
            error = %error,
            "cannot record a Telegram update{hint} ({})",
            repeated.note()
        ),
        LogDecision::Quiet => {
            tracing::debug!(update_id, error = %error, "cannot record a Telegram update (again)");
        }
    }
}

/// An update was recorded: if recording had failed since the last line, says how often.
pub(super) fn log_recorded_again(filter: &mut RepeatFilter) {
    if let Some(repeated) = filter.clear(Instant::now()) {
        tracing::warn!(
            error = %repeated.message,
            "Telegram updates are recorded again; until now: cannot record a Telegram update ({})",
            repeated.note()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_update_is_told_once_until_it_is_recorded() {
        let notices = DiskFullNotices::default();
        assert!(notices.first(7));
        assert!(!notices.first(7));
        assert!(notices.first(8));
        notices.recorded(7);
        assert!(notices.first(7));
    }
}
