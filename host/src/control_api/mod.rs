//! The control API: HTTP + JSON on a Unix socket (`<data dir>/nexbot.sock`, mode 0600) for
//! `nexbot-ctl`, and `GET /metrics` (also on an optional TCP address, metrics only).
//!
//! Why this shape: handlers are thin (axum extracts, a plain function of [`ops`] answers),
//! so each answer is testable without HTTP and nothing here knows more than the pool's,
//! store's and status board's own APIs. Types are `nexbot_control`'s, shared with the client.
//! A bad request gets a JSON error naming what was wrong; nothing an operator sends can panic
//! the daemon (a handler that panicked would still only end that request).

mod actions;
pub mod approvals;
pub mod cron;
pub mod early;
pub mod mcp;
pub mod memory;
pub mod metrics;
pub mod ops;
pub mod reload;
pub mod secrets;
pub mod web;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use nexbot_control::{paths, BackupRequest, ErrorBody};
use nexbot_docker::Pool;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::app::{App, Stage};
use crate::config::Config;
use crate::status::StatusBoard;
use crate::store::Store;

pub use reload::Reloader;

/// What the control API reads and acts on. Cheap to clone.
#[derive(Clone)]
pub struct ControlState(pub(crate) Arc<Inner>);

pub(crate) struct Inner {
    pub store: Store,
    pub pool: Option<Arc<Pool>>,
    pub egress: Option<Arc<dyn Fn() -> crate::egress::MetricsSnapshot + Send + Sync>>,
    /// The egress audit file and its chain's walk (`None` without a sandbox).
    pub audit: Option<(PathBuf, Arc<ops::AuditVerifier>)>,
    /// The chained audit the operator's actions are written to (`actions.rs`).
    pub trail: Option<Arc<dyn nexbot_core::audit::AuditTrail>>,
    pub relay: Option<Arc<crate::sandbox::RelayCounters>>,
    pub delegation_off: Option<String>,
    pub status: StatusBoard,
    /// The main agent's provider and model, and its LLM client's counters.
    pub llm_target: (String, String),
    pub llm_stats: Arc<nexbot_llm::ChainStats>,
    /// The providers' names, in the order of `llm_stats.providers`.
    pub llm_providers: Vec<String>,
    /// The spending caps and counts, for `status`.
    pub spend: Arc<crate::spend::Spend>,
    pub data_dir: PathBuf,
    pub started: Instant,
    pub reloader: Option<Arc<Reloader>>,
    /// Degraded from the start (e.g. the Telegram channel off), and what the model probe
    /// last found (when, and what was wrong; `None` inside: nothing).
    pub degraded: Vec<String>,
    pub model_probe: std::sync::Mutex<Option<nexbot_llm::CallOutcome>>,
    /// The scheduler's counters (`None`: it is off) and its jobs' default time zone.
    pub scheduler: Option<Arc<crate::scheduler::SchedulerStats>>,
    pub scheduler_zone: chrono_tz::Tz,
    /// Tokens a job's run may use when the job names no budget of its own.
    pub job_token_budget: u64,
    /// The live skill set, for `skills ls`.
    pub skills: Option<crate::skills::Skills>,
    /// The secrets vault, for `secrets set|ls|rm` (off without a master key; it says why).
    pub vault: Arc<crate::vault::Vault>,
    /// The egress questions (`None` without a sandbox) and the mode in a sentence.
    pub approvals: Option<Arc<crate::approvals::Approvals>>,
    pub egress_mode: String,
    /// The MCP servers (`None` without a sandbox: they run in it).
    pub mcp: Option<Arc<crate::mcp::McpServers>>,
    /// The owner's self-test (`None` without a sandbox).
    pub selftest: Option<Arc<crate::selftest::SelfTest>>,
    /// The web dashboard (`None`: off, `control.web_addr` unset).
    pub web: Option<Arc<web::Web>>,
    /// Why the dashboard is off although `control.web_addr` is set (its port could not be
    /// taken), for `web login`'s answer.
    pub web_off: Option<String>,
}

impl std::fmt::Debug for ControlState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlState").field("data_dir", &self.0.data_dir).finish_non_exhaustive()
    }
}

/// An answer that is not a success: a status and a message for the operator.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self { status, message: message.into() }
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }
    pub fn internal(message: impl std::fmt::Display) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, message.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(ErrorBody { error: self.message, starting: false })).into_response()
    }
}

impl From<QueryRejection> for ApiError {
    fn from(e: QueryRejection) -> Self {
        Self::bad_request(format!("bad query: {}", e.body_text()))
    }
}

