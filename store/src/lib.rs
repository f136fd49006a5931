//! Durable state in SQLite: sessions, history, todos, per-chat settings, task records, the
//! Telegram update ledger, scheduled jobs and their runs ([`jobs`]), the vault's sealed
//! rows ([`vault`]), and each chat's long-term memory with where each entry came from.
//!
//! Why a crate of its own: every SQL statement and every migration of the daemon is here, behind
//! a typed API, and this is the only crate that depends on `rusqlite` — so a schema change is
//! read in one place, and no other part can reach the connection.
//!
//! Why SQLite (bundled, WAL): one file that survives restarts and crashes, readable while the
//! daemon writes, with no server to run. Every call runs on tokio's blocking pool, so a slow
//! disk never stalls the async workers. Schema changes are numbered migrations tracked in
//! `PRAGMA user_version`. A corrupt, foreign or locked database file is reported in words that
//! say which file and what to do, never as a panic.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode};
use thiserror::Error;

/// An enum whose values are stored (and shown) as words: each variant names its word once, and
/// gets `as_str`, `parse` (`None` for a word this daemon does not know), `WORDS` (every word,
/// in the order declared: what a filter offers) and `Display`.
macro_rules! words {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $($(#[$vmeta:meta])* $variant:ident => $word:literal,)+
        }
    ) => {
        $(#[$meta])*
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// Every word, in the order the variants are declared.
            pub const WORDS: &'static [&'static str] = &[$($word,)+];

            /// The stored and shown word.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $word,)+
                }
            }

            pub fn parse(text: &str) -> Option<Self> {
                match text {
                    $($word => Some(Self::$variant),)+
                    _ => None,
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

mod answering;
pub mod interrupted;
pub mod jobs;
mod later;
pub use answering::SENDING;
mod schema;
mod selftests;
pub mod vault;

mod approvals;
mod chats;
mod ledger;
mod maintenance;
mod memories;
mod skills;
mod tasks;
mod usage;

pub use approvals::{EgressQuestionRow, EgressRuleRow};
pub use chats::{HistoryEntry, Todo, AGENT_CLIS, AGENT_CLI_SETTING, AGENT_MODE_SETTING};
pub use ledger::{LedgerRow, UpdateState};
pub use maintenance::Retention;
pub use memories::{match_query, one_line, MemoryLimits, MemoryStats, Remembered};
pub use schema::SCHEMA_VERSION;
use schema::{migrate, MigrateError};
pub use tasks::{TaskEnd, TaskRecord, TaskStatus};
pub use usage::{HourActivity, UsageRow, UsageSums};

#[derive(Debug, Error)]
pub enum StoreError {
    #[error(
        "database {path} is corrupt or not a SQLite database ({reason}); move it aside to start \
         fresh, or restore a backup"
    )]
    Corrupt { path: PathBuf, reason: String },
    #[error("database {path} is locked by another process ({reason}); is another nexbot running?")]
    Locked { path: PathBuf, reason: String },
    #[error(
        "database {path} was written by a newer nexbot (schema {found}; this build knows up to \
         {known}) and was left untouched: run that newer version, or restore a backup made by \
         this one (docs/operating.md: Upgrades and restores)"
    )]
    TooNew { path: PathBuf, found: i64, known: i64 },
    /// SQLite's `SQLITE_FULL`: nothing more can be written until space is freed.
    #[error(
        "database {path}: the disk is full ({reason}); free space in its directory, nothing \
         new is stored until then"
    )]
    Full { path: PathBuf, reason: String },
    #[error("database {path}: {reason}")]
    Other { path: PathBuf, reason: String },
}

impl StoreError {
    /// Whether the write failed for lack of space (the caller may say so to the user).
    pub fn is_disk_full(&self) -> bool {
        matches!(self, Self::Full { .. })
    }
}

/// A handle to the database; cheap to clone.
#[derive(Clone)]
pub struct Store {
    conn: Arc<Mutex<Connection>>,
    path: Arc<PathBuf>,
    /// Woken when a job is added, changed or cancelled, so the scheduler sleeps until the
    /// next due time instead of polling ([`Store::jobs_changed`]).
    jobs_changed: Arc<tokio::sync::Notify>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

fn classify(path: &Path, err: rusqlite::Error) -> StoreError {
    let path = path.to_owned();
    let reason = err.to_string();
    match err.sqlite_error_code() {
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => {
            StoreError::Corrupt { path, reason }
        }
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
            StoreError::Locked { path, reason }
        }
        Some(ErrorCode::DiskFull) => StoreError::Full { path, reason },
        _ => StoreError::Other { path, reason },
    }
}

