//! Hooks steer the real agent loop (scripted LLM, real tools and SQLite): block a tool,
//! block a turn before any LLM call, inject context after a tool, finish at an iteration,
//! and add to the answer when the turn times out.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{base_env, TempWorkspace};
use nexbot_core::ChatRef;
use nexbot_host::agent::channel::Channel;
use nexbot_host::agent::hooks::{Hook, HookContext, HookEvent, HookResult};
use nexbot_host::agent::turns::TurnOrigin;
use nexbot_host::agent::{Agent, TurnStatus};
use nexbot_host::channels::Router;
use nexbot_host::config::Config;
use nexbot_host::runtime::{build_agent_with_hooks, open_store};
use nexbot_tests::scripted_llm::{ScriptedLlm, Step};
use serde_json::json;
use tokio_util::sync::CancellationToken;

#[derive(Debug)]
struct Policy;

impl Hook for Policy {
    fn name(&self) -> &'static str {
        "test_policy"
    }
    fn handle(&self, event: &HookEvent<'_>, context: &HookContext<'_>) -> HookResult {
        match event {
            HookEvent::BeforeAgent { user_message } if user_message.contains("forbidden") => {
                HookResult::Block { reason: "not allowed here".into() }
            }
            HookEvent::BeforeTool { tool: "delete_file", .. } => {
                HookResult::Block { reason: "deleting is disabled".into() }
            }
            HookEvent::AfterTool { tool: "list_dir", .. } => {
                HookResult::InjectContext("listing checked by policy".into())
            }
            HookEvent::BeforeIteration { iteration: 3 }
                if *context.chat == ChatRef::console("finish").unwrap() =>
            {
                HookResult::Finish("enough for now".into())
            }
            HookEvent::Timeout { tool: None } => {
                HookResult::InjectContext("(timeout noted)".into())
            }
            _ => HookResult::Continue,
        }
    }
}

/// Turns here send nothing to a chat: a router with no channel.
fn no_channel() -> Arc<dyn Channel> {
    Arc::new(Router::new())
}

async fn agent(ws: &TempWorkspace, llm: &ScriptedLlm, extra: &[(&str, &str)]) -> Agent {
    let mut env = base_env(&llm.base_url());
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let text = std::fs::read_to_string(ws.config()).unwrap();
    let config = Config::from_parts(&text, &ws.config(), &ws.dir, env).unwrap();
    let store = open_store(&config).await.unwrap();
    build_agent_with_hooks(&config, store, None, vec![Arc::new(Policy)], Default::default())
        .unwrap()
}

#[tokio::test]
async fn hooks_block_inject_and_finish() {
    let ws = TempWorkspace::init("hooks");
    let llm = ScriptedLlm::start(vec![
        Step::tool_calls(&[("delete_file", json!({"path": "keep.txt"})), ("list_dir", json!({}))]),
        Step::text("could not delete"),
        Step::tool_call("list_dir", json!({})),
        Step::tool_call("list_dir", json!({})),
    ])
    .await;
    let agent = agent(&ws, &llm, &[]).await;
    let tx = no_channel();
    // A file of the chat's room (which exists once the agent is built).
    let keep = ws.dir.join("chats/console_c/keep.txt");
    std::fs::create_dir_all(keep.parent().unwrap()).unwrap();
    std::fs::write(&keep, "x").unwrap();

    let outcome = agent
        .run_turn(
            &ChatRef::console("c").unwrap(),
            "forbidden request",
            TurnOrigin::Message { user: None, message: 0 },
            CancellationToken::new(),
            tx.clone(),
        )
        .await;
    assert_eq!(
        (outcome.status, outcome.answer.as_str()),
        (TurnStatus::Blocked, "not allowed here")
    );
    assert!(llm.chat_requests().is_empty(), "the LLM was called for a blocked turn");

    let outcome = agent
        .run_turn(
            &ChatRef::console("c").unwrap(),
            "clean up",
            TurnOrigin::Message { user: None, message: 0 },
            CancellationToken::new(),
            tx.clone(),
        )
        .await;
    assert_eq!(outcome.answer, "could not delete");
    assert!(keep.exists());
    let tool_messages: Vec<String> = llm.chat_requests()[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect();
    assert!(tool_messages[0].contains("blocked: deleting is disabled"), "{tool_messages:?}");
    assert!(tool_messages[1].contains("[note] listing checked by policy"), "{tool_messages:?}");

    let outcome = agent
        .run_turn(
            &ChatRef::console("finish").unwrap(),
            "keep listing",
            TurnOrigin::Message { user: None, message: 0 },
            CancellationToken::new(),
            tx,
        )
        .await;
    assert_eq!((outcome.status, outcome.answer.as_str()), (TurnStatus::Answered, "enough for now"));
    assert_eq!(outcome.iterations, 3);
    assert_eq!(llm.chat_requests().len(), 4);
}

#[tokio::test]
async fn a_turn_that_runs_out_of_time_is_stopped_with_a_message() {
    let ws = TempWorkspace::init("hooks-timeout");
    let llm = ScriptedLlm::start(vec![Step::text("late").delayed(Duration::from_secs(4))]).await;
    let agent = agent(&ws, &llm, &[("NEXBOT_AGENT__TURN_TIMEOUT_SECS", "1")]).await;
    let tx = no_channel();
    let cancel = CancellationToken::new();
    let outcome = tokio::time::timeout(
        Duration::from_secs(30),
        agent.run_turn(
            &ChatRef::console("c").unwrap(),
            "take your time",
            TurnOrigin::Message { user: None, message: 0 },
            cancel.clone(),
            tx,
        ),
    )
    .await
    .unwrap();
    assert_eq!(outcome.status, TurnStatus::TimedOut);
    assert!(
        outcome.answer.contains("longer than 1s") && outcome.answer.ends_with("(timeout noted)")
    );
    // The turn's own token (a child of the producer's, which its tools' and subagent tasks'
    // tokens descend from) was cancelled; the producer's (the bus's shutdown) was not.
    assert!(!cancel.is_cancelled(), "a turn's timeout cancelled its producer's token");
    assert!(agent.turns().running(&ChatRef::console("c").unwrap()).is_none());
}
