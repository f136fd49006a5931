//! The scheduler's endpoints (`nexbot-ctl cron add|ls|rm|runs`): bodies and paths.

use serde::{Deserialize, Serialize};

/// The scheduler's paths.
pub mod cron_paths {
    /// `GET`: the active jobs; `POST` a [`super::CronAdd`]: a new job.
    pub const CRON: &str = "/v1/cron";
    /// `GET ?job=ID&limit=N`: the run ledger, newest first.
    pub const CRON_RUNS: &str = "/v1/cron/runs";
    /// `POST`: cancels job `id`.
    pub fn cron_remove(id: i64) -> String {
        format!("/v1/cron/{id}/remove")
    }
}

/// `POST /v1/cron`: a job for `chat`, recurring (`cron`) or one-shot (`at`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CronAdd {
    /// `telegram:<id>` or `console:<name>`.
    pub chat: String,
    pub task: String,
    #[serde(default)]
    pub name: Option<String>,
    /// Five fields, or six with seconds first.
    #[serde(default)]
    pub cron: Option<String>,
    /// RFC 3339, a local `YYYY-MM-DD HH:MM[:SS]`, or a delay (`in 10m`).
    #[serde(default)]
    pub at: Option<String>,
    /// IANA zone; unset: the daemon's `scheduler.time_zone`.
    #[serde(default)]
    pub time_zone: Option<String>,
    /// `skip` or `once`; unset: `once` for one-shot jobs, `skip` for recurring ones.
    #[serde(default)]
    pub missed: Option<String>,
    /// Tokens one run may use (the agent's and its delegated tasks'); unset: the daemon's
    /// `scheduler.job_token_budget` at each run.
    #[serde(default)]
    pub token_budget: Option<u64>,
}

/// A job as `cron ls` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CronJob {
    pub id: i64,
    pub chat: String,
    pub name: String,
    pub task: String,
    /// The cron expression, or `at <time>` for a one-shot job.
    pub schedule: String,
    pub time_zone: String,
    pub missed: String,
    /// `HEARTBEAT.md` check rather than a job someone created.
    pub heartbeat: bool,
    /// Unix seconds, and the same as local time in the job's zone.
    pub next_run: Option<i64>,
    pub next_run_local: Option<String>,
    /// Mean tokens per run over the last runs that called the model (`runs_measured`).
    pub tokens_per_run: Option<f64>,
    pub runs_measured: u32,
    /// `tokens_per_run` × the runs due in the next 24 hours.
    pub tokens_per_day: Option<f64>,
    pub runs_per_day: u64,
    /// Tokens one run may use; a run that passes it is stopped and recorded `over budget`.
    #[serde(default)]
    pub token_budget: u64,
    /// The budget is the daemon's default (`scheduler.job_token_budget`), not the job's own.
    #[serde(default)]
    pub token_budget_default: bool,
    /// Who stored the job: the operator, a turn of its chat, `HEARTBEAT.md`, or unknown
    /// (stored by a daemon that did not record it).
    #[serde(default)]
    pub created_by: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CronJobList {
    pub jobs: Vec<CronJob>,
}

/// One row of the run ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CronRun {
    pub id: i64,
    pub job_id: i64,
    pub scheduled_at: i64,
    pub started_at: Option<i64>,
    pub ended_at: Option<i64>,
    /// `ok`, `failed`, `skipped`, `dropped: busy`, `cancelled`, `queued`, `running`.
    pub outcome: String,
    pub detail: Option<String>,
    /// The agent's tokens and its delegated tasks'.
    pub tokens: i64,
    /// How many due runs the row stands for (a job's `dropped: busy` runs within a minute
    /// are one row).
    #[serde(default = "one")]
    pub times: i64,
    /// What was delivered to the chat, and the channel's message id when it has one.
    pub message: Option<String>,
    pub message_id: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CronRunList {
    pub runs: Vec<CronRun>,
}

fn one() -> i64 {
    1
}
