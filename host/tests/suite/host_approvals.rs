//! `egress.mode = "ask"` end to end: the real `nexbot serve`, the real pool and proxy, real
//! SQLite, the Telegram fixture and emulator, and the scripted model. A subagent's fetch of a
//! host no rule allows is held by the proxy while the task's chat is asked (four buttons);
//! the press decides what the held connection gets.

use crate::common;
use crate::egress_support;
use crate::telegram::{has_text, start, telegram_env, LIMIT, OWNER};

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use common::{is_main, parsed_tool_results, tool_results, Leftovers, TempWorkspace};
use nexbot_tests::scripted_llm::{ScriptedLlm, Step};
use nexbot_tests::telegram::{BotMessage, TelegramFixture};
use serde_json::{json, Value};

/// Someone on no allow-list.
const STRANGER: i64 = 3003;

/// The buttons of a message: (label, callback data).
fn buttons(message: &BotMessage) -> Vec<(String, String)> {
    let rows = message.json["reply_markup"]["inline_keyboard"].as_array().cloned();
    rows.unwrap_or_default()
        .iter()
        .flat_map(|row| row.as_array().cloned().unwrap_or_default())
        .map(|b| {
            let text = |k: &str| b[k].as_str().unwrap_or_default().to_owned();
            (text("text"), text("callback_data"))
        })
        .collect()
}

/// The questions among the bot's messages: those with `/egress` buttons.
fn questions(messages: &[BotMessage]) -> Vec<BotMessage> {
    let asks = |m: &&BotMessage| buttons(m).iter().any(|(_, data)| data.starts_with("/egress "));
    messages.iter().filter(asks).cloned().collect()
}

/// The callback data of the question's button labelled `label`.
fn press(question: &BotMessage, label: &str) -> String {
    let found = buttons(question).into_iter().find(|(l, _)| l == label);
    found.unwrap_or_else(|| panic!("no {label:?} button: {question:#?}")).1
}

async fn wait_question(tg: &TelegramFixture, chat: i64, nth: usize) -> BotMessage {
    let messages = tg.wait_bot_messages(chat, |m| questions(m).len() > nth, LIMIT * 2).await;
    questions(&messages).remove(nth)
}

/// The egress questions recorded: (host:port, answer, answered by).
fn recorded(ws: &TempWorkspace) -> Vec<(String, Option<String>, Option<String>)> {
    let db = rusqlite::Connection::open(ws.database()).unwrap();
    let mut stmt = db
        .prepare("SELECT host, port, answer, answered_by FROM egress_questions ORDER BY id")
        .unwrap();
    let rows = stmt
        .query_map([], |r| {
            let host: String = r.get(0)?;
            let port: u16 = r.get(1)?;
            Ok((format!("{host}:{port}"), r.get(2)?, r.get(3)?))
        })
        .unwrap();
    rows.map(Result::unwrap).collect()
}

