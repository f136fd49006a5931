//! `GET /metrics`: the daemon in Prometheus' (OpenMetrics) text format, from
//! `prometheus-client`. Every value is read at scrape time from the part that owns it — the
//! pool's snapshot and counters, the store's records and ledger, the LLM client's and the
//! egress' counters — so nothing is counted twice and a scrape costs a few queries.
//!
//! Names follow Prometheus conventions: `nexbot_` prefix, `_total` on counters (added by the
//! encoder), `_seconds` and `_bytes` units.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{ControlState, Handles};

pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

type Labels = Vec<(String, String)>;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

fn counter(registry: &mut Registry, name: &str, help: &str, value: u64) {
    let c: Counter<u64, AtomicU64> = Counter::default();
    c.inc_by(value);
    registry.register(name, help, c);
}

fn gauge(registry: &mut Registry, name: &str, help: &str, value: i64) {
    let g: Gauge = Gauge::default();
    g.set(value);
    registry.register(name, help, g);
}

fn counter_family(registry: &mut Registry, name: &str, help: &str, rows: &[(Labels, u64)]) {
    let family = Family::<Labels, Counter<u64, AtomicU64>>::default();
    for (labels, value) in rows {
        family.get_or_create(labels).inc_by(*value);
    }
    registry.register(name, help, family);
}

fn gauge_family(registry: &mut Registry, name: &str, help: &str, rows: &[(Labels, i64)]) {
    let family = Family::<Labels, Gauge>::default();
    for (labels, value) in rows {
        family.get_or_create(labels).set(*value);
    }
    registry.register(name, help, family);
}

/// The kind of a restart reason, as a label value (`exited`, `oom_killed`, …).
fn restart_kind(reason: &nexbot_docker::RestartReason) -> String {
    serde_json::to_value(reason)
        .ok()
        .and_then(|v| v["kind"].as_str().map(str::to_owned))
        .unwrap_or_else(|| "other".to_owned())
}

/// The metrics text of this moment.
pub async fn render(state: &ControlState) -> Result<String, String> {
    let inner = &state.0;
    let mut registry = Registry::with_prefix("nexbot");
    gauge(
        &mut registry,
        "uptime_seconds",
        "Seconds since the daemon started",
        inner.started.elapsed().as_secs() as i64,
    );

    // One family of metrics after another, each from the part that owns it (the order is
    // the text's).
    pool_metrics(&mut registry, inner);
    task_metrics(&mut registry, inner).await?;
    scheduler_metrics(&mut registry, inner);
    telegram_metrics(&mut registry, inner).await?;
    llm_metrics(&mut registry, inner);
    egress_metrics(&mut registry, inner);
    approval_metrics(&mut registry, inner);
    relay_metrics(&mut registry, inner);
    if let Some(mcp) = &inner.mcp {
        let views = mcp.instances().await;
        mcp_servers(&mut registry, mcp.servers(), &views, &mcp.counters());
    }
    let mut text = String::new();
    encode(&mut text, &registry).map_err(|e| e.to_string())?;
    Ok(text)
}

