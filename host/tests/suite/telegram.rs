//! The Telegram channel end to end: the real `nexbot serve` binary, real SQLite, the scripted
//! LLM, and the third-party Bot API emulator (`telegram-test-api`) behind the tests' fixture
//! (`nexbot_tests::telegram`), which fills the emulator's gaps (a complete `getMe`, offsets,
//! long polling, Telegram's HTML rules, faults). Delegation tests use the real pool.

use crate::common;
use crate::egress_support;

use std::time::Duration;

use common::{base_env, echo, is_main, tool_results, Leftovers, Serving, TempWorkspace};
use nexbot_tests::scripted_llm::{last_user, ScriptedLlm, Step};
use nexbot_tests::telegram::{BotMessage, ChatType, Fault, TelegramFixture, UserMessage};
use serde_json::{json, Value};

pub(crate) const OWNER: i64 = 1001;
pub(crate) const FRIEND: i64 = 1002;
const STRANGER: i64 = 3003;
const GROUP: i64 = -500;
/// A group that is not on the allow-list.
const OTHER_GROUP: i64 = -700;
pub(crate) const LIMIT: Duration = Duration::from_secs(60);

/// The environment that points the daemon at the fixture.
pub(crate) fn telegram_env(llm: &ScriptedLlm, tg: &TelegramFixture) -> Vec<(String, String)> {
    let mut env = base_env(&llm.base_url());
    common::telegram_env(&mut env, tg, OWNER);
    env.extend(
        [
            ("NEXBOT_TELEGRAM__ALLOWED_USERS", format!("[{FRIEND}]")),
            ("NEXBOT_TELEGRAM__ALLOWED_CHATS", format!("[{GROUP}]")),
            ("NEXBOT_TELEGRAM__PROGRESS_EDIT_INTERVAL_MS", "300".to_owned()),
            ("NEXBOT_TELEGRAM__DELIVERY_DEADLINE_SECS", "60".to_owned()),
        ]
        .map(|(k, v)| (k.to_owned(), v)),
    );
    env
}

fn system_prompt(body: &Value) -> String {
    body["messages"][0]["content"].as_str().unwrap_or_default().to_owned()
}

pub(crate) async fn start(ws: &TempWorkspace, env: &[(String, String)]) -> Serving {
    let serving = Serving::start(&ws.config(), env, LIMIT).await;
    serving.wait_log("the Telegram channel is on", LIMIT).await;
    serving
}

/// The ledger's rows: (update id, chat, state, detail).
pub(crate) fn ledger(ws: &TempWorkspace) -> Vec<(i64, String, String, Option<String>)> {
    let db = rusqlite::Connection::open(ws.database()).unwrap();
    let mut stmt = db
        .prepare(
            "SELECT update_id, chat_id, state, detail FROM telegram_updates ORDER BY update_id",
        )
        .unwrap();
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))).unwrap();
    rows.map(Result::unwrap).collect()
}

