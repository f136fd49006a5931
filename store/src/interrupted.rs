//! Delegated tasks a dead daemon left `running`, settled by the next run.
//!
//! Why: a task record is written `running` when a delegation starts and finished when it
//! ends. A daemon killed in between (SIGKILL, OOM, a power cut) never finishes it, so without
//! this the record stayed `running` for ever: pruning skips it, the metrics count it as
//! running, and the chat's "Working on" message of the dead run is never edited.
//!
//! Which records are a dead run's: each record names the daemon run that wrote it
//! ([`this_run`], migration 15); the settle touches only `running` records of another run (or
//! of none: written before runs were recorded), so a task of this very process is never
//! settled, whenever the settle runs.

use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::params;

use nexbot_core::ChatRef;

use crate::{Store, StoreError};

/// This process's run of the daemon: its pid and the time it first asked, unique enough
/// that no other run (before a restart, or a reused pid) has the same one.
pub fn this_run() -> &'static str {
    static RUN: OnceLock<String> = OnceLock::new();
    RUN.get_or_init(|| {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        format!("{}-{nanos}", std::process::id())
    })
}

/// A task a dead run left `running`, as the settle found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterruptedTask {
    pub id: String,
    pub chat: ChatRef,
    pub task: String,
    /// Its progress message in the chat (Telegram's id), when the dead run recorded one.
    pub progress_message_id: Option<i64>,
    /// Whether the request it came from is handled again: its chat has a Telegram update
    /// still pending (the ledger replays those), received no later than the task started.
    pub retried: bool,
}

impl Store {
    /// Records the message that shows task `id`'s progress in its chat, so that a later run
    /// can edit it if this one dies before the task ends.
    pub async fn set_task_message(&self, id: &str, message_id: i64) -> Result<(), StoreError> {
        let id = id.to_owned();
        self.call(move |c| {
            c.execute(
                "UPDATE task_records SET progress_message_id = ?2 WHERE id = ?1",
                params![id, message_id],
            )
            .map(drop)
        })
        .await
    }

    /// Marks every task record another (dead) daemon run left `running` as `interrupted`,
    /// with `reason` as its error, in one transaction; returns them (a row whose chat this
    /// daemon cannot read is settled but not returned). Records of this run are untouched.
    pub async fn settle_interrupted_tasks(
        &self,
        reason: &str,
    ) -> Result<Vec<InterruptedTask>, StoreError> {
        let reason = reason.to_owned();
        self.call(move |c| {
            let tx = c.transaction()?;
            let found = {
                let mut stmt = tx.prepare(
                    "SELECT t.id, t.chat_id, t.task, t.progress_message_id,
                       EXISTS (SELECT 1 FROM telegram_updates u WHERE u.state = 'pending'
                         AND u.chat_id = t.chat_id AND u.received_at <= t.started_at)
                     FROM task_records t
                     WHERE t.status = 'running' AND (t.run_id IS NULL OR t.run_id != ?1)
                     ORDER BY t.started_at, t.rowid",
                )?;
                let rows = stmt.query_map([this_run()], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, Option<i64>>(3)?,
                        r.get::<_, bool>(4)?,
                    ))
                })?;
                rows.collect::<rusqlite::Result<Vec<_>>>()?
            };
            tx.execute(
                "UPDATE task_records SET status = 'interrupted', error = ?2
                 WHERE status = 'running' AND (run_id IS NULL OR run_id != ?1)",
                params![this_run(), reason],
            )?;
            tx.commit()?;
            Ok(found
                .into_iter()
                .filter_map(|(id, chat, task, progress_message_id, retried)| {
                    let Ok(chat) = chat.parse::<ChatRef>() else {
                        tracing::warn!(task_id = %id, %chat, "an interrupted task of a chat this daemon cannot read");
                        return None;
                    };
                    Some(InterruptedTask { id, chat, task, progress_message_id, retried })
                })
                .collect())
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use rusqlite::Connection;

    use super::*;
    use crate::schema::MIGRATIONS;
    use crate::{LedgerRow, TaskEnd, TaskStatus, UpdateState};

    fn temp_db(tag: &str) -> PathBuf {
        std::env::temp_dir().join(format!("nxh-store-{tag}-{}", uuid::Uuid::new_v4())).join("t.db")
    }

    /// A task record written by another daemon run (a dead one).
    fn insert_dead(path: &std::path::Path, id: &str, chat: &str, started_at: i64, run: &str) {
        let conn = Connection::open(path).unwrap();
        conn.execute(
            "INSERT INTO task_records (id, chat_id, task, status, started_at, run_id)
             VALUES (?1, ?2, 'dead work', 'running', ?3, ?4)",
            params![id, chat, started_at, run],
        )
        .unwrap();
    }

