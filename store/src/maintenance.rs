//! The database as a whole: its size, an online backup, and pruning by age.
//!
//! Why apart: these touch every table (or none in particular) and are the operator's tools
//! (`nexbot-ctl backup`, the retention settings), not any one feature's rows.

use std::path::Path;
use std::time::Duration;

use rusqlite::Connection;

use crate::{Store, StoreError};

/// How old (days) rows may get before [`Store::prune`] deletes them; 0 keeps them forever.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    pub telegram_updates_days: u32,
    pub task_records_days: u32,
    pub history_days: u32,
}

impl Store {
    /// The database's size in bytes (pages in use and free).
    pub async fn size_bytes(&self) -> Result<u64, StoreError> {
        self.call(|c| {
            let pages: i64 = c.query_row("PRAGMA page_count", [], |r| r.get(0))?;
            let size: i64 = c.query_row("PRAGMA page_size", [], |r| r.get(0))?;
            Ok((pages * size) as u64)
        })
        .await
    }

    /// A consistent copy of the database at `path` while the daemon runs (SQLite's online
    /// backup); refuses to overwrite an existing file. Returns the copy's size.
    pub async fn backup(&self, path: &Path) -> Result<u64, StoreError> {
        let target = path.to_owned();
        // Created new and private (0600): the copy holds the whole database.
        {
            use std::os::unix::fs::OpenOptionsExt;
            let created =
                std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&target);
            if let Err(e) = created {
                let reason = match e.kind() {
                    std::io::ErrorKind::AlreadyExists => {
                        "exists already; choose a new file name".to_owned()
                    }
                    _ => e.to_string(),
                };
                return Err(StoreError::Other { path: target, reason });
            }
        }
        let written = target.clone();
        self.call(move |c| {
            let mut copy = Connection::open(&written)?;
            let backup = rusqlite::backup::Backup::new(c, &mut copy)?;
            backup.run_to_completion(256, Duration::from_millis(0), None)?;
            Ok(())
        })
        .await?;
        std::fs::metadata(&target)
            .map(|m| m.len())
            .map_err(|e| StoreError::Other { path: target, reason: e.to_string() })
    }

    /// Deletes what is older than its age (days; 0 keeps forever): settled Telegram updates,
    /// finished task records, and history messages. Returns the rows deleted of each.
    pub async fn prune(&self, ages: Retention, now: i64) -> Result<[usize; 3], StoreError> {
        let cutoff = move |days: u32| (days > 0).then(|| now - i64::from(days) * 86_400);
        self.call(move |c| {
            let tx = c.transaction()?;
            let mut deleted = [0; 3];
            if let Some(t) = cutoff(ages.telegram_updates_days) {
                deleted[0] = tx.execute(
                    "DELETE FROM telegram_updates WHERE state != 'pending' AND received_at < ?1",
                    [t],
                )?;
            }
            if let Some(t) = cutoff(ages.task_records_days) {
                deleted[1] = tx.execute(
                    "DELETE FROM task_records WHERE status != 'running' AND started_at < ?1",
                    [t],
                )?;
            }
            if let Some(t) = cutoff(ages.history_days) {
                deleted[2] = tx.execute("DELETE FROM history WHERE created_at < ?1", [t])?;
            }
            tx.commit()?;
            Ok(deleted)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::temp_db;
    use crate::{unix_now, LedgerRow, TaskEnd, TaskStatus, UpdateState};
    use nexbot_core::{ChatRef, Usage};

    #[tokio::test]
    async fn pruning_deletes_only_what_is_older_than_its_age_and_keeps_pending_work() {
        let store = Store::open(&temp_db("prune")).await.unwrap();
        let chat = ChatRef::Telegram(5);
        let row = |id: i64, state| LedgerRow {
            update_id: id,
            chat: chat.clone(),
            user_id: Some(5),
            message_id: None,
            text: "t".into(),
            state,
            detail: None,
            file: None,
        };
        store.receive_update(row(1, UpdateState::Answered)).await.unwrap();
        // Pending: never pruned.
        store.receive_update(row(2, UpdateState::Pending)).await.unwrap();
        store.start_task("old", &chat, None, "x").await.unwrap();
        store
            .finish_task("old", TaskEnd { status: TaskStatus::Success, ..TaskEnd::default() })
            .await
            .unwrap();
        store.start_task("running", &chat, None, "y").await.unwrap();
        let session = store.active_session(&chat).await.unwrap();
        store.append_turn(session, "q", "a", Usage::default()).await.unwrap();
        let ages = Retention { telegram_updates_days: 30, task_records_days: 90, history_days: 0 };
        // Nothing is old yet.
        assert_eq!(store.prune(ages, unix_now()).await.unwrap(), [0, 0, 0]);
        // A year later: the settled update and the finished task go; pending work and the
        // history (kept forever by 0) stay.
        let later = unix_now() + 365 * 86_400;
        assert_eq!(store.prune(ages, later).await.unwrap(), [1, 1, 0]);
        assert_eq!(store.chat_updates(&chat).await.unwrap().len(), 1);
        let left: Vec<String> =
            store.tasks(&chat).await.unwrap().into_iter().map(|t| t.id).collect();
        assert_eq!(left, ["running"]);
        assert_eq!(store.history(session, 10).await.unwrap().len(), 2);
        let all = Retention { history_days: 30, ..ages };
        assert_eq!(store.prune(all, later).await.unwrap(), [0, 0, 2]);
    }
}
