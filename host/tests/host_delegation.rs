//! Delegation on the REAL pool: `nexbot chat` whose second turn delegates to a subagent
//! container and answers with its result (task record in SQLite, no API key in the
//! container's requests), and a turn stopped with `/stop` whose `cancel` reaches the subagent.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use common::{base_env, chat, text, TempWorkspace};
use nexbot_docker::{ensure_internal_network, remove_network};
use nexbot_host::bus::{self, InboundMessage, OutboundKind};
use nexbot_host::config::Config;
use nexbot_host::pool_runner::{start_pool, stop_pool, PoolRunner};
use nexbot_host::runtime::{build_agent, open_store};
use nexbot_host::subagent::SubagentRunner;
use nexbot_tests::docker_or_skip;
use nexbot_tests::scripted_llm::{ScriptedLlm, Step};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

const PLANTED_KEY: &str = "sk-planted-nxh-4f7a9c";
const IMAGE: &str = "nexbot-subagent:dev";

/// Main-agent requests offer the delegation tool; subagent requests do not.
fn is_main(body: &Value) -> bool {
    body["tools"]
        .as_array()
        .is_some_and(|tools| tools.iter().any(|t| t["function"]["name"] == "delegate_to_sub_agent"))
}

fn responder(body: &Value) -> Step {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let last = messages.last().cloned().unwrap_or_default();
    if !is_main(body) {
        let slow =
            messages.iter().any(|m| m["content"].as_str().is_some_and(|c| c.contains("slow task")));
        return if slow {
            Step::text("too late").delayed(Duration::from_secs(120))
        } else {
            Step::text("SUBAGENT-RESULT-42")
        };
    }
    match (last["role"].as_str(), last["content"].as_str().unwrap_or("")) {
        (Some("tool"), content) => {
            let result: Value = serde_json::from_str(content).unwrap_or_default();
            Step::text(&format!(
                "The sub-agent answered: {}",
                result["output"].as_str().unwrap_or(content)
            ))
        }
        (_, "hello") => Step::text("hi there"),
        (_, "delegate please") => Step::tool_call(
            "delegate_to_sub_agent",
            json!({"task": "compute the answer", "context": "be brief"}),
        ),
        (_, "slow") => Step::tool_call("delegate_to_sub_agent", json!({"task": "a slow task"})),
        (_, other) => Step::text(&format!("unexpected: {other}")),
    }
}

async fn image_present(docker: &bollard::Docker) {
    if docker.inspect_image(IMAGE).await.is_err() {
        panic!("the image {IMAGE} is missing: build it with `make image`");
    }
}

fn labels() -> HashMap<String, String> {
    [("nxh.test".to_owned(), std::process::id().to_string())].into()
}

