//! The control API's answers as plain functions of the daemon's parts (what the handlers in
//! `mod.rs` call).

use std::collections::BTreeMap;
use std::path::Path;

use axum::http::StatusCode;
use nexbot_control::{
    BackupReport, ChannelStatus, Done, LogLines, MessageList, MessageRow, PoolSummary,
    ReloadReport, Status, Subagent, SubagentList, TaskDetail, TaskList, TaskRow, TokenCount,
};
use nexbot_core::ChatRef;
use nexbot_docker::{ContainerSnapshot, EngineOutage, Pool, PoolError};

use super::{ApiError, ControlState};
use nexbot_store::{unix_now, TaskRecord};

/// Most rows one listing returns.
const MAX_ROWS: i64 = 1000;

fn pool(state: &ControlState) -> Result<&Pool, ApiError> {
    state.0.pool.as_deref().ok_or_else(|| {
        let why = state.0.delegation_off.as_deref().unwrap_or("no pool");
        ApiError::new(
            StatusCode::CONFLICT,
            format!("there is no subagent pool: delegation is off ({why})"),
        )
    })
}

fn pool_error(e: PoolError) -> ApiError {
    match e {
        PoolError::UnknownContainer(_) => ApiError::not_found(e.to_string()),
        PoolError::NoContainer(_) => ApiError::new(StatusCode::CONFLICT, e.to_string()),
        other => ApiError::internal(other),
    }
}

pub fn subagent(s: &ContainerSnapshot) -> Subagent {
    Subagent {
        id: s.id.clone(),
        container: s.container.clone(),
        state: s.state.as_str().to_owned(),
        room: s.room.clone(),
        uptime_secs: s.uptime_secs,
        tasks_served: s.tasks_served,
        current_task: s.current_task.clone(),
        current_task_age_ms: s.current_task_age_ms,
        last_ping_us: s.last_ping_us,
        restarts: s.restarts,
        last_restart: s.last_restart.as_ref().map(ToString::to_string),
        planned_replacements: s.planned_replacements,
        memory_bytes: s.memory_bytes,
        last_error: s.last_error.clone(),
    }
}

pub fn pool_summary(pool: &Pool) -> PoolSummary {
    let snapshot = pool.snapshot();
    let stats = pool.stats();
    let states = nexbot_docker::count_by_state(&snapshot)
        .into_iter()
        .map(|(state, n)| (state.to_owned(), n))
        .collect();
    PoolSummary {
        name: pool.config().name.clone(),
        size: pool.config().size,
        states,
        queue_depth: stats.queue_depth,
        tasks: task_outcomes(&stats.tasks),
        unplanned_restarts: stats.unplanned_restarts_total,
        planned_replacements: stats.planned_replacements_total,
        blank: stats.blank,
        bound: stats.bound,
        pending_removal: stats.pending_removal,
        engine: pool.engine_outage().map(|o| engine_line(&o, std::time::SystemTime::now())),
        runtime: Some(pool.runtime().to_owned()),
        engine_at: pool.engine_place(),
    }
}

/// The engine's outage in words, for `health` (after `engine: `, naming it the degraded
/// part), `/status`, `subagents ps` and the dashboard: since when (local time, and how
/// long), the pool's last error, and what to check first.
pub fn engine_line(outage: &EngineOutage, now: std::time::SystemTime) -> String {
    let since = chrono::DateTime::<chrono::Local>::from(outage.since).format("%H:%M:%S");
    let secs = now.duration_since(outage.since).unwrap_or_default().as_secs();
    format!(
        "unreachable since {since} ({secs} s): {} — is dockerd running? \
         `systemctl status docker`",
        outage.error
    )
}

/// The pool's task counters by outcome name.
pub fn task_outcomes(tasks: &nexbot_docker::TaskCounts) -> BTreeMap<String, u64> {
    let value = serde_json::to_value(tasks).unwrap_or_default();
    value
        .as_object()
        .map(|o| o.iter().map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0))).collect())
        .unwrap_or_default()
}

