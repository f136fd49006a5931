//! Jobs and their run ledger in the store (tables `jobs` and `job_runs`, migrations 6 and 8).

use nexbot_core::{ChatRef, Usage};
use rusqlite::{params, OptionalExtension};

use crate::{unix_now, Store, StoreError};

/// What a job does when its time passed while the daemon was down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missed {
    /// Record the run as skipped.
    Skip,
    /// Run it once at start-up when it is recent enough (`scheduler.missed_window_secs`).
    Once,
}

impl Missed {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Skip => "skip",
            Self::Once => "once",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "skip" => Some(Self::Skip),
            "once" => Some(Self::Once),
            _ => None,
        }
    }
}

/// Who stored a job. A job a chat's own turn stored reaches the model as that stored task,
/// never as the user's fresh instruction, and a recurring one needs the user's confirmation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum JobCreator {
    /// `nexbot-ctl cron add` (the control API).
    #[default]
    Operator,
    /// A turn of the job's chat (the model's `schedule_task`); `turn` says which turn, as
    /// `/status` names it ("a message", "scheduled job #3 «…»").
    Chat { turn: String },
    /// `HEARTBEAT.md`.
    Heartbeat,
    /// Stored before the daemon recorded who stores jobs (schema 8).
    Unknown,
}

impl JobCreator {
    fn columns(&self) -> (Option<&'static str>, Option<&str>) {
        match self {
            Self::Operator => (Some("operator"), None),
            Self::Chat { turn } => (Some("chat"), Some(turn)),
            Self::Heartbeat => (Some("heartbeat"), None),
            Self::Unknown => (None, None),
        }
    }

    fn from_columns(by: Option<String>, turn: Option<String>) -> Self {
        match by.as_deref() {
            Some("operator") => Self::Operator,
            Some("chat") => Self::Chat { turn: turn.unwrap_or_default() },
            Some("heartbeat") => Self::Heartbeat,
            _ => Self::Unknown,
        }
    }

    /// Who stored it, in words, for the model and for `cron ls`.
    pub fn describe(&self) -> String {
        match self {
            Self::Operator => "the operator".to_owned(),
            Self::Chat { turn } if turn.is_empty() => "this chat's assistant".to_owned(),
            Self::Chat { turn } => format!("this chat's assistant, in a turn started by {turn}"),
            Self::Heartbeat => "HEARTBEAT.md".to_owned(),
            Self::Unknown => "unknown (stored before this was recorded)".to_owned(),
        }
    }
}

words! {
    /// Where a job is in its life.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum JobState {
        Active => "active",
        /// A one-shot job that ran or was skipped.
        Done => "done",
        Cancelled => "cancelled",
    }
}

words! {
    /// How a run of a job went (its ledger row's `outcome`).
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub enum RunOutcome {
        /// Handed to the workers, not started.
        #[default]
        Queued => "queued",
        Running => "running",
        Ok => "ok",
        Failed => "failed",
        /// The run used its token budget.
        OverBudget => "over budget",
        /// Due while the daemon was down (or unusable), and not run.
        Skipped => "skipped",
        /// The queue was full when it was due.
        DroppedBusy => "dropped: busy",
        Cancelled => "cancelled",
    }
}

/// A text column read as one of the enums above; an unknown word is a corrupt row.
pub(crate) fn word<T>(
    r: &rusqlite::Row<'_>,
    i: usize,
    parse: fn(&str) -> Option<T>,
) -> rusqlite::Result<T> {
    let text: String = r.get(i)?;
    parse(&text).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            i,
            rusqlite::types::Type::Text,
            format!("unknown value {text:?}").into(),
        )
    })
}

/// A stored job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    pub id: i64,
    pub chat: ChatRef,
    pub name: String,
    pub task: String,
    /// Recurring: the cron expression.
    pub cron: Option<String>,
    /// One-shot: when (unix seconds).
    pub at: Option<i64>,
    pub time_zone: String,
    pub missed: Missed,
    /// The next run (unix seconds); `None` once a one-shot job ran.
    pub next_run: Option<i64>,
    pub heartbeat: bool,
    pub state: JobState,
    pub created_at: i64,
    pub created_by: JobCreator,
    /// Tokens one run may use (the main agent's and its delegated tasks'); `None`: the
    /// scheduler's default (`scheduler.job_token_budget`).
    pub token_budget: Option<u64>,
}