impl From<JsonRejection> for ApiError {
    fn from(e: JsonRejection) -> Self {
        Self::bad_request(format!("bad JSON body: {}", e.body_text()))
    }
}

type Answer<T> = Result<Json<T>, ApiError>;

/// `?n=N`: the last N lines of a log.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LogsQuery {
    pub n: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TasksQuery {
    limit: Option<i64>,
    chat: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MessagesQuery {
    failed: Option<bool>,
    limit: Option<i64>,
}

/// Every endpoint of the control API.
pub fn router(state: ControlState) -> Router {
    Router::new()
        .route(
            paths::STATUS,
            get(|State(s): State<ControlState>| async move {
                Ok::<_, ApiError>(Json(ops::status(&s).await))
            }),
        )
        .route(
            paths::HEALTH,
            get(|State(s): State<ControlState>| async move {
                Ok::<_, ApiError>(Json(ops::health(&s).await))
            }),
        )
        .route(
            paths::SUBAGENTS,
            get(|State(s): State<ControlState>| async move { ops::subagents(&s).map(Json) }),
        )
        .route("/v1/subagents/{id}/logs", get(logs))
        .route(
            "/v1/subagents/{id}/restart",
            post(|State(s): State<ControlState>, UrlPath(id): UrlPath<String>| async move {
                ops::restart(&s, &id).map(Json)
            }),
        )
        .route(
            "/v1/subagents/{id}/kill",
            post(|State(s): State<ControlState>, UrlPath(id): UrlPath<String>| async move {
                ops::kill(&s, &id).await.map(Json)
            }),
        )
        .route(paths::TASKS, get(tasks))
        .route(
            "/v1/tasks/{id}",
            get(|State(s): State<ControlState>, UrlPath(id): UrlPath<String>| async move {
                ops::task(&s, &id).await.map(Json)
            }),
        )
        .route(paths::MESSAGES, get(messages))
        .route(
            paths::RELOAD,
            post(|State(s): State<ControlState>| async move { ops::reload(&s).await.map(Json) }),
        )
        .route(paths::BACKUP, post(backup))
        .route(
            paths::SKILLS,
            get(|State(s): State<ControlState>| async move { Json(ops::skills(&s).await) }),
        )
        .route(paths::SKILLS_ALLOW, post(allow_skill))
        .route(paths::AUDIT_VERIFY, get(audit_verify))
        .route(paths::SELFTEST, post(selftest))
        .route(
            paths::WEB_LOGIN,
            post(|State(s): State<ControlState>| async move { web::login_link(&s).map(Json) }),
        )
        .route(paths::METRICS, get(metrics_text))
        .merge(cron::routes())
        .merge(memory::routes())
        .merge(secrets::routes())
        .merge(approvals::routes())
        .merge(mcp::routes())
        .fallback(|| async { ApiError::not_found("no such endpoint (see `nexbot-ctl --help`)") })
        .layer(axum::middleware::from_fn_with_state(state.clone(), actions::by_ctl))
        .with_state(state)
}

async fn logs(
    State(s): State<ControlState>,
    UrlPath(id): UrlPath<String>,
    query: Result<Query<LogsQuery>, QueryRejection>,
) -> Answer<nexbot_control::LogLines> {
    let Query(query) = query?;
    ops::logs(&s, &id, query.n).map(Json)
}

async fn tasks(
    State(s): State<ControlState>,
    query: Result<Query<TasksQuery>, QueryRejection>,
) -> Answer<nexbot_control::TaskList> {
    let Query(query) = query?;
    ops::tasks(&s, query.limit, query.chat.as_deref()).await.map(Json)
}

async fn messages(
    State(s): State<ControlState>,
    query: Result<Query<MessagesQuery>, QueryRejection>,
) -> Answer<nexbot_control::MessageList> {
    let Query(query) = query?;
    ops::messages(&s, query.failed.unwrap_or(false), query.limit).await.map(Json)
}

async fn audit_verify(State(s): State<ControlState>) -> Answer<nexbot_control::AuditCheck> {
    let check = tokio::task::spawn_blocking(move || ops::audit_check(&s)).await;
    check.map_err(ApiError::internal)?.map(Json)
}

async fn selftest(State(s): State<ControlState>) -> Answer<nexbot_selftest::Report> {
    let Some(test) = &s.0.selftest else {
        let why = s.0.delegation_off.as_deref().unwrap_or("the sandbox is not running");
        let message = format!("no self-test: there is no sandbox to attack ({why})");
        return Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, message));
    };
    match test.run().await {
        Some(report) => Ok(Json(report)),
        None => Err(ApiError::new(
            StatusCode::CONFLICT,
            "a self-test is already running; ask again when it has ended",
        )),
    }
}