pub async fn health(state: &ControlState) -> nexbot_control::Health {
    let inner = &state.0;
    let mut problems = Vec::new();
    if let Err(e) = inner.store.size_bytes().await {
        problems.push(format!("the database does not answer: {e}"));
    }
    let mut engine = None;
    if let Some(pool) = &inner.pool {
        let now = std::time::SystemTime::now();
        engine = pool.engine_outage().map(|o| format!("engine: {}", engine_line(&o, now)));
        let snapshot = pool.snapshot();
        let warm = snapshot
            .iter()
            .filter(|s| {
                matches!(s.state, nexbot_docker::SlotState::Idle | nexbot_docker::SlotState::Busy)
            })
            .count();
        if warm == 0 {
            // The cause first: without the engine no container can come up.
            problems.extend(engine.take());
            problems.push(format!("no subagent container is warm yet (0 of {})", snapshot.len()));
        }
    }
    let mut degraded = inner.degraded.clone();
    degraded.extend(engine);
    if let Some(why) = &inner.delegation_off {
        degraded.push(format!("delegation to subagents is off: {why}"));
    }
    if let Some(problem) = model_problem(inner) {
        degraded.push(format!("the model: {problem}"));
    }
    for (name, problem) in inner.status.problems() {
        degraded.push(format!("{name}: {problem}"));
    }
    let runtime = inner.pool.as_deref().map(|pool| pool.runtime().to_owned());
    let engine_at = inner.pool.as_deref().and_then(Pool::engine_place);
    nexbot_control::Health { ready: problems.is_empty(), problems, degraded, runtime, engine_at }
}

/// What keeps the model from answering, as the newest word on it says: the probe's
/// (`GET /models`) or the main agent's last real call, whichever came later, with its age.
fn model_problem(inner: &super::Handles) -> Option<String> {
    let probe = inner.model_probe.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let call = inner.llm_stats.last_outcome();
    let (what, newest) = match (probe, call) {
        (Some(probe), Some(call)) if call.at >= probe.at => ("call", call),
        (Some(probe), _) => ("probe", probe),
        (None, Some(call)) => ("call", call),
        (None, None) => return None,
    };
    let problem = newest.problem?;
    Some(format!("{problem} (the last {what}, {}s ago)", newest.at.elapsed().as_secs()))
}

pub async fn status(state: &ControlState) -> Status {
    let inner = &state.0;
    let midnight = unix_now() - unix_now().rem_euclid(86_400);
    let tokens = inner.store.tokens_since(midnight).await.unwrap_or_default();
    Status {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        pid: std::process::id(),
        uptime_secs: inner.started.elapsed().as_secs(),
        model: inner.llm_target.1.clone(),
        data_dir: inner.data_dir.display().to_string(),
        pool: inner.pool.as_deref().map(pool_summary),
        delegation_off: inner.delegation_off.clone(),
        channels: inner
            .status
            .lines()
            .into_iter()
            // The pool, the scheduler and the skills have their own answers (`subagents ps`,
            // `cron ls`, `skills ls`).
            // The vault has its own line.
            .filter(|(name, _)| !matches!(*name, "pool" | "scheduler" | "skills" | "secrets"))
            .map(|(name, health)| ChannelStatus { name: name.to_owned(), health })
            .collect(),
        scheduler: match &inner.scheduler {
            Some(stats) => stats.line(),
            None => "off (scheduler.enabled = false)".to_owned(),
        },
        vault: nexbot_vault::status_line(&inner.vault),
        tokens_today: TokenCount {
            prompt: tokens.prompt_tokens,
            completion: tokens.completion_tokens,
        },
        database_bytes: inner.store.size_bytes().await.unwrap_or(0),
        spend: inner.spend.summary(None).await,
    }
}

pub fn subagents(state: &ControlState) -> Result<SubagentList, ApiError> {
    let pool = pool(state)?;
    let now = std::time::SystemTime::now();
    Ok(SubagentList {
        subagents: pool.snapshot().iter().map(subagent).collect(),
        pending_removal: pool.pending_removals(),
        engine: pool.engine_outage().map(|o| engine_line(&o, now)),
        runtime: Some(pool.runtime().to_owned()),
        engine_at: pool.engine_place(),
    })
}

pub fn logs(state: &ControlState, id: &str, n: Option<usize>) -> Result<LogLines, ApiError> {
    let mut lines = pool(state)?.logs(id).map_err(pool_error)?;
    keep_last(&mut lines, n);
    Ok(LogLines { id: id.to_owned(), lines })
}

/// Keeps the last `n` of `lines` (all of them without `n`).
pub fn keep_last(lines: &mut Vec<String>, n: Option<usize>) {
    if let Some(n) = n {
        let skip = lines.len().saturating_sub(n);
        lines.drain(..skip);
    }
}

