//! The Telegram update ledger: every update fetched and how it ended, and the polling offset
//! moved in the same transaction as the update's row (table `telegram_updates` and
//! `channel_offsets`, migration 4).
//!
//! Why: an update is recorded before it is handled, so one a restart interrupted is replayed
//! (`pending`), and one handled is never handled twice.

use rusqlite::{params, OptionalExtension};

use nexbot_core::ChatRef;

use crate::{unix_now, Store, StoreError};

words! {
    /// Where a Telegram update is in the ledger.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum UpdateState {
        /// Received, not settled yet (replayed after a restart).
        Pending => "pending",
        Answered => "answered",
        Refused => "refused",
        Failed => "failed",
    }
}

/// A row of the Telegram update ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerRow {
    pub update_id: i64,
    pub chat: ChatRef,
    pub user_id: Option<i64>,
    pub message_id: Option<i64>,
    pub text: String,
    pub state: UpdateState,
    /// The sent message ids (answered), the rule (refused) or the error (failed).
    pub detail: Option<String>,
    /// The channel's reference to the file the message carried, to fetch it again.
    pub file: Option<String>,
}

impl LedgerRow {
    /// The row, or `None` for a chat or state this daemon cannot read (skipped, with a warning:
    /// one corrupt row must not stop the ledger's replay).
    fn from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Option<Self>> {
        let (chat, state): (String, String) = (r.get(1)?, r.get(5)?);
        let (Ok(chat), Some(state)) = (chat.parse::<ChatRef>(), UpdateState::parse(&state)) else {
            tracing::warn!(update_id = r.get::<_, i64>(0)?, %chat, %state, "a Telegram ledger row this daemon cannot read; skipped");
            return Ok(None);
        };
        Ok(Some(Self {
            update_id: r.get(0)?,
            chat,
            user_id: r.get(2)?,
            message_id: r.get(3)?,
            text: r.get(4)?,
            state,
            detail: r.get(6)?,
            file: r.get(7)?,
        }))
    }
}

impl Store {
    /// The Telegram polling offset: one past the newest update received.
    pub async fn telegram_offset(&self) -> Result<Option<i64>, StoreError> {
        self.call(|c| {
            c.query_row(
                "SELECT next_offset FROM channel_offsets WHERE channel = 'telegram'",
                [],
                |r| r.get(0),
            )
            .optional()
        })
        .await
    }

    /// Records a Telegram update as it is (`pending`, or already settled with its detail) and
    /// moves the offset past it, in one transaction. False when it was recorded before.
    pub async fn receive_update(&self, update: LedgerRow) -> Result<bool, StoreError> {
        self.call(move |c| {
            let tx = c.transaction()?;
            let settled_at = (update.state != UpdateState::Pending).then(unix_now);
            let inserted = tx.execute(
                "INSERT OR IGNORE INTO telegram_updates
                   (update_id, chat_id, user_id, message_id, text, state, detail, received_at, settled_at, file)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                params![
                    update.update_id,
                    update.chat.to_string(),
                    update.user_id,
                    update.message_id,
                    update.text,
                    update.state.as_str(),
                    update.detail,
                    unix_now(),
                    settled_at,
                    update.file
                ],
            )?;
            tx.execute(
                "INSERT INTO channel_offsets (channel, next_offset) VALUES ('telegram', ?1)
                 ON CONFLICT (channel) DO UPDATE SET next_offset = max(next_offset, excluded.next_offset)",
                [update.update_id + 1],
            )?;
            tx.commit()?;
            Ok(inserted == 1)
        })
        .await
    }

    /// Settles a pending Telegram update as `state` with `detail`; a settled one keeps its
    /// first state.
    pub async fn settle_update(
        &self,
        update_id: i64,
        state: UpdateState,
        detail: String,
    ) -> Result<(), StoreError> {
        let state = state.as_str();
        self.call(move |c| {
            c.execute(
                "UPDATE telegram_updates SET state = ?2, detail = ?3, settled_at = ?4
                 WHERE update_id = ?1 AND state = 'pending'",
                params![update_id, state, detail, unix_now()],
            )
            .map(drop)
        })
        .await
    }

