//! The scheduler's endpoints: list, add and cancel jobs, read the run ledger.

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use nexbot_control::{cron_paths, CronAdd, CronJob, CronJobList, CronRun, CronRunList, Done};
use nexbot_core::ChatRef;
use serde::Deserialize;

use super::{ApiError, ControlState};
use nexbot_scheduler::jobs::{Job, JobCreator, JobState};
use nexbot_scheduler::{create_job, job_schedule, schedule, JobError, JobSpec};
use nexbot_store::{unix_now, Store};

/// Runs whose tokens make a job's mean.
const COST_RUNS: i64 = 10;
/// Most runs one listing returns.
const MAX_ROWS: i64 = 1000;

pub fn routes() -> Router<ControlState> {
    Router::new()
        .route(cron_paths::CRON, get(list).post(add))
        .route(cron_paths::CRON_RUNS, get(runs))
        .route("/v1/cron/{id}/remove", post(remove))
}

fn on(state: &ControlState) -> Result<(), ApiError> {
    if state.0.scheduler.is_none() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "the scheduler is off (scheduler.enabled = false)",
        ));
    }
    Ok(())
}

/// A job as `cron ls` shows it, with its measured cost.
pub async fn view(
    store: &Store,
    job: &Job,
    now: i64,
    default_budget: u64,
) -> Result<CronJob, ApiError> {
    let cost = store.job_cost(job.id, COST_RUNS).await.map_err(ApiError::internal)?;
    let schedule = job_schedule(job).ok();
    let runs_per_day = schedule.as_ref().map_or(0, |s| {
        let (mut t, mut n) = (now, 0u64);
        while let Some(next) = s.next_after(t).filter(|n| *n <= now + 86_400) {
            n += 1;
            t = next;
        }
        n
    });
    let tokens_per_run = (cost.runs > 0).then_some(cost.mean_tokens);
    let zone = schedule.as_ref().map_or(chrono_tz::Tz::UTC, |s| s.zone());
    Ok(CronJob {
        id: job.id,
        chat: job.chat.to_string(),
        name: job.name.clone(),
        task: job.task.clone(),
        schedule: match (&job.cron, job.at) {
            (Some(cron), _) => cron.clone(),
            (None, Some(at)) => format!("at {}", schedule::local(at, zone)),
            (None, None) => String::new(),
        },
        time_zone: job.time_zone.clone(),
        missed: job.missed.as_str().to_owned(),
        heartbeat: job.heartbeat,
        next_run: job.next_run,
        next_run_local: job.next_run.map(|t| schedule::local(t, zone)),
        tokens_per_run,
        runs_measured: cost.runs,
        tokens_per_day: tokens_per_run.map(|t| t * runs_per_day as f64),
        runs_per_day,
        token_budget: job.token_budget.unwrap_or(default_budget),
        token_budget_default: job.token_budget.is_none(),
        created_by: job.created_by.describe(),
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    chat: Option<String>,
}

fn chat(text: &str) -> Result<ChatRef, ApiError> {
    text.parse().map_err(|e: nexbot_core::ChatRefError| ApiError::bad_request(e.to_string()))
}

async fn list(
    State(s): State<ControlState>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<CronJobList>, ApiError> {
    let Query(query) = query?;
    jobs(&s, query.chat.as_deref()).await.map(Json)
}

/// `cron ls [--chat CHAT]`: the active jobs (of one chat), each with its measured cost.
pub async fn jobs(s: &ControlState, chat_text: Option<&str>) -> Result<CronJobList, ApiError> {
    on(s)?;
    let chat = chat_text.map(chat).transpose()?;
    let jobs = s.0.store.active_jobs(chat.as_ref()).await.map_err(ApiError::internal)?;
    let now = unix_now();
    let mut out = Vec::with_capacity(jobs.len());
    for job in &jobs {
        out.push(view(&s.0.store, job, now, s.0.job_token_budget).await?);
    }
    Ok(CronJobList { jobs: out })
}

async fn add(
    State(s): State<ControlState>,
    body: Result<Json<CronAdd>, JsonRejection>,
) -> Result<Json<CronJob>, ApiError> {
    on(&s)?;
    let Json(add) = body?;
    let chat = chat(&add.chat)?;
    let spec = JobSpec {
        name: add.name,
        task: add.task,
        cron: add.cron,
        at: add.at,
        time_zone: add.time_zone,
        missed: add.missed,
        token_budget: add.token_budget,
        created_by: JobCreator::Operator,
    };
    let job =
        create_job(&s.0.store, &chat, spec, s.0.scheduler_zone).await.map_err(|e| match e {
            JobError::Store(e) => ApiError::internal(e),
            other => ApiError::bad_request(other.to_string()),
        })?;
    Ok(Json(view(&s.0.store, &job, unix_now(), s.0.job_token_budget).await?))
}

async fn remove(
    State(s): State<ControlState>,
    Path(id): Path<i64>,
) -> Result<Json<Done>, ApiError> {
    remove_job(&s, id).await.map(Json)
}

/// `cron rm ID`: cancels an active job (a heartbeat check is removed from `HEARTBEAT.md`).
pub async fn remove_job(s: &ControlState, id: i64) -> Result<Done, ApiError> {
    on(s)?;
    let job = s.0.store.job(id).await.map_err(ApiError::internal)?;
    match job {
        Some(job) if job.heartbeat && job.state == JobState::Active => Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("job {id} is the heartbeat check {:?}: remove it from HEARTBEAT.md", job.name),
        )),
        Some(_) if s.0.store.cancel_job(id, None).await.map_err(ApiError::internal)? => {
            Ok(Done { message: format!("job {id} cancelled") })
        }
        _ => Err(ApiError::not_found(format!("no active job {id}"))),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RunsQuery {
    job: Option<i64>,
    limit: Option<i64>,
}

async fn runs(
    State(s): State<ControlState>,
    query: Result<Query<RunsQuery>, QueryRejection>,
) -> Result<Json<CronRunList>, ApiError> {
    let Query(query) = query?;
    job_runs(&s, query.job, query.limit).await.map(Json)
}

/// `cron runs [--job ID]`: the newest runs first.
pub async fn job_runs(
    s: &ControlState,
    job: Option<i64>,
    limit: Option<i64>,
) -> Result<CronRunList, ApiError> {
    on(s)?;
    let limit = limit.unwrap_or(20).clamp(1, MAX_ROWS);
    let rows = s.0.store.job_runs(job, limit).await.map_err(ApiError::internal)?;
    let runs = rows
        .into_iter()
        .map(|r| CronRun {
            id: r.id,
            job_id: r.job_id,
            scheduled_at: r.scheduled_at,
            started_at: r.started_at,
            ended_at: r.ended_at,
            outcome: r.outcome.as_str().to_owned(),
            detail: r.detail,
            tokens: r.prompt_tokens + r.completion_tokens + r.task_tokens,
            times: r.times,
            message: r.message,
            message_id: r.message_id,
        })
        .collect();
    Ok(CronRunList { runs })
}