pub fn restart(state: &ControlState, id: &str) -> Result<Done, ApiError> {
    let container = pool(state)?.restart(id).map_err(pool_error)?;
    tracing::info!(slot = id, container, "container restarted by the operator");
    Ok(Done { message: format!("restarting {id} (container {container} is being replaced)") })
}

pub async fn kill(state: &ControlState, id: &str) -> Result<Done, ApiError> {
    let container = pool(state)?.kill(id).await.map_err(pool_error)?;
    tracing::warn!(slot = id, container, "container killed by the operator");
    Ok(Done { message: format!("killed container {container} of {id}; a new one replaces it") })
}

fn task_row(record: &TaskRecord) -> TaskRow {
    TaskRow {
        id: record.id.clone(),
        chat: record.chat.to_string(),
        status: record.status.as_str().to_owned(),
        started_at: record.started_at,
        duration_ms: record.duration_ms,
        prompt_tokens: record.prompt_tokens,
        completion_tokens: record.completion_tokens,
        container: record.container.clone(),
        error: record.error.clone(),
    }
}

pub async fn tasks(
    state: &ControlState,
    limit: Option<i64>,
    chat: Option<&str>,
) -> Result<TaskList, ApiError> {
    let chat = chat
        .map(|c| c.parse::<ChatRef>())
        .transpose()
        .map_err(|e| ApiError::bad_request(format!("chat: {e}")))?;
    let limit = limit.unwrap_or(20).clamp(1, MAX_ROWS);
    let records =
        state.0.store.recent_tasks(chat.as_ref(), limit).await.map_err(ApiError::internal)?;
    Ok(TaskList { tasks: records.iter().map(task_row).collect() })
}

pub async fn task(state: &ControlState, id: &str) -> Result<TaskDetail, ApiError> {
    let record = state.0.store.task(id).await.map_err(ApiError::internal)?;
    let record = record.ok_or_else(|| ApiError::not_found(format!("no task {id}")))?;
    Ok(TaskDetail {
        row: task_row(&record),
        task: record.task.clone(),
        egress: record.egress.as_deref().and_then(|e| serde_json::from_str(e).ok()),
        receipt: record.receipt.clone(),
        progress: record
            .progress
            .as_deref()
            .map_or_else(Vec::new, |p| p.lines().map(str::to_owned).collect()),
    })
}

pub async fn messages(
    state: &ControlState,
    failed: bool,
    limit: Option<i64>,
) -> Result<MessageList, ApiError> {
    let limit = limit.unwrap_or(50).clamp(1, MAX_ROWS);
    let rows = state.0.store.recent_updates(failed, limit).await.map_err(ApiError::internal)?;
    Ok(MessageList {
        messages: rows
            .into_iter()
            .map(|r| MessageRow {
                update_id: r.update_id,
                chat: r.chat.to_string(),
                user_id: r.user_id,
                state: r.state.as_str().to_owned(),
                detail: r.detail,
                text: r.text,
            })
            .collect(),
    })
}

pub async fn reload(state: &ControlState) -> Result<ReloadReport, ApiError> {
    let reloader = state.0.reloader.as_ref().ok_or_else(|| {
        ApiError::new(StatusCode::CONFLICT, "this process cannot reload its settings")
    })?;
    reloader.reload().await.map_err(ApiError::bad_request)
}

pub async fn backup(state: &ControlState, path: &Path) -> Result<BackupReport, ApiError> {
    if !path.is_absolute() {
        return Err(ApiError::bad_request(format!(
            "{}: the backup path must be absolute (it is written by the daemon)",
            path.display()
        )));
    }
    let bytes =
        state.0.store.backup(path).await.map_err(|e| ApiError::bad_request(e.to_string()))?;
    tracing::info!(path = %path.display(), bytes, "database backed up");
    Ok(BackupReport { path: path.display().to_string(), bytes })
}