/// The pool's containers, queue, rooms, tasks and replacements.
fn pool_metrics(registry: &mut Registry, inner: &Handles) {
    if let Some(pool) = &inner.pool {
        let snapshot = pool.snapshot();
        gauge(
            registry,
            "pool_size",
            "Containers the pool keeps warm (configured)",
            pool.config().size as i64,
        );
        let rows: Vec<(Labels, i64)> = nexbot_docker::count_by_state(&snapshot)
            .iter()
            .map(|(s, n)| (labels(&[("state", s)]), *n as i64))
            .collect();
        gauge_family(registry, "pool_containers", "Pool containers by state", &rows);
        gauge_family(
            registry,
            "pool_runtime_info",
            "The OCI runtime the pool's containers run under (runc, runsc): 1",
            &[(labels(&[("runtime", pool.runtime())]), 1)],
        );
        let pings = Family::<Labels, Gauge<f64, AtomicU64>>::default();
        for slot in &snapshot {
            if let Some(us) = slot.last_ping_us {
                pings.get_or_create(&labels(&[("slot", &slot.id)])).set(us as f64 / 1e6);
            }
        }
        registry.register(
            "pool_ping_rtt_seconds",
            "Round trip of each container's last health ping",
            pings,
        );
        let stats = pool.stats();
        gauge(
            registry,
            "pool_queue_depth",
            "Tasks waiting for a container",
            stats.queue_depth as i64,
        );
        gauge(
            registry,
            "pool_backoff_slots",
            "Slots waiting (back-off) before their next container",
            stats.backoff.len() as i64,
        );
        gauge(
            registry,
            "pool_pending_removal_containers",
            "Containers let go of but not removed yet (the engine was away); retried until gone",
            stats.pending_removal as i64,
        );
        gauge(
            registry,
            "pool_engine_unreachable",
            "1 while the pool cannot reach the Docker engine, else 0",
            i64::from(pool.engine_outage().is_some()),
        );
        let rooms: Vec<(Labels, i64)> = [("blank", stats.blank), ("chat", stats.bound)]
            .iter()
            .map(|(room, n)| (labels(&[("room", room)]), *n as i64))
            .collect();
        gauge_family(
            registry,
            "pool_containers_by_room",
            "Pool containers up: blank (never used) or bound to a chat",
            &rooms,
        );
        let r = stats.rooms;
        let room_events: Vec<(Labels, u64)> = [
            ("blank_taken", r.blanks_taken),
            ("blank_empty_wait", r.blank_empty_waits),
            ("idle_retired", r.idle_retired),
            ("yielded", r.yielded),
        ]
        .iter()
        .map(|(event, n)| (labels(&[("event", event)]), *n))
        .collect();
        counter_family(
            registry,
            "pool_room_events",
            "Blanks taken, waits with no blank ready, and containers retired for their chat",
            &room_events,
        );
        let outcomes: Vec<(Labels, u64)> = super::ops::task_outcomes(&stats.tasks)
            .iter()
            .map(|(outcome, n)| (labels(&[("outcome", outcome)]), *n))
            .collect();
        counter_family(
            registry,
            "pool_tasks",
            "Tasks the pool ran since the start, by outcome",
            &outcomes,
        );
        counter(
            registry,
            "pool_restarts",
            "Unplanned container replacements (exit, OOM, hung, operator kill)",
            stats.unplanned_restarts_total,
        );
        counter(
            registry,
            "pool_planned_replacements",
            "Planned container replacements (recycling, not clean, operator restart, timeouts)",
            stats.planned_replacements_total,
        );
        let last: Vec<(Labels, i64)> = snapshot
            .iter()
            .filter_map(|s| {
                let reason = s.last_restart.as_ref()?;
                let kind = restart_kind(reason);
                let planned = if reason.is_planned() { "true" } else { "false" };
                Some((labels(&[("slot", &s.id), ("reason", &kind), ("planned", planned)]), 1))
            })
            .collect();
        gauge_family(
            registry,
            "pool_last_restart_info",
            "Why each slot's container was last replaced",
            &last,
        );
        let memory: Vec<(Labels, i64)> = snapshot
            .iter()
            .filter_map(|s| Some((labels(&[("slot", &s.id)]), s.memory_bytes? as i64)))
            .collect();
        gauge_family(registry, "pool_memory_bytes", "Memory in use by each container", &memory);
    }
}

/// Delegated tasks from their records: started, finished by outcome, running, durations.
async fn task_metrics(registry: &mut Registry, inner: &Handles) -> Result<(), String> {
    let store = &inner.store;
    let counts = store.task_counts().await.map_err(|e| e.to_string())?;
    let started: u64 = counts.iter().map(|(_, n)| n).sum();
    counter(registry, "tasks_started", "Delegated tasks started (kept records)", started);
    let finished: Vec<(Labels, u64)> = counts
        .iter()
        .filter(|(status, _)| status != "running")
        .map(|(status, n)| (labels(&[("outcome", status)]), *n))
        .collect();
    counter_family(
        registry,
        "tasks_finished",
        "Delegated tasks finished, by outcome (kept records)",
        &finished,
    );
    let running = counts.iter().find(|(s, _)| s == "running").map_or(0, |(_, n)| *n);
    gauge(registry, "tasks_running", "Delegated tasks running now", running as i64);
    let histogram =
        Histogram::new([0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0]);
    for ms in store.task_durations_ms().await.map_err(|e| e.to_string())? {
        histogram.observe(ms as f64 / 1000.0);
    }
    registry.register("task_duration_seconds", "Duration of finished delegated tasks", histogram);
    Ok(())
}