pub use nexbot_core::unix_now;

impl Store {
    /// Opens (creating if needed) and migrates the database at `path`.
    pub async fn open(path: &Path) -> Result<Self, StoreError> {
        let owned = path.to_owned();
        let conn = tokio::task::spawn_blocking(move || open_blocking(&owned))
            .await
            .map_err(|e| StoreError::Other { path: path.to_owned(), reason: e.to_string() })??;
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
            path: Arc::new(path.to_owned()),
            jobs_changed: Arc::default(),
        })
    }

    /// Notified (one stored permit, so nothing is missed between two waits) whenever a job
    /// of this store is added, changed or cancelled.
    pub fn jobs_changed(&self) -> &tokio::sync::Notify {
        &self.jobs_changed
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` with the connection on the blocking pool.
    pub(crate) async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, StoreError> {
        let conn = self.conn.clone();
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || {
            let mut guard = conn.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            f(&mut guard).map_err(|e| classify(&path, e))
        })
        .await
        .map_err(|e| StoreError::Other { path: self.path.to_path_buf(), reason: e.to_string() })?
    }
}

fn open_blocking(path: &Path) -> Result<Connection, StoreError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| StoreError::Other {
            path: path.to_owned(),
            reason: format!("cannot create its directory: {e}"),
        })?;
    }
    // Before anything that writes (the WAL switch, a checkpoint at close, migrations).
    schema::refuse_newer(path)?;
    let fail = |e| classify(path, e);
    let mut conn = Connection::open(path).map_err(fail)?;
    conn.busy_timeout(Duration::from_secs(5)).map_err(fail)?;
    // The first real read: a foreign or corrupt file fails here, with a clear error.
    let mode: String =
        conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0)).map_err(fail)?;
    if !mode.eq_ignore_ascii_case("wal") {
        tracing::warn!(%mode, "SQLite did not switch to WAL mode");
    }
    conn.execute_batch("PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL;").map_err(fail)?;
    let check: String = conn.query_row("PRAGMA quick_check", [], |r| r.get(0)).map_err(fail)?;
    if check != "ok" {
        return Err(StoreError::Corrupt { path: path.to_owned(), reason: check });
    }
    migrate(&mut conn).map_err(|e| match e {
        MigrateError::Sql(e) => classify(path, e),
        MigrateError::TooNew(found) => {
            StoreError::TooNew { path: path.to_owned(), found, known: SCHEMA_VERSION }
        }
    })?;
    Ok(conn)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::MIGRATIONS;
    use nexbot_core::{ChatRef, Usage};

    /// `WORDS` lists every word once, in the declared order, each parsing back to itself (the
    /// dashboard's outcome filter offers exactly these).
    #[test]
    fn words_lists_every_word_in_order() {
        let words = TaskStatus::WORDS;
        assert_eq!(words.first(), Some(&"running"));
        assert_eq!(words.last(), Some(&"killed"));
        for word in words {
            assert_eq!(TaskStatus::parse(word).map(TaskStatus::as_str), Some(*word));
        }
        let unique: std::collections::BTreeSet<_> = words.iter().collect();
        assert_eq!(unique.len(), words.len());
    }

    #[tokio::test]
    async fn bare_chat_ids_of_schema_1_become_console_chats() {
        let path = temp_db("migrate");
        {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(MIGRATIONS[0]).unwrap();
            conn.pragma_update(None, "user_version", 1).unwrap();
            conn.execute_batch(
                "INSERT INTO sessions (id, chat_id, created_at) VALUES (1, 'console', 1), (2, 'chat-a', 1);
                 INSERT INTO history (session_id, role, content, created_at) VALUES (1, 'user', 'old', 1);
                 INSERT INTO chat_settings VALUES ('console', 'k', 'v');
                 INSERT INTO task_records (id, chat_id, task, status, started_at)
                   VALUES ('t1', 'console', 'x', 'success', 1);",
            )
            .unwrap();
        }
        let store = Store::open(&path).await.unwrap();
        let console = ChatRef::default_console();
        assert_eq!(store.active_session(&console).await.unwrap(), 1, "history is kept");
        assert_eq!(store.history(1, 10).await.unwrap()[0].content, "old");
        assert_eq!(store.active_session(&ChatRef::console("chat-a").unwrap()).await.unwrap(), 2);
        assert_eq!(store.setting(&console, "k").await.unwrap().as_deref(), Some("v"));
        let tasks = store.tasks(&console).await.unwrap();
        assert_eq!((tasks.len(), &tasks[0].chat), (1, &console));
        drop(store);
        // Opening again changes nothing (the migration ran once).
        let store = Store::open(&path).await.unwrap();
        assert_eq!(store.active_session(&console).await.unwrap(), 1);
    }

    /// Jobs of schema 7 keep running after migration 8: unknown provenance (the heartbeat's
    /// known), the scheduler's default budget, their runs' tokens as they were.
    #[tokio::test]
    async fn jobs_stored_before_schema_8_are_of_unknown_origin_under_the_default_budget() {
        use crate::jobs::JobCreator;
        let path = temp_db("migrate8");
        {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            let conn = Connection::open(&path).unwrap();
            for sql in &MIGRATIONS[..7] {
                conn.execute_batch(sql).unwrap();
            }
            conn.pragma_update(None, "user_version", 7).unwrap();
            conn.execute_batch(
                "INSERT INTO jobs (id, chat_id, name, task, cron, time_zone, missed, next_run,
                     heartbeat, created_at)
                   VALUES (1, 'telegram:5', 'a', 'say hi', '0 * * * * *', 'UTC', 'skip', 60, 0, 1),
                          (2, 'telegram:5', 'b', 'check', '0 * * * * *', 'UTC', 'skip', 60, 1, 1);
                 INSERT INTO job_runs (job_id, scheduled_at, outcome, prompt_tokens,
                     completion_tokens) VALUES (1, 60, 'ok', 10, 5);",
            )
            .unwrap();
        }
        let store = Store::open(&path).await.unwrap();
        let old = store.job(1).await.unwrap().unwrap();
        assert_eq!((&old.created_by, old.token_budget), (&JobCreator::Unknown, None));
        let check = store.job(2).await.unwrap().unwrap();
        assert_eq!(check.created_by, JobCreator::Heartbeat);
        let runs = store.job_runs(Some(1), 10).await.unwrap();
        assert_eq!(
            (runs[0].prompt_tokens, runs[0].completion_tokens, runs[0].task_tokens),
            (10, 5, 0)
        );
        assert_eq!(store.job_cost(1, 10).await.unwrap().mean_tokens, 15.0);
        assert_eq!(old.created_by.describe(), "unknown (stored before this was recorded)");
    }

    #[tokio::test]
    async fn a_write_refused_for_lack_of_space_is_a_full_disk_with_what_to_do() {
        let path = temp_db("full");
        let store = Store::open(&path).await.unwrap();
        // SQLite answers SQLITE_FULL, as on a full disk, once the file may not grow.
        store
            .call(|c| {
                let pages: i64 = c.query_row("PRAGMA page_count", [], |r| r.get(0))?;
                c.query_row(&format!("PRAGMA max_page_count = {pages}"), [], |r| r.get::<_, i64>(0))
            })
            .await
            .unwrap();
        let chat = ChatRef::default_console();
        let err = store.set_setting(&chat, "big", &"x".repeat(200_000)).await.unwrap_err();
        assert!(err.is_disk_full(), "{err:?}");
        assert!(err.to_string().contains("the disk is full"), "{err}");
        assert!(err.to_string().contains("free space in its directory"), "{err}");
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    pub(crate) fn temp_db(tag: &str) -> PathBuf {
        std::env::temp_dir().join(format!("nxh-store-{tag}-{}", uuid::Uuid::new_v4())).join("t.db")
    }

    #[tokio::test]
    async fn history_survives_reopening_and_is_pairs_in_order() {
        let path = temp_db("reopen");
        let c1 = ChatRef::console("c1").unwrap();
        let store = Store::open(&path).await.unwrap();
        let session = store.active_session(&c1).await.unwrap();
        let usage = Usage { prompt_tokens: 10, completion_tokens: 5 };
        store.append_turn(session, "hi", "hello", usage).await.unwrap();
        store.append_turn(session, "again", "yes", usage).await.unwrap();
        drop(store);
        let store = Store::open(&path).await.unwrap();
        assert_eq!(store.active_session(&c1).await.unwrap(), session);
        let history = store.history(session, 3).await.unwrap();
        let roles: Vec<_> = history.iter().map(|h| h.role.as_str()).collect();
        assert_eq!(roles, ["assistant", "user", "assistant"]);
        assert_eq!(history[2].content, "yes");
        assert_eq!(
            store.chat_usage(&c1).await.unwrap(),
            Usage { prompt_tokens: 20, completion_tokens: 10 }
        );
        let mode: String =
            store.call(|c| c.query_row("PRAGMA journal_mode", [], |r| r.get(0))).await.unwrap();
        assert_eq!(mode, "wal");
        let fresh = store.new_session(&c1).await.unwrap();
        assert_ne!(fresh, session);
        assert!(store.history(fresh, 10).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn todos_settings_and_tasks_round_trip() {
        let store = Store::open(&temp_db("rt")).await.unwrap();
        let c = ChatRef::Telegram(7);
        let s = store.active_session(&c).await.unwrap();
        let a = store.add_todo(s, "one").await.unwrap();
        store.add_todo(s, "two").await.unwrap();
        assert!(store.complete_todo(s, a).await.unwrap());
        assert!(!store.complete_todo(s + 1, a).await.unwrap());
        let todos = store.todos(s).await.unwrap();
        assert_eq!(todos.len(), 2);
        assert!(todos[0].done && !todos[1].done);
        assert!(store.remove_todo(s, a).await.unwrap());
        assert_eq!(store.clear_todos(s).await.unwrap(), 1);

        assert_eq!(store.setting(&c, "agent").await.unwrap(), None);
        store.set_setting(&c, "agent", "on").await.unwrap();
        store.set_setting(&c, "agent", "off").await.unwrap();
        assert_eq!(store.setting(&c, "agent").await.unwrap().as_deref(), Some("off"));

        store.start_task("t1", &c, Some(s), "do it").await.unwrap();
        assert_eq!(store.tasks(&c).await.unwrap()[0].status, TaskStatus::Running);
        let end = TaskEnd {
            status: TaskStatus::Success,
            container: Some("abc".into()),
            duration_ms: 12,
            usage: Usage { prompt_tokens: 3, completion_tokens: 4 },
            error: None,
            egress: Some("{\"bytes_up\":1}".into()),
            receipt: Some("Task success in 0.0s".into()),
            progress: Some("run_command ls".into()),
        };
        store.finish_task("t1", end).await.unwrap();
        let record = &store.tasks(&c).await.unwrap()[0];
        assert_eq!(
            (record.status.as_str(), record.container.as_deref(), record.completion_tokens),
            ("success", Some("abc"), 4)
        );
        assert_eq!(record.egress.as_deref(), Some("{\"bytes_up\":1}"));
        assert_eq!(record.receipt.as_deref(), Some("Task success in 0.0s"));
        assert_eq!(record.progress.as_deref(), Some("run_command ls"));

        // The dashboard's chart: this hour holds the task; the hours before, nothing.
        let now = unix_now();
        let hours = store.hourly_activity(now, 24).await.unwrap();
        assert_eq!(hours.len(), 24);
        assert_eq!(hours[23].tasks, 1, "{hours:?}");
        assert!(hours[23].start <= now && now < hours[23].start + 3600);
        assert!(hours[..23].iter().all(|h| h.tasks == 0), "{hours:?}");
        assert_eq!(hours[22].start + 3600, hours[23].start);
    }

    #[tokio::test]
    async fn a_file_that_is_not_a_database_gives_a_clear_error() {
        let path = temp_db("corrupt");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, vec![b'x'; 8192]).unwrap();
        let err = Store::open(&path).await.unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
        let text = err.to_string();
        assert!(text.contains(&path.display().to_string()) && text.contains("corrupt"), "{text}");
    }

    #[tokio::test]
    async fn a_locked_database_gives_a_clear_error() {
        let path = temp_db("locked");
        let store = Store::open(&path).await.unwrap();
        let other = Connection::open(&path).unwrap();
        other.execute_batch("BEGIN EXCLUSIVE;").unwrap();
        store.call(|c| c.busy_timeout(Duration::from_millis(50))).await.unwrap();
        let err = store.add_todo(1, "x").await.unwrap_err();
        assert!(matches!(err, StoreError::Locked { .. }), "{err:?}");
        assert!(err.to_string().contains("locked"), "{err}");
    }

    #[tokio::test]
    async fn a_newer_schema_is_refused() {
        let path = temp_db("newer");
        drop(Store::open(&path).await.unwrap());
        Connection::open(&path).unwrap().pragma_update(None, "user_version", 99).unwrap();
        let err = Store::open(&path).await.unwrap_err();
        assert!(matches!(err, StoreError::TooNew { found: 99, .. }), "{err:?}");
    }
}