/// Every skill folder as the last scan saw it (the set the next turn uses).
pub async fn skills(state: &ControlState) -> nexbot_control::SkillList {
    let Some(skills) = &state.0.skills else {
        return nexbot_control::SkillList { dir: None, error: None, skills: Vec::new() };
    };
    let set = skills.current();
    let recorded = state.0.store.skill_hashes().await.unwrap_or_default();
    nexbot_control::SkillList {
        dir: skills.dir().map(|d| d.display().to_string()),
        error: set.error().map(str::to_owned),
        skills: set
            .entries()
            .iter()
            .map(|e| nexbot_control::SkillRow {
                name: e.name.clone(),
                state: e.state.as_str().to_owned(),
                reason: e.reason.clone(),
                hash: e.hash().map(str::to_owned),
                description: e.description().map(str::to_owned),
                findings: e
                    .findings()
                    .iter()
                    .map(|f| nexbot_control::SkillFinding {
                        file: f.file.clone(),
                        line: f.line,
                        rule: f.rule.as_str().to_owned(),
                        text: f.text.clone(),
                    })
                    .collect(),
                domains: e.loaded.as_ref().map_or_else(Vec::new, |l| {
                    l.skill.domains.iter().map(ToString::to_string).collect()
                }),
                secrets: e.loaded.as_ref().map_or_else(Vec::new, |l| l.skill.secrets.clone()),
                recorded_hash: recorded.get(&e.name).cloned(),
            })
            .collect(),
    }
}

/// `skills allow NAME [HASH]`: the operator accepts a skill's current content (see
/// [`nexbot_delegation::skill_grants::allow`]), recorded as done `by` (`nexbot-ctl`, `dashboard`).
pub async fn allow_skill(
    state: &ControlState,
    request: &nexbot_control::SkillAllow,
    by: &str,
) -> Result<Done, ApiError> {
    use nexbot_delegation::skill_grants::AllowError;
    let Some(skills) = &state.0.skills else {
        return Err(ApiError::not_found("no skills folder configured (set [skills] dir)"));
    };
    match nexbot_delegation::skill_grants::allow(
        skills,
        &state.0.store,
        &request.name,
        request.hash.as_deref(),
        by,
    )
    .await
    {
        Ok(hash) => Ok(Done {
            message: format!(
                "skill {} accepted at {hash}: the destinations it declares are granted to the \
                 tasks of turns that read it",
                request.name
            ),
        }),
        Err(e @ AllowError::NoSuchSkill(_)) => Err(ApiError::not_found(e.to_string())),
        Err(e @ AllowError::Store(_)) => Err(ApiError::internal(e)),
        Err(e) => Err(ApiError::bad_request(e.to_string())),
    }
}

/// Walks the egress audit file's chain (`nexbot_egress::audit_chain`).
pub type AuditVerifier = dyn Fn() -> Result<nexbot_egress::audit_chain::Verified, nexbot_egress::audit_chain::Break>
    + Send
    + Sync;

/// The audit chain walked, for `nexbot-ctl audit verify`; 409 without a sandbox (no audit
/// file). Blocking: it reads every kept audit file.
pub fn audit_check(state: &ControlState) -> Result<nexbot_control::AuditCheck, ApiError> {
    let Some((path, verify)) = &state.0.audit else {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "there is no egress audit file: the sandbox is off (subagent.enabled = false)",
        ));
    };
    let path = path.display().to_string();
    Ok(match verify() {
        Ok(v) => nexbot_control::AuditCheck {
            path,
            lines: v.lines,
            files: v.files,
            head: v.head,
            unlinked: v.unlinked,
            starts_after_rotation: v.starts_after_rotation,
            broken: None,
        },
        Err(b) => nexbot_control::AuditCheck {
            path,
            lines: 0,
            files: 0,
            head: String::new(),
            unlinked: 0,
            starts_after_rotation: false,
            broken: Some(nexbot_control::AuditBreak {
                file: b.file,
                line: b.line,
                reason: b.reason,
            }),
        },
    })
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;

    #[test]
    fn the_engine_line_says_since_when_why_and_what_to_check() {
        let since = SystemTime::now() - Duration::from_secs(42);
        let outage = EngineOutage {
            since,
            error: "replacement failed (attempt 3): Docker engine error while trying to create \
                    container x: Error in the hyper legacy client: client error (Connect)"
                .into(),
        };
        let line = engine_line(&outage, since + Duration::from_secs(42));
        let clock = chrono::DateTime::<chrono::Local>::from(since).format("%H:%M:%S");
        assert!(line.starts_with(&format!("unreachable since {clock} (42 s): ")), "{line}");
        assert!(line.contains("client error (Connect)"), "{line}");
        assert!(line.ends_with("is dockerd running? `systemctl status docker`"), "{line}");
    }
}
