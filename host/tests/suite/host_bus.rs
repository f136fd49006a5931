//! The message bus with the real agent, SQLite and the scripted LLM: one turn at a time per
//! chat, chats in parallel, and a clear "busy" answer when a chat's queue is full.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{base_env, TempWorkspace};
use nexbot_host::bus::{self, BusHandle, InboundMessage, OutboundKind};
use nexbot_host::config::Config;
use nexbot_host::runtime::{build_agent, open_store};
use nexbot_tests::scripted_llm::{ScriptedLlm, Step};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// Answers "slow" after a delay, anything else at once, echoing the user's last message.
fn responder(body: &Value) -> Step {
    let last = body["messages"].as_array().and_then(|m| m.last()).cloned().unwrap_or_default();
    let text = last["content"].as_str().unwrap_or("").to_owned();
    let step = Step::text(&format!("re: {text}"));
    if text.starts_with("slow") {
        step.delayed(Duration::from_secs(2))
    } else {
        step
    }
}

async fn start(
    ws: &TempWorkspace,
    llm: &ScriptedLlm,
    extra: &[(&str, &str)],
) -> (BusHandle, CancellationToken) {
    let mut env = base_env(&llm.base_url());
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let text = std::fs::read_to_string(ws.config()).unwrap();
    let config = Config::from_parts(&text, &ws.config(), &ws.dir, env).unwrap();
    let store = open_store(&config).await.unwrap();
    let agent = Arc::new(build_agent(&config, store, None).unwrap());
    let shutdown = CancellationToken::new();
    (bus::start(agent, &config.bus, shutdown.clone()), shutdown)
}

fn message(chat: &str, id: u64, text: &str) -> InboundMessage {
    InboundMessage { chat_id: chat.into(), id, text: text.into() }
}

/// The next `n` final answers as (chat, reply_to, text), in arrival order.
async fn finals(handle: &mut BusHandle, n: usize) -> Vec<(String, u64, String)> {
    let mut out = Vec::new();
    while out.len() < n {
        let m = tokio::time::timeout(Duration::from_secs(30), handle.outbound.recv())
            .await
            .expect("no answer in time")
            .expect("bus closed");
        if m.kind == OutboundKind::Final {
            out.push((m.chat_id, m.reply_to.unwrap(), m.text));
        }
    }
    out
}

#[tokio::test]
async fn one_turn_at_a_time_per_chat_and_chats_in_parallel() {
    let ws = TempWorkspace::init("bus-order");
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(responder);
    let (mut handle, shutdown) = start(&ws, &llm, &[]).await;
    handle.inbound.send(message("a", 1, "slow first")).await.unwrap();
    handle.inbound.send(message("a", 2, "second")).await.unwrap();
    handle.inbound.send(message("b", 3, "other chat")).await.unwrap();
    let answers = finals(&mut handle, 3).await;
    // Chat b did not wait for chat a's slow turn; chat a answered in order.
    assert_eq!(answers[0], ("b".into(), 3, "re: other chat".into()));
    assert_eq!(answers[1], ("a".into(), 1, "re: slow first".into()));
    assert_eq!(answers[2], ("a".into(), 2, "re: second".into()));
    // Chat a's second turn started after the first ended: it saw it as history.
    let second = llm
        .chat_requests()
        .into_iter()
        .find(|r| r.body["messages"].as_array().unwrap().last().unwrap()["content"] == "second")
        .unwrap();
    let history: Vec<&str> = second.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert!(history.contains(&"re: slow first"), "{history:?}");
    shutdown.cancel();
}

#[tokio::test]
async fn a_full_chat_queue_answers_busy_and_nothing_else_is_lost() {
    let ws = TempWorkspace::init("bus-busy");
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(responder);
    let (mut handle, shutdown) = start(&ws, &llm, &[("NEXBOT_BUS__PER_CHAT_QUEUE", "1")]).await;
    handle.inbound.send(message("a", 1, "slow one")).await.unwrap();
    // Once the first turn is running, one message fits in the queue and the next does not.
    tokio::time::timeout(Duration::from_secs(30), async {
        while llm.chat_requests().is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap();
    handle.inbound.send(message("a", 2, "two")).await.unwrap();
    handle.inbound.send(message("a", 3, "three")).await.unwrap();
    let answers = finals(&mut handle, 3).await;
    assert_eq!(answers[0].1, 3);
    assert!(answers[0].2.contains("still busy"), "{answers:?}");
    assert_eq!((answers[1].1, answers[1].2.as_str()), (1, "re: slow one"));
    assert_eq!((answers[2].1, answers[2].2.as_str()), (2, "re: two"));
    shutdown.cancel();
}

#[tokio::test]
async fn new_starts_a_fresh_session() {
    let ws = TempWorkspace::init("bus-new");
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(responder);
    let (mut handle, shutdown) = start(&ws, &llm, &[]).await;
    handle.inbound.send(message("a", 1, "remember me")).await.unwrap();
    finals(&mut handle, 1).await;
    handle.inbound.send(message("a", 2, "/new")).await.unwrap();
    assert_eq!(finals(&mut handle, 1).await[0].2, "Started a new conversation.");
    handle.inbound.send(message("a", 3, "who am i")).await.unwrap();
    finals(&mut handle, 1).await;
    let last = llm.chat_requests().pop().unwrap();
    let contents: Vec<&str> = last.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert!(!contents.contains(&"remember me"), "{contents:?}");
    shutdown.cancel();
}