    #[tokio::test]
    async fn a_dead_runs_running_tasks_become_interrupted_and_this_runs_stay() {
        let path = temp_db("interrupted");
        let store = Store::open(&path).await.unwrap();
        let chat = ChatRef::Telegram(42);
        // The dead run: a task with its progress message, whose update is still pending
        // (replayed, so retried), and one of a chat with nothing pending.
        let now = crate::unix_now();
        let row = LedgerRow {
            update_id: 7,
            chat: chat.clone(),
            user_id: Some(42),
            message_id: Some(1),
            text: "do it".into(),
            state: UpdateState::Pending,
            detail: None,
            file: None,
        };
        assert!(store.receive_update(row).await.unwrap());
        insert_dead(&path, "dead", "telegram:42", now + 1, "1-1");
        insert_dead(&path, "lone", "telegram:43", now + 1, "1-1");
        store.set_task_message("dead", 99).await.unwrap();
        // A finished task of the dead run is not touched; this run's running one neither.
        insert_dead(&path, "ended", "telegram:42", now, "1-1");
        let ended = TaskEnd { status: TaskStatus::Success, ..TaskEnd::default() };
        store.finish_task("ended", ended).await.unwrap();
        store.start_task("mine", &chat, None, "live work").await.unwrap();

        let settled = store.settle_interrupted_tasks("the daemon stopped").await.unwrap();
        assert_eq!(
            settled,
            [
                InterruptedTask {
                    id: "dead".into(),
                    chat: chat.clone(),
                    task: "dead work".into(),
                    progress_message_id: Some(99),
                    retried: true,
                },
                InterruptedTask {
                    id: "lone".into(),
                    chat: ChatRef::Telegram(43),
                    task: "dead work".into(),
                    progress_message_id: None,
                    retried: false,
                },
            ]
        );
        let dead = store.task("dead").await.unwrap().unwrap();
        assert_eq!(dead.status, TaskStatus::Interrupted);
        assert_eq!(dead.error.as_deref(), Some("the daemon stopped"));
        assert_eq!(store.task("ended").await.unwrap().unwrap().status, TaskStatus::Success);
        assert_eq!(store.task("mine").await.unwrap().unwrap().status, TaskStatus::Running);
        let counts = store.task_counts().await.unwrap();
        assert!(counts.contains(&("running".to_owned(), 1)), "{counts:?}");
        assert!(counts.contains(&("interrupted".to_owned(), 2)), "{counts:?}");
        // Settling again finds nothing: this run's task is never a dead run's.
        assert!(store.settle_interrupted_tasks("again").await.unwrap().is_empty());
        assert_eq!(store.task("mine").await.unwrap().unwrap().status, TaskStatus::Running);
    }

    #[tokio::test]
    async fn a_database_of_schema_14_opens_and_its_running_tasks_are_a_dead_runs() {
        let path = temp_db("schema14");
        {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            let conn = Connection::open(&path).unwrap();
            for sql in &MIGRATIONS[..14] {
                conn.execute_batch(sql).unwrap();
            }
            conn.pragma_update(None, "user_version", 14).unwrap();
            conn.execute_batch(
                "INSERT INTO task_records (id, chat_id, task, status, started_at)
                   VALUES ('old', 'telegram:5', 'x', 'running', 1),
                          ('done', 'telegram:5', 'y', 'success', 1);",
            )
            .unwrap();
        }
        let store = Store::open(&path).await.unwrap();
        let old = store.task("old").await.unwrap().unwrap();
        assert_eq!(old.status, TaskStatus::Running, "the migration itself changes no status");
        let settled = store.settle_interrupted_tasks("stopped").await.unwrap();
        assert_eq!(settled.len(), 1);
        assert_eq!((settled[0].id.as_str(), settled[0].progress_message_id), ("old", None));
        assert_eq!(store.task("old").await.unwrap().unwrap().status, TaskStatus::Interrupted);
        assert_eq!(store.task("done").await.unwrap().unwrap().status, TaskStatus::Success);
        // A task this run starts is recorded with the new columns.
        store.start_task("new", &ChatRef::Telegram(5), None, "z").await.unwrap();
        store.set_task_message("new", 12).await.unwrap();
        assert!(store.settle_interrupted_tasks("stopped").await.unwrap().is_empty());
    }
}
