//! Durable state in SQLite: sessions, history, todos, per-chat settings, task records, the
//! Telegram update ledger, scheduled jobs and their runs ([`jobs`]), and the vault's sealed
//! rows ([`vault`]).
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

use rusqlite::types::Type;
use rusqlite::{params, Connection, ErrorCode, OptionalExtension};
use thiserror::Error;

use nexbot_core::ChatRef;

use nexbot_core::Usage;

/// An enum whose values are stored (and shown) as words: each variant names its word once, and
/// gets `as_str`, `parse` (`None` for a word this daemon does not know) and `Display`.
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
pub mod vault;

pub use schema::SCHEMA_VERSION;

/// Migrations in order; `user_version` is the number applied.
const MIGRATIONS: &[&str] = &[
    // 1: the initial schema.
    "CREATE TABLE sessions (
        id INTEGER PRIMARY KEY,
        chat_id TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        active INTEGER NOT NULL DEFAULT 1
    );
    CREATE INDEX sessions_chat ON sessions(chat_id, active);
    CREATE TABLE history (
        id INTEGER PRIMARY KEY,
        session_id INTEGER NOT NULL REFERENCES sessions(id),
        role TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
        content TEXT NOT NULL,
        prompt_tokens INTEGER NOT NULL DEFAULT 0,
        completion_tokens INTEGER NOT NULL DEFAULT 0,
        created_at INTEGER NOT NULL
    );
    CREATE INDEX history_session ON history(session_id, id);
    CREATE TABLE todos (
        id INTEGER PRIMARY KEY,
        session_id INTEGER NOT NULL REFERENCES sessions(id),
        text TEXT NOT NULL,
        done INTEGER NOT NULL DEFAULT 0,
        created_at INTEGER NOT NULL
    );
    CREATE TABLE chat_settings (
        chat_id TEXT NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (chat_id, key)
    );
    CREATE TABLE task_records (
        id TEXT PRIMARY KEY,
        chat_id TEXT NOT NULL,
        session_id INTEGER,
        task TEXT NOT NULL,
        container TEXT,
        status TEXT NOT NULL,
        started_at INTEGER NOT NULL,
        duration_ms INTEGER,
        prompt_tokens INTEGER NOT NULL DEFAULT 0,
        completion_tokens INTEGER NOT NULL DEFAULT 0,
        error TEXT
    );
    CREATE INDEX task_records_chat ON task_records(chat_id, started_at);",
    // 2: chats are named by `ChatRef`'s text form (`telegram:<id>`, `console:<name>`). Before,
    // only the console channel existed and named its chat `console`; any other bare id could
    // only have come from the console too. `Store::open` logs how many rows it renamed.
    "UPDATE sessions SET chat_id = CASE chat_id WHEN 'console' THEN 'console:default'
        ELSE 'console:' || chat_id END WHERE instr(chat_id, ':') = 0;
    UPDATE chat_settings SET chat_id = CASE chat_id WHEN 'console' THEN 'console:default'
        ELSE 'console:' || chat_id END WHERE instr(chat_id, ':') = 0;
    UPDATE task_records SET chat_id = CASE chat_id WHEN 'console' THEN 'console:default'
        ELSE 'console:' || chat_id END WHERE instr(chat_id, ':') = 0;",
    // 3: what a task did through the egress (JSON: destinations, bytes), handed over by the
    // egress when the task ended.
    "ALTER TABLE task_records ADD COLUMN egress TEXT;",
    // 4: the Telegram update ledger (every update fetched and how it ended) and the polling
    // offset, moved in the same transaction as the update's row (`receive_update`).
    "CREATE TABLE telegram_updates (
        update_id INTEGER PRIMARY KEY,
        chat_id TEXT NOT NULL,
        user_id INTEGER,
        message_id INTEGER,
        text TEXT NOT NULL,
        state TEXT NOT NULL,
        detail TEXT,
        received_at INTEGER NOT NULL,
        settled_at INTEGER
    );
    CREATE INDEX telegram_updates_state ON telegram_updates(state, update_id);
    CREATE TABLE channel_offsets (channel TEXT PRIMARY KEY, next_offset INTEGER NOT NULL);",
    // 5: what the model cost, per day (in the caps' time zone), chat, provider and source
    // (`agent` turns, delegated `task`s), for the spending caps and `/status`.
    "CREATE TABLE llm_usage (
        day TEXT NOT NULL,
        chat_id TEXT NOT NULL,
        provider TEXT NOT NULL,
        source TEXT NOT NULL,
        calls INTEGER NOT NULL DEFAULT 0,
        prompt_tokens INTEGER NOT NULL DEFAULT 0,
        completion_tokens INTEGER NOT NULL DEFAULT 0,
        cost_micros INTEGER NOT NULL DEFAULT 0,
        unpriced_calls INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (day, chat_id, provider, source)
    );",
    // 6: scheduled jobs (recurring `cron` or one-shot `at`, in `time_zone`) of a chat, the
    // heartbeat's checks among them (`heartbeat` = 1), and the ledger of every run.
    "CREATE TABLE jobs (
        id INTEGER PRIMARY KEY,
        chat_id TEXT NOT NULL,
        name TEXT NOT NULL,
        task TEXT NOT NULL,
        cron TEXT,
        at INTEGER,
        time_zone TEXT NOT NULL,
        missed TEXT NOT NULL,
        next_run INTEGER,
        heartbeat INTEGER NOT NULL DEFAULT 0,
        state TEXT NOT NULL DEFAULT 'active',
        created_at INTEGER NOT NULL
    );
    CREATE INDEX jobs_due ON jobs(state, next_run);
    CREATE INDEX jobs_chat ON jobs(chat_id, state);
    CREATE TABLE job_runs (
        id INTEGER PRIMARY KEY,
        job_id INTEGER NOT NULL,
        scheduled_at INTEGER NOT NULL,
        started_at INTEGER,
        ended_at INTEGER,
        outcome TEXT NOT NULL,
        detail TEXT,
        prompt_tokens INTEGER NOT NULL DEFAULT 0,
        completion_tokens INTEGER NOT NULL DEFAULT 0,
        message TEXT,
        message_id INTEGER,
        handed_at_ms INTEGER
    );
    CREATE INDEX job_runs_job ON job_runs(job_id, id);",
    // 7: the secrets vault (`vault/`): values encrypted with XChaCha20-Poly1305 under a key
    // derived from NEXBOT_MASTER_KEY with the KDF and salt of `vault_meta`; `scope` is a
    // chat (`telegram:42`) or `operator`. Names, hosts and mode are not secret.
    "CREATE TABLE vault_meta (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        kdf TEXT NOT NULL,
        salt BLOB NOT NULL,
        check_nonce BLOB NOT NULL,
        check_sealed BLOB NOT NULL,
        created_at INTEGER NOT NULL
    );
    CREATE TABLE secrets (
        scope TEXT NOT NULL,
        name TEXT NOT NULL,
        nonce BLOB NOT NULL,
        sealed BLOB NOT NULL,
        hosts TEXT NOT NULL DEFAULT '[]',
        mode TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (scope, name)
    );",
    // 8: a job's provenance and its budget per run (scheduled jobs are not a persistence
    // channel): `created_by` is `operator`, `chat` (a turn of the job's chat stored it; which
    // turn is `created_in`) or `heartbeat`, NULL for jobs stored before this version (shown
    // as unknown); `token_budget` NULL runs under `scheduler.job_token_budget`. A run's
    // delegated tasks' tokens are kept beside the main agent's; `times` is how many due runs
    // a row stands for (a job's `dropped: busy` runs of one minute are one row).
    "ALTER TABLE jobs ADD COLUMN created_by TEXT;
    ALTER TABLE jobs ADD COLUMN created_in TEXT;
    ALTER TABLE jobs ADD COLUMN token_budget INTEGER;
    ALTER TABLE job_runs ADD COLUMN task_tokens INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE job_runs ADD COLUMN times INTEGER NOT NULL DEFAULT 1;
    UPDATE jobs SET created_by = 'heartbeat' WHERE heartbeat = 1;",
    // 9: egress approvals (`egress.mode = "ask"`): the chats' "always" rules (host and
    // port), which survive restarts, and every question asked with its answer and who gave
    // it (`answer` NULL while it waits; `expired` when the daemon stopped first).
    "CREATE TABLE egress_rules (
        chat_id TEXT NOT NULL,
        host TEXT NOT NULL,
        port INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        created_by TEXT NOT NULL,
        PRIMARY KEY (chat_id, host, port)
    );
    CREATE TABLE egress_questions (
        id INTEGER PRIMARY KEY,
        task_id TEXT NOT NULL,
        chat_id TEXT NOT NULL,
        host TEXT NOT NULL,
        port INTEGER NOT NULL,
        method TEXT NOT NULL,
        path TEXT,
        secret INTEGER NOT NULL,
        asked_at INTEGER NOT NULL,
        answer TEXT,
        answered_by TEXT,
        answered_at INTEGER
    );
    CREATE INDEX egress_questions_task ON egress_questions(task_id);",
    // 10: the content hash of each skill whose declared `domains` the daemon grants (issue 26
    // §4): recorded the first time the daemon sees the skill usable, replaced only by
    // `nexbot-ctl skills allow`; a skill whose content differs grants nothing.
    "CREATE TABLE skill_hashes (
        name TEXT PRIMARY KEY,
        hash TEXT NOT NULL,
        recorded_at INTEGER NOT NULL,
        recorded_by TEXT NOT NULL
    );",
    // 11: one question machinery for several kinds (issue 26 §3): a question's `kind`
    // (`egress`, as every earlier row was; `secret`, `send_file`, `delete`) and its `subject`
    // (a `--confirm` secret's name, a file); a secret's `confirm` flag (stored with
    // `--confirm`: asked about before a task's first use; earlier rows: not).
    "ALTER TABLE egress_questions ADD COLUMN kind TEXT NOT NULL DEFAULT 'egress';
    ALTER TABLE egress_questions ADD COLUMN subject TEXT;
    ALTER TABLE secrets ADD COLUMN confirm INTEGER NOT NULL DEFAULT 0;",
    // 12: the file a Telegram message carried (the channel's reference to fetch it again, as
    // JSON: kind, Telegram's file id, name, type, size), so an update interrupted by a restart
    // is handled again with its file. Earlier rows: none.
    "ALTER TABLE telegram_updates ADD COLUMN file TEXT;",
    // 13: a task's receipt as its chat read it (tools, destinations, secret names, questions)
    // and its progress lines, for the dashboard's task page; and the newest-first listing of
    // every chat's tasks by an index. Earlier rows: none.
    "ALTER TABLE task_records ADD COLUMN receipt TEXT;
    ALTER TABLE task_records ADD COLUMN progress TEXT;
    CREATE INDEX task_records_started ON task_records(started_at);",
    // 14: skills' contents the operator allowed despite the content screen, live (the
    // dashboard, `nexbot-ctl skills allow NAME HASH`): added to `[skills] allow_hashes` for
    // the main agent and every task. Earlier databases: none.
    "CREATE TABLE skill_allowances (
        hash TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        allowed_at INTEGER NOT NULL,
        allowed_by TEXT NOT NULL
    );",
    // 15: which daemon run recorded a task (`run_id`, [`interrupted::this_run`]), so the
    // start-up settles only a dead run's `running` records, never its own; and the task's
    // progress message in its chat (`progress_message_id`, Telegram's id), so a later run can
    // say in it that the task was interrupted. Earlier rows: none (a `running` one is a dead
    // run's, as every run before this one is).
    "ALTER TABLE task_records ADD COLUMN run_id TEXT;
    ALTER TABLE task_records ADD COLUMN progress_message_id INTEGER;",
];