    /// Telegram updates of `state` (`pending`, `answered`, `refused`, `failed`), oldest first.
    pub async fn updates(&self, state: UpdateState) -> Result<Vec<LedgerRow>, StoreError> {
        self.ledger_rows("state", state.as_str().to_owned()).await
    }

    /// Every Telegram update of `chat`, oldest first (for tests and the control API).
    pub async fn chat_updates(&self, chat: &ChatRef) -> Result<Vec<LedgerRow>, StoreError> {
        self.ledger_rows("chat_id", chat.to_string()).await
    }

    /// Ledger rows whose `column` (a fixed name, never input) equals `value`.
    async fn ledger_rows(
        &self,
        column: &'static str,
        value: String,
    ) -> Result<Vec<LedgerRow>, StoreError> {
        self.call(move |c| {
            let mut stmt = c.prepare(&format!(
                "SELECT update_id, chat_id, user_id, message_id, text, state, detail, file
                 FROM telegram_updates WHERE {column} = ?1 ORDER BY update_id"
            ))?;
            let rows = stmt.query_map([value], LedgerRow::from_row)?;
            rows.filter_map(Result::transpose).collect()
        })
        .await
    }

    /// The newest `limit` Telegram updates (only `failed` ones with `failed_only`), newest
    /// first.
    pub async fn recent_updates(
        &self,
        failed_only: bool,
        limit: i64,
    ) -> Result<Vec<LedgerRow>, StoreError> {
        self.call(move |c| {
            let mut stmt = c.prepare(
                "SELECT update_id, chat_id, user_id, message_id, text, state, detail, file
                 FROM telegram_updates WHERE ?1 = 0 OR state = 'failed'
                 ORDER BY update_id DESC LIMIT ?2",
            )?;
            let rows = stmt.query_map(params![failed_only, limit], LedgerRow::from_row)?;
            rows.filter_map(Result::transpose).collect()
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::temp_db;

    #[tokio::test]
    async fn the_telegram_ledger_moves_the_offset_with_the_record_and_settles_once() {
        let store = Store::open(&temp_db("ledger")).await.unwrap();
        assert_eq!(store.telegram_offset().await.unwrap(), None);
        let row = |id: i64| LedgerRow {
            update_id: id,
            chat: ChatRef::Telegram(5),
            user_id: Some(5),
            message_id: Some(id * 10),
            text: format!("m{id}"),
            state: UpdateState::Pending,
            detail: None,
            file: (id == 8).then(|| r#"{"kind":"document","file_id":"F8"}"#.to_owned()),
        };
        assert!(store.receive_update(row(7)).await.unwrap());
        assert_eq!(store.telegram_offset().await.unwrap(), Some(8));
        // Sent again by Telegram: not a second record, and the offset does not go back.
        assert!(!store.receive_update(row(7)).await.unwrap());
        let refused =
            LedgerRow { state: UpdateState::Refused, detail: Some("not-allowed".into()), ..row(9) };
        assert!(store.receive_update(refused).await.unwrap());
        assert!(store.receive_update(row(8)).await.unwrap());
        assert_eq!(store.telegram_offset().await.unwrap(), Some(10));
        let pending: Vec<i64> = store
            .updates(UpdateState::Pending)
            .await
            .unwrap()
            .iter()
            .map(|r| r.update_id)
            .collect();
        assert_eq!(pending, [7, 8]);
        let files: Vec<Option<String>> = store
            .updates(UpdateState::Pending)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.file)
            .collect();
        assert_eq!(files, [None, Some(r#"{"kind":"document","file_id":"F8"}"#.to_owned())]);
        store.settle_update(7, UpdateState::Answered, "101,102".into()).await.unwrap();
        // The first state stays.
        store.settle_update(7, UpdateState::Failed, "late".into()).await.unwrap();
        let rows = store.chat_updates(&ChatRef::Telegram(5)).await.unwrap();
        let states: Vec<(i64, &str, Option<&str>)> =
            rows.iter().map(|r| (r.update_id, r.state.as_str(), r.detail.as_deref())).collect();
        assert_eq!(
            states,
            [
                (7, "answered", Some("101,102")),
                (8, "pending", None),
                (9, "refused", Some("not-allowed"))
            ]
        );
    }
}