/// What a new job is.
#[derive(Debug, Clone)]
pub struct NewJob {
    pub chat: ChatRef,
    pub name: String,
    pub task: String,
    pub cron: Option<String>,
    pub at: Option<i64>,
    pub time_zone: String,
    pub missed: Missed,
    pub next_run: Option<i64>,
    pub heartbeat: bool,
    pub created_by: JobCreator,
    pub token_budget: Option<u64>,
    /// The message whose turn stores it (`message <id>`), when a message's turn does: the
    /// same message handled again after a restart finds it ([`Store::job_stored_by`]).
    pub origin: Option<String>,
}

/// One row of the run ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRun {
    pub id: i64,
    pub job_id: i64,
    pub scheduled_at: i64,
    pub started_at: Option<i64>,
    pub ended_at: Option<i64>,
    pub outcome: RunOutcome,
    pub detail: Option<String>,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    /// Tokens of the tasks the run delegated.
    pub task_tokens: i64,
    /// How many due runs the row stands for: a job's `dropped: busy` runs within a minute
    /// are one row (its `ended_at` is the last one's).
    pub times: i64,
    /// The text delivered to the chat (none when nothing was sent).
    pub message: Option<String>,
    /// The channel's id of that message, when it has one (Telegram).
    pub message_id: Option<i64>,
    /// When the run was handed to the workers (unix milliseconds).
    pub handed_at_ms: Option<i64>,
}

/// A job's cost over its last runs, for `cron ls`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct JobCost {
    /// Runs counted (that called the model: finished `ok` or `failed`).
    pub runs: u32,
    pub mean_tokens: f64,
}

const JOB_COLUMNS: &str = "id, chat_id, name, task, cron, at, time_zone, missed, next_run, \
    heartbeat, state, created_at, created_by, created_in, token_budget";
const RUN_COLUMNS: &str = "id, job_id, scheduled_at, started_at, ended_at, outcome, detail, \
    prompt_tokens, completion_tokens, message, message_id, handed_at_ms, task_tokens, times";

fn job_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Job> {
    use rusqlite::types::Type;
    let chat: String = r.get(1)?;
    let missed: String = r.get(7)?;
    Ok(Job {
        id: r.get(0)?,
        chat: chat
            .parse()
            .map_err(|e| rusqlite::Error::FromSqlConversionFailure(1, Type::Text, Box::new(e)))?,
        name: r.get(2)?,
        task: r.get(3)?,
        cron: r.get(4)?,
        at: r.get(5)?,
        time_zone: r.get(6)?,
        missed: Missed::parse(&missed).unwrap_or(Missed::Skip),
        next_run: r.get(8)?,
        heartbeat: r.get::<_, i64>(9)? != 0,
        state: word(r, 10, JobState::parse)?,
        created_at: r.get(11)?,
        created_by: JobCreator::from_columns(r.get(12)?, r.get(13)?),
        token_budget: r.get::<_, Option<i64>>(14)?.map(|b| b.max(0) as u64),
    })
}

fn run_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<JobRun> {
    Ok(JobRun {
        id: r.get(0)?,
        job_id: r.get(1)?,
        scheduled_at: r.get(2)?,
        started_at: r.get(3)?,
        ended_at: r.get(4)?,
        outcome: word(r, 5, RunOutcome::parse)?,
        detail: r.get(6)?,
        prompt_tokens: r.get(7)?,
        completion_tokens: r.get(8)?,
        message: r.get(9)?,
        message_id: r.get(10)?,
        handed_at_ms: r.get(11)?,
        task_tokens: r.get(12)?,
        times: r.get(13)?,
    })
}