/// One model call (or one delegated task) to count in `llm_usage`.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageRow {
    /// `YYYY-MM-DD` in the caps' time zone.
    pub day: String,
    pub chat: ChatRef,
    pub provider: String,
    /// `agent` or `task`.
    pub source: &'static str,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// `None`: the provider has no prices.
    pub cost_micros: Option<u64>,
}

/// Sums over `llm_usage` rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageSums {
    pub tokens: u64,
    pub cost_micros: u64,
    pub unpriced_calls: u64,
}

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

/// How old (days) rows may get before [`Store::prune`] deletes them; 0 keeps them forever.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    pub telegram_updates_days: u32,
    pub task_records_days: u32,
    pub history_days: u32,
}

const TASK_COLUMNS: &str = "id, chat_id, session_id, task, container, status, started_at, \
    duration_ms, prompt_tokens, completion_tokens, error, egress, receipt, progress";

/// Token usage from a row of two sums (prompt, completion).
fn usage_sums(r: &rusqlite::Row<'_>) -> rusqlite::Result<Usage> {
    Ok(Usage {
        prompt_tokens: r.get::<_, i64>(0)? as u64,
        completion_tokens: r.get::<_, i64>(1)? as u64,
    })
}

fn task_record(r: &rusqlite::Row<'_>) -> rusqlite::Result<TaskRecord> {
    Ok(TaskRecord {
        id: r.get(0)?,
        chat: r
            .get::<_, String>(1)?
            .parse()
            .map_err(|e| rusqlite::Error::FromSqlConversionFailure(1, Type::Text, Box::new(e)))?,
        session_id: r.get(2)?,
        task: r.get(3)?,
        container: r.get(4)?,
        status: jobs::word(r, 5, TaskStatus::parse)?,
        started_at: r.get(6)?,
        duration_ms: r.get(7)?,
        prompt_tokens: r.get(8)?,
        completion_tokens: r.get(9)?,
        error: r.get(10)?,
        egress: r.get(11)?,
        receipt: r.get(12)?,
        progress: r.get(13)?,
    })
}