#[tokio::test]
async fn chat_delegates_to_a_real_subagent_and_records_the_task() {
    let Some(docker) = docker_or_skip("chat_delegates_to_a_real_subagent").await else { return };
    image_present(&docker).await;
    let network = format!("nxh-net-chat-{}", std::process::id());
    let info = ensure_internal_network(&docker, &network, &labels()).await.expect("network");
    let gateway = info.gateway.to_string();
    let llm = ScriptedLlm::start_on(format!("{gateway}:0").parse().unwrap(), vec![]).await;
    llm.set_responder(responder);

    let ws = TempWorkspace::init("delegate");
    let mut env = base_env(&llm.base_url_for_host(&gateway));
    env.extend(
        [
            ("NEXBOT_SUBAGENT__ENABLED", "true".to_owned()),
            ("NEXBOT_SUBAGENT__POOL_SIZE", "1".to_owned()),
            ("NEXBOT_SUBAGENT__POOL_NAME", format!("nxh-chat-{}", std::process::id())),
            ("NEXBOT_SUBAGENT__NETWORK", network.clone()),
            ("NEXBOT_LLM_API_KEY", PLANTED_KEY.to_owned()),
            ("RUST_LOG", "debug".to_owned()),
        ]
        .map(|(k, v)| (k.to_owned(), v)),
    );
    let out =
        chat(&ws.config(), &env, &["hello", "delegate please"], Duration::from_secs(120)).await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    let _ = remove_network(&docker, &network).await;
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        ["hi there", "The sub-agent answered: SUBAGENT-RESULT-42"]
    );

    // The task record.
    let db = rusqlite::Connection::open(ws.database()).unwrap();
    let (chat_id, status, container, duration, task): (
        String,
        String,
        Option<String>,
        Option<i64>,
        String,
    ) = db
        .query_row(
            "SELECT chat_id, status, container, duration_ms, task FROM task_records",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .unwrap();
    assert_eq!(
        (chat_id.as_str(), status.as_str(), task.as_str()),
        ("console", "success", "compute the answer")
    );
    assert!(container.is_some_and(|c| c.len() >= 12), "no container recorded");
    assert!(duration.is_some());

    // The subagent reached the LLM with a per-task token, never the key; the key never
    // appears in a prompt, in the output or in the debug logs.
    let requests = llm.chat_requests();
    let sub: Vec<_> = requests.iter().filter(|r| !is_main(&r.body)).collect();
    assert!(!sub.is_empty(), "the subagent never called the LLM");
    for request in &sub {
        let auth = request.header("authorization").unwrap_or_default();
        assert!(auth.starts_with("Bearer nxt-"), "subagent auth: {auth:?}");
        assert!(!request.to_text().contains(PLANTED_KEY));
    }
    for request in requests.iter().filter(|r| is_main(&r.body)) {
        assert_eq!(request.header("authorization"), Some(format!("Bearer {PLANTED_KEY}").as_str()));
        assert!(!request.body.to_string().contains(PLANTED_KEY), "key in a prompt");
    }
    assert!(!stdout.contains(PLANTED_KEY) && !stderr.contains(PLANTED_KEY), "key in output/logs");
    assert!(stderr.contains("DEBUG") || stderr.contains("INFO"), "logs were not captured");
}

#[tokio::test]
async fn stopping_a_turn_sends_cancel_to_the_subagent_it_started() {
    let Some(docker) = docker_or_skip("stopping_a_turn_sends_cancel").await else { return };
    image_present(&docker).await;
    let network = format!("nxh-net-stop-{}", std::process::id());
    let info = ensure_internal_network(&docker, &network, &labels()).await.expect("network");
    let gateway = info.gateway.to_string();
    let llm = ScriptedLlm::start_on(format!("{gateway}:0").parse().unwrap(), vec![]).await;
    llm.set_responder(responder);

    let ws = TempWorkspace::init("stop");
    let mut env = base_env(&llm.base_url_for_host(&gateway));
    env.extend(
        [
            ("NEXBOT_SUBAGENT__ENABLED", "true".to_owned()),
            ("NEXBOT_SUBAGENT__POOL_SIZE", "1".to_owned()),
            ("NEXBOT_SUBAGENT__POOL_NAME", format!("nxh-stop-{}", std::process::id())),
            ("NEXBOT_SUBAGENT__NETWORK", network.clone()),
        ]
        .map(|(k, v)| (k.to_owned(), v)),
    );
    let text_config = std::fs::read_to_string(ws.config()).unwrap();
    let config = Config::from_parts(&text_config, &ws.config(), &ws.dir, env).expect("config");
    let pool = start_pool(&config).await.expect("pool");
    let store = open_store(&config).await.unwrap();
    let runner: Arc<dyn SubagentRunner> = Arc::new(PoolRunner::new(pool.clone()));
    let agent = Arc::new(build_agent(&config, store.clone(), Some(runner)).unwrap());
    let shutdown = CancellationToken::new();
    let mut handle = bus::start(agent, &config.bus, shutdown.clone());

    // Checks run inside, cleanup runs after whatever they found.
    let checks = async {
        let send = |id, text: &str| InboundMessage { chat_id: "c1".into(), id, text: text.into() };
        handle.inbound.send(send(1, "slow")).await.unwrap();
        // Wait until the subagent is working on it (its LLM call is in flight).
        let waited = tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                let running =
                    store.tasks("c1").await.unwrap().iter().any(|t| t.status == "running");
                if running && llm.chat_requests().iter().any(|r| !is_main(&r.body)) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await;
        if waited.is_err() {
            return Err("the subagent never started the task".to_owned());
        }
        handle.inbound.send(send(2, "/stop")).await.unwrap();

        let mut answers = HashMap::new();
        while answers.len() < 2 {
            let message = tokio::time::timeout(Duration::from_secs(60), handle.outbound.recv())
                .await
                .expect("no answer in time")
                .expect("bus closed");
            if message.kind == OutboundKind::Final {
                answers.insert(message.reply_to.unwrap(), message.text);
            }
        }
        assert_eq!(answers[&2], "Stopping the current task.");
        assert_eq!(answers[&1], "Stopped.");
        let record = store.tasks("c1").await.unwrap().remove(0);
        assert_eq!(record.status, "cancelled");
        // "task cancelled" is the subagent's own answer to the `cancel` request.
        assert_eq!(record.error.as_deref(), Some("task cancelled"), "{record:?}");

        Ok::<_, String>(())
    };
    let result = checks.await;
    shutdown.cancel();
    drop(handle.inbound);
    let _ = tokio::time::timeout(Duration::from_secs(30), handle.task).await;
    stop_pool(pool).await;
    let _ = remove_network(&docker, &network).await;
    result.unwrap();
}