/// The scheduler's job runs.
fn scheduler_metrics(registry: &mut Registry, inner: &Handles) {
    if let Some(sched) = &inner.scheduler {
        let n = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        for (name, help, value) in [
            ("scheduler_runs_submitted", "Job runs handed to the workers", n(&sched.submitted)),
            ("scheduler_runs_completed", "Job runs that ended ok", n(&sched.completed)),
            ("scheduler_runs_failed", "Job runs that failed or were cancelled", n(&sched.failed)),
            ("scheduler_runs_skipped", "Missed job runs recorded as skipped", n(&sched.skipped)),
            ("scheduler_runs_dropped", "Job runs dropped: the queue was full", n(&sched.dropped)),
        ] {
            counter(registry, name, help, value);
        }
        gauge(
            registry,
            "scheduler_runs_pending",
            "Job runs queued or running now",
            sched.pending.load(Ordering::Relaxed) as i64,
        );
        registry.register(
            "scheduler_run_duration_seconds",
            "Duration of finished job runs",
            sched.duration.clone(),
        );
    }
}

/// Telegram updates from the ledger, by outcome.
async fn telegram_metrics(registry: &mut Registry, inner: &Handles) -> Result<(), String> {
    let store = &inner.store;
    let updates: Vec<(Labels, u64)> = store
        .update_counts()
        .await
        .map_err(|e| e.to_string())?
        .iter()
        .map(|(state, n)| (labels(&[("outcome", state)]), *n))
        .collect();
    counter_family(
        registry,
        "telegram_updates",
        "Telegram updates by outcome (kept ledger rows)",
        &updates,
    );
    Ok(())
}

/// The main agent's LLM calls, tokens and fallbacks, and each provider's answers, failures
/// and breaker.
fn llm_metrics(registry: &mut Registry, inner: &Handles) {
    let (provider, model) = (&inner.llm_target.0, &inner.llm_target.1);
    let stats = &inner.llm_stats;
    let target = labels(&[("provider", provider), ("model", model)]);
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
    counter_family(
        registry,
        "llm_requests",
        "Main agent LLM calls",
        &[(target.clone(), load(&stats.calls))],
    );
    counter_family(
        registry,
        "llm_errors",
        "Main agent LLM calls that failed after their retries",
        &[(target.clone(), load(&stats.errors))],
    );
    let mut tokens = target.clone();
    tokens.push(("kind".into(), "prompt".into()));
    let mut completion = target;
    completion.push(("kind".into(), "completion".into()));
    counter_family(
        registry,
        "llm_tokens",
        "LLM tokens the provider reported for the main agent",
        &[(tokens, load(&stats.prompt_tokens)), (completion, load(&stats.completion_tokens))],
    );
    counter(
        registry,
        "llm_fallbacks",
        "Main agent LLM calls answered by a provider other than the first",
        load(&stats.fallbacks),
    );
    let by_provider =
        |pick: &dyn Fn(&nexbot_llm::chain::ProviderStats) -> u64| -> Vec<(Labels, u64)> {
            inner
                .llm_providers
                .iter()
                .zip(&stats.providers)
                .map(|(name, p)| (labels(&[("provider", name)]), pick(p)))
                .collect()
        };
    counter_family(
        registry,
        "llm_provider_answers",
        "Main agent LLM calls each provider answered",
        &by_provider(&|p| load(&p.answered)),
    );
    let mut failures = Vec::new();
    for (name, p) in inner.llm_providers.iter().zip(&stats.providers) {
        for (class, count) in nexbot_llm::ErrorClass::ALL.iter().zip(&p.failures) {
            let count = load(count);
            if count > 0 {
                failures.push((labels(&[("provider", name), ("class", class.as_str())]), count));
            }
        }
    }
    counter_family(
        registry,
        "llm_provider_failures",
        "Failed LLM attempts by provider and error class",
        &failures,
    );
    let open: Vec<(Labels, i64)> =
        by_provider(&|p| load(&p.breaker_open)).into_iter().map(|(l, v)| (l, v as i64)).collect();
    gauge_family(
        registry,
        "llm_provider_breaker_open",
        "1 while a provider's circuit breaker is open (skipped until a probe)",
        &open,
    );
}