/// The per-chat setting `/agent` keeps: `on` (the default) or `off`.
pub const AGENT_MODE_SETTING: &str = "agent_mode";

/// The per-chat setting of which coding CLI answers the chat while its agent mode is off
/// (`/agent cli <name>`): a name of [`AGENT_CLIS`], or `none` (the default: the model alone).
pub const AGENT_CLI_SETTING: &str = "agent_cli";

/// The coding CLIs a chat can choose: the ones the CLI image variant carries (`use_cli`).
pub const AGENT_CLIS: &[&str] = &["qwen"];

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

/// A message of a session's history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryEntry {
    pub role: String,
    pub content: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Todo {
    pub id: i64,
    pub text: String,
    pub done: bool,
}

/// One delegation to a subagent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRecord {
    pub id: String,
    pub chat: ChatRef,
    pub session_id: Option<i64>,
    pub task: String,
    pub container: Option<String>,
    pub status: TaskStatus,
    pub started_at: i64,
    pub duration_ms: Option<i64>,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub error: Option<String>,
    /// What the task did through the egress (JSON), when it had egress.
    pub egress: Option<String>,
    /// The receipt its chat was sent, and its progress lines (one per line), when it ended
    /// on a daemon that keeps them.
    pub receipt: Option<String>,
    pub progress: Option<String>,
}

words! {
    /// Where a delegated task is: running, or how it ended.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub enum TaskStatus {
        Running => "running",
        Success => "success",
        /// Failed (the default of an end no branch named: a task never ends as "unknown").
        #[default]
        Error => "error",
        Timeout => "timeout",
        Cancelled => "cancelled",
        /// The daemon stopped while it ran (a crash or a kill): settled by the next run
        /// ([`Store::settle_interrupted_tasks`]).
        Interrupted => "interrupted",
    }
}

/// One hour of [`Store::hourly_activity`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HourActivity {
    /// Unix seconds of the hour's start.
    pub start: i64,
    pub tokens: i64,
    pub tasks: i64,
}

/// How a delegated task ended, for [`Store::finish_task`].
#[derive(Debug, Clone, Default)]
pub struct TaskEnd {
    pub status: TaskStatus,
    pub container: Option<String>,
    pub duration_ms: i64,
    pub usage: Usage,
    pub error: Option<String>,
    /// The egress's summary of the task (JSON).
    pub egress: Option<String>,
    /// The receipt the chat was sent, and the task's progress lines.
    pub receipt: Option<String>,
    pub progress: Option<String>,
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