/// The daemon's environment: the fixture, a pool of its own, mode `ask`, and the test's
/// servers opened as internal addresses (which only lifts the address rule: `ask` still asks).
fn ask_env(
    llm: &ScriptedLlm,
    tg: &TelegramFixture,
    names: &Leftovers,
    servers: &[SocketAddr],
) -> Vec<(String, String)> {
    let mut env = telegram_env(llm, tg);
    env.extend(names.env());
    let entries: Vec<String> = servers
        .iter()
        .map(|s| format!(r#"{{ cidr = "{}", ports = [{}] }}"#, s.ip(), s.port()))
        .collect();
    env.push(("NEXBOT_EGRESS__PROXY__ALLOW_INTERNAL".into(), format!("[{}]", entries.join(", "))));
    env.push(("NEXBOT_EGRESS__MODE".into(), "ask".into()));
    env
}

/// The subagent's tool results so far, shared with the test (what its fetches got).
type Results = Arc<Mutex<Vec<Value>>>;

/// A model whose main agent delegates `task` once per user message and whose subagent
/// fetches `urls` in turn, then answers `FETCHED`; the subagent's tool results are kept.
fn fetching_model(llm: &ScriptedLlm, task: &'static str, urls: Vec<String>) -> Results {
    let results: Results = Arc::default();
    let seen = results.clone();
    llm.set_responder(move |body| {
        if !is_main(body) {
            *seen.lock().unwrap() = parsed_tool_results(body);
            return match urls.get(tool_results(body)) {
                Some(url) => Step::tool_call("web_fetch", json!({ "url": url })),
                None => Step::text("FETCHED"),
            };
        }
        match tool_results(body) {
            0 => Step::tool_call("delegate_to_sub_agent", json!({ "task": task })),
            _ => Step::text("done with the task"),
        }
    });
    results
}

fn host() -> IpAddr {
    egress_support::docker::host_address_off_network()
}

#[tokio::test]
async fn allow_for_this_task_lets_the_held_fetch_and_a_second_one_through_with_one_question() {
    let Some(_docker) = nexbot_tests::docker_or_skip("approvals_task").await else { return };
    let tg = TelegramFixture::start().await;
    let (server, seen) = egress_support::http_server_at(host()).await;
    let llm = ScriptedLlm::start(vec![]).await;
    let urls =
        vec![format!("http://{server}/hello?key=hidden"), format!("http://{server}/hello?n=2")];
    let results = fetching_model(&llm, "look up the weather in Lisbon", urls);
    let ws = TempWorkspace::init("ap-task");
    let names = Leftovers::new("aptask");
    let env = ask_env(&llm, &tg, &names, &[server]);
    let serving = start(&ws, &env).await;
    tg.user_says(OWNER, OWNER, "what is the weather").await;

    let question = wait_question(&tg, OWNER, 0).await;
    let text = &question.text;
    assert!(text.contains(&server.to_string()), "the destination: {text}");
    assert!(text.contains("look up the weather in Lisbon"), "the task's words: {text}");
    assert!(text.contains("GET /hello") && !text.contains("hidden"), "path, no query: {text}");
    let labels: Vec<String> = buttons(&question).into_iter().map(|(l, _)| l).collect();
    assert_eq!(labels, ["Allow once", "Allow for this task", "Always for this chat", "Deny"]);
    assert!(seen.lock().unwrap().is_empty(), "held: nothing reached the server yet");

    // A stranger's press is refused (the callback answer says so) and decides nothing.
    let task = press(&question, "Allow for this task");
    let refused = tg.user_clicks(OWNER, STRANGER, question.message_id, &task).await;
    let pressed = tg.user_clicks(OWNER, OWNER, question.message_id, &task).await;
    tg.wait_bot_messages(OWNER, |m| has_text(m, "done with the task"), LIMIT * 2).await;
    let answered: Vec<Value> =
        tg.calls("answerCallbackQuery").await.into_iter().map(|c| c.params).collect();
    let answer_of = |id: &str| answered.iter().find(|p| p["callback_query_id"] == id).cloned();
    assert_eq!(answer_of(&refused.callback_query_id).expect("answered")["text"], "Not allowed.");
    assert!(answer_of(&pressed.callback_query_id).is_some());

    // Both fetches got the page; one question was asked; the question says who decided.
    let got = results.lock().unwrap().clone();
    assert_eq!(got.len(), 2, "{got:#?}");
    for result in &got {
        assert!(result.to_string().contains("hello from the allowed server"), "{result}");
    }
    assert_eq!(seen.lock().unwrap().len(), 2);
    let messages = tg.bot_messages(OWNER).await;
    // (Edited, a question keeps its first line and loses its buttons.)
    let asked = messages.iter().filter(|m| m.text.contains("A task wants to reach")).count();
    assert_eq!(asked, 1, "one question for the task and destination");
    let edited = messages.iter().find(|m| m.message_id == question.message_id).unwrap();
    assert!(
        edited.text.contains(&format!("Allowed for this task by telegram:{OWNER}")),
        "{}",
        edited.text
    );
    let by = format!("telegram:{OWNER}");
    assert_eq!(recorded(&ws), [(server.to_string(), Some("task".into()), Some(by.clone()))]);
    // The receipt lists what was asked and who answered.
    let receipt = tg
        .wait_bot_messages(OWNER, |m| has_text(m, "Asked:"), LIMIT)
        .await
        .into_iter()
        .find(|m| m.text.contains("Asked:"))
        .unwrap();
    assert!(receipt.text.contains(&format!("{server} → task by {by}")), "{}", receipt.text);
    serving.stop(LIMIT).await;
}
