//! Task records: one row per delegation to a subagent, from `running` to how it ended
//! (table `task_records`).
//!
//! Why: the chat's `/tasks`, the dashboard's task pages and the metrics read what a task did
//! after it ended; a record a dead run left `running` is settled by [`crate::interrupted`].

use rusqlite::types::Type;
use rusqlite::{params, OptionalExtension};

use nexbot_core::{ChatRef, Usage};

use crate::{interrupted, jobs, unix_now, Store, StoreError};

const TASK_COLUMNS: &str = "id, chat_id, session_id, task, container, status, started_at, \
    duration_ms, prompt_tokens, completion_tokens, error, egress, receipt, progress";

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
        /// The operator killed its container (`nexbot-ctl subagents kill`).
        Killed => "killed",
    }
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

impl Store {
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
}
