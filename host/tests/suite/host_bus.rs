//! The message bus with the real agent, SQLite and the scripted LLM: one turn at a time per
//! chat, chats in parallel, and a clear "busy" answer when a chat's queue is full.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{base_env, TempWorkspace};
use nexbot_core::{ChannelKind, ChatRef};
use nexbot_host::agent::channel::{Channel, OutboundKind, OutboundMessage};
use nexbot_host::app::{App, Stage};
use nexbot_host::bus::InboundMessage;
use nexbot_host::channels::console::ConsoleChannel;
use nexbot_host::config::Config;
use nexbot_tests::scripted_llm::{ScriptedLlm, Step};
use serde_json::Value;
use tokio::sync::mpsc;

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

/// The app as `nexbot chat` assembles it, with a console channel whose output the test reads.
struct Harness {
    app: App,
    inbound: mpsc::Sender<InboundMessage>,
    outbound: mpsc::Receiver<OutboundMessage>,
}

async fn start(ws: &TempWorkspace, llm: &ScriptedLlm, extra: &[(&str, &str)]) -> Harness {
    let mut env = base_env(&llm.base_url());
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let text = std::fs::read_to_string(ws.config()).unwrap();
    let config = Config::from_parts(&text, &ws.config(), &ws.dir, env).unwrap();
    let mut app = App::start(&config).await.unwrap();
    let (console, outbound) = ConsoleChannel::new(64);
    app.add_channel(ChannelKind::Console, Arc::new(console));
    Harness { inbound: app.inbound(), app, outbound }
}

fn chat(name: &str) -> ChatRef {
    ChatRef::console(name).unwrap()
}

fn message(chat_name: &str, id: u64, text: &str) -> InboundMessage {
    InboundMessage { chat: chat(chat_name), id, text: text.into(), user: None, files: Vec::new() }
}

impl Harness {
    async fn send(&self, chat_name: &str, id: u64, text: &str) {
        self.inbound.send(message(chat_name, id, text)).await.unwrap();
    }

    async fn next(&mut self) -> OutboundMessage {
        tokio::time::timeout(Duration::from_secs(30), self.outbound.recv())
            .await
            .expect("no answer in time")
            .expect("bus closed")
    }

    /// The next `n` final answers as (chat name, reply_to, text), in arrival order.
    async fn finals(&mut self, n: usize) -> Vec<(String, u64, String)> {
        let mut out = Vec::new();
        while out.len() < n {
            let m = self.next().await;
            if m.kind == OutboundKind::Final {
                let ChatRef::Console(name) = m.chat else {
                    panic!("not a console chat: {}", m.chat)
                };
                out.push((name, m.reply_to.unwrap(), m.text));
            }
        }
        out
    }
}

#[tokio::test]
async fn one_turn_at_a_time_per_chat_and_chats_in_parallel() {
    let ws = TempWorkspace::init("bus-order");
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(responder);
    let mut h = start(&ws, &llm, &[]).await;
    h.send("a", 1, "slow first").await;
    h.send("a", 2, "second").await;
    h.send("b", 3, "other chat").await;
    let answers = h.finals(3).await;
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
    h.app.stop().await;
}

