//! `egress.mode = "ask"` end to end: the real `nexbot serve`, the real pool and proxy, real
//! SQLite, the Telegram fixture and emulator, and the scripted model. A subagent's fetch of a
//! host no rule allows is held by the proxy while the task's chat is asked (four buttons);
//! the press decides what the held connection gets.

use crate::common;
use crate::egress_support;
use crate::telegram::{has_text, start, telegram_env, LIMIT, OWNER};

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use common::{
    base_env, is_main, parsed_tool_results, tool_results, ChatSession, Leftovers, TempWorkspace,
};
use nexbot_control::{
    approvals_paths, cron_paths, secrets_paths, ApprovalList, Client, CronAdd, CronJob,
    EgressRuleList, SecretEntry, SecretSet, SecretValue,
};
use nexbot_tests::scripted_llm::{ScriptedLlm, Step};
use nexbot_tests::telegram::{BotMessage, ChatType, TelegramFixture, UserMessage};
use serde_json::{json, Value};

/// Someone on no allow-list.
const STRANGER: i64 = 3003;

/// The egress questions among the bot's messages, in order (an answered one is edited and
/// loses its buttons; its first line stays).
pub(crate) fn questions(messages: &[BotMessage]) -> Vec<BotMessage> {
    asked(messages, EGRESS_QUESTION)
}

/// What an egress question's first line says.
const EGRESS_QUESTION: &str = "A task wants to reach";

/// The questions whose first text says `marker`, in order.
fn asked(messages: &[BotMessage], marker: &str) -> Vec<BotMessage> {
    messages.iter().filter(|m| m.raw.contains(marker)).cloned().collect()
}

/// The callback data of the question's button labelled `label`.
pub(crate) fn press(question: &BotMessage, label: &str) -> String {
    let found = question.buttons().into_iter().find(|(l, _)| l == label);
    found.unwrap_or_else(|| panic!("no {label:?} button: {question:#?}")).1
}

/// The `nth` egress question of the chat (from 0), once it is there with its buttons.
pub(crate) async fn wait_question(tg: &TelegramFixture, chat: i64, nth: usize) -> BotMessage {
    wait_asked(tg, chat, EGRESS_QUESTION, nth).await
}