#[tokio::test]
async fn delegation_refuses_blocked_tools_and_unknown_secrets_before_any_container_work() {
    let Some(docker) = docker_or_skip("delegation_refuses").await else { return };
    image_present(&docker).await;
    let network = format!("nxh-net-refuse-{}", std::process::id());
    let llm = ScriptedLlm::start(vec![
        Step::tool_calls(&[
            (
                "delegate_to_sub_agent",
                json!({"task": "recurse", "tools": ["run_command", "spawn"]}),
            ),
            ("spawn", json!({"task": "use a key", "secrets": ["GITHUB_TOKEN"]})),
            ("spawn", json!({"task": "bad name", "secrets": ["lower-case"]})),
        ]),
        Step::text("ok"),
    ])
    .await;
    let ws = TempWorkspace::init("refuse");
    let mut env = base_env(&llm.base_url());
    env.extend(
        [
            ("NEXBOT_SUBAGENT__ENABLED", "true".to_owned()),
            ("NEXBOT_SUBAGENT__POOL_SIZE", "1".to_owned()),
            ("NEXBOT_SUBAGENT__POOL_NAME", format!("nxh-refuse-{}", std::process::id())),
            ("NEXBOT_SUBAGENT__NETWORK", network.clone()),
        ]
        .map(|(k, v)| (k.to_owned(), v)),
    );
    let out = chat(&ws.config(), &env, &["try it"], Duration::from_secs(120)).await;
    let _ = remove_network(&docker, &network).await;
    assert_eq!(text(&out.stdout).trim(), "ok", "{}", text(&out.stderr));
    let replies: Vec<String> = llm.chat_requests()[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect();
    assert!(replies[0].contains("the tool spawn can never be granted"), "{replies:?}");
    assert!(replies[1].contains("no secret named GITHUB_TOKEN"), "{replies:?}");
    assert!(replies[2].contains("invalid secret name"), "{replies:?}");
    let db = rusqlite::Connection::open(ws.database()).unwrap();
    let records: i64 = db.query_row("SELECT COUNT(*) FROM task_records", [], |r| r.get(0)).unwrap();
    assert_eq!(records, 0);
}