/// The egress proxy's connections, the LLM relay's calls and the firewall's repairs.
fn egress_metrics(registry: &mut Registry, inner: &Handles) {
    if let Some(egress) = &inner.egress {
        let m = egress();
        let verdicts = [("allowed", m.allowed), ("denied", m.denied), ("error", m.errors)];
        let rows: Vec<(Labels, u64)> =
            verdicts.iter().map(|(v, n)| (labels(&[("verdict", v)]), *n)).collect();
        counter_family(
            registry,
            "egress_connections",
            "Egress proxy connections by verdict",
            &rows,
        );
        counter(
            registry,
            "egress_relay_calls",
            "LLM relay calls forwarded for subagents",
            m.relay_calls,
        );
        counter(
            registry,
            "egress_relay_refused",
            "LLM relay calls refused (token, budget, request)",
            m.relay_refused,
        );
        counter(
            registry,
            "egress_relay_fallbacks",
            "LLM relay calls answered by a provider other than the first",
            m.relay_fallbacks,
        );
        counter(
            registry,
            "egress_relay_tokens",
            "LLM tokens charged to subagent tasks by the relay",
            m.relay_tokens,
        );
        counter(
            registry,
            "egress_firewall_rules_reinserted",
            "Firewall rules put back after something removed them",
            nexbot_egress::firewall_rules_reinserted(),
        );
    }
}

/// The approvals' questions by how they ended, and the confirmations.
fn approval_metrics(registry: &mut Registry, inner: &Handles) {
    if let Some(approvals) = &inner.approvals {
        let m = approvals.metrics();
        let load = |n: &std::sync::atomic::AtomicU64| n.load(Ordering::Relaxed);
        let answers = [
            ("once", load(&m.once)),
            ("task", load(&m.task)),
            ("chat", load(&m.chat)),
            ("read", load(&m.read)),
            ("deny", load(&m.deny)),
            ("no_answer", load(&m.no_answer)),
            ("expired", load(&m.expired)),
        ];
        let rows: Vec<(Labels, u64)> =
            answers.iter().map(|(a, n)| (labels(&[("answer", a)]), *n)).collect();
        counter_family(
            registry,
            "egress_questions",
            "Egress questions (egress.mode = ask) by how they ended",
            &rows,
        );
        counter(
            registry,
            "egress_question_answer_ms_sum",
            "Milliseconds the answered egress questions waited for their answer, summed",
            load(&m.answer_ms_sum),
        );
        counter(
            registry,
            "egress_questions_answered",
            "Egress questions answered by someone (the count of the sum above)",
            load(&m.answered),
        );
        let rows: Vec<(Labels, u64)> = m
            .confirmations()
            .into_iter()
            .map(|((kind, answer), n)| (labels(&[("kind", kind), ("answer", answer)]), n))
            .collect();
        counter_family(
            registry,
            "confirmation_questions",
            "Confirmations (a --confirm secret's use, agent.confirm's steps) by kind and how \
             they ended",
            &rows,
        );
    }
}

/// Per-task relay tokens issued and revoked.
fn relay_metrics(registry: &mut Registry, inner: &Handles) {
    if let Some(relay) = &inner.relay {
        counter(
            registry,
            "relay_task_tokens_issued",
            "Per-task relay tokens issued",
            relay.issued.load(Ordering::Relaxed),
        );
        counter(
            registry,
            "relay_task_tokens_revoked",
            "Per-task relay tokens revoked",
            relay.revoked.load(Ordering::Relaxed),
        );
    }
}