/// How a run ended, for [`Store::finish_job_run`].
#[derive(Debug, Clone, Default)]
pub struct RunEnd {
    pub outcome: RunOutcome,
    pub detail: Option<String>,
    /// The run's own model calls.
    pub usage: Usage,
    /// Tokens of the tasks the run delegated.
    pub task_tokens: u64,
    pub message: Option<String>,
    pub message_id: Option<i64>,
}

/// What one tick decided for one due job ([`Store::apply_tick`]).
#[derive(Debug, Clone)]
pub struct TickItem {
    pub job_id: i64,
    /// The job's next time; `None`: done.
    pub next: Option<i64>,
    /// The job cannot run any more (its schedule is unusable).
    pub cancel: bool,
    /// Runs that did not start: (scheduled time, outcome, detail).
    pub rows: Vec<(i64, RunOutcome, Option<String>)>,
    /// The run handed to the workers: (scheduled time, note).
    pub fire: Option<(i64, Option<String>)>,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A job's `dropped: busy` runs this close together are one ledger row.
const DROPPED_MERGE_SECS: i64 = 60;

/// Counts a `dropped: busy` run of `job` due at `t` into the job's last such row when that
/// row began less than a minute before; `true` when it did (no row of its own then).
fn merge_dropped(c: &rusqlite::Connection, job: i64, t: i64, now: i64) -> rusqlite::Result<bool> {
    let merged = c.execute(
        "UPDATE job_runs SET times = times + 1, ended_at = ?3,
             detail = 'the queue was full: ' || (times + 1) || ' due runs dropped in this minute'
         WHERE id = (SELECT id FROM job_runs WHERE job_id = ?1 AND outcome = 'dropped: busy'
                     AND scheduled_at > ?2 - ?4 ORDER BY id DESC LIMIT 1)",
        params![job, t, now, DROPPED_MERGE_SECS],
    )?;
    Ok(merged > 0)
}

impl Store {
    /// A run still waiting for a worker is dropped after all (it gave way to a run of a chat
    /// with fewer waiting): recorded `dropped: busy` with `why`, counted into its job's row
    /// of the minute if there is one.
    pub async fn drop_queued_run(&self, run_id: i64, why: &str) -> Result<(), StoreError> {
        let why = why.to_owned();
        self.call(move |c| {
            let tx = c.transaction()?;
            let found: Option<(i64, i64)> = tx
                .query_row(
                    "SELECT job_id, scheduled_at FROM job_runs WHERE id = ?1 AND outcome = 'queued'",
                    [run_id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            if let Some((job, t)) = found {
                if merge_dropped(&tx, job, t, unix_now())? {
                    tx.execute("DELETE FROM job_runs WHERE id = ?1", [run_id])?;
                } else {
                    tx.execute(
                        "UPDATE job_runs SET outcome = 'dropped: busy', detail = ?2, ended_at = ?3
                         WHERE id = ?1",
                        params![run_id, why, unix_now()],
                    )?;
                }
            }
            tx.commit()
        })
        .await
    }

    /// Writes one tick in one transaction: each job moved to its next time (or ended), its
    /// rows recorded, its fired run recorded `queued`. Returns the queued runs' ids, in order.
    pub async fn apply_tick(&self, items: Vec<TickItem>) -> Result<Vec<Option<i64>>, StoreError> {
        self.call(move |c| {
            let tx = c.transaction()?;
            let mut ids = Vec::with_capacity(items.len());
            {
                let mut next = tx.prepare_cached(
                    "UPDATE jobs SET next_run = ?2,
                         state = CASE WHEN ?3 THEN 'cancelled'
                                      WHEN ?2 IS NULL AND state = 'active' THEN 'done'
                                      ELSE state END
                     WHERE id = ?1",
                )?;
                let mut row = tx.prepare_cached(
                    "INSERT INTO job_runs (job_id, scheduled_at, ended_at, outcome, detail,
                         handed_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )?;
                let now = unix_now();
                for item in items {
                    next.execute(params![item.job_id, item.next, item.cancel])?;
                    for (t, outcome, detail) in item.rows {
                        if outcome == RunOutcome::DroppedBusy
                            && merge_dropped(&tx, item.job_id, t, now)?
                        {
                            continue;
                        }
                        let outcome = outcome.as_str();
                        row.execute(params![item.job_id, t, now, outcome, detail, None::<i64>])?;
                    }
                    ids.push(match item.fire {
                        Some((t, note)) => {
                            row.execute(params![
                                item.job_id,
                                t,
                                None::<i64>,
                                "queued",
                                note,
                                now_ms()
                            ])?;
                            Some(tx.last_insert_rowid())
                        }
                        None => None,
                    });
                }
            }
            tx.commit()?;
            Ok(ids)
        })
        .await
    }

    /// Stores a new job; returns its id.
    pub async fn add_job(&self, job: NewJob) -> Result<i64, StoreError> {
        self.call(move |c| {
            let (created_by, created_in) = job.created_by.columns();
            c.execute(
                "INSERT INTO jobs (chat_id, name, task, cron, at, time_zone, missed, next_run,
                     heartbeat, state, created_at, created_by, created_in, token_budget, origin)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 'active', ?10, ?11, ?12, ?13, ?14)",
                params![
                    job.chat.to_string(),
                    job.name,
                    job.task,
                    job.cron,
                    job.at,
                    job.time_zone,
                    job.missed.as_str(),
                    job.next_run,
                    i64::from(job.heartbeat),
                    unix_now(),
                    created_by,
                    created_in,
                    job.token_budget.map(|b| b.min(i64::MAX as u64) as i64),
                    job.origin,
                ],
            )?;
            Ok(c.last_insert_rowid())
        })
        .await
        .inspect(|_| self.jobs_changed().notify_one())
    }

