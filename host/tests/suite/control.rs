//! The control API of the real `nexbot serve`: its socket (mode 0600), answers, JSON errors,
//! backup, reload, one daemon per data directory, and `/metrics` (parsed as Prometheus text)
//! against the pool, the task records and the Telegram ledger.

use crate::common;

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use common::{base_env, echo, is_main, tool_results, Leftovers, Serving, TempWorkspace};
use nexbot_control::{
    paths, BackupReport, Client, ClientError, Done, MessageList, ReloadReport, Status,
    SubagentList, TaskDetail, TaskList,
};
use nexbot_tests::scripted_llm::{last_user, ScriptedLlm, Step};
use nexbot_tests::telegram::TelegramFixture;
use serde_json::{json, Value};

const OWNER: i64 = 6001;
const LATECOMER: i64 = 6002;
const LIMIT: Duration = Duration::from_secs(90);

fn telegram_env(env: &mut Vec<(String, String)>, tg: &TelegramFixture) {
    common::telegram_env(env, tg, OWNER);
}

fn client(ws: &TempWorkspace) -> Client {
    Client::new(ws.dir.join("nexbot.sock"))
}

#[tokio::test]
async fn the_control_api_answers_on_a_private_socket_and_bad_requests_get_json_errors() {
    let tg = TelegramFixture::start().await;
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(echo);
    let ws = TempWorkspace::init("ctl-api");
    let mut env = base_env(&llm.base_url());
    telegram_env(&mut env, &tg);
    let serving = Serving::start(&ws.config(), &env, LIMIT).await;
    serving.wait_log("the control API is on", LIMIT).await;
    let socket = ws.dir.join("nexbot.sock");
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "socket mode {mode:o}");

    let api = client(&ws);
    let status: Status = api.get(paths::STATUS).await.unwrap();
    assert_eq!(status.model, "scripted");
    assert!(status.pool.is_none());
    assert!(status.delegation_off.as_deref().unwrap_or("").contains("subagent.enabled"));
    assert!(status.channels.iter().any(|c| c.name == "telegram"), "{status:?}");
    assert!(status.scheduler.starts_with("on: "), "{status:?}");
    assert!(!status.channels.iter().any(|c| c.name == "scheduler"), "{status:?}");
    assert!(status.database_bytes > 0);
    // Ready (store open; no pool to warm), and it says what is degraded.
    let health: nexbot_control::Health = api.get(paths::HEALTH).await.unwrap();
    assert!(health.ready, "{health:?}");
    assert_eq!(health.runtime, None, "no pool, no wall to name");
    assert!(
        health.degraded.iter().any(|d| d.contains("delegation to subagents is off")),
        "{health:?}"
    );
    assert!(!health.degraded.iter().any(|d| d.contains("Telegram")), "{health:?}");
    // No pool: a clear error, not an empty list.
    let err = api.get::<SubagentList>(paths::SUBAGENTS).await.unwrap_err();
    assert!(matches!(err, ClientError::Daemon { status: 409, .. }), "{err}");
    assert!(err.to_string().contains("delegation is off"), "{err}");

    // A message makes history and a ledger row.
    tg.user_says(OWNER, OWNER, "remember this line").await;
    tg.wait_bot_messages(OWNER, |m| m.iter().any(|m| m.text.contains("echo: remember")), LIMIT)
        .await;
    // The ledger marks the row answered once the send returned, which may be just after the
    // fixture saw the message: wait for it (the state is asserted, not a time).
    let deadline = std::time::Instant::now() + LIMIT;
    let messages = loop {
        let messages: MessageList = api.get(paths::MESSAGES).await.unwrap();
        let done = messages.messages.first().is_some_and(|m| m.state != "pending");
        if done || std::time::Instant::now() > deadline {
            break messages;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(messages.messages.len(), 1);
    assert_eq!(messages.messages[0].state, "answered");
    let failed: MessageList = api.get(&format!("{}?failed=true", paths::MESSAGES)).await.unwrap();
    assert!(failed.messages.is_empty());
    let tasks: TaskList = api.get(paths::TASKS).await.unwrap();
    assert!(tasks.tasks.is_empty());

    // Bad requests: JSON errors that say what was wrong; the daemon serves on.
    for (path, needle) in [
        ("/v1/tasks?limit=many", "bad query"),
        ("/v1/tasks?chat=nonsense", "chat"),
        ("/v1/tasks/no-such-task", "no task"),
        ("/v1/nothing-here", "no such endpoint"),
    ] {
        let err = api.get::<Value>(path).await.unwrap_err();
        assert!(matches!(err, ClientError::Daemon { .. }), "{path}: {err}");
        assert!(err.to_string().contains(needle), "{path}: {err}");
    }
    let err = api.post::<_, Value>(paths::BACKUP, &json!({"where": "x"})).await.unwrap_err();
    assert!(err.to_string().contains("bad JSON body"), "{err}");
    let err = api.post::<_, BackupReport>(paths::BACKUP, &json!({"path": "relative.db"})).await;
    assert!(err.unwrap_err().to_string().contains("must be absolute"));

    // Backup: a consistent copy that opens and holds the history and the ledger.
    let copy = std::env::temp_dir().join(format!("nxh-backup-{}.db", std::process::id()));
    let _ = std::fs::remove_file(&copy);
    let report: BackupReport =
        api.post(paths::BACKUP, &json!({"path": copy.display().to_string()})).await.unwrap();
    assert!(report.bytes > 0);
    let mode = std::fs::metadata(&copy).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the backup is private");
    let db = rusqlite::Connection::open(&copy).unwrap();
    let history: String =
        db.query_row("SELECT content FROM history WHERE role = 'user'", [], |r| r.get(0)).unwrap();
    assert_eq!(history, "remember this line");
    let ledger: i64 =
        db.query_row("SELECT COUNT(*) FROM telegram_updates", [], |r| r.get(0)).unwrap();
    assert_eq!(ledger, 1);
    let again = api
        .post::<_, BackupReport>(paths::BACKUP, &json!({"path": copy.display().to_string()}))
        .await;
    assert!(again.unwrap_err().to_string().contains("exists already"));
    let _ = std::fs::remove_file(&copy);

    // Metrics: parse as Prometheus text; the ledger's count is there.
    let text = api.get_text(paths::METRICS).await.unwrap();
    let samples = parse_metrics(&text);
    assert_eq!(
        samples.get("nexbot_telegram_updates_total{outcome=answered}"),
        Some(&1.0),
        "{text}"
    );
    let llm_calls: f64 = samples
        .iter()
        .filter(|(k, _)| k.starts_with("nexbot_llm_requests_total{"))
        .map(|(_, v)| v)
        .sum();
    assert_eq!(llm_calls, 1.0, "{text}");

    let log = serving.stop(LIMIT).await;
    assert!(!socket.exists(), "the socket is removed at shutdown");
    assert!(!log.contains(tg.token()));
}

/// The degraded parts health names now, asked until `done` holds of them (`LIMIT`).
async fn degraded_until(api: &Client, done: impl Fn(&[String]) -> bool) -> Vec<String> {
    let start = std::time::Instant::now();
    loop {
        let health: nexbot_control::Health = api.get(paths::HEALTH).await.unwrap();
        if done(&health.degraded) {
            return health.degraded;
        }
        assert!(start.elapsed() < LIMIT, "health still says {health:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn names(degraded: &[String], part: &str) -> bool {
    degraded.iter().any(|d| d.starts_with(part))
}

#[tokio::test]
async fn health_says_what_the_last_model_call_found_at_once() {
    // Nothing answers on the model's address yet: the start-up probe cannot reach it.
    let addr = nexbot_tests::free_loopback_addr();
    let tg = TelegramFixture::start().await;
    let ws = TempWorkspace::init("ctl-model-health");
    let mut env = base_env(&format!("http://{addr}/v1"));
    telegram_env(&mut env, &tg);
    let serving = Serving::start(&ws.config(), &env, LIMIT).await;
    serving.wait_log("the control API is on", LIMIT).await;
    let api = client(&ws);
    let degraded = degraded_until(&api, |d| names(d, "the model")).await;
    let model = degraded.iter().find(|d| d.starts_with("the model")).unwrap();
    assert!(model.contains("the last probe"), "{degraded:?}");

    // The model comes up and answers a real call: health says so at once, not at the next
    // probe (five minutes later).
    let llm = ScriptedLlm::start_on(addr, vec![]).await;
    llm.set_responder(echo);
    tg.user_says(OWNER, OWNER, "are you there").await;
    tg.wait_bot_messages(OWNER, |m| m.iter().any(|m| m.text == "echo: are you there"), LIMIT).await;
    let health: nexbot_control::Health = api.get(paths::HEALTH).await.unwrap();
    assert!(!names(&health.degraded, "the model"), "{health:?}");

    // A call that fails sets it again, naming the call and its age.
    llm.set_responder(|_| Step::status(503, r#"{"error":{"message":"overloaded now"}}"#));
    tg.user_says(OWNER, OWNER, "and now").await;
    tg.wait_bot_messages(OWNER, |m| m.len() >= 2, LIMIT).await;
    let health: nexbot_control::Health = api.get(paths::HEALTH).await.unwrap();
    let model = health.degraded.iter().find(|d| d.starts_with("the model"));
    let model = model.unwrap_or_else(|| panic!("{health:?}"));
    assert!(model.contains("overloaded now") && model.contains("the last call"), "{model}");
    serving.stop(LIMIT).await;
}

#[tokio::test]
async fn an_unreachable_telegram_api_is_a_degraded_part_until_it_answers_again() {
    let tg = TelegramFixture::start().await;
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(echo);
    let ws = TempWorkspace::init("ctl-tg-down");
    let mut env = base_env(&llm.base_url());
    telegram_env(&mut env, &tg);
    let serving = Serving::start(&ws.config(), &env, LIMIT).await;
    serving.wait_log("the control API is on", LIMIT).await;
    let api = client(&ws);
    tg.user_says(OWNER, OWNER, "before").await;
    tg.wait_bot_messages(OWNER, |m| !m.is_empty(), LIMIT).await;
    assert!(!names(&degraded_until(&api, |_| true).await, "telegram"));

    // Every Bot API connection is cut: telegram is degraded (the token is fine).
    tg.down_for(Duration::from_secs(600)).await;
    let degraded = degraded_until(&api, |d| names(d, "telegram")).await;
    let line = degraded.iter().find(|d| d.starts_with("telegram")).unwrap();
    assert!(line.contains("cannot reach the Bot API"), "{degraded:?}");
    // Back: the next good poll clears it.
    tg.down_for(Duration::ZERO).await;
    degraded_until(&api, |d| !names(d, "telegram")).await;
    serving.stop(LIMIT).await;
}

/// Samples of a Prometheus text exposition, as `name{label=value,...}` (labels sorted) → value.
/// The wall the containers run behind (the runtime the run asked for), named where the
/// operator looks: `subagents ps`, `health` and `status`. Returns its name.
async fn the_wall_is_named(api: &Client, ps: &SubagentList) -> String {
    let runtime = nexbot_tests::expected_runtime();
    assert_eq!(ps.runtime.as_deref(), Some(runtime.as_str()));
    let health: nexbot_control::Health = api.get(paths::HEALTH).await.unwrap();
    assert_eq!(health.runtime.as_deref(), Some(runtime.as_str()), "{health:?}");
    let status: nexbot_control::Status = api.get(paths::STATUS).await.unwrap();
    assert_eq!(status.pool.and_then(|p| p.runtime).as_deref(), Some(runtime.as_str()));
    runtime
}

fn parse_metrics(text: &str) -> HashMap<String, f64> {
    let lines = text.lines().map(|l| Ok(l.to_owned()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("Prometheus text");
    let mut out = HashMap::new();
    for sample in scrape.samples {
        let mut labels: Vec<String> =
            sample.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        labels.sort();
        let key = if labels.is_empty() {
            sample.metric.clone()
        } else {
            format!("{}{{{}}}", sample.metric, labels.join(","))
        };
        let value = match sample.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => continue,
        };
        out.insert(key, value);
    }
    out
}

#[tokio::test]
async fn one_daemon_per_data_directory_and_reload_applies_an_allow_list_live() {
    let tg = TelegramFixture::start().await;
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(echo);
    let ws = TempWorkspace::init("ctl-reload");
    let mut env = base_env(&llm.base_url());
    telegram_env(&mut env, &tg);
    let serving = Serving::start(&ws.config(), &env, LIMIT).await;
    serving.wait_log("the control API is on", LIMIT).await;

    // A second daemon on the same data directory refuses, naming the first one's pid.
    let second = common::nexbot(&["serve"], &ws.config(), &env).output().await.unwrap();
    assert!(!second.status.success());
    let said = String::from_utf8_lossy(&second.stderr);
    assert!(said.contains("another nexbot daemon (pid"), "{said}");

    // Not allowed yet.
    tg.user_says(LATECOMER, LATECOMER, "let me in").await;
    tg.wait_bot_messages(LATECOMER, |m| !m.is_empty(), LIMIT).await;
    // The config file gains the user; reload applies it without a restart.
    let config = std::fs::read_to_string(ws.config()).unwrap();
    let config = config.replace("allowed_users = []", &format!("allowed_users = [{LATECOMER}]"));
    assert!(config.contains(&LATECOMER.to_string()), "the default config has allowed_users = []");
    std::fs::write(ws.config(), config.replace("max_iterations = 20", "max_iterations = 21"))
        .unwrap();
    let report: ReloadReport = client(&ws).post(paths::RELOAD, &json!({})).await.unwrap();
    assert_eq!(report.applied, ["telegram.allowed_users"], "{report:?}");
    assert!(report.needs_restart.contains(&"[agent]".to_owned()), "{report:?}");
    tg.user_says(LATECOMER, LATECOMER, "now?").await;
    tg.wait_bot_messages(LATECOMER, |m| m.iter().any(|m| m.text == "echo: now?"), LIMIT).await;
    // SIGHUP does the same (and a broken file is refused with the reason, nothing applied).
    std::fs::write(ws.config(), "this is [not toml").unwrap();
    let err = client(&ws).post::<_, ReloadReport>(paths::RELOAD, &json!({})).await.unwrap_err();
    assert!(err.to_string().contains("not reloaded"), "{err}");
    serving.stop(LIMIT).await;
}

async fn docker_ps(label: &str) -> Vec<String> {
    let out = tokio::process::Command::new("docker")
        .args(["ps", "-q", "--no-trunc", "--filter", &format!("label={label}")])
        .output()
        .await
        .unwrap();
    let mut ids: Vec<String> =
        String::from_utf8_lossy(&out.stdout).split_whitespace().map(str::to_owned).collect();
    ids.sort();
    ids
}

#[tokio::test]
async fn subagents_ps_restart_kill_logs_and_metrics_match_the_pool_and_the_records() {
    let Some(_docker) = nexbot_tests::docker_or_skip("control_pool").await else { return };
    let tg = TelegramFixture::start().await;
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(|body| {
        if !is_main(body) {
            let task = body["messages"].to_string();
            if task.contains("sleep long") {
                return match tool_results(body) {
                    0 => Step::tool_call("run_command", json!({"command": "sleep 120"})),
                    _ => Step::text("slept"),
                };
            }
            return Step::text("SUB-OK");
        }
        match (tool_results(body), last_user(body).as_str()) {
            (0, "quick") => Step::tool_call("delegate_to_sub_agent", json!({"task": "say ok"})),
            (0, "long") => Step::tool_call("delegate_to_sub_agent", json!({"task": "sleep long"})),
            (_, _) => Step::text("turn done"),
        }
    });
    let ws = TempWorkspace::init("ctl-pool");
    let names = Leftovers::new("ctlpool");
    let mut env = base_env(&llm.base_url());
    env.extend(names.env());
    env.push(("NEXBOT_SUBAGENT__POOL_SIZE".into(), "2".into()));
    telegram_env(&mut env, &tg);
    let serving = Serving::start(&ws.config(), &env, LIMIT).await;
    serving.wait_log("the control API is on", LIMIT).await;
    let api = client(&ws);
    let label = format!("nexbot.pool={}", names.pool);

    // ps: the pool's containers, as docker sees them by label.
    let workspace = &ws;
    let wait_ps = |want: usize| async move {
        let start = std::time::Instant::now();
        loop {
            let list: SubagentList = client(workspace).get(paths::SUBAGENTS).await.unwrap();
            if list.subagents.iter().filter(|s| s.state == "idle").count() == want {
                return list;
            }
            assert!(start.elapsed() < LIMIT, "not {want} idle: {list:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    let ps = wait_ps(2).await;
    let runtime = the_wall_is_named(&api, &ps).await;
    let mut short: Vec<String> = ps.subagents.iter().filter_map(|s| s.container.clone()).collect();
    short.sort();
    let running: Vec<String> =
        docker_ps(&label).await.iter().map(|id| id[..12].to_owned()).collect();
    assert_eq!(short, running, "ps and docker ps agree");

    // Two tasks, then metrics agree with ps and the task records.
    for _ in 0..2 {
        let before = tg.bot_messages(OWNER).await.iter().filter(|m| m.text == "turn done").count();
        tg.user_says(OWNER, OWNER, "quick").await;
        tg.wait_bot_messages(
            OWNER,
            |m| m.iter().filter(|m| m.text == "turn done").count() > before,
            LIMIT,
        )
        .await;
    }
    let tasks: TaskList = match api.get(paths::TASKS).await {
        Ok(tasks) => tasks,
        Err(e) => panic!("{e}\n{}", serving.log()),
    };
    assert_eq!(tasks.tasks.len(), 2);
    assert!(tasks.tasks.iter().all(|t| t.status == "success" && t.container.is_some()));
    let detail: TaskDetail = api.get(&paths::task(&tasks.tasks[0].id)).await.unwrap();
    assert_eq!(detail.task, "say ok");
    assert!(detail.egress.is_some(), "the egress summary is in the record");
    let samples = parse_metrics(&api.get_text(paths::METRICS).await.unwrap());
    let containers: f64 = samples
        .iter()
        .filter(|(k, _)| k.starts_with("nexbot_pool_containers{"))
        .map(|(_, v)| v)
        .sum();
    assert_eq!(containers, 2.0);
    let info = format!("nexbot_pool_runtime_info{{runtime={runtime}}}");
    assert_eq!(samples.get(&info), Some(&1.0), "{samples:?}");
    assert_eq!(samples.get("nexbot_tasks_finished_total{outcome=success}"), Some(&2.0));
    assert_eq!(samples.get("nexbot_tasks_started_total"), Some(&2.0));

    // logs: what the subagent wrote to stderr.
    let slot = ps.subagents[0].id.clone();
    let logs: nexbot_control::LogLines =
        api.get(&format!("{}?n=50", paths::subagent(&slot, "logs"))).await.unwrap();
    assert!(!logs.lines.is_empty(), "no log lines for {slot}");
    assert!(logs.lines.iter().all(|l| serde_json::from_str::<Value>(l).is_ok()), "{logs:?}");

    // restart: the slot gets a new container.
    let old = ps.subagents[0].container.clone().unwrap();
    let done: Done = api.post(&paths::subagent(&slot, "restart"), &json!({})).await.unwrap();
    assert!(done.message.contains(&old), "{done:?}");
    let start = std::time::Instant::now();
    loop {
        let list: SubagentList = api.get(paths::SUBAGENTS).await.unwrap();
        let now = list.subagents.iter().find(|s| s.id == slot).unwrap();
        if now.container.as_deref().is_some_and(|c| c != old) && now.state == "idle" {
            break;
        }
        assert!(start.elapsed() < LIMIT, "{slot} kept {old}: {now:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // kill during a long task: the task ends (not as success), a new container appears.
    tg.user_says(OWNER, OWNER, "long").await;
    let start = std::time::Instant::now();
    let busy = loop {
        let list: SubagentList = api.get(paths::SUBAGENTS).await.unwrap();
        if let Some(busy) = list.subagents.into_iter().find(|s| s.current_task.is_some()) {
            break busy;
        }
        assert!(start.elapsed() < LIMIT, "the long task never started");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let killed: Done = api.post(&paths::subagent(&busy.id, "kill"), &json!({})).await.unwrap();
    assert!(killed.message.contains("killed"), "{killed:?}");
    let start = std::time::Instant::now();
    loop {
        let tasks: TaskList = match api.get(paths::TASKS).await {
            Ok(tasks) => tasks,
            Err(e) => panic!("{e}\n{}", serving.log()),
        };
        let long = tasks.tasks.iter().find(|t| t.status != "success");
        if let Some(task) = long.filter(|t| t.status != "running") {
            assert!(task.error.as_deref().unwrap_or("").contains("killed by operator"), "{task:?}");
            // Its record says who ended it and where it ran (it said `error`, no container).
            assert_eq!(task.status, "killed", "{task:?}");
            let (ran_in, was) = (task.container.as_deref().unwrap_or("-"), &busy.container);
            assert!(
                was.as_deref().is_some_and(|c| ran_in.starts_with(c) || c.starts_with(ran_in)),
                "{task:?} {busy:?}"
            );
            break;
        }
        assert!(start.elapsed() < LIMIT, "the killed task did not end: {tasks:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The chat's receipt says who ended the task, not just "error".
    tg.wait_bot_messages(
        OWNER,
        |m| m.iter().any(|m| m.text.contains("Task killed by the operator in")),
        LIMIT,
    )
    .await;
    let start = std::time::Instant::now();
    loop {
        let list: SubagentList = api.get(paths::SUBAGENTS).await.unwrap();
        let slot = list.subagents.iter().find(|s| s.id == busy.id).unwrap();
        if slot.container.is_some() && slot.container != busy.container && slot.state == "idle" {
            assert!(slot.restarts >= 1, "{slot:?}");
            break;
        }
        assert!(start.elapsed() < LIMIT, "no new container for {}: {slot:?}", busy.id);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    serving.stop(LIMIT).await;
}