/// The `nth` question of the chat saying `marker` (from 0), once it is there with its buttons.
async fn wait_asked(tg: &TelegramFixture, chat: i64, marker: &str, nth: usize) -> BotMessage {
    let ready =
        |m: &[BotMessage]| asked(m, marker).get(nth).is_some_and(|q| !q.buttons().is_empty());
    let messages = tg.wait_bot_messages(chat, ready, LIMIT * 2).await;
    asked(&messages, marker).remove(nth)
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
pub(crate) fn ask_env(
    llm: &ScriptedLlm,
    tg: &TelegramFixture,
    names: &Leftovers,
    servers: &[SocketAddr],
) -> Vec<(String, String)> {
    let mut env = telegram_env(llm, tg);
    env.extend(ask_settings(names, servers));
    env
}

/// [`ask_env`] without a channel: the pool, mode `ask` and the servers' addresses opened.
fn ask_settings(names: &Leftovers, servers: &[SocketAddr]) -> Vec<(String, String)> {
    let mut env = names.env();
    let entries: Vec<String> = servers
        .iter()
        .map(|s| format!(r#"{{ cidr = "{}", ports = [{}] }}"#, s.ip(), s.port()))
        .collect();
    env.push(("NEXBOT_EGRESS__PROXY__ALLOW_INTERNAL".into(), format!("[{}]", entries.join(", "))));
    env.push(("NEXBOT_EGRESS__MODE".into(), "ask".into()));
    env
}

/// The subagent's tool results so far, shared with the test (what its fetches got).
pub(crate) type Results = Arc<Mutex<Vec<Value>>>;

/// A model whose main agent delegates `task` once per user message and whose subagent
/// fetches `urls` in turn, then answers `FETCHED`; the subagent's tool results are kept.
pub(crate) fn fetching_model(llm: &ScriptedLlm, task: &'static str, urls: Vec<String>) -> Results {
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
        // Each user message delegates once (earlier turns' results are in the history).
        let last = body["messages"].as_array().and_then(|m| m.last()).cloned();
        match last.is_some_and(|m| m["role"] == "tool") {
            false => Step::tool_call("delegate_to_sub_agent", json!({ "task": task })),
            true => Step::text("done with the task"),
        }
    });
    results
}

pub(crate) fn host() -> IpAddr {
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
    let labels: Vec<String> = question.buttons().into_iter().map(|(l, _)| l).collect();
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
    assert_eq!(questions(&messages).len(), 1, "one question for the task and destination");
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

/// The daemon's control API.
pub(crate) fn ctl(ws: &TempWorkspace) -> Client {
    Client::new(ws.dir.join("nexbot.sock"))
}

/// The subagent's tool results, once there are `n`.
pub(crate) async fn results_when(results: &Results, n: usize) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + LIMIT * 2;
    loop {
        let got = results.lock().unwrap().clone();
        if got.len() >= n {
            return got;
        }
        assert!(tokio::time::Instant::now() < deadline, "{n} tool results never came: {got:#?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn deny_refuses_clearly_and_the_operator_can_answer_from_nexbot_ctl() {
    let Some(_docker) = nexbot_tests::docker_or_skip("approvals_deny").await else { return };
    let tg = TelegramFixture::start().await;
    let (denied, denied_seen) = egress_support::http_server_at(host()).await;
    let (operator, operator_seen) = egress_support::http_server_at(host()).await;
    let llm = ScriptedLlm::start(vec![]).await;
    let urls = [denied, operator].map(|s| format!("http://{s}/hello")).to_vec();
    let results = fetching_model(&llm, "collect two pages", urls);
    let ws = TempWorkspace::init("ap-deny");
    let names = Leftovers::new("apdeny");
    let env = ask_env(&llm, &tg, &names, &[denied, operator]);
    let serving = start(&ws, &env).await;
    tg.user_says(OWNER, OWNER, "collect them").await;

    // Deny, pressed in the chat.
    let first = wait_question(&tg, OWNER, 0).await;
    assert!(first.text.contains(&denied.to_string()), "{}", first.text);
    tg.user_clicks(OWNER, OWNER, first.message_id, &press(&first, "Deny")).await;
    // The operator's answer: the waiting question is listed, then allowed once.
    let second = wait_question(&tg, OWNER, 1).await;
    let listed: ApprovalList = ctl(&ws).get(approvals_paths::APPROVALS).await.unwrap();
    assert!(listed.mode.starts_with("ask"), "{listed:?}");
    assert_eq!(listed.pending.len(), 1, "{listed:?}");
    let waiting = &listed.pending[0];
    assert_eq!((waiting.port, waiting.method.as_str()), (operator.port(), "GET"));
    assert_eq!(waiting.path.as_deref(), Some("/hello"));
    let body = json!({ "id": waiting.id, "answer": "once" });
    let done: Value = ctl(&ws).post(approvals_paths::APPROVALS_ANSWER, &body).await.unwrap();
    assert!(done["message"].as_str().unwrap().contains("once"), "{done}");
    // An answer to a question no longer waiting says so.
    let again = ctl(&ws).post::<_, Value>(approvals_paths::APPROVALS_ANSWER, &body).await;
    let again = again.unwrap_err().to_string();
    assert!(again.contains("is waiting"), "{again}");

    let got = results_when(&results, 2).await;
    let said: Vec<String> = got.iter().map(Value::to_string).collect();
    assert!(said[0].contains("denied by the user"), "the task reads why: {}", said[0]);
    assert!(said[1].contains("hello from the allowed server"), "{}", said[1]);
    assert!(denied_seen.lock().unwrap().is_empty());
    assert_eq!(operator_seen.lock().unwrap().len(), 1);
    tg.wait_bot_messages(OWNER, |m| has_text(m, "done with the task"), LIMIT).await;
    let by = format!("telegram:{OWNER}");
    assert_eq!(
        recorded(&ws),
        [
            (denied.to_string(), Some("deny".into()), Some(by.clone())),
            (operator.to_string(), Some("once".into()), Some("nexbot-ctl".into())),
        ]
    );
    let messages = tg.bot_messages(OWNER).await;
    let text_of = |id: i64| messages.iter().find(|m| m.message_id == id).unwrap().text.clone();
    assert!(text_of(first.message_id).contains(&format!("Denied by {by}")));
    assert!(text_of(second.message_id).contains("Allowed once by nexbot-ctl"));
    // The metrics count the questions by answer.
    let metrics = ctl(&ws).get_text("/metrics").await.unwrap();
    for answer in ["deny", "once"] {
        let line = format!("egress_questions_total{{answer=\"{answer}\"}} 1");
        assert!(metrics.contains(&line), "{line} in {metrics}");
    }
    assert!(metrics.contains("egress_questions_answered_total 2"), "{metrics}");
    serving.stop(LIMIT).await;
}

#[tokio::test]
async fn no_answer_within_the_deadline_is_a_refusal_the_task_reads() {
    let Some(_docker) = nexbot_tests::docker_or_skip("approvals_timeout").await else { return };
    let tg = TelegramFixture::start().await;
    let (server, seen) = egress_support::http_server_at(host()).await;
    let llm = ScriptedLlm::start(vec![]).await;
    let results = fetching_model(&llm, "fetch it", vec![format!("http://{server}/hello")]);
    let ws = TempWorkspace::init("ap-timeout");
    let names = Leftovers::new("aptimeout");
    let mut env = ask_env(&llm, &tg, &names, &[server]);
    env.push(("NEXBOT_EGRESS__APPROVAL_TIMEOUT_SECS".into(), "2".into()));
    let serving = start(&ws, &env).await;
    tg.user_says(OWNER, OWNER, "fetch it").await;
    // Nobody answers.
    let question = wait_question(&tg, OWNER, 0).await;
    let got = results_when(&results, 1).await;
    assert!(got[0].to_string().contains("no answer"), "{}", got[0]);
    assert!(seen.lock().unwrap().is_empty());
    tg.wait_bot_messages(OWNER, |m| has_text(m, "done with the task"), LIMIT).await;
    assert_eq!(
        recorded(&ws),
        [(server.to_string(), Some("no answer".into()), Some("daemon".into()))]
    );
    let messages = tg.bot_messages(OWNER).await;
    let edited = messages.iter().find(|m| m.message_id == question.message_id).unwrap();
    assert!(edited.text.contains("Denied: no answer within 2 s"), "{}", edited.text);
    serving.stop(LIMIT).await;
}

#[tokio::test]
async fn always_for_this_chat_survives_a_restart_and_rules_rm_makes_it_ask_again() {
    let Some(_docker) = nexbot_tests::docker_or_skip("approvals_always").await else { return };
    let tg = TelegramFixture::start().await;
    let (server, seen) = egress_support::http_server_at(host()).await;
    let llm = ScriptedLlm::start(vec![]).await;
    let results = fetching_model(&llm, "fetch the page", vec![format!("http://{server}/hello")]);
    let ws = TempWorkspace::init("ap-always");
    let names = Leftovers::new("apalways");
    let env = ask_env(&llm, &tg, &names, &[server]);
    let serving = start(&ws, &env).await;
    tg.user_says(OWNER, OWNER, "first time").await;
    let question = wait_question(&tg, OWNER, 0).await;
    let always = press(&question, "Always for this chat");
    tg.user_clicks(OWNER, OWNER, question.message_id, &always).await;
    tg.wait_bot_messages(OWNER, |m| has_text(m, "done with the task"), LIMIT * 2).await;
    serving.stop(LIMIT).await;

    // After a restart the chat's rule holds: no question, the fetch goes through.
    let serving = start(&ws, &env).await;
    let rules: EgressRuleList = ctl(&ws).get(approvals_paths::EGRESS_RULES).await.unwrap();
    assert_eq!(rules.rules.len(), 1, "{rules:?}");
    let rule = &rules.rules[0];
    assert_eq!((rule.chat.clone(), rule.port), (format!("telegram:{OWNER}"), server.port()));
    assert_eq!(rule.created_by, format!("telegram:{OWNER}"));
    results.lock().unwrap().clear();
    tg.user_says(OWNER, OWNER, "second time").await;
    let done =
        |m: &[BotMessage]| m.iter().filter(|m| m.text.contains("done with the task")).count();
    tg.wait_bot_messages(OWNER, |m| done(m) >= 2, LIMIT * 2).await;
    assert_eq!(seen.lock().unwrap().len(), 2, "both fetches reached the server");
    assert_eq!(questions(&tg.bot_messages(OWNER).await).len(), 1, "nothing asked the second time");

    // `egress rules rm` removes it: the next fetch is asked about again.
    let remove = json!({ "chat": rule.chat, "host": rule.host, "port": rule.port });
    let _: Value = ctl(&ws).post(approvals_paths::EGRESS_RULES_REMOVE, &remove).await.unwrap();
    let rules: EgressRuleList = ctl(&ws).get(approvals_paths::EGRESS_RULES).await.unwrap();
    assert!(rules.rules.is_empty(), "{rules:?}");
    tg.user_says(OWNER, OWNER, "third time").await;
    let again = wait_question(&tg, OWNER, 1).await;
    tg.user_clicks(OWNER, OWNER, again.message_id, &press(&again, "Deny")).await;
    tg.wait_bot_messages(OWNER, |m| done(m) >= 3, LIMIT * 2).await;
    assert_eq!(seen.lock().unwrap().len(), 2, "the denied fetch did not reach it");
    serving.stop(LIMIT).await;
}

#[tokio::test]
async fn a_stop_while_a_question_waits_refuses_the_held_fetch_and_expires_the_question() {
    let Some(_docker) = nexbot_tests::docker_or_skip("approvals_stop").await else { return };
    let tg = TelegramFixture::start().await;
    let (server, seen) = egress_support::http_server_at(host()).await;
    let llm = ScriptedLlm::start(vec![]).await;
    let _results = fetching_model(&llm, "fetch slowly", vec![format!("http://{server}/hello")]);
    let ws = TempWorkspace::init("ap-stop");
    let names = Leftovers::new("apstop");
    let env = ask_env(&llm, &tg, &names, &[server]);
    let serving = start(&ws, &env).await;
    tg.user_says(OWNER, OWNER, "fetch it").await;
    let question = wait_question(&tg, OWNER, 0).await;
    assert_eq!(recorded(&ws), [(server.to_string(), None, None)], "waiting");
    // Stopped with the question waiting (its deadline is 120 s away): the stop does not
    // wait for it; the held fetch is refused and the question expires.
    let log = serving.stop(LIMIT).await;
    assert!(log.contains("waiting egress questions expired at stop"), "{log}");
    assert_eq!(
        recorded(&ws),
        [(server.to_string(), Some("expired".into()), Some("daemon".into()))]
    );
    assert!(seen.lock().unwrap().is_empty());
    let messages = tg.bot_messages(OWNER).await;
    let edited = messages.iter().find(|m| m.message_id == question.message_id).unwrap();
    assert!(edited.text.contains("Expired: the daemon stopped"), "{}", edited.text);
    // Pressed after the restart, its button answers nothing.
    let serving = start(&ws, &env).await;
    let once = press(&question, "Allow once");
    let late = tg.user_clicks(OWNER, OWNER, question.message_id, &once).await;
    let said = tg.press_answer(&late, LIMIT).await;
    assert!(said.contains("is waiting"), "{said}");
    serving.stop(LIMIT).await;
}

#[tokio::test]
async fn allowlist_refuses_silently_and_a_config_without_a_mode_stays_open() {
    let Some(_docker) = nexbot_tests::docker_or_skip("approvals_modes").await else { return };
    let tg = TelegramFixture::start().await;
    let (listed, listed_seen) = egress_support::http_server_at(host()).await;
    let (unlisted, unlisted_seen) = egress_support::http_server_at(host()).await;
    let llm = ScriptedLlm::start(vec![]).await;
    let urls = [listed, unlisted].map(|s| format!("http://{s}/hello")).to_vec();
    let results = fetching_model(&llm, "fetch both", urls);
    let ws = TempWorkspace::init("ap-modes");
    let names = Leftovers::new("apmodes");
    let mut env = ask_env(&llm, &tg, &names, &[listed, unlisted]);
    env.push(("NEXBOT_EGRESS__MODE".into(), "allowlist".into()));
    env.push(("NEXBOT_EGRESS__ALLOW".into(), format!(r#"["{listed}"]"#)));
    let serving = start(&ws, &env).await;
    tg.user_says(OWNER, OWNER, "fetch both").await;
    let got = results_when(&results, 2).await;
    assert!(got[0].to_string().contains("hello from the allowed server"), "{}", got[0]);
    let refused = got[1].to_string();
    assert!(refused.contains("not_allowed") && refused.contains("allowlist"), "{refused}");
    assert_eq!((listed_seen.lock().unwrap().len(), unlisted_seen.lock().unwrap().len()), (1, 0));
    tg.wait_bot_messages(OWNER, |m| has_text(m, "done with the task"), LIMIT).await;
    assert!(questions(&tg.bot_messages(OWNER).await).is_empty(), "allowlist never asks");
    serving.stop(LIMIT).await;

    // An earlier version's config: no `mode` at all. Both go through, nothing is asked, and
    // the daemon says how to turn `ask` on, in its log and in /status.
    let config = std::fs::read_to_string(ws.config()).unwrap();
    let old: String =
        config.lines().filter(|l| !l.starts_with("mode = ")).collect::<Vec<_>>().join("\n");
    std::fs::write(ws.config(), old).unwrap();
    let env: Vec<(String, String)> = env
        .into_iter()
        .filter(|(k, _)| !k.starts_with("NEXBOT_EGRESS__MODE") && k != "NEXBOT_EGRESS__ALLOW")
        .collect();
    results.lock().unwrap().clear();
    let serving = start(&ws, &env).await;
    tg.user_says(OWNER, OWNER, "fetch both again").await;
    let got = results_when(&results, 2).await;
    for result in &got {
        assert!(result.to_string().contains("hello from the allowed server"), "{result}");
    }
    tg.user_says(OWNER, OWNER, "/status").await;
    let status = tg.wait_bot_messages(OWNER, |m| has_text(m, "mode = \"ask\""), LIMIT).await;
    assert!(status.iter().any(|m| m.text.contains("open (this config names no egress.mode")));
    assert!(questions(&tg.bot_messages(OWNER).await).is_empty());
    assert!(
        serving.log().contains("set `mode = \\\"ask\\\"`")
            || serving.log().contains("set `mode = \"ask\"`")
    );
    serving.stop(LIMIT).await;
}

#[tokio::test]
async fn five_tasks_of_five_chats_ask_at_once_and_each_answer_reaches_only_its_task() {
    let Some(_docker) = nexbot_tests::docker_or_skip("approvals_five").await else { return };
    let tg = TelegramFixture::start().await;
    let users: Vec<i64> = (0..5).map(|i| 2001 + i).collect();
    let mut servers = Vec::new();
    for _ in &users {
        servers.push(egress_support::http_server_at(host()).await);
    }
    let addrs: Vec<SocketAddr> = servers.iter().map(|(a, _)| *a).collect();
    // Each chat's task fetches its own server (the user's message names it).
    let llm = ScriptedLlm::start(vec![]).await;
    let results: Arc<Mutex<Vec<(String, Value)>>> = Arc::default();
    let seen_results = results.clone();
    llm.set_responder(move |body| {
        if !is_main(body) {
            let task = body["messages"].to_string();
            let url = task.split("FETCH ").nth(1).and_then(|t| t.split(['"', '\\', ' ']).next());
            let url = url.unwrap_or_default().to_owned();
            return match parsed_tool_results(body).pop() {
                None => Step::tool_call("web_fetch", json!({ "url": url })),
                Some(result) => {
                    seen_results.lock().unwrap().push((url, result));
                    Step::text("FETCHED")
                }
            };
        }
        let last = body["messages"].as_array().and_then(|m| m.last()).cloned();
        match last.is_some_and(|m| m["role"] == "tool") {
            false => {
                let task = nexbot_tests::scripted_llm::last_user(body);
                Step::tool_call("delegate_to_sub_agent", json!({ "task": task }))
            }
            true => Step::text("done with the task"),
        }
    });
    let ws = TempWorkspace::init("ap-five");
    let names = Leftovers::new("apfive");
    let mut env = ask_env(&llm, &tg, &names, &addrs);
    let allowed: Vec<String> = users.iter().map(i64::to_string).collect();
    env.push(("NEXBOT_TELEGRAM__ALLOWED_USERS".into(), format!("[{}]", allowed.join(", "))));
    env.push(("NEXBOT_SUBAGENT__POOL_SIZE".into(), "5".into()));
    env.push(("NEXBOT_BUS__MAX_PARALLEL_TURNS".into(), "5".into()));
    let serving = start(&ws, &env).await;
    for (user, addr) in users.iter().zip(&addrs) {
        tg.user_says(*user, *user, &format!("FETCH http://{addr}/hello")).await;
    }
    // All five wait at once (nothing is answered yet); then each chat answers its own, in
    // reverse order, odd chats allowing and even ones denying.
    let mut asked = Vec::new();
    for user in &users {
        asked.push(wait_question(&tg, *user, 0).await);
    }
    let listed: ApprovalList = ctl(&ws).get(approvals_paths::APPROVALS).await.unwrap();
    assert_eq!(listed.pending.len(), 5, "{listed:?}");
    for (i, (user, question)) in users.iter().zip(&asked).enumerate().rev() {
        let label = if i % 2 == 0 { "Deny" } else { "Allow once" };
        tg.user_clicks(*user, *user, question.message_id, &press(question, label)).await;
    }
    for user in &users {
        tg.wait_bot_messages(*user, |m| has_text(m, "done with the task"), LIMIT * 2).await;
    }
    let got = results.lock().unwrap().clone();
    assert_eq!(got.len(), 5, "{got:#?}");
    for (i, (addr, (_, seen))) in addrs.iter().zip(&servers).enumerate() {
        let url = format!("http://{addr}/hello");
        let (_, result) = got.iter().find(|(u, _)| *u == url).expect("its task answered");
        let result = result.to_string();
        if i % 2 == 0 {
            assert!(result.contains("denied by the user"), "{url}: {result}");
            assert!(seen.lock().unwrap().is_empty());
        } else {
            assert!(result.contains("hello from the allowed server"), "{url}: {result}");
            assert_eq!(seen.lock().unwrap().len(), 1);
        }
    }
    serving.stop(LIMIT).await;
}

#[tokio::test]
async fn in_a_group_the_member_who_started_the_task_or_the_owner_decides() {
    let Some(_docker) = nexbot_tests::docker_or_skip("approvals_group").await else { return };
    const GROUP: i64 = -500; // allowed by `telegram_env`
    const MEMBER: i64 = 3004; // on no allow-list: the group's allowance lets them talk
    const OTHER: i64 = 3005;
    let tg = TelegramFixture::start().await;
    let (server, seen) = egress_support::http_server_at(host()).await;
    let llm = ScriptedLlm::start(vec![]).await;
    let results =
        fetching_model(&llm, "fetch for the group", vec![format!("http://{server}/hello")]);
    let ws = TempWorkspace::init("ap-group");
    let names = Leftovers::new("apgroup");
    let env = ask_env(&llm, &tg, &names, &[server]);
    let serving = start(&ws, &env).await;
    let says = |user_id: i64, text: &str| UserMessage {
        chat_id: GROUP,
        chat_type: ChatType::Group,
        user_id,
        text: Some(format!("@nexbot_test_bot {text}")),
        ..UserMessage::default()
    };
    let refusal = "Only the member who started the task, or the owner, can answer";

    // MEMBER's task: another member's press is refused; MEMBER's own press decides.
    tg.user_sends(says(MEMBER, "fetch it for us")).await;
    let question = wait_question(&tg, GROUP, 0).await;
    let allow = press(&question, "Allow once");
    let other = tg.user_clicks(GROUP, OTHER, question.message_id, &allow).await;
    // The refusal is the press's notice (one line), not a message in the group.
    let said = tg.press_answer(&other, LIMIT).await;
    assert!(said.contains(refusal), "{said}");
    assert!(!has_text(&tg.bot_messages(GROUP).await, refusal), "the refusal came as a message");
    let listed: ApprovalList = ctl(&ws).get(approvals_paths::APPROVALS).await.unwrap();
    assert_eq!(listed.pending.len(), 1, "still waiting: {listed:?}");
    assert!(seen.lock().unwrap().is_empty());
    // The member who started it may not make a group-wide rule: "always" is the owner's.
    let always = press(&question, "Always for this chat");
    let member = tg.user_clicks(GROUP, MEMBER, question.message_id, &always).await;
    let said = tg.press_answer(&member, LIMIT).await;
    assert!(said.contains("Only the owner can allow"), "{said}");
    let listed: ApprovalList = ctl(&ws).get(approvals_paths::APPROVALS).await.unwrap();
    assert_eq!(listed.pending.len(), 1, "still waiting after the refused press: {listed:?}");
    assert!(seen.lock().unwrap().is_empty());
    tg.user_clicks(GROUP, MEMBER, question.message_id, &allow).await;
    let got = results_when(&results, 1).await;
    assert!(got[0].to_string().contains("hello from the allowed server"), "{}", got[0]);
    let done = |n: usize| {
        move |m: &[BotMessage]| m.iter().filter(|m| m.text.contains("done with")).count() >= n
    };
    tg.wait_bot_messages(GROUP, done(1), LIMIT * 2).await;

    // OTHER's task: MEMBER may not decide it; the owner may.
    results.lock().unwrap().clear();
    tg.user_sends(says(OTHER, "fetch it again")).await;
    let question = wait_question(&tg, GROUP, 1).await;
    let allow = press(&question, "Allow once");
    let member = tg.user_clicks(GROUP, MEMBER, question.message_id, &allow).await;
    let said = tg.press_answer(&member, LIMIT).await;
    assert!(said.contains(refusal), "{said}");
    assert_eq!(seen.lock().unwrap().len(), 1, "the second fetch still waits");
    tg.user_clicks(GROUP, OWNER, question.message_id, &allow).await;
    let got = results_when(&results, 1).await;
    assert!(got[0].to_string().contains("hello from the allowed server"), "{}", got[0]);
    let by = |user: i64| Some(format!("telegram:{user}"));
    let once = Some("once".to_owned());
    assert_eq!(
        recorded(&ws),
        [(server.to_string(), once.clone(), by(MEMBER)), (server.to_string(), once, by(OWNER))]
    );
    serving.stop(LIMIT).await;
}

/// The same buttons for another step that waits on the user: `ask_user` with `options`.
#[tokio::test]
async fn ask_user_offers_its_options_as_buttons_and_a_press_is_the_answer() {
    let tg = TelegramFixture::start().await;
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(|body| {
        let results = parsed_tool_results(body);
        match results.last() {
            None => Step::tool_call(
                "ask_user",
                json!({"question": "Which colour?", "options": ["Red", "Blue"]}),
            ),
            Some(result) if result.to_string().contains("Blue") => Step::text("you chose Blue"),
            Some(result) => Step::text(&format!("unexpected: {result}")),
        }
    });
    let ws = TempWorkspace::init("ap-choice");
    let env = telegram_env(&llm, &tg);
    let serving = start(&ws, &env).await;
    tg.user_says(OWNER, OWNER, "pick a colour for me").await;
    let asked =
        tg.wait_bot_messages(OWNER, |m| m.iter().any(|m| !m.buttons().is_empty()), LIMIT).await;
    let question = asked.into_iter().find(|m| !m.buttons().is_empty()).unwrap();
    assert!(question.text.contains("Which colour?"), "{}", question.text);
    let labels: Vec<String> = question.buttons().into_iter().map(|(l, _)| l).collect();
    assert_eq!(labels, ["Red", "Blue"]);
    tg.user_clicks(OWNER, OWNER, question.message_id, &press(&question, "Blue")).await;
    tg.wait_bot_messages(OWNER, |m| has_text(m, "you chose Blue"), LIMIT).await;
    serving.stop(LIMIT).await;
}

/// A console chat (`nexbot chat`) has nothing to press: the question is printed with a
/// one-letter prompt, and the letter typed is the answer.
#[tokio::test]
async fn a_console_chat_is_asked_inline_and_a_typed_letter_answers() {
    let Some(_docker) = nexbot_tests::docker_or_skip("approvals_console").await else { return };
    let (server, seen) = egress_support::http_server_at(host()).await;
    let llm = ScriptedLlm::start(vec![]).await;
    let urls = vec![format!("http://{server}/hello"), format!("http://{server}/hello?n=2")];
    let results = fetching_model(&llm, "fetch the page twice", urls);
    let ws = TempWorkspace::init("ap-console");
    let names = Leftovers::new("apconsole");
    let mut env = base_env(&llm.base_url());
    env.extend(ask_settings(&names, &[server]));
    let mut chat = ChatSession::start(&ws.config(), &env);
    chat.say("fetch it").await;
    let mut screen = Vec::new();
    while !screen.last().is_some_and(|l: &String| l.contains("(type the key)")) {
        screen.push(chat.answer(LIMIT * 2).await);
    }
    let prompt = screen.last().unwrap();
    assert!(
        prompt.contains(
            "[o] Allow once · [t] Allow for this task · [a] Always for this chat · [d] Deny"
        ),
        "{screen:#?}"
    );
    assert!(screen.iter().any(|l| l.contains(&format!("A task wants to reach {server}"))));
    assert!(seen.lock().unwrap().is_empty(), "held until answered");
    chat.say("t").await;
    while !screen.last().unwrap().contains("done with the task") {
        screen.push(chat.answer(LIMIT * 2).await);
    }
    let got = results.lock().unwrap().clone();
    assert_eq!(got.len(), 2, "{got:#?}");
    assert!(got.iter().all(|r| r.to_string().contains("hello from the allowed server")));
    assert_eq!(seen.lock().unwrap().len(), 2, "one question let both through");
    let asked = screen.iter().filter(|l| l.contains("A task wants to reach")).count();
    assert_eq!(asked, 1, "{screen:#?}");
    let (status, _, stderr) = chat.finish(LIMIT).await;
    assert!(status.success(), "{stderr}");
    let rows = recorded(&ws);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!((&rows[0].0, rows[0].1.as_deref()), (&server.to_string(), Some("task")));
    assert!(rows[0].2.as_deref().is_some_and(|by| by.starts_with("console")), "{rows:?}");
}

/// Scheduled jobs have nobody to ask: `egress.unattended = "deny"` (the default) refuses what
/// no `egress.allow` rule names, even what the chat allowed always; `"allowlist"` also lets
/// the chat's "always" rules through. Neither asks.
#[tokio::test]
async fn a_scheduled_job_is_never_asked_and_follows_egress_unattended() {
    let Some(_docker) = nexbot_tests::docker_or_skip("approvals_unattended").await else { return };
    let tg = TelegramFixture::start().await;
    let (server, seen) = egress_support::http_server_at(host()).await;
    let llm = ScriptedLlm::start(vec![]).await;
    let results = fetching_model(&llm, "fetch the page", vec![format!("http://{server}/hello")]);
    let ws = TempWorkspace::init("ap-unattended");
    let names = Leftovers::new("apunatt");
    let env = ask_env(&llm, &tg, &names, &[server]);
    let serving = start(&ws, &env).await;
    // The chat allows the server always, from a task the chat started.
    tg.user_says(OWNER, OWNER, "fetch it").await;
    let question = wait_question(&tg, OWNER, 0).await;
    tg.user_clicks(OWNER, OWNER, question.message_id, &press(&question, "Always for this chat"))
        .await;
    let done = |n: usize| {
        move |m: &[BotMessage]| {
            m.iter().filter(|m| m.text.contains("done with the task")).count() >= n
        }
    };
    tg.wait_bot_messages(OWNER, done(1), LIMIT * 2).await;
    assert_eq!(seen.lock().unwrap().len(), 1);

    // A job of the same chat, unattended = "deny": refused, not asked, the reason names it.
    let job = CronAdd {
        chat: format!("telegram:{OWNER}"),
        task: "fetch the page for the job".into(),
        at: Some("in 1s".into()),
        ..CronAdd::default()
    };
    results.lock().unwrap().clear();
    let _: CronJob = ctl(&ws).post(cron_paths::CRON, &job).await.unwrap();
    let got = results_when(&results, 1).await;
    let refused = got[0].to_string();
    assert!(
        refused.contains("nobody to ask") && refused.contains("egress.unattended"),
        "{refused}"
    );
    tg.wait_bot_messages(OWNER, done(2), LIMIT * 2).await;
    assert_eq!(seen.lock().unwrap().len(), 1, "the job's fetch never reached the server");
    assert_eq!(questions(&tg.bot_messages(OWNER).await).len(), 1, "the job asked nothing");
    serving.stop(LIMIT).await;

    // unattended = "allowlist": the chat's "always" rule lets the job's fetch through.
    let mut env = env;
    env.push(("NEXBOT_EGRESS__UNATTENDED".into(), "allowlist".into()));
    let serving = start(&ws, &env).await;
    results.lock().unwrap().clear();
    let _: CronJob = ctl(&ws).post(cron_paths::CRON, &job).await.unwrap();
    let got = results_when(&results, 1).await;
    assert!(got[0].to_string().contains("hello from the allowed server"), "{}", got[0]);
    tg.wait_bot_messages(OWNER, done(3), LIMIT * 2).await;
    assert_eq!(seen.lock().unwrap().len(), 2);
    assert_eq!(questions(&tg.bot_messages(OWNER).await).len(), 1, "still nothing asked");
    serving.stop(LIMIT).await;
}
/// What a send_file confirmation's first line says.
const SEND_QUESTION: &str = "wants to send you the file";
/// What a delete confirmation's first line says.
const DELETE_QUESTION: &str = "wants to delete the file";

/// A main agent that, for each user message `<tool> <path>`, calls the tool on the path once
/// and then says `RESULT <the tool's result>`.
fn stepping_model(llm: &ScriptedLlm) {
    llm.set_responder(|body| {
        let last = body["messages"].as_array().and_then(|m| m.last()).cloned();
        if last.is_some_and(|m| m["role"] == "tool") {
            let result = parsed_tool_results(body).pop().unwrap_or_default();
            return Step::text(&format!("RESULT {result}"));
        }
        let user = nexbot_tests::scripted_llm::last_user(body);
        match user.split_once(' ') {
            Some((tool, path)) => Step::tool_call(tool, json!({ "path": path })),
            None => Step::text("say <tool> <path>"),
        }
    });
}

/// The model's `RESULT` lines of the chat, once there are `n`.
async fn wait_results(tg: &TelegramFixture, n: usize) -> Vec<String> {
    let enough = |m: &[BotMessage]| m.iter().filter(|m| m.text.starts_with("RESULT")).count() >= n;
    let messages = tg.wait_bot_messages(OWNER, enough, LIMIT * 2).await;
    messages.iter().filter(|m| m.text.starts_with("RESULT")).map(|m| m.text.clone()).collect()
}

/// A question as recorded: (kind, subject, answer, answered by).
type Recorded = (String, Option<String>, Option<String>, Option<String>);

/// The questions recorded, every kind.
fn recorded_kinds(ws: &TempWorkspace) -> Vec<Recorded> {
    let db = rusqlite::Connection::open(ws.database()).unwrap();
    let mut stmt = db
        .prepare("SELECT kind, subject, answer, answered_by FROM egress_questions ORDER BY id")
        .unwrap();
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))).unwrap();
    rows.map(Result::unwrap).collect()
}

#[tokio::test]
async fn agent_confirm_asks_before_a_large_send_file_and_a_delete_and_the_answer_decides() {
    let tg = TelegramFixture::start().await;
    let llm = ScriptedLlm::start(vec![]).await;
    stepping_model(&llm);
    let ws = TempWorkspace::init("ap-confirm");
    // Loose in the data directory: they move into the owner's room on the first start.
    std::fs::write(ws.dir.join("big.bin"), vec![7u8; 4000]).unwrap();
    std::fs::write(ws.dir.join("small.txt"), "a small note").unwrap();
    std::fs::write(ws.dir.join("old.txt"), "to be deleted").unwrap();
    let mut env = telegram_env(&llm, &tg);
    env.push(("NEXBOT_AGENT__CONFIRM".into(), r#"["send_file", "delete"]"#.into()));
    env.push(("NEXBOT_AGENT__CONFIRM_SEND_FILE_BYTES".into(), "1000".into()));
    let serving = start(&ws, &env).await;
    let documents = |m: &[BotMessage]| m.iter().filter(|m| m.kind == "document").count();

    // Over the size: asked, with Allow / Deny; a stranger's press is refused; Allow sends.
    tg.user_says(OWNER, OWNER, "send_file big.bin").await;
    let question = wait_asked(&tg, OWNER, SEND_QUESTION, 0).await;
    assert!(question.text.contains("big.bin (3.9 KB)"), "{}", question.text);
    let labels: Vec<String> = question.buttons().into_iter().map(|(l, _)| l).collect();
    assert_eq!(labels, ["Allow", "Deny"]);
    assert_eq!(documents(&tg.bot_messages(OWNER).await), 0, "nothing sent while it asks");
    let allow = press(&question, "Allow");
    let refused = tg.user_clicks(OWNER, STRANGER, question.message_id, &allow).await;
    tg.user_clicks(OWNER, OWNER, question.message_id, &allow).await;
    let results = wait_results(&tg, 1).await;
    assert!(results[0].contains(r#""success":true"#), "{results:?}");
    let answered = tg.calls("answerCallbackQuery").await;
    let stranger =
        answered.iter().find(|c| c.params["callback_query_id"] == refused.callback_query_id);
    assert_eq!(stranger.expect("answered").params["text"], "Not allowed.");
    let messages = tg.bot_messages(OWNER).await;
    assert_eq!(documents(&messages), 1, "allowed: sent");
    let by = format!("telegram:{OWNER}");
    let edited = messages.iter().find(|m| m.message_id == question.message_id).unwrap();
    assert!(edited.text.contains(&format!("Allowed by {by}")), "{}", edited.text);

    // Deny: the model reads the refusal; nothing is sent.
    tg.user_says(OWNER, OWNER, "send_file big.bin").await;
    let question = wait_asked(&tg, OWNER, SEND_QUESTION, 1).await;
    tg.user_clicks(OWNER, OWNER, question.message_id, &press(&question, "Deny")).await;
    let results = wait_results(&tg, 2).await;
    assert!(results[1].contains("not sent: the user refused it"), "{results:?}");
    assert_eq!(documents(&tg.bot_messages(OWNER).await), 1, "denied: nothing more sent");

    // At or under the size: nothing asks.
    tg.user_says(OWNER, OWNER, "send_file small.txt").await;
    let results = wait_results(&tg, 3).await;
    assert!(results[2].contains(r#""success":true"#), "{results:?}");
    let messages = tg.bot_messages(OWNER).await;
    assert_eq!(documents(&messages), 2);
    assert_eq!(asked(&messages, SEND_QUESTION).len(), 2, "no third question");

    // A delete asks too; `nexbot-ctl approvals ls` lists it with its kind, `allow` answers.
    tg.user_says(OWNER, OWNER, "delete_file old.txt").await;
    let question = wait_asked(&tg, OWNER, DELETE_QUESTION, 0).await;
    let room = ws.dir.join(format!("chats/telegram_{OWNER}"));
    assert!(room.join("old.txt").exists(), "not deleted while it asks");
    let listed: ApprovalList = ctl(&ws).get(approvals_paths::APPROVALS).await.unwrap();
    assert_eq!(listed.pending.len(), 1, "{listed:?}");
    let waiting = &listed.pending[0];
    assert_eq!((waiting.kind.as_str(), waiting.subject.as_deref()), ("delete", Some("old.txt")));
    assert_eq!(waiting.chat, format!("telegram:{OWNER}"));
    // An answer a confirmation does not take is refused and decides nothing.
    let always = json!({ "id": waiting.id, "answer": "chat" });
    let wrong = ctl(&ws).post::<_, Value>(approvals_paths::APPROVALS_ANSWER, &always).await;
    assert!(wrong.unwrap_err().to_string().contains("allow or deny"));
    let body = json!({ "id": waiting.id, "answer": "once" });
    let done: Value = ctl(&ws).post(approvals_paths::APPROVALS_ANSWER, &body).await.unwrap();
    assert!(done["message"].as_str().unwrap().contains("delete question"), "{done}");
    let results = wait_results(&tg, 4).await;
    assert!(results[3].contains("deleted old.txt"), "{results:?}");
    assert!(!room.join("old.txt").exists());
    let messages = tg.bot_messages(OWNER).await;
    let edited = messages.iter().find(|m| m.message_id == question.message_id).unwrap();
    assert!(edited.text.contains("Allowed by nexbot-ctl"), "{}", edited.text);

    let (big, old) = (Some("big.bin (4000 bytes)".to_owned()), Some("old.txt".to_owned()));
    assert_eq!(
        recorded_kinds(&ws),
        [
            ("send_file".into(), big.clone(), Some("once".into()), Some(by.clone())),
            ("send_file".into(), big, Some("deny".into()), Some(by)),
            ("delete".into(), old, Some("once".into()), Some("nexbot-ctl".into())),
        ]
    );
    let metrics = ctl(&ws).get_text("/metrics").await.unwrap();
    for (kind, answer) in [("send_file", "once"), ("send_file", "deny"), ("delete", "once")] {
        let line = format!("confirmation_questions_total{{kind=\"{kind}\",answer=\"{answer}\"}} 1");
        assert!(metrics.contains(&line), "{line} in {metrics}");
    }
    serving.stop(LIMIT).await;
}

/// A planted value, hunted for in the question, the database and the logs.
const CONFIRMED: &str = "ghp_PLANTED_confirm_4e7b1a9c03d2";
/// What a `--confirm` secret's question says first.
const SECRET_QUESTION: &str = "wants to use the secret";

/// A model whose main agent delegates `calls: N` tasks with the secret `GH_TOKEN` and whose
/// subagent sends N requests to `api` carrying it; the subagent's tool results are kept.
fn secret_model(llm: &ScriptedLlm, api: SocketAddr) -> Results {
    let results: Results = Arc::default();
    let seen = results.clone();
    llm.set_responder(move |body| {
        if !is_main(body) {
            let calls = if body.to_string().contains("calls: 2") { 2 } else { 1 };
            *seen.lock().unwrap() = parsed_tool_results(body);
            let n = tool_results(body);
            if n >= calls {
                return Step::text("CALLED");
            }
            let url = format!("http://{api}/echo/{n}");
            let headers = json!({ "Authorization": "Bearer {{secret:GH_TOKEN}}" });
            return Step::tool_call("http_request", json!({ "url": url, "headers": headers }));
        }
        let last = body["messages"].as_array().and_then(|m| m.last()).cloned().unwrap_or_default();
        if last["role"] == "tool" {
            return Step::text("done with the task");
        }
        let task = match last["content"].as_str() {
            Some("twice") => "call the API, calls: 2",
            _ => "call the API, calls: 1",
        };
        Step::tool_call(
            "delegate_to_sub_agent",
            json!({ "task": task, "secrets": ["GH_TOKEN"], "tools": ["http_request"] }),
        )
    });
    results
}

#[tokio::test]
async fn a_confirm_secret_is_filled_in_only_after_the_chat_allows_it_for_the_task() {
    let Some(_docker) = nexbot_tests::docker_or_skip("approvals_secret").await else { return };
    let tg = TelegramFixture::start().await;
    let (api, api_seen) = nexbot_tests::egress::web_echo_server(host()).await;
    let llm = ScriptedLlm::start(vec![]).await;
    let results = secret_model(&llm, api);
    let ws = TempWorkspace::init("ap-secret");
    let names = Leftovers::new("apsecret");
    let mut env = ask_env(&llm, &tg, &names, &[api]);
    // `open`: the destination asks nothing; only the secret does.
    env.push(("NEXBOT_EGRESS__MODE".into(), "open".into()));
    env.push(("NEXBOT_MASTER_KEY".into(), "nxs-test-master-key-0123456789abcdef".into()));
    let serving = start(&ws, &env).await;
    let set = SecretSet {
        scope: format!("telegram:{OWNER}"),
        name: "GH_TOKEN".into(),
        value: SecretValue::new(CONFIRMED.into()),
        hosts: vec![format!("http://{api}")],
        places: vec![],
        mode: None,
        confirm: true,
    };
    let stored: SecretEntry = ctl(&ws).post(secrets_paths::SECRETS, &set).await.unwrap();
    assert!(stored.confirm, "{stored:?}");

    // The first request of a task is held and the chat asked, naming the secret only.
    tg.user_says(OWNER, OWNER, "twice").await;
    let question = wait_asked(&tg, OWNER, SECRET_QUESTION, 0).await;
    assert!(question.text.contains("GH_TOKEN"), "{}", question.text);
    assert!(question.text.contains(&format!("GET /echo/0 to {api}")), "{}", question.text);
    assert!(!question.raw.contains(CONFIRMED), "{}", question.raw);
    let labels: Vec<String> = question.buttons().into_iter().map(|(l, _)| l).collect();
    assert_eq!(labels, ["Allow for this task", "Deny"]);
    assert!(api_seen.lock().unwrap().is_empty(), "held: nothing reached the API yet");
    let listed: ApprovalList = ctl(&ws).get(approvals_paths::APPROVALS).await.unwrap();
    let waiting = &listed.pending[0];
    assert_eq!((waiting.kind.as_str(), waiting.subject.as_deref()), ("secret", Some("GH_TOKEN")));
    tg.user_clicks(OWNER, OWNER, question.message_id, &press(&question, "Allow for this task"))
        .await;
    // Allowed for the task: both its requests carry the value, with one question.
    let got = results_when(&results, 2).await;
    tg.wait_bot_messages(OWNER, |m| has_text(m, "done with the task"), LIMIT * 2).await;
    let seen = api_seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?} {got:?}");
    let bearer = format!("Bearer {CONFIRMED}");
    assert!(seen.iter().all(|e| e.header("authorization") == Some(bearer.as_str())), "{seen:?}");
    assert_eq!(asked(&tg.bot_messages(OWNER).await, SECRET_QUESTION).len(), 1);

    // A second task asks again; Deny: the API never sees the value, the task reads why.
    tg.user_says(OWNER, OWNER, "once").await;
    let question = wait_asked(&tg, OWNER, SECRET_QUESTION, 1).await;
    tg.user_clicks(OWNER, OWNER, question.message_id, &press(&question, "Deny")).await;
    tg.wait_bot_messages(
        OWNER,
        |m| m.iter().filter(|m| m.text.contains("done with the task")).count() >= 2,
        LIMIT * 2,
    )
    .await;
    let got = results.lock().unwrap().clone();
    let said = got.last().map(Value::to_string).unwrap_or_default();
    assert!(said.contains("secret_not_confirmed") && said.contains("denied by the user"), "{said}");
    assert_eq!(api_seen.lock().unwrap().len(), 2, "nothing more reached the API");
    let messages = tg.bot_messages(OWNER).await;
    let edited = messages.iter().find(|m| m.message_id == question.message_id).unwrap();
    assert!(edited.text.contains(&format!("Denied by telegram:{OWNER}")), "{}", edited.text);

    let log = serving.stop(LIMIT).await;
    assert!(!log.contains(CONFIRMED), "the value is in the daemon's log");
    let db = std::fs::read(ws.database()).unwrap();
    let planted = CONFIRMED.as_bytes();
    assert!(!db.windows(planted.len()).any(|w| w == planted), "the value is in the database");
    let kinds: Vec<(String, Option<String>, Option<String>)> =
        recorded_kinds(&ws).into_iter().map(|(k, s, a, _)| (k, s, a)).collect();
    let secret = || ("secret".to_owned(), Some("GH_TOKEN".to_owned()));
    assert_eq!(
        kinds,
        [
            (secret().0, secret().1, Some("task".to_owned())),
            (secret().0, secret().1, Some("deny".to_owned())),
        ]
    );
}