    pub async fn job(&self, id: i64) -> Result<Option<Job>, StoreError> {
        self.call(move |c| {
            c.query_row(&format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?1"), [id], job_row)
                .optional()
        })
        .await
    }

    /// Active jobs, of one chat or all, oldest first.
    /// The job with `task` of `chat` that the turn of message `origin` stored (in any state:
    /// one that ran or was cancelled since is not stored again either), if any.
    pub async fn job_stored_by(
        &self,
        chat: &ChatRef,
        origin: &str,
        task: &str,
    ) -> Result<Option<Job>, StoreError> {
        let (chat, origin, task) = (chat.to_string(), origin.to_owned(), task.to_owned());
        self.call(move |c| {
            let mut stmt = c.prepare(&format!(
                "SELECT {JOB_COLUMNS} FROM jobs
                 WHERE chat_id = ?1 AND origin = ?2 AND task = ?3 ORDER BY id"
            ))?;
            let mut rows = stmt.query_map([chat, origin, task], job_row)?;
            rows.next().transpose()
        })
        .await
    }

    pub async fn active_jobs(&self, chat: Option<&ChatRef>) -> Result<Vec<Job>, StoreError> {
        let chat = chat.map(ToString::to_string);
        self.call(move |c| {
            let mut stmt = c.prepare(&format!(
                "SELECT {JOB_COLUMNS} FROM jobs
                 WHERE state = 'active' AND (?1 IS NULL OR chat_id = ?1) ORDER BY id"
            ))?;
            let rows = stmt.query_map([chat], job_row)?;
            rows.collect()
        })
        .await
    }

    /// Active jobs whose next run is at or before `now`.
    pub async fn due_jobs(&self, now: i64) -> Result<Vec<Job>, StoreError> {
        self.call(move |c| {
            let mut stmt = c.prepare_cached(&format!(
                "SELECT {JOB_COLUMNS} FROM jobs
                 WHERE state = 'active' AND next_run IS NOT NULL AND next_run <= ?1
                 ORDER BY next_run, id"
            ))?;
            let rows = stmt.query_map([now], job_row)?;
            rows.collect()
        })
        .await
    }

    /// The earliest next run of an active job, if any.
    pub async fn next_due(&self) -> Result<Option<i64>, StoreError> {
        self.call(|c| {
            c.query_row(
                "SELECT MIN(next_run) FROM jobs WHERE state = 'active' AND next_run IS NOT NULL",
                [],
                |r| r.get(0),
            )
        })
        .await
    }

    /// Moves a job to its next run, or ends it (`done`) when there is none.
    pub async fn set_next_run(&self, id: i64, next: Option<i64>) -> Result<(), StoreError> {
        self.call(move |c| {
            c.execute(
                "UPDATE jobs SET next_run = ?2,
                     state = CASE WHEN ?2 IS NULL AND state = 'active' THEN 'done' ELSE state END
                 WHERE id = ?1",
                params![id, next],
            )
            .map(drop)
        })
        .await
        .inspect(|_| self.jobs_changed().notify_one())
    }

    /// Cancels an active job (of `chat`, when given). Returns whether one was cancelled.
    pub async fn cancel_job(&self, id: i64, chat: Option<&ChatRef>) -> Result<bool, StoreError> {
        let chat = chat.map(ToString::to_string);
        self.call(move |c| {
            c.execute(
                "UPDATE jobs SET state = 'cancelled', next_run = NULL
                 WHERE id = ?1 AND state = 'active' AND (?2 IS NULL OR chat_id = ?2)",
                params![id, chat],
            )
            .map(|n| n > 0)
        })
        .await
        .inspect(|_| self.jobs_changed().notify_one())
    }

    /// Replaces a job's schedule and task (the heartbeat file changed).
    pub async fn update_job(
        &self,
        id: i64,
        chat: &ChatRef,
        cron: &str,
        task: &str,
        time_zone: &str,
        next_run: Option<i64>,
    ) -> Result<(), StoreError> {
        let (chat, cron, task, zone) =
            (chat.to_string(), cron.to_owned(), task.to_owned(), time_zone.to_owned());
        self.call(move |c| {
            c.execute(
                "UPDATE jobs SET chat_id = ?2, cron = ?3, task = ?4, time_zone = ?5, next_run = ?6
                 WHERE id = ?1",
                params![id, chat, cron, task, zone, next_run],
            )
            .map(drop)
        })
        .await
        .inspect(|_| self.jobs_changed().notify_one())
    }

    /// Records a run that did not start (`skipped`, `dropped: busy`) or is queued; returns
    /// its id.
    pub async fn add_job_run(
        &self,
        job_id: i64,
        scheduled_at: i64,
        outcome: RunOutcome,
        detail: Option<String>,
    ) -> Result<i64, StoreError> {
        self.call(move |c| {
            let queued = outcome == RunOutcome::Queued;
            let outcome = outcome.as_str();
            let ended = (!queued).then(unix_now);
            let handed = queued.then(now_ms);
            c.execute(
                "INSERT INTO job_runs (job_id, scheduled_at, ended_at, outcome, detail, handed_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![job_id, scheduled_at, ended, outcome, detail, handed],
            )?;
            Ok(c.last_insert_rowid())
        })
        .await
    }

    /// Marks a queued run as started.
    pub async fn start_job_run(&self, run_id: i64) -> Result<(), StoreError> {
        self.call(move |c| {
            c.execute(
                "UPDATE job_runs SET outcome = 'running', started_at = ?2 WHERE id = ?1",
                params![run_id, unix_now()],
            )
            .map(drop)
        })
        .await
    }

    pub async fn finish_job_run(&self, run_id: i64, end: RunEnd) -> Result<(), StoreError> {
        self.call(move |c| {
            c.execute(
                "UPDATE job_runs SET outcome = ?2,
                     detail = CASE WHEN ?3 IS NULL THEN detail WHEN detail IS NULL THEN ?3
                                   ELSE detail || '; ' || ?3 END,
                     prompt_tokens = ?4,
                     completion_tokens = ?5, message = ?6, message_id = ?7, ended_at = ?8,
                     task_tokens = ?9
                 WHERE id = ?1",
                params![
                    run_id,
                    end.outcome.as_str(),
                    end.detail,
                    end.usage.prompt_tokens as i64,
                    end.usage.completion_tokens as i64,
                    end.message,
                    end.message_id,
                    unix_now(),
                    end.task_tokens as i64
                ],
            )
            .map(drop)
        })
        .await
    }

    /// Runs still `queued` or `running` (the daemon stopped under them) become `cancelled`.
    pub async fn settle_open_job_runs(&self, why: &str) -> Result<usize, StoreError> {
        let why = why.to_owned();
        self.call(move |c| {
            c.execute(
                "UPDATE job_runs SET outcome = 'cancelled', detail = ?1, ended_at = ?2
                 WHERE outcome IN ('queued', 'running')",
                params![why, unix_now()],
            )
        })
        .await
    }

    /// The last `limit` runs, of one job or all, newest first.
    pub async fn job_runs(&self, job: Option<i64>, limit: i64) -> Result<Vec<JobRun>, StoreError> {
        self.call(move |c| {
            let mut stmt = c.prepare(&format!(
                "SELECT {RUN_COLUMNS} FROM job_runs WHERE (?1 IS NULL OR job_id = ?1)
                 ORDER BY id DESC LIMIT ?2"
            ))?;
            let rows = stmt.query_map(params![job, limit], run_row)?;
            rows.collect()
        })
        .await
    }

    /// Mean tokens of the job's last `last` runs that called the model.
    pub async fn job_cost(&self, job: i64, last: i64) -> Result<JobCost, StoreError> {
        self.call(move |c| {
            c.query_row(
                "SELECT COUNT(*), COALESCE(AVG(prompt_tokens + completion_tokens + task_tokens), 0)
                 FROM (SELECT prompt_tokens, completion_tokens, task_tokens FROM job_runs
                    WHERE job_id = ?1 AND outcome IN ('ok', 'failed', 'over budget')
                    ORDER BY id DESC LIMIT ?2)",
                params![job, last],
                |r| Ok(JobCost { runs: r.get::<_, i64>(0)? as u32, mean_tokens: r.get(1)? }),
            )
        })
        .await
    }

    /// Deletes finished runs scheduled before `before` (unix seconds); returns how many.
    pub async fn prune_job_runs(&self, before: i64) -> Result<usize, StoreError> {
        self.call(move |c| {
            c.execute(
                "DELETE FROM job_runs WHERE scheduled_at < ?1
                 AND outcome NOT IN ('queued', 'running')",
                [before],
            )
        })
        .await
    }

    /// Runs by outcome, for the metrics.
    pub async fn job_run_counts(&self) -> Result<Vec<(String, u64)>, StoreError> {
        self.call(|c| {
            let mut stmt = c.prepare("SELECT outcome, COUNT(*) FROM job_runs GROUP BY outcome")?;
            let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as u64)))?;
            rows.collect()
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn store(name: &str) -> Store {
        let dir = std::env::temp_dir().join(format!("nexbot-jobs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Store::open(&dir.join("db.sqlite")).await.unwrap()
    }

    fn new_job(chat: &ChatRef, next: i64) -> NewJob {
        NewJob {
            chat: chat.clone(),
            name: "n".into(),
            task: "t".into(),
            cron: None,
            at: Some(next),
            time_zone: "UTC".into(),
            missed: Missed::Once,
            next_run: Some(next),
            heartbeat: false,
            created_by: JobCreator::Operator,
            token_budget: None,
            origin: None,
        }
    }

    #[tokio::test]
    async fn jobs_are_due_cancelled_per_chat_and_done_without_a_next_run() {
        let store = store("due").await;
        let a = ChatRef::console("a").unwrap();
        let b = ChatRef::console("b").unwrap();
        let j1 = store.add_job(new_job(&a, 100)).await.unwrap();
        let j2 = store.add_job(new_job(&b, 200)).await.unwrap();
        let due: Vec<i64> = store.due_jobs(150).await.unwrap().iter().map(|j| j.id).collect();
        assert_eq!(due, vec![j1]);
        assert!(!store.cancel_job(j2, Some(&a)).await.unwrap(), "not a's job");
        assert!(store.cancel_job(j2, Some(&b)).await.unwrap());
        assert!(store.due_jobs(1_000).await.unwrap().iter().all(|j| j.id != j2));
        store.set_next_run(j1, None).await.unwrap();
        assert_eq!(store.job(j1).await.unwrap().unwrap().state, JobState::Done);
        assert!(store.active_jobs(None).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_tick_moves_jobs_and_records_every_row_at_once() {
        let store = store("tick").await;
        let chat = ChatRef::console("a").unwrap();
        let a = store.add_job(new_job(&chat, 100)).await.unwrap();
        let b = store.add_job(new_job(&chat, 100)).await.unwrap();
        let c = store.add_job(new_job(&chat, 100)).await.unwrap();
        let items = vec![
            TickItem {
                job_id: a,
                next: Some(200),
                cancel: false,
                rows: vec![(90, RunOutcome::Skipped, Some("x".into()))],
                fire: Some((100, None)),
            },
            TickItem {
                job_id: b,
                next: None,
                cancel: false,
                rows: vec![(100, RunOutcome::DroppedBusy, None)],
                fire: None,
            },
            TickItem {
                job_id: c,
                next: None,
                cancel: true,
                rows: vec![(100, RunOutcome::Failed, Some("bad".into()))],
                fire: None,
            },
        ];
        let ids = store.apply_tick(items).await.unwrap();
        assert!(ids[0].is_some() && ids[1].is_none() && ids[2].is_none());
        assert_eq!(store.job(a).await.unwrap().unwrap().next_run, Some(200));
        assert_eq!(store.job(b).await.unwrap().unwrap().state, JobState::Done);
        assert_eq!(store.job(c).await.unwrap().unwrap().state, JobState::Cancelled);
        let runs = store.job_runs(Some(a), 10).await.unwrap();
        assert_eq!(
            runs.iter().map(|r| r.outcome.as_str()).collect::<Vec<_>>(),
            ["queued", "skipped"]
        );
        assert!(runs[0].handed_at_ms.is_some() && runs[1].handed_at_ms.is_none());
        assert_eq!(store.job_runs(Some(b), 10).await.unwrap()[0].outcome, RunOutcome::DroppedBusy);
    }

    #[tokio::test]
    async fn the_ledger_keeps_every_run_and_the_cost_counts_model_runs_only() {
        let store = store("ledger").await;
        let chat = ChatRef::console("a").unwrap();
        let job = store.add_job(new_job(&chat, 100)).await.unwrap();
        store.add_job_run(job, 90, RunOutcome::Skipped, Some("daemon down".into())).await.unwrap();
        for tokens in [10, 30] {
            let run =
                store.add_job_run(job, 100, RunOutcome::Queued, Some("late".into())).await.unwrap();
            store.start_job_run(run).await.unwrap();
            let end = RunEnd {
                outcome: RunOutcome::Ok,
                usage: Usage { prompt_tokens: tokens, completion_tokens: 0 },
                message: Some("hi".into()),
                ..RunEnd::default()
            };
            store.finish_job_run(run, end).await.unwrap();
        }
        let open = store.add_job_run(job, 110, RunOutcome::Queued, None).await.unwrap();
        let stale = store.add_job_run(job, 5, RunOutcome::Ok, None).await.unwrap();
        assert_eq!(store.prune_job_runs(80).await.unwrap(), 1, "only the finished old run");
        assert!(store.job_runs(Some(job), 10).await.unwrap().iter().all(|r| r.id != stale));
        assert_eq!(store.settle_open_job_runs("stopped").await.unwrap(), 1);
        let runs = store.job_runs(Some(job), 10).await.unwrap();
        assert_eq!(runs.len(), 4);
        assert_eq!(runs[0].id, open);
        assert_eq!(runs[0].outcome, RunOutcome::Cancelled);
        assert_eq!(runs[3].outcome, RunOutcome::Skipped);
        assert!(runs[1].started_at.is_some() && runs[1].ended_at.is_some());
        assert!(runs[1].handed_at_ms.unwrap() >= 100_000, "queued runs say when");
        assert_eq!(runs[3].handed_at_ms, None, "a skipped run was never handed over");
        assert_eq!(runs[1].detail.as_deref(), Some("late"), "the queued note is kept");
        let cost = store.job_cost(job, 10).await.unwrap();
        assert_eq!(cost.runs, 2);
        assert!((cost.mean_tokens - 20.0).abs() < 1e-9);
    }
}