    /// The chat's active session, created on first use.
    pub async fn active_session(&self, chat: &ChatRef) -> Result<i64, StoreError> {
        let chat = chat.to_string();
        self.call(move |c| {
            let found = c
                .query_row(
                    "SELECT id FROM sessions WHERE chat_id = ?1 AND active = 1 ORDER BY id DESC",
                    [&chat],
                    |r| r.get(0),
                )
                .optional()?;
            match found {
                Some(id) => Ok(id),
                None => {
                    c.execute(
                        "INSERT INTO sessions (chat_id, created_at) VALUES (?1, ?2)",
                        params![chat, unix_now()],
                    )?;
                    Ok(c.last_insert_rowid())
                }
            }
        })
        .await
    }

    /// Closes the chat's active session and opens a fresh one (history starts empty).
    pub async fn new_session(&self, chat: &ChatRef) -> Result<i64, StoreError> {
        let chat = chat.to_string();
        self.call(move |c| {
            let tx = c.transaction()?;
            tx.execute("UPDATE sessions SET active = 0 WHERE chat_id = ?1", [&chat])?;
            tx.execute(
                "INSERT INTO sessions (chat_id, created_at) VALUES (?1, ?2)",
                params![chat, unix_now()],
            )?;
            let id = tx.last_insert_rowid();
            tx.commit()?;
            Ok(id)
        })
        .await
    }

