//! The control API (`nexbot-control-api`) wired into the daemon: its [`Handles`] built from
//! the app's parts and the config, its listeners opened and served as `Stage::Service` parts,
//! the model probe that feeds its health, and the daily pruning of old records.

use std::path::PathBuf;
use std::sync::Arc;

use nexbot_control_api::{bind_unix, tcp_listener, ControlState, Handles};
use tokio_util::sync::CancellationToken;

use crate::app::{App, Stage};
use crate::config::Config;
use crate::reload::Reloader;
use crate::store::Store;

pub use nexbot_control_api::early;

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
    let web = web_listener.as_ref().map(|(addr, _)| {
        Arc::new(nexbot_control_api::web::Web::new(*addr, config.control.web_remote))
    });
    let state = ControlState::new(handles(app, config, reloader, degraded, web, web_off));
    let probed = state.clone();
    let probe_config = config.clone();
    app.spawn("model probe", Stage::Service, move |stop| probe_model(probed, probe_config, stop));
    let path = config.control_socket();
    let listener = match early {
        Some(early) => early.hand_over().await,
        None => bind_unix(&path),
    }
    .map_err(|e| format!("cannot listen on {}: {e}", path.display()))?;
    let (socket, api_state) = (path.clone(), state.clone());
    app.spawn("control API", Stage::Service, move |stop| {
        nexbot_control_api::serve(listener, socket, api_state, stop)
    });
    if let Some((addr, listener)) = web_listener {
        tracing::info!(%addr, "the dashboard is on (log in with `nexbot-ctl web login`)");
        let web_state = state.clone();
        app.spawn("dashboard", Stage::Service, move |stop| {
            nexbot_control_api::web::serve(listener, web_state, stop)
        });
    }
    if let Some(addr) = config.control.metrics_addr {
        let listener =
            tcp_listener(addr).map_err(|e| format!("cannot listen for metrics on {addr}: {e}"))?;
        tracing::info!(%addr, "metrics listening (GET /metrics only)");
        app.spawn("metrics", Stage::Service, move |stop| {
            nexbot_control_api::serve_metrics(listener, state, stop)
        });
    }
    Ok(path)
}

/// What the control API reads and acts on, from the running app and its config.
fn handles(
    app: &App,
    config: &Config,
    reloader: Option<Arc<Reloader>>,
    degraded: Vec<String>,
    web: Option<Arc<nexbot_control_api::web::Web>>,
    web_off: Option<String>,
) -> Handles {
    let agent = app.agent().clone();
    let (provider, model) = agent.model().target();
    let llm_providers =
        agent.model().chain().providers().iter().map(|p| p.name().to_owned()).collect();
    Handles {
        store: app.store().clone(),
        pool: app.sandbox().map(|s| s.pool().clone()),
        egress: app.sandbox().map(|s| {
            let source = s.egress().metrics_source();
            Arc::new(source) as Arc<dyn Fn() -> crate::egress::MetricsSnapshot + Send + Sync>
        }),
        audit: app.sandbox().map(|s| {
            let verifier = s.egress().audit_verifier();
            let verifier = Arc::new(verifier) as Arc<nexbot_control_api::ops::AuditVerifier>;
            (s.egress().audit_path().to_owned(), verifier)
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
        reloader: reloader.map(|r| r as Arc<dyn nexbot_control_api::Reload>),
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
        selftest: app.selftest().map(|t| t.clone() as Arc<dyn nexbot_control_api::RunSelfTest>),
        web,
        web_off,
    }
}

/// Asks the model (`GET /models`) at start and every five minutes, so health can say
/// "model unreachable" before any call.
async fn probe_model(state: ControlState, config: Config, stop: CancellationToken) {
    loop {
        let checks = crate::doctor::llm(&config).await;
        let problem = checks
            .iter()
            .filter(|c| c.status != crate::doctor::CheckStatus::Ok)
            .map(|c| format!("{}: {}", c.name, c.detail))
            .collect::<Vec<_>>();
        state.record_model_probe((!problem.is_empty()).then(|| problem.join("; ")));
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
