//! The moment between an answer leaving for Telegram and its update being recorded as
//! answered: a pending update is marked `sending` (in `detail`, so the state stays one an
//! older daemon reads) just before its answer is sent.
//!
//! Why: a daemon killed after Telegram took the answer but before "answered" was written would
//! otherwise replay the update at its next start and answer it twice (seen in the soak run:
//! 1 answer of 686 doubled by a SIGKILL). A marked update is not handled again; its user is
//! told the answer may not have arrived (the channel says so), so it is answered at most once
//! and never lost silently.

use rusqlite::params;

use crate::{LedgerRow, Store, StoreError, UpdateState};

/// The `detail` of a pending update whose answer is on its way.
pub const SENDING: &str = "sending";

impl Store {
    /// Marks pending update `update_id` as having its answer sent now.
    pub async fn mark_update_sending(&self, update_id: i64) -> Result<(), StoreError> {
        self.call(move |c| {
            c.execute(
                "UPDATE telegram_updates SET detail = ?2 WHERE update_id = ?1 AND state = 'pending'",
                params![update_id, SENDING],
            )
            .map(drop)
        })
        .await
    }

    /// Pending updates, split into those to handle again and those whose answer was being
    /// sent when the last run stopped (marked by [`Store::mark_update_sending`]).
    pub async fn pending_updates(&self) -> Result<(Vec<LedgerRow>, Vec<LedgerRow>), StoreError> {
        let rows = self.updates(UpdateState::Pending).await?;
        Ok(rows.into_iter().partition(|row| row.detail.as_deref() != Some(SENDING)))
    }
}