/// [`ledger`] once no row is pending (at most [`LIMIT`]): a row is settled just after its
/// answer's send returns, which may be a moment after the fixture saw the message.
pub(crate) async fn settled_ledger(
    ws: &TempWorkspace,
) -> Vec<(i64, String, String, Option<String>)> {
    let deadline = std::time::Instant::now() + LIMIT;
    loop {
        let rows = ledger(ws);
        if rows.iter().all(|r| r.2 != "pending") || std::time::Instant::now() > deadline {
            return rows;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub(crate) fn texts(messages: &[BotMessage]) -> Vec<String> {
    messages.iter().map(|m| m.text.clone()).collect()
}

pub(crate) fn has_text(messages: &[BotMessage], needle: &str) -> bool {
    messages.iter().any(|m| m.text.contains(needle))
}

#[tokio::test]
async fn allowed_users_get_answers_strangers_one_refusal_and_the_model_never_sees_them() {
    let tg = TelegramFixture::start().await;
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(echo);
    let ws = TempWorkspace::init("tg-access");
    std::fs::write(ws.dir.join("USER.md"), "The owner is OWNER-FACT-7f3.").unwrap();
    std::fs::write(ws.dir.join("MEMORY.md"), "- MEMORY-FACT-9c1 (from the user)").unwrap();
    let serving = start(&ws, &telegram_env(&llm, &tg)).await;

    tg.user_says(OWNER, OWNER, "hello from the owner").await;
    tg.wait_bot_messages(OWNER, |m| has_text(m, "echo: hello from the owner"), LIMIT).await;
    tg.user_says(FRIEND, FRIEND, "hello from a friend").await;
    tg.wait_bot_messages(FRIEND, |m| has_text(m, "echo: hello from a friend"), LIMIT).await;

    // A stranger: one short refusal for two messages, and no model call at all.
    tg.user_says(STRANGER, STRANGER, "stranger one").await;
    tg.user_says(STRANGER, STRANGER, "stranger two").await;
    let refused = tg.wait_bot_messages(STRANGER, |m| !m.is_empty(), LIMIT).await;
    assert!(refused[0].text.contains("private bot"), "{refused:?}");
    // In an allowed group: only what addresses the bot is answered.
    let group = |text: &str| UserMessage {
        chat_id: GROUP,
        chat_type: ChatType::Group,
        user_id: STRANGER,
        text: Some(text.to_owned()),
        ..UserMessage::default()
    };
    tg.user_sends(group("just chatting among ourselves")).await;
    tg.user_sends(group("@nexbot_test_bot are you there")).await;
    tg.wait_bot_messages(GROUP, |m| has_text(m, "echo: are you there"), LIMIT).await;
    tg.user_sends(group("/secret set API_KEY s3cr3t-value-123")).await;
    tg.wait_bot_messages(GROUP, |m| has_text(m, "only in a private chat"), LIMIT).await;
    // In a group that is not allowed: talk among its members gets no word; a stranger who
    // addresses the bot gets one short refusal for the group, without their user id.
    let other = |text: &str| UserMessage { chat_id: OTHER_GROUP, ..group(text) };
    tg.user_sends(other("who is this bot?")).await;
    tg.user_sends(other("@nexbot_test_bot hello")).await;
    tg.user_sends(other("@nexbot_test_bot hello again")).await;
    tg.wait_bot_messages(OTHER_GROUP, |m| !m.is_empty(), LIMIT).await;

    // Every update ended in one recorded state; the refusal went out once.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stranger_messages = tg.bot_messages(STRANGER).await;
    assert_eq!(stranger_messages.len(), 1, "{:?}", texts(&stranger_messages));
    let in_other_group = texts(&tg.bot_messages(OTHER_GROUP).await);
    assert_eq!(in_other_group, ["Sorry, this is a private bot."], "{in_other_group:?}");
    let rows = settled_ledger(&ws).await;
    assert_eq!(rows.len(), 10, "{rows:#?}");
    let state_of =
        |needle: &str| rows.iter().find(|r| r.3.as_deref() == Some(needle)).map(|r| r.2.clone());
    assert_eq!(rows.iter().filter(|r| r.2 == "answered").count(), 3, "{rows:#?}");
    assert_eq!(rows.iter().filter(|r| r.3.as_deref() == Some("not-allowed")).count(), 4);
    assert_eq!(rows.iter().filter(|r| r.3.as_deref() == Some("group-not-addressed")).count(), 2);
    assert_eq!(state_of("group-not-addressed").as_deref(), Some("refused"));
    assert_eq!(state_of("secret-in-group").as_deref(), Some("refused"));
    let db = std::fs::read(ws.database()).unwrap();
    assert!(!String::from_utf8_lossy(&db).contains("s3cr3t-value-123"), "a secret in the ledger");

    let requests: Vec<Value> = llm.chat_requests().iter().map(|r| r.body.clone()).collect();
    let asked: Vec<String> = requests.iter().map(last_user).collect();
    assert!(asked.iter().all(|t| !t.contains("stranger") && !t.contains("chatting")), "{asked:?}");
    // The owner's facts are in the owner's prompt only.
    for body in &requests {
        let user = last_user(body);
        let prompt = system_prompt(body);
        let owner = user.contains("from the owner");
        assert_eq!(prompt.contains("OWNER-FACT-7f3"), owner, "{user}");
        assert_eq!(prompt.contains("MEMORY-FACT-9c1"), owner, "{user}");
    }
    let log = serving.stop(LIMIT).await;
    assert!(!log.contains(tg.token()), "the token is in the log");
    assert!(!log.contains("s3cr3t-value-123"), "a secret in the log");
}

/// Paragraphs of numbered words, `chars` long.
fn long_text(chars: usize) -> String {
    let mut text = String::new();
    let mut n = 0;
    while text.len() < chars {
        n += 1;
        text.push_str(&format!("Paragraph {n}: "));
        for w in 0..40 {
            text.push_str(&format!("word{n}x{w} "));
        }
        text.push_str("\n\n");
    }
    text.truncate(chars);
    text
}

fn squeeze(text: &str) -> String {
    text.chars().filter(|c| !c.is_whitespace()).collect()
}

const MARKUP: &str = "a < b && c > d; x = 2*3*4; *unbalanced _under [bracket\n\
                      **not closed & <b>not a tag</b>\n```rust\nfn f() -> Vec<u8> { vec![] } // <&>\n```\nend";

#[tokio::test]
async fn long_answers_arrive_as_ordered_parts_and_markup_arrives_intact() {
    let tg = TelegramFixture::start().await;
    let llm = ScriptedLlm::start(vec![]).await;
    let long = long_text(10_000);
    let answer = long.clone();
    llm.set_responder(move |body| match last_user(body).as_str() {
        "long please" => Step::text(&answer),
        "markup please" => Step::text(MARKUP),
        other => Step::text(&format!("unexpected {other}")),
    });
    let ws = TempWorkspace::init("tg-split");
    let serving = start(&ws, &telegram_env(&llm, &tg)).await;

    tg.user_says(OWNER, OWNER, "long please").await;
    let parts =
        tg.wait_bot_messages(OWNER, |m| squeeze(&texts(m).concat()) == squeeze(&long), LIMIT).await;
    assert!(parts.len() >= 3, "{} parts", parts.len());
    assert!(parts.iter().all(|p| p.text.encode_utf16().count() <= 4096));
    assert!(parts.windows(2).all(|w| w[0].message_id < w[1].message_id), "in order");

    tg.user_says(OWNER, OWNER, "markup please").await;
    let messages = tg.wait_bot_messages(OWNER, |m| m.len() > parts.len(), LIMIT).await;
    let shown = &messages.last().unwrap().text;
    // What the user sees: every character the model wrote, bar the code fence lines.
    let expected: String = MARKUP.lines().filter(|l| !l.starts_with("```")).collect();
    assert_eq!(squeeze(shown), squeeze(&expected), "shown: {shown}");
    serving.stop(LIMIT).await;
}

#[tokio::test]
async fn agent_mode_survives_a_restart_and_status_reports_it() {
    let tg = TelegramFixture::start().await;
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(echo);
    let ws = TempWorkspace::init("tg-agent");
    let env = telegram_env(&llm, &tg);
    let serving = start(&ws, &env).await;
    tg.user_says(OWNER, OWNER, "/agent off").await;
    tg.wait_bot_messages(OWNER, |m| has_text(m, "Agent mode off"), LIMIT).await;
    serving.stop(LIMIT).await;

    let serving = start(&ws, &env).await;
    tg.user_says(OWNER, OWNER, "/status").await;
    let messages = tg.wait_bot_messages(OWNER, |m| has_text(m, "Model:"), LIMIT).await;
    let status = &messages.last().unwrap().text;
    assert!(status.contains("Agent mode here: off"), "{status}");
    assert!(status.contains("Model: scripted"), "{status}");
    assert!(status.contains("Pool: off"), "{status}");
    assert!(status.contains("Telegram: @nexbot_test_bot polling"), "{status}");
    // Off: the model answers without tools.
    tg.user_says(OWNER, OWNER, "no tools now").await;
    tg.wait_bot_messages(OWNER, |m| has_text(m, "echo: no tools now"), LIMIT).await;
    let last = llm.chat_requests().last().unwrap().body.clone();
    assert!(last["tools"].as_array().is_none_or(|t| t.is_empty()), "{last}");
    // The commands are the bot's menu.
    let menus = tg.calls("setMyCommands").await;
    let menu = menus.last().expect("setMyCommands was called").params.to_string();
    for command in ["start", "help", "new", "stop", "status", "agent", "secret"] {
        assert!(menu.contains(&format!("\"{command}\"")), "{command} missing from {menu}");
    }
    serving.stop(LIMIT).await;
}

#[tokio::test]
async fn the_agent_menu_is_an_inline_keyboard_whose_presses_change_the_mode_across_a_restart() {
    let tg = TelegramFixture::start().await;
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(echo);
    let ws = TempWorkspace::init("tg-agent-menu");
    let env = telegram_env(&llm, &tg);
    let serving = start(&ws, &env).await;
    tg.user_says(OWNER, OWNER, "/agent").await;
    let messages =
        tg.wait_bot_messages(OWNER, |m| m.iter().any(|m| !m.buttons().is_empty()), LIMIT).await;
    let menu = messages.iter().find(|m| !m.buttons().is_empty()).unwrap();
    assert!(menu.text.contains("Agent mode is on here"), "{}", menu.text);
    // No sandbox runs in this test: no coding CLI can, so none is offered.
    let pressed: Vec<String> = menu.buttons().into_iter().map(|(_, data)| data).collect();
    assert_eq!(pressed, ["/agent on", "/agent off", "/agent cli none", "/agent cancel"]);
    assert!(
        menu.buttons()[0].0.starts_with('✅'),
        "the current mode is ticked: {:?}",
        menu.buttons()
    );

    // A stranger's press changes nothing and is answered as refused.
    let refused = tg.user_clicks(OWNER, STRANGER, menu.message_id, "/agent off").await;
    // The owner's presses: a CLI the image cannot run (one line why), then off; each press
    // is answered by its notice, not by one more message (the menu is the message).
    let messages_before = tg.bot_messages(OWNER).await.len();
    let cli = tg.user_clicks(OWNER, OWNER, menu.message_id, "/agent cli qwen").await;
    let why = tg.press_answer(&cli, LIMIT).await;
    assert!(why.contains("The qwen CLI cannot run here"), "{why}");
    assert!(why.contains("the sandbox is not running"), "{why}");
    let off = tg.user_clicks(OWNER, OWNER, menu.message_id, "/agent off").await;
    assert!(tg.press_answer(&off, LIMIT).await.contains("the model answers alone"));
    let cancel = tg.user_clicks(OWNER, OWNER, menu.message_id, "/agent cancel").await;
    let nothing = tg.press_answer(&cancel, LIMIT).await;
    assert!(nothing.contains("Nothing changed: agent mode off, CLI none"), "{nothing}");
    let after: Vec<String> =
        tg.bot_messages(OWNER).await.into_iter().map(|m| m.text).skip(messages_before).collect();
    assert!(after.is_empty(), "a press's answer came as a message too: {after:?}");
    let answered: Vec<Value> =
        tg.calls("answerCallbackQuery").await.into_iter().map(|c| c.params).collect();
    for click in [&refused, &cli, &off, &cancel] {
        assert!(
            answered.iter().any(|p| p["callback_query_id"] == click.callback_query_id.as_str()),
            "press {} not answered: {answered:?}",
            click.callback_query_id
        );
    }
    let refusal = answered
        .iter()
        .find(|p| p["callback_query_id"] == refused.callback_query_id.as_str())
        .unwrap();
    assert_eq!(refusal["text"], "Not allowed.");
    serving.stop(LIMIT).await;

    // After a restart the chat keeps its choices; /status shows them. With agent mode off and
    // no CLI the model answers alone, without tools.
    let serving = start(&ws, &env).await;
    tg.user_says(OWNER, OWNER, "/status").await;
    let messages = tg.wait_bot_messages(OWNER, |m| has_text(m, "Model:"), LIMIT).await;
    let status = &messages.iter().rev().find(|m| m.text.contains("Model:")).unwrap().text;
    assert!(status.contains("Agent mode here: off (CLI when off: none)"), "{status}");
    tg.user_says(OWNER, OWNER, "hello model").await;
    tg.wait_bot_messages(OWNER, |m| has_text(m, "echo: hello model"), LIMIT).await;
    let asked = llm.chat_requests();
    let last = asked.last().unwrap();
    assert!(last.body.get("tools").is_none_or(|t| t.as_array().is_none_or(Vec::is_empty)));
    // Back on through the menu: the agent answers again.
    tg.user_says(OWNER, OWNER, "/agent").await;
    let messages =
        tg.wait_bot_messages(OWNER, |m| has_text(m, "Agent mode is off here"), LIMIT).await;
    let menu = messages.iter().rev().find(|m| !m.buttons().is_empty()).unwrap();
    assert!(menu.buttons()[1].0.starts_with('✅'), "off is ticked: {:?}", menu.buttons());
    let on = tg.user_clicks(OWNER, OWNER, menu.message_id, "/agent on").await;
    assert!(tg.press_answer(&on, LIMIT).await.contains("Agent mode on"));
    tg.user_says(OWNER, OWNER, "tools again").await;
    tg.wait_bot_messages(OWNER, |m| has_text(m, "echo: tools again"), LIMIT).await;
    serving.stop(LIMIT).await;
}

#[tokio::test]
async fn rate_limits_conflicts_and_an_outage_lose_nothing_and_double_nothing() {
    let tg = TelegramFixture::start().await;
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(echo);
    let ws = TempWorkspace::init("tg-faults");
    let serving = start(&ws, &telegram_env(&llm, &tg)).await;
    tg.user_says(OWNER, OWNER, "warm up").await;
    tg.wait_bot_messages(OWNER, |m| has_text(m, "echo: warm up"), LIMIT).await;

    // 429 on sending: the answer still arrives, after the wait Telegram asked for.
    tg.fail_next("sendMessage", Fault::RateLimit { retry_after: 2 }, 1).await;
    tg.user_says(OWNER, OWNER, "after a rate limit").await;
    tg.wait_bot_messages(OWNER, |m| has_text(m, "echo: after a rate limit"), LIMIT).await;
    let sends = tg.calls("sendMessage").await;
    let limited = sends.iter().rposition(|c| c.status == 429).expect("a 429 was answered");
    let delivered = &sends[limited + 1];
    assert_eq!(delivered.status, 200);
    assert!(delivered.time_ms - sends[limited].time_ms >= 1900, "waited as told");

    // 409 for a while: reported, backed off, then polling recovers.
    tg.conflict_for(Duration::from_secs(4)).await;
    serving.wait_log("409 Conflict", LIMIT).await;
    tg.user_says(OWNER, OWNER, "after a conflict").await;
    tg.wait_bot_messages(OWNER, |m| has_text(m, "echo: after a conflict"), LIMIT).await;
    serving.wait_log("conflict is over", LIMIT).await;

    // The Bot API down for 10 s, with messages sent meanwhile: all answered, once each.
    tg.down_for(Duration::from_secs(10)).await;
    for i in 0..3 {
        tg.user_says(OWNER, OWNER, &format!("during the outage {i}")).await;
    }
    let messages = tg
        .wait_bot_messages(
            OWNER,
            |m| (0..3).all(|i| has_text(m, &format!("echo: during the outage {i}"))),
            LIMIT * 2,
        )
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let messages = tg.bot_messages(OWNER).await.len().max(messages.len());
    let all = tg.bot_messages(OWNER).await;
    for i in 0..3 {
        let count = all.iter().filter(|m| m.text == format!("echo: during the outage {i}")).count();
        assert_eq!(count, 1, "answered {count} times: {:?}", texts(&all));
    }
    assert_eq!(messages, all.len());
    let rows = settled_ledger(&ws).await;
    assert!(rows.iter().all(|r| r.2 == "answered"), "{rows:#?}");
    serving.stop(LIMIT).await;
}

#[tokio::test]
async fn a_message_being_handled_when_the_daemon_is_killed_is_answered_once_after_restart() {
    let tg = TelegramFixture::start().await;
    let llm = ScriptedLlm::start(vec![]).await;
    // The first call hangs (the daemon is killed during it); later ones answer.
    llm.push(Step::text("never delivered").delayed(Duration::from_secs(600)));
    llm.set_responder(echo);
    let ws = TempWorkspace::init("tg-kill");
    let env = telegram_env(&llm, &tg);
    let serving = start(&ws, &env).await;
    tg.user_says(OWNER, OWNER, "survive the crash").await;
    // Wait until the model is being asked: the update is recorded and in a turn.
    let start_wait = std::time::Instant::now();
    while llm.chat_requests().is_empty() {
        assert!(start_wait.elapsed() < LIMIT, "the model was never asked");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    serving.kill().await;
    assert_eq!(ledger(&ws)[0].2, "pending", "recorded before it was handled");

    let serving = start(&ws, &env).await;
    let messages =
        tg.wait_bot_messages(OWNER, |m| has_text(m, "echo: survive the crash"), LIMIT).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let all = tg.bot_messages(OWNER).await;
    let answers = all.iter().filter(|m| m.text.contains("survive the crash")).count();
    assert_eq!(answers, 1, "{:?}", texts(&all));
    assert!(!has_text(&messages, "never delivered"));
    let rows = settled_ledger(&ws).await;
    assert_eq!((rows.len(), rows[0].2.as_str()), (1, "answered"), "{rows:#?}");
    serving.stop(LIMIT).await;
}

#[tokio::test]
async fn an_invalid_token_stops_the_channel_and_the_daemon_serves_on() {
    let tg = TelegramFixture::start().await;
    tg.set_token_valid(false).await;
    let llm = ScriptedLlm::start(vec![]).await;
    let ws = TempWorkspace::init("tg-token");
    let serving = start(&ws, &telegram_env(&llm, &tg)).await;
    serving.wait_log("Telegram refused the bot token", LIMIT).await;
    // Still serving: it stops cleanly, on request, not by crashing.
    let log = serving.stop(LIMIT).await;
    assert!(!log.contains(tg.token()), "the token is in the log");
    assert!(!log.contains("panicked"), "{log}");
}

#[tokio::test]
async fn a_bot_api_that_answers_empty_polls_at_once_is_not_polled_in_a_busy_loop() {
    let tg = TelegramFixture::start().await;
    tg.set_long_polling(false).await;
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(echo);
    let ws = TempWorkspace::init("tg-no-long-poll");
    let serving = start(&ws, &telegram_env(&llm, &tg)).await;
    let start = std::time::Instant::now();
    let polls = loop {
        let polls = tg.calls("getUpdates").await;
        if polls.len() >= 5 {
            break polls;
        }
        assert!(start.elapsed() < LIMIT, "{} polls", polls.len());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // Every poll came back empty at once: the next one waited (a second after the last one
    // was *sent*; the old loop asked again within milliseconds). The fixture stamps a poll when
    // it arrives, so on a loaded machine one gap can look shorter by the previous poll's delay
    // on the way: each gap is well over the old loop's, and together they are a second each.
    let times: Vec<u64> = polls.iter().map(|c| c.time_ms).collect();
    assert!(polls.iter().all(|c| c.status == 200), "{polls:?}");
    for pair in times.windows(2) {
        assert!(pair[1] - pair[0] >= 500, "polled again too soon: {times:?}");
    }
    let (first, last) = (times[0], times[times.len() - 1]);
    assert!(last - first >= 1000 * (times.len() as u64 - 1) - 200, "polled too often: {times:?}");
    // Messages still come in.
    tg.user_says(OWNER, OWNER, "still listening?").await;
    tg.wait_bot_messages(OWNER, |m| has_text(m, "echo: still listening?"), LIMIT).await;
    serving.stop(LIMIT).await;
}

/// A Bot API slow to answer `setMyCommands` holds up no message: the first message is answered
/// while the menu's registration is still waiting (before, polling began only after it).
#[tokio::test]
async fn a_slow_command_menu_registration_holds_up_no_message() {
    let tg = TelegramFixture::start().await;
    tg.fail_next("setMyCommands", Fault::Slow { delay: Duration::from_secs(600) }, 1).await;
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(echo);
    let ws = TempWorkspace::init("tg-slow-menu");
    let serving = start(&ws, &telegram_env(&llm, &tg)).await;
    tg.user_says(OWNER, OWNER, "first thing").await;
    tg.wait_bot_messages(OWNER, |m| has_text(m, "echo: first thing"), LIMIT).await;
    let menu = tg.calls("setMyCommands").await;
    assert_eq!(menu.len(), 1, "{menu:?}");
    assert_eq!(menu[0].status, 0, "the menu was answered before the message: {menu:?}");
    let log = serving.stop(LIMIT).await;
    assert!(!log.contains("panicked"), "{log}");
}

#[tokio::test]
async fn a_huge_answer_that_is_not_json_is_logged_cut_and_the_channel_goes_on() {
    const SIZE: u64 = 5 << 20;
    let tg = TelegramFixture::start().await;
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(echo);
    let ws = TempWorkspace::init("tg-huge-body");
    let serving = start(&ws, &telegram_env(&llm, &tg)).await;
    tg.fail_next("getUpdates", Fault::BadJsonOfSize { size: SIZE }, 1).await;
    serving.wait_log("getUpdates failed", LIMIT).await;
    tg.user_says(OWNER, OWNER, "after the flood").await;
    tg.wait_bot_messages(OWNER, |m| has_text(m, "echo: after the flood"), LIMIT).await;
    let log = serving.stop(LIMIT).await;
    let failed = log.lines().find(|l| l.contains("getUpdates failed"));
    let Some(failed) = failed else { panic!("no getUpdates failure logged") };
    // Never print a line whole here: on a regression it holds the 5 MiB.
    let longest = log.lines().map(str::len).max().unwrap_or(0);
    assert!(longest < 2_000, "a log line of {longest} bytes");
    assert!(failed.contains(&format!("{SIZE} bytes in all")), "{failed}");
}

// --- delegation through the real pool ---------------------------------------------------

/// Task record rows: (status, container).
fn task_records(ws: &TempWorkspace) -> Vec<(String, Option<String>)> {
    let db = rusqlite::Connection::open(ws.database()).unwrap();
    let mut stmt = db.prepare("SELECT status, container FROM task_records").unwrap();
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap();
    rows.map(Result::unwrap).collect()
}

#[tokio::test]
async fn a_delegated_task_shows_edited_progress_and_ends_with_a_receipt() {
    let Some(_docker) = nexbot_tests::docker_or_skip("telegram_delegated_progress").await else {
        return;
    };
    let tg = TelegramFixture::start().await;
    // The "internet": a server on the host's outside address, allowed by the egress config;
    // the denied one: the same host on a port nothing allows.
    let host = egress_support::docker::host_address_off_network();
    let (allowed, _seen) = egress_support::http_server_at(host).await;
    let fetched = format!("http://{allowed}/page");
    let denied = format!("http://{host}:9/secret-place");
    let llm = ScriptedLlm::start(vec![]).await;
    let slow = Duration::from_millis(400);
    let (fetched_url, denied_url) = (fetched.clone(), denied.clone());
    llm.set_responder(move |body| {
        if !is_main(body) {
            // The subagent: fetch, probe a denied place, answer — each step a little slow,
            // so the progress message has time to be edited.
            return match tool_results(body) {
                0 => Step::tool_call("web_fetch", json!({"url": fetched_url})).delayed(slow),
                1 => Step::tool_call("web_fetch", json!({"url": denied_url})).delayed(slow),
                _ => Step::text("FETCHED-OK").delayed(slow),
            };
        }
        match tool_results(body) {
            0 => Step::tool_call("delegate_to_sub_agent", json!({"task": "fetch the page"})),
            _ => Step::text("done: the page was fetched"),
        }
    });
    let ws = TempWorkspace::init("tg-progress");
    let names = Leftovers::new("tgprog");
    let mut env = telegram_env(&llm, &tg);
    env.extend(names.env());
    let allow = format!(r#"[{{ cidr = "{}", ports = [{}] }}]"#, allowed.ip(), allowed.port());
    env.push(("NEXBOT_EGRESS__PROXY__ALLOW_INTERNAL".into(), allow));
    let serving = start(&ws, &env).await;
    tg.user_says(OWNER, OWNER, "please fetch it").await;
    let messages =
        tg.wait_bot_messages(OWNER, |m| has_text(m, "done: the page was fetched"), LIMIT * 2).await;
    let progress = messages
        .iter()
        .find(|m| m.raw.contains("Working on"))
        .unwrap_or_else(|| panic!("no progress message: {messages:#?}"));
    // The receipt edit is spaced after the last progress edit; wait for it.
    let progress = tg
        .wait_bot_messages(
            OWNER,
            |m| m.iter().any(|x| x.message_id == progress.message_id && x.text.contains("Task")),
            LIMIT,
        )
        .await
        .into_iter()
        .find(|m| m.message_id == progress.message_id)
        .unwrap();
    assert!(progress.edits.len() >= 2, "edited {} times: {progress:#?}", progress.edits.len());
    let receipt = &progress.text;
    assert!(receipt.contains("Task success"), "{receipt}");
    assert!(receipt.contains(&allowed.to_string()), "the fetched domain: {receipt}");
    assert!(receipt.contains(&format!("Denied: {host}:9")), "the denied one: {receipt}");
    assert!(receipt.contains("web_fetch"), "{receipt}");
    let sent = messages.iter().filter(|m| m.raw.contains("Working on")).count();
    assert_eq!(sent, 1, "one progress message, edited, not re-sent");
    // "typing…" was shown while the turn ran.
    let typing = tg.calls("sendChatAction").await;
    assert!(typing.iter().any(|c| c.params["action"] == "typing"), "{typing:?}");
    serving.stop(LIMIT).await;
}

#[tokio::test]
async fn stop_during_a_delegated_task_cancels_it_and_frees_the_container() {
    let Some(_docker) = nexbot_tests::docker_or_skip("telegram_stop_task").await else {
        return;
    };
    let tg = TelegramFixture::start().await;
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(move |body| {
        if !is_main(body) {
            // The subagent lists its folder, then thinks forever.
            return match tool_results(body) {
                0 => Step::tool_call("list_dir", json!({})),
                _ => Step::text("too late").delayed(Duration::from_secs(600)),
            };
        }
        match tool_results(body) {
            0 => Step::tool_call("delegate_to_sub_agent", json!({"task": "a long task"})),
            _ => Step::text("the task ended"),
        }
    });
    let ws = TempWorkspace::init("tg-stop");
    let names = Leftovers::new("tgstop");
    let mut env = telegram_env(&llm, &tg);
    env.extend(names.env());
    let serving = start(&ws, &env).await;
    tg.user_says(OWNER, OWNER, "start the long task").await;
    let start_wait = std::time::Instant::now();
    while llm.chat_requests().iter().filter(|r| !is_main(&r.body)).count() < 2 {
        assert!(start_wait.elapsed() < LIMIT, "the subagent never got going");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tg.user_says(OWNER, OWNER, "/stop").await;
    tg.wait_bot_messages(OWNER, |m| has_text(m, "Stopping the current task"), LIMIT).await;
    tg.wait_bot_messages(OWNER, |m| has_text(m, "Stopped"), LIMIT).await;
    let start_wait = std::time::Instant::now();
    loop {
        let records = task_records(&ws);
        if records.first().is_some_and(|r| r.0 != "running") {
            assert_eq!(records[0].0, "cancelled", "{records:?}");
            break;
        }
        assert!(start_wait.elapsed() < LIMIT, "the task record stayed {records:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The container is back: /status shows the pool idle.
    let start_wait = std::time::Instant::now();
    loop {
        tg.user_says(OWNER, OWNER, "/status").await;
        let messages = tg.wait_bot_messages(OWNER, |m| has_text(m, "Pool:"), LIMIT).await;
        let status = messages.iter().rev().find(|m| m.text.contains("Pool:")).unwrap().text.clone();
        if status.contains("1 containers (1 idle)") && status.contains("Running: nothing") {
            let wall = format!("runtime {}", nexbot_tests::expected_runtime());
            assert!(status.contains(&wall), "/status names the wall: {status}");
            break;
        }
        assert!(start_wait.elapsed() < LIMIT, "the pool did not come back: {status}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    serving.stop(LIMIT).await;
}

#[tokio::test]
async fn an_answer_that_cannot_be_delivered_is_recorded_and_the_chat_is_told_later() {
    let tg = TelegramFixture::start().await;
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(echo);
    let ws = TempWorkspace::init("tg-undelivered");
    let mut env = telegram_env(&llm, &tg);
    env.push(("NEXBOT_TELEGRAM__DELIVERY_DEADLINE_SECS".into(), "2".into()));
    let serving = start(&ws, &env).await;
    tg.fail_for("sendMessage", Fault::ServerError, Duration::from_secs(4)).await;
    tg.user_says(OWNER, OWNER, "lost in transit").await;
    let start_wait = std::time::Instant::now();
    loop {
        let rows = ledger(&ws);
        if rows.first().is_some_and(|r| r.2 != "pending") {
            assert_eq!(rows[0].2, "failed", "{rows:#?}");
            assert!(rows[0].3.as_deref().unwrap_or("").contains("not delivered"), "{rows:#?}");
            break;
        }
        assert!(start_wait.elapsed() < LIMIT, "the update stayed {rows:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    tg.user_says(OWNER, OWNER, "are you back").await;
    let messages = tg.wait_bot_messages(OWNER, |m| has_text(m, "echo: are you back"), LIMIT).await;
    let messages = tg
        .wait_bot_messages(OWNER, |m| has_text(m, "could not be delivered"), LIMIT)
        .await
        .len()
        .max(messages.len());
    assert!(messages >= 2);
    serving.stop(LIMIT).await;
}

/// `/secret` in a private chat: stored sealed, the user's message deleted, listed by name
/// only, deleted; the value is in no message, no log and not in the database in clear.
#[tokio::test]
async fn secret_set_in_a_private_chat_is_stored_sealed_and_its_message_deleted() {
    const VALUE: &str = "ghp_PLANTED_tg_secret_value_9d2c";
    let tg = TelegramFixture::start().await;
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(echo);
    let ws = TempWorkspace::init("tg-secret");
    let mut env = telegram_env(&llm, &tg);
    env.push(("NEXBOT_MASTER_KEY".into(), "tg-test-master-key-0123456789abcdef".into()));
    let serving = start(&ws, &env).await;

    let sent = tg
        .user_says(OWNER, OWNER, &format!("/secret set GH_TOKEN {VALUE} --host api.github.com"))
        .await;
    let stored = tg.wait_bot_messages(OWNER, |m| has_text(m, "Stored GH_TOKEN"), LIMIT).await;
    let answer = &stored.iter().find(|m| m.text.contains("Stored GH_TOKEN")).unwrap().text;
    assert!(answer.contains("proxy mode") && answer.contains("api.github.com"), "{answer}");
    assert!(answer.contains("Your message with the value was deleted"), "{answer}");
    let deleted = tg.calls("deletemessage").await;
    assert!(
        deleted
            .iter()
            .any(|c| c.params["message_id"] == sent.message_id && c.params["chat_id"] == OWNER),
        "the /secret message was not deleted: {deleted:?}"
    );

    tg.user_says(OWNER, OWNER, "/secret list").await;
    let listed =
        tg.wait_bot_messages(OWNER, |m| has_text(m, "Secrets of this chat (1)"), LIMIT).await;
    let list = &listed.iter().find(|m| m.text.contains("Secrets of this chat")).unwrap().text;
    assert!(
        list.contains("GH_TOKEN — proxy → https://api.github.com:443 header:authorization"),
        "{list}"
    );
    // Another chat sees none of it.
    tg.user_says(FRIEND, FRIEND, "/secret list").await;
    tg.wait_bot_messages(FRIEND, |m| has_text(m, "No secrets are stored for this chat"), LIMIT)
        .await;
    tg.user_says(OWNER, OWNER, "/secret delete GH_TOKEN").await;
    tg.wait_bot_messages(OWNER, |m| has_text(m, "Deleted GH_TOKEN"), LIMIT).await;

    let all: Vec<BotMessage> =
        [tg.bot_messages(OWNER).await, tg.bot_messages(FRIEND).await].concat();
    assert!(all.iter().all(|m| !m.text.contains(VALUE)), "{:?}", texts(&all));
    assert!(llm.chat_requests().is_empty(), "a /secret command reached the model");
    let log = serving.stop(LIMIT).await;
    assert!(!log.contains(VALUE), "the value in the daemon's log");
    assert!(log.contains("secret stored"), "positive control: the store was logged\n{log}");
    for suffix in ["", "-wal"] {
        let mut path = ws.database().into_os_string();
        path.push(suffix);
        let bytes = std::fs::read(&path).unwrap_or_default();
        assert!(!String::from_utf8_lossy(&bytes).contains(VALUE), "plain value in {path:?}");
    }
}