/// Each configured MCP server's calls and instances, labelled by server (every configured one,
/// zeros included, so a dashboard sees a server before its first call).
fn mcp_servers(
    registry: &mut Registry,
    servers: &[nexbot_mcp::ServerConfig],
    views: &[nexbot_mcp_host::InstanceView],
    counters: &std::collections::HashMap<String, nexbot_mcp_host::ServerCounters>,
) {
    let per_server = |value: &dyn Fn(&str) -> u64| -> Vec<(Labels, u64)> {
        servers.iter().map(|s| (labels(&[("server", &s.name)]), value(&s.name))).collect()
    };
    let count = |pick: fn(&nexbot_mcp_host::ServerCounters) -> u64| {
        per_server(&|name| counters.get(name).map_or(0, pick))
    };
    counter_family(registry, "mcp_calls", "MCP tool calls, by server", &count(|c| c.calls));
    counter_family(
        registry,
        "mcp_tool_errors",
        "MCP tool calls the server answered as failed (isError), by server",
        &count(|c| c.tool_errors),
    );
    counter_family(
        registry,
        "mcp_failures",
        "MCP tool calls that did not complete (no session, closed, timeout, stopped), by server",
        &count(|c| c.failures),
    );
    let seconds = Family::<Labels, Counter<f64, AtomicU64>>::default();
    for server in servers {
        let ms = counters.get(&server.name).map_or(0, |c| c.duration_ms);
        seconds.get_or_create(&labels(&[("server", &server.name)])).inc_by(ms as f64 / 1000.0);
    }
    registry.register(
        "mcp_call_duration_seconds",
        "Seconds MCP tool calls took, summed (divided by mcp_calls_total: the mean), by server",
        seconds,
    );
    let of = |name: &str| -> Vec<&nexbot_mcp_host::InstanceView> {
        views.iter().filter(|v| v.server == name).collect()
    };
    let running: Vec<(Labels, i64)> =
        per_server(&|name| of(name).iter().filter(|v| v.state == "running").count() as u64)
            .into_iter()
            .map(|(l, n)| (l, n as i64))
            .collect();
    gauge_family(
        registry,
        "mcp_instances_running",
        "MCP server instances running, by server",
        &running,
    );
    counter_family(
        registry,
        "mcp_restarts",
        "MCP server instances started again after they ended unplanned, by server",
        &per_server(&|name| of(name).iter().map(|v| u64::from(v.restarts)).sum()),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use nexbot_mcp_host::{InstanceView, ServerCounters};

    fn server(name: &str) -> nexbot_mcp::ServerConfig {
        serde_json::from_value(serde_json::json!({"name": name, "command": "x"})).unwrap()
    }

    fn view(server: &str, serves: &str, state: &'static str, restarts: u32) -> InstanceView {
        InstanceView {
            server: server.into(),
            serves: serves.into(),
            state,
            container: None,
            tools: 0,
            restarts,
            last_error: None,
            up_secs: None,
            idle_secs: None,
        }
    }

    #[test]
    fn mcp_metrics_are_per_server_with_zeros_for_a_server_never_called() {
        let servers = [server("everything"), server("quiet")];
        let views = [
            view("everything", "telegram:1", "running", 1),
            view("everything", "telegram:2", "running", 0),
            view("everything", "telegram:3", "failed", 3),
        ];
        let counters = [(
            "everything".to_owned(),
            ServerCounters { calls: 7, tool_errors: 2, failures: 1, duration_ms: 2500 },
        )]
        .into();
        let mut registry = Registry::with_prefix("nexbot");
        mcp_servers(&mut registry, &servers, &views, &counters);
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        for line in [
            "nexbot_mcp_calls_total{server=\"everything\"} 7",
            "nexbot_mcp_tool_errors_total{server=\"everything\"} 2",
            "nexbot_mcp_failures_total{server=\"everything\"} 1",
            "nexbot_mcp_call_duration_seconds_total{server=\"everything\"} 2.5",
            "nexbot_mcp_instances_running{server=\"everything\"} 2",
            "nexbot_mcp_restarts_total{server=\"everything\"} 4",
            "nexbot_mcp_calls_total{server=\"quiet\"} 0",
            "nexbot_mcp_call_duration_seconds_total{server=\"quiet\"} 0.0",
            "nexbot_mcp_instances_running{server=\"quiet\"} 0",
            "nexbot_mcp_restarts_total{server=\"quiet\"} 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} is not in\n{text}");
        }
    }
}
