//! The control API: HTTP + JSON on a Unix socket (`<data dir>/nexbot.sock`, mode 0600) for
//! `nexbot-ctl`, `GET /metrics` (also on an optional TCP address, metrics only), and the web
//! dashboard ([`web`]) over the same functions.
//!
//! Why a crate of its own: it is the daemon's only HTTP server (the one `axum` user), and what
//! it may reach is what its dependencies say: the pool, the store, the egress's counters and
//! audit, the scheduler, the vault, the questions, the MCP servers and the self-test, each
//! through its own API; no channel crate, no config file, no part of the host. The host builds
//! its [`Handles`] and starts it (`host/src/control_api.rs`).
//!
//! Why this shape: handlers are thin (axum extracts, a plain function of [`ops`] answers),
//! so each answer is testable without HTTP. Types are `nexbot_control`'s, shared with the
//! client. A bad request gets a JSON error naming what was wrong; nothing an operator sends
//! can panic the daemon (a handler that panicked would still only end that request).

mod actions;
pub mod approvals;
pub mod cron;
pub mod early;
pub mod mcp;
pub mod memory;
pub mod metrics;
pub mod ops;
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

use nexbot_core::status::StatusBoard;
use nexbot_core::BoxFuture;
use nexbot_store::Store;

/// What the control API reads and acts on. Cheap to clone.
#[derive(Clone)]
pub struct ControlState(pub(crate) Arc<Handles>);

impl ControlState {
    pub fn new(handles: Handles) -> Self {
        Self(Arc::new(handles))
    }

    /// What the model probe found now (`None`: the model answers); the log says it once when
    /// it changes. Health reports whichever is newer, this or the main agent's last real call.
    pub fn record_model_probe(&self, problem: Option<String>) {
        let mut last = self.0.model_probe.lock().unwrap_or_else(|p| p.into_inner());
        if last.as_ref().map(|l| &l.problem) != Some(&problem) {
            match &problem {
                Some(p) => tracing::warn!("degraded: the model: {p}"),
                None => tracing::info!("the model answers"),
            }
        }
        *last = Some(nexbot_llm::CallOutcome { at: Instant::now(), problem });
    }
}

/// `nexbot-ctl reload` (and SIGHUP): the config file read again, what changed applied or
/// listed as needing a restart. The host's, which knows the config.
pub trait Reload: Send + Sync {
    fn reload(&self) -> BoxFuture<'_, Result<nexbot_control::ReloadReport, String>>;
}

/// `nexbot-ctl selftest`: the owner's attacks run once (`None`: one is running already).
pub trait RunSelfTest: Send + Sync {
    fn run(&self) -> BoxFuture<'_, Option<nexbot_selftest::Report>>;
}

/// Everything the control API reads and acts on, handed over by the host at start.
pub struct Handles {
    pub store: Store,
    pub pool: Option<Arc<Pool>>,
    pub egress: Option<Arc<dyn Fn() -> nexbot_egress::MetricsSnapshot + Send + Sync>>,
    /// The egress audit file and its chain's walk (`None` without a sandbox).
    pub audit: Option<(PathBuf, Arc<ops::AuditVerifier>)>,
    /// The chained audit the operator's actions are written to (`actions.rs`).
    pub trail: Option<Arc<dyn nexbot_core::audit::AuditTrail>>,
    pub relay: Option<Arc<nexbot_egress::RelayCounters>>,
    pub delegation_off: Option<String>,
    pub status: StatusBoard,
    /// The main agent's provider and model, and its LLM client's counters.
    pub llm_target: (String, String),
    pub llm_stats: Arc<nexbot_llm::ChainStats>,
    /// The providers' names, in the order of `llm_stats.providers`.
    pub llm_providers: Vec<String>,
    /// The spending caps and counts, for `status`.
    pub spend: Arc<nexbot_agent::spend::Spend>,
    pub data_dir: PathBuf,
    pub started: Instant,
    pub reloader: Option<Arc<dyn Reload>>,
    /// Degraded from the start (e.g. the Telegram channel off), and what the model probe
    /// last found (when, and what was wrong; `None` inside: nothing).
    pub degraded: Vec<String>,
    pub model_probe: std::sync::Mutex<Option<nexbot_llm::CallOutcome>>,
    /// The scheduler's counters (`None`: it is off) and its jobs' default time zone.
    pub scheduler: Option<Arc<nexbot_scheduler::SchedulerStats>>,
    pub scheduler_zone: chrono_tz::Tz,
    /// Tokens a job's run may use when the job names no budget of its own.
    pub job_token_budget: u64,
    /// The live skill set, for `skills ls`.
    pub skills: Option<nexbot_agent::skills::Skills>,
    /// The secrets vault, for `secrets set|ls|rm` (off without a master key; it says why).
    pub vault: Arc<nexbot_vault::Vault>,
    /// The egress questions (`None` without a sandbox) and the mode in a sentence.
    pub approvals: Option<Arc<nexbot_approvals::Approvals>>,
    pub egress_mode: String,
    /// The MCP servers (`None` without a sandbox: they run in it).
    pub mcp: Option<Arc<nexbot_mcp_host::McpServers>>,
    /// The owner's self-test (`None` without a sandbox).
    pub selftest: Option<Arc<dyn RunSelfTest>>,
    /// The web dashboard (`None`: off, `control.web_addr` unset).
    pub web: Option<Arc<web::Web>>,
    /// Why the dashboard is off although `control.web_addr` is set (its port could not be
    /// taken), for `web login`'s answer.
    pub web_off: Option<String>,
}

impl std::fmt::Debug for ControlState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::fmt::Debug for Handles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handles").field("data_dir", &self.data_dir).finish_non_exhaustive()
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

/// Serves the control API on `listener` until `stop`; the socket file is removed after.
pub async fn serve(
    listener: tokio::net::UnixListener,
    socket: PathBuf,
    state: ControlState,
    stop: CancellationToken,
) {
    let served = axum::serve(listener, router(state))
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await;
    if let Err(e) = served {
        tracing::error!(error = %e, "the control API stopped");
    }
    let _ = std::fs::remove_file(&socket);
}

/// Serves `GET /metrics` alone on `listener` (`control.metrics_addr`) until `stop`.
pub async fn serve_metrics(
    listener: tokio::net::TcpListener,
    state: ControlState,
    stop: CancellationToken,
) {
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
}

/// A TCP listener on `addr` for the runtime (bound at once, so a taken port is said at start).
pub fn tcp_listener(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    std::net::TcpListener::bind(addr)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .and_then(tokio::net::TcpListener::from_std)
}