async fn backup(
    State(s): State<ControlState>,
    body: Result<Json<BackupRequest>, JsonRejection>,
) -> Answer<nexbot_control::BackupReport> {
    let Json(request) = body?;
    ops::backup(&s, Path::new(&request.path)).await.map(Json)
}

async fn allow_skill(
    State(s): State<ControlState>,
    body: Result<Json<nexbot_control::SkillAllow>, JsonRejection>,
) -> Answer<nexbot_control::Done> {
    let Json(request) = body?;
    ops::allow_skill(&s, &request, approvals::OPERATOR).await.map(Json)
}

async fn metrics_text(State(s): State<ControlState>) -> Result<Response, ApiError> {
    let text = metrics::render(&s).await.map_err(ApiError::internal)?;
    Ok(([(axum::http::header::CONTENT_TYPE, metrics::CONTENT_TYPE)], text).into_response())
}

/// Binds the control API's Unix socket at `path`, mode 0600 from the start (no window where
/// another user could connect). A socket file left by a dead daemon is replaced: the data
/// directory's lock says no live daemon owns it.
pub fn bind_unix(path: &Path) -> std::io::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    if path.symlink_metadata().is_ok() {
        std::fs::remove_file(path)?;
    }
    let old = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o177));
    let bound = tokio::net::UnixListener::bind(path);
    rustix::process::umask(old);
    let listener = bound?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// Starts the control API (and the metrics-only TCP listener when `control.metrics_addr` is
/// set) as `Stage::Service` parts of `app`, and the daily pruning of old records. Returns the
/// socket's path; an error says why the control API is off (the daemon serves on without it).
/// `early`: the socket as the daemon opened it before the app started (answering "starting"
/// meanwhile); the control API takes it over, or binds the socket itself when there is none.
pub async fn attach(
    app: &mut App,
    config: &Config,
    reloader: Option<Arc<Reloader>>,
    degraded: Vec<String>,
    early: Option<early::EarlySocket>,
) -> Result<PathBuf, String> {
    let retention = config.storage.retention();
    let store = app.store().clone();
    let memory_days = config.memory.prune_unused_days;
    app.spawn("retention", Stage::Service, move |stop| {
        prune_daily(store, retention, memory_days, stop)
    });
    if !config.control.enabled {
        return Err("control.enabled = false".to_owned());
    }
    // The dashboard's port is taken at once: a port in use leaves the dashboard off (said in
    // health) and the control API on.
    let mut degraded = degraded;
    let mut web_off = None;
    let web_listener = config.control.web_addr.and_then(|addr| match tcp_listener(addr) {
        Ok(listener) => Some((addr, listener)),
        Err(e) => {
            tracing::error!(%addr, error = %e, "the dashboard is off: cannot listen");
            degraded.push(format!("the dashboard: cannot listen on {addr}: {e}"));
            web_off = Some(format!("cannot listen on control.web_addr {addr}: {e}"));
            None
        }
    });
    let agent = app.agent().clone();
    let (provider, model) = agent.model().target();
    let llm_providers =
        agent.model().chain().providers().iter().map(|p| p.name().to_owned()).collect();
    let state = ControlState(Arc::new(Inner {
        store: app.store().clone(),
        pool: app.sandbox().map(|s| s.pool().clone()),
        egress: app.sandbox().map(|s| {
            let source = s.egress().metrics_source();
            Arc::new(source) as Arc<dyn Fn() -> crate::egress::MetricsSnapshot + Send + Sync>
        }),
        audit: app.sandbox().map(|s| {
            let verifier = s.egress().audit_verifier();
            (s.egress().audit_path().to_owned(), Arc::new(verifier) as Arc<ops::AuditVerifier>)
        }),
        trail: app.trail(),
        relay: app.sandbox().map(|s| s.relay_counters()),
        delegation_off: app.delegation_off().map(str::to_owned),
        status: app.status().clone(),
        llm_target: (provider.to_owned(), model.to_owned()),
        llm_stats: agent.model().stats().clone(),
        llm_providers,
        spend: agent.model().spend().clone(),
        data_dir: config.data_dir(),
        started: app.started(),
        reloader,
        degraded,
        model_probe: std::sync::Mutex::new(None),
        scheduler: app.scheduler().cloned(),
        scheduler_zone: config.scheduler.default_zone(&config.llm.caps),
        job_token_budget: config.scheduler.job_token_budget,
        skills: agent.skills().cloned(),
        vault: app.vault().clone(),
        approvals: app.approvals().cloned(),
        egress_mode: crate::approvals::mode_line(&config.egress),
        mcp: app.sandbox().map(|s| s.mcp().clone()),
        selftest: app.selftest().cloned(),
        web: web_listener
            .as_ref()
            .map(|(addr, _)| Arc::new(web::Web::new(*addr, config.control.web_remote))),
        web_off,
    }));
    let probed = state.clone();
    let probe_config = config.clone();
    app.spawn("model probe", Stage::Service, move |stop| probe_model(probed, probe_config, stop));
    let path = config.control_socket();
    let listener = match early {
        Some(early) => early.hand_over().await,
        None => bind_unix(&path),
    }
    .map_err(|e| format!("cannot listen on {}: {e}", path.display()))?;
    let socket = path.clone();
    let api_state = state.clone();
    app.spawn("control API", Stage::Service, move |stop| async move {
        let served = axum::serve(listener, router(api_state))
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "the control API stopped");
        }
        let _ = std::fs::remove_file(&socket);
    });
    if let Some((addr, listener)) = web_listener {
        tracing::info!(%addr, "the dashboard is on (log in with `nexbot-ctl web login`)");
        let web_state = state.clone();
        app.spawn("dashboard", Stage::Service, move |stop| web::serve(listener, web_state, stop));
    }
    if let Some(addr) = config.control.metrics_addr {
        let listener =
            tcp_listener(addr).map_err(|e| format!("cannot listen for metrics on {addr}: {e}"))?;
        tracing::info!(%addr, "metrics listening (GET /metrics only)");
        app.spawn("metrics", Stage::Service, move |stop| async move {
            let app = Router::new()
                .route(paths::METRICS, get(metrics_text))
                .fallback(|| async { ApiError::not_found("only /metrics is served here") })
                .with_state(state);
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(async move { stop.cancelled().await })
                .await;
            if let Err(e) = served {
                tracing::error!(error = %e, "the metrics listener stopped");
            }
        });
    }
    Ok(path)
}