#[tokio::test]
async fn a_full_chat_queue_answers_busy_and_nothing_else_is_lost() {
    let ws = TempWorkspace::init("bus-busy");
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(responder);
    let mut h = start(&ws, &llm, &[("NEXBOT_BUS__PER_CHAT_QUEUE", "1")]).await;
    h.send("a", 1, "slow one").await;
    // Once the first turn is running, one message fits in the queue and the next does not.
    tokio::time::timeout(Duration::from_secs(30), async {
        while llm.chat_requests().is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap();
    h.send("a", 2, "two").await;
    h.send("a", 3, "three").await;
    let answers = h.finals(3).await;
    assert_eq!(answers[0].1, 3);
    assert!(answers[0].2.contains("still busy"), "{answers:?}");
    assert_eq!((answers[1].1, answers[1].2.as_str()), (1, "re: slow one"));
    assert_eq!((answers[2].1, answers[2].2.as_str()), (2, "re: two"));
    h.app.stop().await;
}

#[tokio::test]
async fn new_starts_a_fresh_session() {
    let ws = TempWorkspace::init("bus-new");
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(responder);
    let mut h = start(&ws, &llm, &[]).await;
    h.send("a", 1, "remember me").await;
    h.finals(1).await;
    h.send("a", 2, "/new").await;
    assert_eq!(h.finals(1).await[0].2, "Started a new conversation.");
    h.send("a", 3, "who am i").await;
    h.finals(1).await;
    let last = llm.chat_requests().pop().unwrap();
    let contents: Vec<&str> = last.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert!(!contents.contains(&"remember me"), "{contents:?}");
    h.app.stop().await;
}

#[tokio::test]
async fn commands_are_shared_and_unknown_ones_say_what_exists() {
    let ws = TempWorkspace::init("bus-commands");
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(responder);
    let mut h = start(&ws, &llm, &[]).await;
    h.send("a", 1, "/help").await;
    let help = h.finals(1).await.remove(0).2;
    assert!(
        help.contains("/stop — ") && help.contains("/new — ") && help.contains("/help — "),
        "{help}"
    );
    h.send("a", 2, "/frobnicate").await;
    let unknown = h.finals(1).await.remove(0).2;
    assert!(
        unknown.starts_with("Unknown command /frobnicate.") && unknown.contains("/new"),
        "{unknown}"
    );
    // A path is not a command: it reaches the model.
    h.send("a", 3, "/etc/hosts looks odd").await;
    assert_eq!(h.finals(1).await.remove(0).2, "re: /etc/hosts looks odd");
    assert_eq!(llm.chat_requests().len(), 1, "commands never reach the model");
    h.app.stop().await;
}

#[tokio::test]
async fn a_question_takes_the_next_message_and_answers_reach_only_their_channel() {
    let ws = TempWorkspace::init("bus-ask");
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(responder);
    let mut h = start(&ws, &llm, &[]).await;
    let router = h.app.router().clone();
    let asking = tokio::spawn(async move {
        router.ask(&chat("a"), "Which file?", Duration::from_secs(20)).await
    });
    let question = h.next().await;
    assert_eq!((question.text.as_str(), question.kind), ("Which file?", OutboundKind::Progress));
    h.send("a", 1, "notes.md").await;
    assert_eq!(asking.await.unwrap().unwrap(), "notes.md");
    let taken = h.next().await;
    assert_eq!((taken.kind, taken.reply_to), (OutboundKind::Taken, Some(1)));
    assert!(llm.chat_requests().is_empty(), "an answer to a question starts no turn");

    // A chat of a channel that is not running: its answer cannot go anywhere, which is logged;
    // the bus keeps serving the others.
    h.inbound
        .send(InboundMessage {
            chat: ChatRef::Telegram(77),
            id: 2,
            text: "hi".into(),
            user: None,
            files: Vec::new(),
        })
        .await
        .unwrap();
    h.send("a", 3, "still there?").await;
    assert_eq!(h.finals(1).await, [("a".to_owned(), 3, "re: still there?".to_owned())]);
    h.app.stop().await;
}

#[tokio::test]
async fn stop_ends_inputs_then_turns_then_services_and_the_last_answer_still_arrives() {
    let ws = TempWorkspace::init("bus-stop");
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(responder);
    let mut h = start(&ws, &llm, &[]).await;
    let order = Arc::new(Mutex::new(Vec::new()));
    for (name, stage) in [("service", Stage::Service), ("input", Stage::Input)] {
        let order = order.clone();
        h.app.spawn(name, stage, move |stop| async move {
            stop.cancelled().await;
            order.lock().unwrap().push(name);
        });
    }
    h.send("a", 1, "slow and then stopped").await;
    tokio::time::timeout(Duration::from_secs(30), async {
        while llm.chat_requests().is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap();
    let Harness { app, mut outbound, .. } = h;
    app.stop().await;
    assert_eq!(*order.lock().unwrap(), ["input", "service"]);
    // The turn running at stop was cancelled, and its answer still reached the console.
    let last = outbound.recv().await.expect("the stopped turn's answer");
    assert_eq!(
        (last.kind, last.reply_to, last.text.as_str()),
        (OutboundKind::Final, Some(1), "Stopped.")
    );
}