    /// The last `limit` messages of a session, oldest first.
    pub async fn history(
        &self,
        session_id: i64,
        limit: usize,
    ) -> Result<Vec<HistoryEntry>, StoreError> {
        self.call(move |c| {
            let mut stmt = c.prepare(
                "SELECT role, content FROM (SELECT id, role, content FROM history
                 WHERE session_id = ?1 ORDER BY id DESC LIMIT ?2) ORDER BY id",
            )?;
            let rows = stmt.query_map(params![session_id, limit as i64], |r| {
                Ok(HistoryEntry { role: r.get(0)?, content: r.get(1)? })
            })?;
            rows.collect()
        })
        .await
    }

    /// Stores one finished turn: the user's message and the answer, with the turn's usage.
    pub async fn append_turn(
        &self,
        session_id: i64,
        user: &str,
        assistant: &str,
        usage: Usage,
    ) -> Result<(), StoreError> {
        let (user, assistant) = (user.to_owned(), assistant.to_owned());
        self.call(move |c| {
            let tx = c.transaction()?;
            let now = unix_now();
            tx.execute(
                "INSERT INTO history (session_id, role, content, created_at)
                 VALUES (?1, 'user', ?2, ?3)",
                params![session_id, user, now],
            )?;
            tx.execute(
                "INSERT INTO history (session_id, role, content, prompt_tokens,
                 completion_tokens, created_at) VALUES (?1, 'assistant', ?2, ?3, ?4, ?5)",
                params![
                    session_id,
                    assistant,
                    usage.prompt_tokens as i64,
                    usage.completion_tokens as i64,
                    now
                ],
            )?;
            tx.commit()
        })
        .await
    }

    /// Tokens spent by the chat across all its sessions (prompt, completion).
    pub async fn chat_usage(&self, chat: &ChatRef) -> Result<Usage, StoreError> {
        let chat = chat.to_string();
        self.call(move |c| {
            c.query_row(
                "SELECT COALESCE(SUM(h.prompt_tokens), 0), COALESCE(SUM(h.completion_tokens), 0)
                 FROM history h JOIN sessions s ON s.id = h.session_id WHERE s.chat_id = ?1",
                [&chat],
                usage_sums,
            )
        })
        .await
    }

    pub async fn add_todo(&self, session_id: i64, text: &str) -> Result<i64, StoreError> {
        let text = text.to_owned();
        self.call(move |c| {
            c.execute(
                "INSERT INTO todos (session_id, text, created_at) VALUES (?1, ?2, ?3)",
                params![session_id, text, unix_now()],
            )?;
            Ok(c.last_insert_rowid())
        })
        .await
    }

    pub async fn todos(&self, session_id: i64) -> Result<Vec<Todo>, StoreError> {
        self.call(move |c| {
            let mut stmt =
                c.prepare("SELECT id, text, done FROM todos WHERE session_id = ?1 ORDER BY id")?;
            let rows = stmt.query_map([session_id], |r| {
                Ok(Todo { id: r.get(0)?, text: r.get(1)?, done: r.get(2)? })
            })?;
            rows.collect()
        })
        .await
    }

    /// Marks a todo done; `false` when the session has no such todo.
    pub async fn complete_todo(&self, session_id: i64, id: i64) -> Result<bool, StoreError> {
        self.call(move |c| {
            c.execute(
                "UPDATE todos SET done = 1 WHERE session_id = ?1 AND id = ?2",
                params![session_id, id],
            )
            .map(|n| n > 0)
        })
        .await
    }

    pub async fn remove_todo(&self, session_id: i64, id: i64) -> Result<bool, StoreError> {
        self.call(move |c| {
            c.execute(
                "DELETE FROM todos WHERE session_id = ?1 AND id = ?2",
                params![session_id, id],
            )
            .map(|n| n > 0)
        })
        .await
    }

    pub async fn clear_todos(&self, session_id: i64) -> Result<usize, StoreError> {
        self.call(move |c| c.execute("DELETE FROM todos WHERE session_id = ?1", [session_id])).await
    }

    pub async fn setting(&self, chat: &ChatRef, key: &str) -> Result<Option<String>, StoreError> {
        let (chat, key) = (chat.to_string(), key.to_owned());
        self.call(move |c| {
            c.query_row(
                "SELECT value FROM chat_settings WHERE chat_id = ?1 AND key = ?2",
                params![chat, key],
                |r| r.get(0),
            )
            .optional()
        })
        .await
    }

    /// Whether the chat's agent mode (`/agent`) is on — the default — or off.
    pub async fn agent_mode_on(&self, chat: &ChatRef) -> bool {
        !matches!(self.setting(chat, AGENT_MODE_SETTING).await, Ok(Some(v)) if v == "off")
    }

    /// The coding CLI the chat chose for agent mode off, if any ([`AGENT_CLI_SETTING`]).
    pub async fn agent_cli(&self, chat: &ChatRef) -> Option<String> {
        match self.setting(chat, AGENT_CLI_SETTING).await {
            Ok(Some(name)) if AGENT_CLIS.contains(&name.as_str()) => Some(name),
            _ => None,
        }
    }

    pub async fn set_setting(
        &self,
        chat: &ChatRef,
        key: &str,
        value: &str,
    ) -> Result<(), StoreError> {
        let (chat, key, value) = (chat.to_string(), key.to_owned(), value.to_owned());
        self.call(move |c| {
            c.execute(
                "INSERT INTO chat_settings (chat_id, key, value) VALUES (?1, ?2, ?3)
                 ON CONFLICT (chat_id, key) DO UPDATE SET value = excluded.value",
                params![chat, key, value],
            )
            .map(drop)
        })
        .await
    }

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

    /// Records that a delegation started (status `running`), by this daemon run.
    pub async fn start_task(
        &self,
        id: &str,
        chat: &ChatRef,
        session_id: Option<i64>,
        task: &str,
    ) -> Result<(), StoreError> {
        let (id, chat, task) = (id.to_owned(), chat.to_string(), task.to_owned());
        self.call(move |c| {
            c.execute(
                "INSERT INTO task_records
                 (id, chat_id, session_id, task, status, started_at, run_id)
                 VALUES (?1, ?2, ?3, ?4, 'running', ?5, ?6)",
                params![id, chat, session_id, task, unix_now(), interrupted::this_run()],
            )
            .map(drop)
        })
        .await
    }

    pub async fn finish_task(&self, id: &str, end: TaskEnd) -> Result<(), StoreError> {
        let id = id.to_owned();
        self.call(move |c| {
            c.execute(
                "UPDATE task_records SET status = ?2, container = COALESCE(?3, container),
                 duration_ms = ?4, prompt_tokens = ?5, completion_tokens = ?6, error = ?7,
                 egress = COALESCE(?8, egress), receipt = COALESCE(?9, receipt),
                 progress = COALESCE(?10, progress) WHERE id = ?1",
                params![
                    id,
                    end.status.as_str(),
                    end.container,
                    end.duration_ms,
                    end.usage.prompt_tokens as i64,
                    end.usage.completion_tokens as i64,
                    end.error,
                    end.egress,
                    end.receipt,
                    end.progress
                ],
            )
            .map(drop)
        })
        .await
    }

    /// The chat's task records, newest first.
    pub async fn tasks(&self, chat: &ChatRef) -> Result<Vec<TaskRecord>, StoreError> {
        self.recent_tasks(Some(chat), i64::MAX).await
    }

    /// The newest `limit` task records, of `chat` or of every chat, newest first.
    pub async fn recent_tasks(
        &self,
        chat: Option<&ChatRef>,
        limit: i64,
    ) -> Result<Vec<TaskRecord>, StoreError> {
        let chat = chat.map(ChatRef::to_string);
        self.call(move |c| {
            let mut stmt = c.prepare(&format!(
                "SELECT {TASK_COLUMNS} FROM task_records
                 WHERE ?1 IS NULL OR chat_id = ?1 ORDER BY started_at DESC, rowid DESC LIMIT ?2"
            ))?;
            let rows = stmt.query_map(params![chat, limit], task_record)?;
            rows.collect()
        })
        .await
    }

    /// The task record `id`, if there is one.
    pub async fn task(&self, id: &str) -> Result<Option<TaskRecord>, StoreError> {
        let id = id.to_owned();
        self.call(move |c| {
            c.query_row(
                &format!("SELECT {TASK_COLUMNS} FROM task_records WHERE id = ?1"),
                [id],
                task_record,
            )
            .optional()
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

    /// Telegram updates by state, for metrics.
    pub async fn update_counts(&self) -> Result<Vec<(String, u64)>, StoreError> {
        self.grouped_counts("SELECT state, COUNT(*) FROM telegram_updates GROUP BY state").await
    }

    /// Task records by status, for metrics.
    pub async fn task_counts(&self) -> Result<Vec<(String, u64)>, StoreError> {
        self.grouped_counts("SELECT status, COUNT(*) FROM task_records GROUP BY status").await
    }

    /// The durations (ms) of finished tasks, for the metrics' histogram.
    pub async fn task_durations_ms(&self) -> Result<Vec<i64>, StoreError> {
        self.call(|c| {
            let mut stmt =
                c.prepare("SELECT duration_ms FROM task_records WHERE duration_ms IS NOT NULL")?;
            let rows = stmt.query_map([], |r| r.get(0))?;
            rows.collect()
        })
        .await
    }

    async fn grouped_counts(&self, sql: &'static str) -> Result<Vec<(String, u64)>, StoreError> {
        self.call(move |c| {
            let mut stmt = c.prepare(sql)?;
            let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as u64)))?;
            rows.collect()
        })
        .await
    }

    /// LLM tokens of the main agent's turns recorded since `since` (unix seconds).
    pub async fn tokens_since(&self, since: i64) -> Result<Usage, StoreError> {
        self.call(move |c| {
            c.query_row(
                "SELECT COALESCE(SUM(prompt_tokens), 0), COALESCE(SUM(completion_tokens), 0)
                 FROM history WHERE created_at >= ?1",
                [since],
                usage_sums,
            )
        })
        .await
    }

    /// The `hours` whole hours up to `now`, oldest first: the main agent's tokens (as
    /// [`Store::tokens_since`] counts them) and the delegated tasks started in each.
    pub async fn hourly_activity(
        &self,
        now: i64,
        hours: i64,
    ) -> Result<Vec<HourActivity>, StoreError> {
        let hours = hours.clamp(1, 24 * 31);
        let since = now - now.rem_euclid(3600) - (hours - 1) * 3600;
        self.call(move |c| {
            let mut out: Vec<HourActivity> = (0..hours)
                .map(|i| HourActivity { start: since + i * 3600, tokens: 0, tasks: 0 })
                .collect();
            let mut stmt = c.prepare(
                "SELECT (created_at - ?1) / 3600, SUM(prompt_tokens + completion_tokens)
                 FROM history WHERE created_at >= ?1 GROUP BY 1",
            )?;
            for row in stmt.query_map([since], |r| Ok((r.get::<_, i64>(0)?, r.get(1)?)))? {
                let (hour, tokens) = row?;
                if let Some(slot) = out.get_mut(hour as usize) {
                    slot.tokens = tokens;
                }
            }
            let mut stmt = c.prepare(
                "SELECT (started_at - ?1) / 3600, COUNT(*) FROM task_records
                 WHERE started_at >= ?1 GROUP BY 1",
            )?;
            for row in stmt.query_map([since], |r| Ok((r.get::<_, i64>(0)?, r.get(1)?)))? {
                let (hour, tasks) = row?;
                if let Some(slot) = out.get_mut(hour as usize) {
                    slot.tasks = tasks;
                }
            }
            Ok(out)
        })
        .await
    }

    /// Counts one call (or task) in `llm_usage`.
    pub async fn record_usage(&self, row: UsageRow) -> Result<(), StoreError> {
        self.call(move |c| {
            c.execute(
                "INSERT INTO llm_usage (day, chat_id, provider, source, calls, prompt_tokens,
                     completion_tokens, cost_micros, unpriced_calls)
                 VALUES (?1, ?2, ?3, ?4, 1, ?5, ?6, ?7, ?8)
                 ON CONFLICT (day, chat_id, provider, source) DO UPDATE SET
                     calls = calls + 1,
                     prompt_tokens = prompt_tokens + excluded.prompt_tokens,
                     completion_tokens = completion_tokens + excluded.completion_tokens,
                     cost_micros = cost_micros + excluded.cost_micros,
                     unpriced_calls = unpriced_calls + excluded.unpriced_calls",
                rusqlite::params![
                    row.day,
                    row.chat.to_string(),
                    row.provider,
                    row.source,
                    row.prompt_tokens as i64,
                    row.completion_tokens as i64,
                    row.cost_micros.unwrap_or(0) as i64,
                    i64::from(row.cost_micros.is_none()),
                ],
            )
            .map(drop)
        })
        .await
    }

    /// Sums of `llm_usage` for days in `from..=to` (`YYYY-MM-DD`), for one chat or all.
    pub async fn usage_between(
        &self,
        from: &str,
        to: &str,
        chat: Option<&ChatRef>,
    ) -> Result<UsageSums, StoreError> {
        let (from, to, chat) = (from.to_owned(), to.to_owned(), chat.map(ChatRef::to_string));
        self.call(move |c| {
            c.query_row(
                "SELECT COALESCE(SUM(prompt_tokens + completion_tokens), 0),
                        COALESCE(SUM(cost_micros), 0), COALESCE(SUM(unpriced_calls), 0)
                 FROM llm_usage WHERE day >= ?1 AND day <= ?2 AND (?3 IS NULL OR chat_id = ?3)",
                rusqlite::params![from, to, chat],
                |r| {
                    Ok(UsageSums {
                        tokens: r.get::<_, i64>(0)? as u64,
                        cost_micros: r.get::<_, i64>(1)? as u64,
                        unpriced_calls: r.get::<_, i64>(2)? as u64,
                    })
                },
            )
        })
        .await
    }

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