/// A TCP listener on `addr` for the runtime (bound at once, so a taken port is said at start).
fn tcp_listener(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    std::net::TcpListener::bind(addr)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .and_then(tokio::net::TcpListener::from_std)
}

/// Asks the model (`GET /models`) at start and every five minutes, so health can say
/// "model unreachable" before any call (and the log says it once when it changes). Health
/// reports whichever is newer, this probe or the main agent's last real call.
async fn probe_model(state: ControlState, config: Config, stop: CancellationToken) {
    loop {
        let checks = crate::doctor::llm(&config).await;
        let problem = checks
            .iter()
            .filter(|c| c.status != crate::doctor::CheckStatus::Ok)
            .map(|c| format!("{}: {}", c.name, c.detail))
            .collect::<Vec<_>>();
        let problem = (!problem.is_empty()).then(|| problem.join("; "));
        {
            let mut last = state.0.model_probe.lock().unwrap_or_else(|p| p.into_inner());
            if last.as_ref().map(|l| &l.problem) != Some(&problem) {
                match &problem {
                    Some(p) => tracing::warn!("degraded: the model: {p}"),
                    None => tracing::info!("the model answers"),
                }
            }
            *last = Some(nexbot_llm::CallOutcome { at: std::time::Instant::now(), problem });
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(std::time::Duration::from_secs(300)) => {}
        }
    }
}

/// Deletes old records, and memories unused for `memory_days`, a minute after the start, then
/// daily.
async fn prune_daily(
    store: Store,
    retention: crate::store::Retention,
    memory_days: u32,
    stop: CancellationToken,
) {
    let mut wait = std::time::Duration::from_secs(60);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
        match store.prune(retention, crate::store::unix_now()).await {
            Ok([updates, tasks, history]) => {
                tracing::info!(updates, tasks, history, "old records pruned")
            }
            Err(e) => tracing::warn!(error = %e, "cannot prune old records"),
        }
        match store.prune_memories(memory_days, crate::store::unix_now()).await {
            Ok(0) => {}
            Ok(memories) => tracing::info!(memories, memory_days, "unused memories pruned"),
            Err(e) => tracing::warn!(error = %e, "cannot prune unused memories"),
        }
        wait = std::time::Duration::from_secs(86_400);
    }
}
