//! `use_cli` as the product runs it: `nexbot chat` (the real binary) with its pool on the CLI
//! image variant `nexbot-subagent-cli:dev` (`make cli-image`), the real egress listener and LLM
//! relay, and the scripted provider. A chat that turned its agent mode off and chose the qwen
//! CLI (`/agent cli qwen`, `/agent off`) has its message run by the real Qwen Code in a pool
//! container, as a direct `use_cli` task.
//!
//! Checked: the CLI's answer is the chat's answer; its model calls reached the provider only
//! through the relay, which accepted them under the task's own token (audited with the task
//! id) and swapped in the real key — so no task token reached the provider, and the key is in
//! no container, no output and no log; the task record is a success; `/status` names the CLI.

use crate::common;
use crate::egress_support;

use std::collections::HashMap;
use std::time::Duration;

use bollard::query_parameters::ListContainersOptionsBuilder;
use common::{base_env, is_main, ChatSession, Leftovers, TempWorkspace};
use egress_support::read_audit;
use nexbot_tests::docker_or_skip;
use nexbot_tests::scripted_llm::{ScriptedLlm, Step};
use serde_json::Value;

const PLANTED_KEY: &str = "sk-planted-cli-8d2e1b";
const CLI_IMAGE: &str = "nexbot-subagent-cli:dev";
const LIMIT: Duration = Duration::from_secs(120);
const TASK: &str = "write a haiku about containers";
const CLI_ANSWER: &str = "CLI-ANSWER-7c1 containers hum";

/// Reads answer lines until one contains `needle`; returns the lines read.
async fn answer_with(session: &mut ChatSession, needle: &str) -> String {
    let mut seen = String::new();
    loop {
        let line = session.answer(LIMIT).await;
        seen.push_str(&line);
        seen.push('\n');
        if line.contains(needle) {
            return seen;
        }
    }
}

#[tokio::test]
async fn a_chat_with_agent_mode_off_is_answered_by_the_real_cli_through_the_relay() {
    let Some(docker) = docker_or_skip("use_cli_end_to_end").await else { return };
    if docker.inspect_image(CLI_IMAGE).await.is_err() {
        panic!("the image {CLI_IMAGE} is missing: build it with `make cli-image`");
    }
    let leftovers = Leftovers::new("cli");
    let llm = ScriptedLlm::start(vec![]).await;
    // The main agent is never asked here: with agent mode off the message goes to the CLI.
    llm.set_responder(|body| {
        if is_main(body) {
            Step::text("MAIN-AGENT-ANSWERED")
        } else {
            Step::text(CLI_ANSWER)
        }
    });
    let ws = TempWorkspace::init("nxw-cli");
    let mut env = base_env(&llm.base_url());
    env.extend(leftovers.env());
    env.push(("NEXBOT_SUBAGENT__IMAGE".into(), CLI_IMAGE.into()));
    env.push(("NEXBOT_LLM_API_KEY".into(), PLANTED_KEY.into()));
    env.push(("RUST_LOG".into(), "debug".into()));
    let mut session = ChatSession::start(&ws.config(), &env);

    session.say("/agent cli qwen").await;
    answer_with(&mut session, "CLI qwen chosen").await;
    session.say("/agent off").await;
    answer_with(&mut session, "your messages go to the qwen coding CLI").await;
    session.say(TASK).await;
    let answer = answer_with(&mut session, "CLI-ANSWER").await;
    assert!(answer.contains(CLI_ANSWER), "{answer}");
    session.say("/status").await;
    let status = answer_with(&mut session, "Agent mode here").await;
    assert!(status.contains("Agent mode here: off (CLI when off: qwen)"), "{status}");

    // While the pool runs: the engine shows no key in the CLI image's container.
    let filters = HashMap::from([("label", vec![format!("nexbot.pool={}", leftovers.pool)])]);
    let options = ListContainersOptionsBuilder::default().all(true).filters(&filters).build();
    let containers = docker.list_containers(Some(options)).await.expect("list containers");
    assert!(!containers.is_empty(), "the pool runs");
    for container in containers {
        assert_eq!(container.image.as_deref(), Some(CLI_IMAGE));
        let inspect = docker.inspect_container(&container.id.unwrap(), None).await.unwrap();
        let inspect = serde_json::to_string(&inspect).unwrap();
        assert!(!inspect.contains(PLANTED_KEY), "the key in docker inspect");
    }
    let (status, rest, stderr) = session.finish(LIMIT).await;
    assert!(status.success(), "{rest}\n{stderr}");

    // The one task: a success, run directly as use_cli.
    let db = rusqlite::Connection::open(ws.database()).unwrap();
    let (task_id, task_status, task_text): (String, String, String) = db
        .query_row("SELECT id, status, task FROM task_records", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .unwrap();
    assert_eq!((task_status.as_str(), task_text.as_str()), ("success", TASK));

    // The CLI's calls: Qwen Code's own prompt and tools (not the subagent's loop), the task
    // as the user's words, through the relay with the real key it added.
    let requests = llm.chat_requests();
    assert!(requests.iter().all(|r| !is_main(&r.body)), "the main agent was asked");
    assert!(!requests.is_empty(), "the CLI called no model");
    for request in &requests {
        assert_eq!(request.header("user-agent"), Some("nexbot-relay"), "not via the relay");
        assert_eq!(request.header("authorization"), Some(format!("Bearer {PLANTED_KEY}").as_str()));
        assert!(!request.to_text().contains("nxr_"), "a task token reached the provider");
        let system = request.body["messages"][0]["content"].to_string();
        assert!(!system.contains("Nexbot sub-agent"), "the subagent's loop, not the CLI");
    }
    let first = &requests[0].body;
    assert!(first["messages"].to_string().contains(TASK), "{first}");
    let tools = first["tools"].as_array().map_or(0, Vec::len);
    assert!(tools > 3, "the CLI's own tools: {tools}");

    // The relay took each call under the task's token: audited with the task id, allowed.
    let audit = read_audit(&ws.dir.join("egress-audit.jsonl"));
    let relayed: Vec<&Value> =
        audit.iter().filter(|l| l["kind"] == "relay" && l["task_id"] == task_id.as_str()).collect();
    assert_eq!(relayed.len(), requests.len(), "{audit:#?}");
    assert!(relayed.iter().all(|l| l["verdict"] == "allowed"), "{audit:#?}");

    // No key and no token in the output or the debug logs.
    assert!(stderr.contains("the message goes to the coding CLI"), "{stderr}");
    assert!(!stderr.contains(PLANTED_KEY) && !rest.contains(PLANTED_KEY), "key in output/logs");
    assert!(!stderr.contains("nxr_"), "a task token in the logs");
}