enum MigrateError {
    Sql(rusqlite::Error),
    TooNew(i64),
}

fn migrate(conn: &mut Connection) -> Result<(), MigrateError> {
    let version: i64 =
        conn.query_row("PRAGMA user_version", [], |r| r.get(0)).map_err(MigrateError::Sql)?;
    if version > MIGRATIONS.len() as i64 {
        return Err(MigrateError::TooNew(version));
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        let tx = conn.transaction().map_err(MigrateError::Sql)?;
        let before = tx.total_changes();
        tx.execute_batch(sql).map_err(MigrateError::Sql)?;
        let rows = tx.total_changes() - before;
        tx.pragma_update(None, "user_version", (i + 1) as i64).map_err(MigrateError::Sql)?;
        tx.commit().map_err(MigrateError::Sql)?;
        if version > 0 {
            // A fresh database is not news; an upgraded one is.
            tracing::info!(to_version = i + 1, rows, "database schema migrated");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn temp_db(tag: &str) -> PathBuf {
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
    async fn a_skills_first_seen_hash_stays_until_the_operator_sets_another() {
        let store = Store::open(&temp_db("skill-hashes")).await.unwrap();
        assert_eq!(store.record_first_skill_hash("meme", "sha256:a").await.unwrap(), "sha256:a");
        // A changed skill seen later does not replace what was recorded.
        assert_eq!(store.record_first_skill_hash("meme", "sha256:b").await.unwrap(), "sha256:a");
        store.set_skill_hash("meme", "sha256:b", "nexbot-ctl").await.unwrap();
        let hashes = store.skill_hashes().await.unwrap();
        assert_eq!(hashes.get("meme").map(String::as_str), Some("sha256:b"));

        // Allowances despite the screen: kept once each, in the order given.
        assert!(store.skill_allowances().await.unwrap().is_empty());
        store.allow_skill_content("evil", "sha256:e", "dashboard").await.unwrap();
        store.allow_skill_content("evil", "sha256:e", "nexbot-ctl").await.unwrap();
        assert_eq!(store.skill_allowances().await.unwrap(), ["sha256:e"]);
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

/// An "always for this chat" egress rule (`egress_rules`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressRuleRow {
    pub chat: String,
    pub host: String,
    pub port: u16,
    pub created_at: i64,
    pub created_by: String,
}

/// One question as recorded (`egress_questions`; an egress destination, or since schema 10
/// another kind). A step's row has an empty task, host and method, and port 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressQuestionRow {
    pub id: i64,
    pub task_id: String,
    pub chat: String,
    pub host: String,
    pub port: u16,
    pub method: String,
    pub path: Option<String>,
    pub secret: bool,
    pub asked_at: i64,
    /// `once`, `task`, `chat`, `deny`, `no answer` or `expired`; `None` while it waits.
    pub answer: Option<String>,
    pub answered_by: Option<String>,
    /// `egress`, `secret`, `send_file` or `delete`.
    pub kind: String,
    /// A `secret` question's secret name; a step's file.
    pub subject: Option<String>,
}

/// The egress approvals' rows (`approvals.rs`): kept in one block so the store can move.
impl Store {
    /// Records a question being asked; returns its id (unique across restarts).
    pub async fn record_egress_question(
        &self,
        question: EgressQuestionRow,
    ) -> Result<i64, StoreError> {
        self.call(move |c| {
            c.execute(
                "INSERT INTO egress_questions
                 (task_id, chat_id, host, port, method, path, secret, asked_at, kind, subject)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                params![
                    question.task_id,
                    question.chat,
                    question.host,
                    question.port,
                    question.method,
                    question.path,
                    question.secret,
                    question.asked_at,
                    question.kind,
                    question.subject
                ],
            )?;
            Ok(c.last_insert_rowid())
        })
        .await
    }

    /// Records the answer of a waiting question (a question answered already keeps its
    /// first answer); returns whether it was waiting.
    pub async fn answer_egress_question(
        &self,
        id: i64,
        answer: &str,
        by: &str,
    ) -> Result<bool, StoreError> {
        let (answer, by) = (answer.to_owned(), by.to_owned());
        self.call(move |c| {
            c.execute(
                "UPDATE egress_questions SET answer = ?2, answered_by = ?3, answered_at = ?4
                 WHERE id = ?1 AND answer IS NULL",
                params![id, answer, by, unix_now()],
            )
            .map(|n| n > 0)
        })
        .await
    }

    /// Marks every question still waiting as `expired` (the daemon stopped, or stopped
    /// without saying so); returns how many.
    pub async fn expire_egress_questions(&self) -> Result<usize, StoreError> {
        self.call(|c| {
            c.execute(
                "UPDATE egress_questions SET answer = 'expired', answered_by = 'daemon',
                 answered_at = ?1 WHERE answer IS NULL",
                params![unix_now()],
            )
        })
        .await
    }

    /// The questions of one task, oldest first (its receipt lists them).
    pub async fn egress_questions_of(
        &self,
        task_id: &str,
    ) -> Result<Vec<EgressQuestionRow>, StoreError> {
        let task_id = task_id.to_owned();
        self.call(move |c| {
            let mut stmt = c.prepare(
                "SELECT id, task_id, chat_id, host, port, method, path, secret, asked_at,
                 answer, answered_by, kind, subject FROM egress_questions WHERE task_id = ?1
                 ORDER BY id",
            )?;
            let rows = stmt.query_map(params![task_id], |r| {
                Ok(EgressQuestionRow {
                    id: r.get(0)?,
                    task_id: r.get(1)?,
                    chat: r.get(2)?,
                    host: r.get(3)?,
                    port: r.get(4)?,
                    method: r.get(5)?,
                    path: r.get(6)?,
                    secret: r.get(7)?,
                    asked_at: r.get(8)?,
                    answer: r.get(9)?,
                    answered_by: r.get(10)?,
                    kind: r.get(11)?,
                    subject: r.get(12)?,
                })
            })?;
            rows.collect()
        })
        .await
    }

    /// Records `hash` for skill `name` unless one is recorded: the first-seen content, whose
    /// declared destinations are granted. Returns the recorded hash (this one or the earlier).
    pub async fn record_first_skill_hash(
        &self,
        name: &str,
        hash: &str,
    ) -> Result<String, StoreError> {
        let (name, hash) = (name.to_owned(), hash.to_owned());
        self.call(move |c| {
            c.execute(
                "INSERT INTO skill_hashes (name, hash, recorded_at, recorded_by)
                 VALUES (?1, ?2, ?3, 'first seen') ON CONFLICT (name) DO NOTHING",
                params![name, hash, unix_now()],
            )?;
            c.query_row("SELECT hash FROM skill_hashes WHERE name = ?1", params![name], |r| {
                r.get(0)
            })
        })
        .await
    }

    /// Records `hash` as skill `name`'s accepted content, replacing any earlier one (the
    /// operator's `nexbot-ctl skills allow`).
    pub async fn set_skill_hash(&self, name: &str, hash: &str, by: &str) -> Result<(), StoreError> {
        let (name, hash, by) = (name.to_owned(), hash.to_owned(), by.to_owned());
        self.call(move |c| {
            c.execute(
                "INSERT INTO skill_hashes (name, hash, recorded_at, recorded_by)
                 VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (name) DO UPDATE SET hash = excluded.hash,
                 recorded_at = excluded.recorded_at, recorded_by = excluded.recorded_by",
                params![name, hash, unix_now(), by],
            )
            .map(drop)
        })
        .await
    }

    /// Records that the operator allowed skill `name`'s content `hash` despite the content
    /// screen (again: nothing changes).
    pub async fn allow_skill_content(
        &self,
        name: &str,
        hash: &str,
        by: &str,
    ) -> Result<(), StoreError> {
        let (name, hash, by) = (name.to_owned(), hash.to_owned(), by.to_owned());
        self.call(move |c| {
            c.execute(
                "INSERT INTO skill_allowances (hash, name, allowed_at, allowed_by)
                 VALUES (?1, ?2, ?3, ?4) ON CONFLICT (hash) DO NOTHING",
                params![hash, name, unix_now(), by],
            )
            .map(drop)
        })
        .await
    }

    /// Every content hash the operator allowed despite the screen, oldest first.
    pub async fn skill_allowances(&self) -> Result<Vec<String>, StoreError> {
        self.call(|c| {
            let mut stmt =
                c.prepare("SELECT hash FROM skill_allowances ORDER BY allowed_at, hash")?;
            let rows = stmt.query_map([], |r| r.get(0))?;
            rows.collect()
        })
        .await
    }

    /// Every recorded skill hash, by name.
    pub async fn skill_hashes(
        &self,
    ) -> Result<std::collections::BTreeMap<String, String>, StoreError> {
        self.call(|c| {
            let mut stmt = c.prepare("SELECT name, hash FROM skill_hashes")?;
            let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
            rows.collect()
        })
        .await
    }

    /// Adds (or renews) a chat's "always" rule.
    pub async fn add_egress_rule(
        &self,
        chat: &ChatRef,
        host: &str,
        port: u16,
        by: &str,
    ) -> Result<(), StoreError> {
        let (chat, host, by) = (chat.to_string(), host.to_owned(), by.to_owned());
        self.call(move |c| {
            c.execute(
                "INSERT INTO egress_rules (chat_id, host, port, created_at, created_by)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (chat_id, host, port) DO UPDATE SET created_at = excluded.created_at,
                 created_by = excluded.created_by",
                params![chat, host, port, unix_now(), by],
            )
            .map(drop)
        })
        .await
    }

    /// Whether the chat has an "always" rule for `host` on `port`.
    pub async fn has_egress_rule(
        &self,
        chat: &ChatRef,
        host: &str,
        port: u16,
    ) -> Result<bool, StoreError> {
        let (chat, host) = (chat.to_string(), host.to_owned());
        self.call(move |c| {
            c.query_row(
                "SELECT 1 FROM egress_rules WHERE chat_id = ?1 AND host = ?2 AND port = ?3",
                params![chat, host, port],
                |_| Ok(()),
            )
            .optional()
            .map(|found| found.is_some())
        })
        .await
    }

    /// The "always" rules, of one chat or all, by chat then host.
    pub async fn egress_rules(&self, chat: Option<&str>) -> Result<Vec<EgressRuleRow>, StoreError> {
        let chat = chat.map(str::to_owned);
        self.call(move |c| {
            let mut stmt = c.prepare(
                "SELECT chat_id, host, port, created_at, created_by FROM egress_rules
                 WHERE ?1 IS NULL OR chat_id = ?1 ORDER BY chat_id, host, port",
            )?;
            let rows = stmt.query_map(params![chat], |r| {
                Ok(EgressRuleRow {
                    chat: r.get(0)?,
                    host: r.get(1)?,
                    port: r.get(2)?,
                    created_at: r.get(3)?,
                    created_by: r.get(4)?,
                })
            })?;
            rows.collect()
        })
        .await
    }

    /// Removes a chat's "always" rule; returns whether there was one.
    pub async fn remove_egress_rule(
        &self,
        chat: &str,
        host: &str,
        port: u16,
    ) -> Result<bool, StoreError> {
        let (chat, host) = (chat.to_owned(), host.to_owned());
        self.call(move |c| {
            c.execute(
                "DELETE FROM egress_rules WHERE chat_id = ?1 AND host = ?2 AND port = ?3",
                params![chat, host, port],
            )
            .map(|n| n > 0)
        })
        .await
    }
}
