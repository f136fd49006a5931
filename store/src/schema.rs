//! The schema: its numbered migrations (applied in order, tracked in `PRAGMA user_version`),
//! the version this build knows, and the guard that refuses a database written by a newer
//! nexbot before anything is written to it.
//!
//! Why a guard before the open: `Store::open` switches the file to WAL and migrates. Run on a
//! newer database, the WAL switch alone rewrites the file's header (a rollback-journal file),
//! and closing a read-write connection checkpoints whatever WAL the newer daemon left into the
//! main file. Either way the operator, told to run the newer version, would go back to a file
//! this build had changed. The guard reads `user_version` through a read-only connection that
//! never checkpoints, so a refused file keeps its bytes.

use std::path::Path;
use std::time::Duration;

use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags};

use crate::{classify, StoreError};

/// The newest schema this build writes (`PRAGMA user_version` after every migration).
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// `Err(TooNew)` when the database at `path` has a schema newer than [`SCHEMA_VERSION`]; a
/// missing or empty file (a new database) passes. Writes nothing to the main file.
pub(crate) fn refuse_newer(path: &Path) -> Result<(), StoreError> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.len() > 0 => {}
        // New, or unreadable: the read-write open reports the latter with its reason.
        _ => return Ok(()),
    }
    let fail = |e| classify(path, e);
    let probe = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(fail)?;
    // A read-only connection cannot checkpoint anyway; this says so rather than relying on it.
    probe.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true).map_err(fail)?;
    probe.busy_timeout(Duration::from_secs(5)).map_err(fail)?;
    let found: i64 = probe.query_row("PRAGMA user_version", [], |r| r.get(0)).map_err(fail)?;
    if found > SCHEMA_VERSION {
        return Err(StoreError::TooNew { path: path.to_owned(), found, known: SCHEMA_VERSION });
    }
    Ok(())
}

/// Migrations in order; `user_version` is the number applied.
pub(crate) const MIGRATIONS: &[&str] = &[
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
    // 16: the message whose turn stored a job (`origin`, e.g. `message 812`), so that the same
    // message handled again after a restart does not store its job twice. Earlier rows: none.
    "ALTER TABLE jobs ADD COLUMN origin TEXT;",
    // 17: each chat's long-term memory (issue 50): entries with their source (JSON of
    // `MemorySource`, its kind beside it for filters) and use, a full-text index of their text
    // with the chat as a token of its own, each entry's vector when `[llm.embeddings]` gave one
    // (little-endian f32s, and the model that made it), and the imports run once (the
    // owner's `MEMORY.md`).
    "CREATE TABLE memories (
        id INTEGER PRIMARY KEY,
        chat_id TEXT NOT NULL,
        text TEXT NOT NULL,
        kind TEXT NOT NULL,
        source TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        uses INTEGER NOT NULL DEFAULT 0,
        used_at INTEGER,
        vector BLOB,
        vector_model TEXT
    );
    CREATE INDEX memories_chat ON memories(chat_id, text);
    CREATE VIRTUAL TABLE memories_fts USING fts5(text, chat_key,
        tokenize = 'unicode61 remove_diacritics 2');
    CREATE TABLE memory_imports (
        chat_id TEXT NOT NULL,
        name TEXT NOT NULL,
        imported_at INTEGER NOT NULL,
        entries INTEGER NOT NULL,
        PRIMARY KEY (chat_id, name)
    );",
    // 18: decoy secrets (issue 51): values shaped like providers' keys, bound nowhere, the
    // same for every chat; kept so a value taken before a restart is still known after it.
    // Plain, not sealed: they open nothing.
    "CREATE TABLE decoys (
        name TEXT PRIMARY KEY,
        value TEXT NOT NULL,
        created_at INTEGER NOT NULL
    );",
    // 19: the owner's self-tests (issue 51): when each ended and its report (the
    // `nexbot-selftest` crate's JSON), for `/status` and the dashboard's "last self-test".
    "CREATE TABLE selftests (
        id INTEGER PRIMARY KEY,
        ended_at INTEGER NOT NULL,
        report TEXT NOT NULL
    );",
];

pub(crate) enum MigrateError {
    Sql(rusqlite::Error),
    TooNew(i64),
}

pub(crate) fn migrate(conn: &mut Connection) -> Result<(), MigrateError> {
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
