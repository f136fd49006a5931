//! The chat tools end to end: in Telegram, the real `nexbot serve`, real SQLite, the scripted
//! LLM calling the tools, and the Bot API emulator behind the tests' fixture — `send_file`
//! (a document upload the fixture records, since the emulator lacks `sendDocument`),
//! `ask_user` (answered, timed out, stopped) and `manage_message` (edit and delete of the
//! bot's own messages, and nothing else); in the console, `nexbot chat` asking and answering
//! through stdin, and a sent file printed as its place.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nexbot_tests::scripted_llm::{last_user, ScriptedLlm, Step};
use nexbot_tests::telegram::TelegramFixture;
use serde_json::{json, Value};

use crate::common::{base_env, echo, tool_results, ChatSession, TempWorkspace};
use crate::telegram::{has_text, settled_ledger, start, telegram_env, texts, LIMIT, OWNER};

use crate::common::parsed_tool_results as results;

/// The results of the last request that saw `count` tool results (the turn's whole record).
fn final_results(llm: &ScriptedLlm, count: usize) -> Vec<Value> {
    llm.chat_requests()
        .iter()
        .map(|r| results(&r.body))
        .rfind(|r| r.len() == count)
        .unwrap_or_else(|| panic!("no request saw {count} tool results"))
}

#[tokio::test]
async fn send_file_arrives_as_a_document_and_protected_or_missing_files_are_refused() {
    let tg = TelegramFixture::start().await;
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(|body| {
        if last_user(body) != "send me the report" {
            return echo(body);
        }
        match tool_results(body) {
            0 => Step::tool_call(
                "send_file",
                json!({"path": "reports/q3.csv", "caption": "Q3 numbers"}),
            ),
            // The protocol's name of the same tool, aimed at the daemon's database.
            1 => Step::tool_call("send_file_to_user", json!({"path": "nexbot.db"})),
            2 => Step::tool_call("send_file", json!({"path": "reports/q4.csv"})),
            _ => Step::text("sent what I could"),
        }
    });
    let ws = TempWorkspace::init("tg-sendfile");
    // Loose in the data directory, as an older install's shared workspace had it: it moves
    // into the owner's room on the first start.
    std::fs::create_dir_all(ws.dir.join("reports")).unwrap();
    let content: Vec<u8> = (0..3000u32).map(|i| b"0123456789,\n"[(i % 12) as usize]).collect();
    std::fs::write(ws.dir.join("reports/q3.csv"), &content).unwrap();
    let serving = start(&ws, &telegram_env(&llm, &tg)).await;

    tg.user_says(OWNER, OWNER, "send me the report").await;
    let messages = tg.wait_bot_messages(OWNER, |m| has_text(m, "sent what I could"), LIMIT).await;
    let documents: Vec<_> = messages.iter().filter(|m| m.kind == "document").collect();
    assert_eq!(documents.len(), 1, "{messages:#?}");
    let document = documents[0];
    let file = document.file.as_ref().expect("the document's file");
    assert_eq!(file.file_name.as_deref(), Some("q3.csv"));
    assert_eq!(file.size, content.len() as u64);
    assert_eq!(document.text, "Q3 numbers");
    // One multipart upload, as the fixture recorded it.
    let uploads = tg.calls("sendDocument").await;
    assert_eq!(uploads.len(), 1, "{uploads:?}");
    assert_eq!(uploads[0].params["document"]["file_name"], "q3.csv");
    assert_eq!(uploads[0].params["document"]["size"], content.len() as u64);

    let results = final_results(&llm, 3);
    assert_eq!(results[0]["success"], true, "{results:?}");
    assert_eq!(results[0]["output"]["message_id"], document.message_id, "{results:?}");
    assert_eq!(results[1]["success"], false);
    // The daemon's database is not in the chat's room at all.
    assert_eq!(results[1]["error"], "nexbot.db: no such file or directory");
    let missing = results[2]["error"].as_str().unwrap();
    assert_eq!(missing, "reports/q4.csv: no such file or directory");
    serving.stop(LIMIT).await;
}

/// What the scripted model does with `ask_user`: asks, then reports what came back.
fn asking(question: Value) -> impl Fn(&Value) -> Step + Send + Sync + 'static {
    move |body| {
        let user = last_user(body);
        if !user.starts_with("ask:") {
            return echo(body);
        }
        match results(body).last() {
            None => {
                let mut args = question.clone();
                args["question"] = json!(format!("Question for {user}?"));
                Step::tool_call("ask_user", args)
            }
            Some(result) if result["success"] == true => {
                Step::text(&format!("Answer: {}", result["output"]["answer"].as_str().unwrap()))
            }
            Some(result) => {
                Step::text(&format!("No answer: {}", result["error"].as_str().unwrap_or("?")))
            }
        }
    }
}

#[tokio::test]
async fn ask_user_takes_the_next_message_as_the_answer_which_starts_no_turn_of_its_own() {
    let tg = TelegramFixture::start().await;
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(asking(json!({})));
    let ws = TempWorkspace::init("tg-ask");
    let serving = start(&ws, &telegram_env(&llm, &tg)).await;

    tg.user_says(OWNER, OWNER, "ask: trip").await;
    tg.wait_bot_messages(OWNER, |m| has_text(m, "Question for ask: trip?"), LIMIT).await;
    // The turn waits on the question; the next message is its answer, not a queued turn.
    tg.user_says(OWNER, OWNER, "Lisbon, in May").await;
    tg.wait_bot_messages(OWNER, |m| has_text(m, "Answer: Lisbon, in May"), LIMIT).await;
    tg.user_says(OWNER, OWNER, "thanks").await;
    let messages = tg.wait_bot_messages(OWNER, |m| has_text(m, "echo: thanks"), LIMIT).await;
    assert_eq!(
        texts(&messages),
        ["Question for ask: trip?", "Answer: Lisbon, in May", "echo: thanks"],
        "the answer got no reply of its own"
    );
    // The model was asked twice for the question's turn and once for "thanks": never with
    // the answer as a user message of its own.
    let asked: Vec<String> = llm.chat_requests().iter().map(|r| last_user(&r.body)).collect();
    assert_eq!(asked, ["ask: trip", "ask: trip", "thanks"]);
    // Every update ended: the answer as taken (answered, no message of its own).
    let rows = settled_ledger(&ws).await;
    assert_eq!(rows.len(), 3, "{rows:#?}");
    assert!(rows.iter().all(|r| r.2 == "answered"), "{rows:#?}");
    assert_eq!(rows[1].3.as_deref().unwrap_or(""), "", "the answer was sent nothing: {rows:#?}");
    serving.stop(LIMIT).await;
}

#[tokio::test]
async fn ask_user_ends_cleanly_when_nobody_answers_in_time_or_the_user_stops_it() {
    let tg = TelegramFixture::start().await;
    let llm = ScriptedLlm::start(vec![]).await;
    // The model asks for an hour; the operator allows 3 s.
    llm.set_responder(asking(json!({"timeout_secs": 3600})));
    let ws = TempWorkspace::init("tg-ask-end");
    let mut env = telegram_env(&llm, &tg);
    env.push(("NEXBOT_AGENT__ASK_TIMEOUT_SECS".into(), "3".into()));
    let serving = start(&ws, &env).await;

    let asked = Instant::now();
    tg.user_says(OWNER, OWNER, "ask: silence").await;
    let messages = tg.wait_bot_messages(OWNER, |m| has_text(m, "No answer:"), LIMIT).await;
    assert!(asked.elapsed() < Duration::from_secs(30), "the wait was not bounded");
    let ended = &messages.last().unwrap().text;
    assert!(ended.contains("no answer from the user within 3s"), "{ended}");
    // The question is closed: the next message is a turn of its own.
    tg.user_says(OWNER, OWNER, "late reply").await;
    tg.wait_bot_messages(OWNER, |m| has_text(m, "echo: late reply"), LIMIT).await;
    serving.stop(LIMIT).await;

    // Again with a long wait, ended by /stop.
    let mut env = telegram_env(&llm, &tg);
    env.push(("NEXBOT_AGENT__ASK_TIMEOUT_SECS".into(), "600".into()));
    let serving = start(&ws, &env).await;
    tg.user_says(OWNER, OWNER, "ask: then stop").await;
    tg.wait_bot_messages(OWNER, |m| has_text(m, "Question for ask: then stop?"), LIMIT).await;
    let stopped = Instant::now();
    tg.user_says(OWNER, OWNER, "/stop").await;
    tg.wait_bot_messages(OWNER, |m| has_text(m, "Stopping the current task"), LIMIT).await;
    tg.wait_bot_messages(OWNER, |m| m.iter().any(|m| m.text == "Stopped."), LIMIT).await;
    assert!(stopped.elapsed() < Duration::from_secs(30), "/stop did not end the wait");
    // The question went with the turn: the next message is an ordinary turn, not an answer.
    tg.user_says(OWNER, OWNER, "still here").await;
    let messages = tg.wait_bot_messages(OWNER, |m| has_text(m, "echo: still here"), LIMIT).await;
    assert!(!has_text(&messages, "Answer:"), "{:?}", texts(&messages));
    let rows = settled_ledger(&ws).await;
    assert!(rows.iter().all(|r| r.2 == "answered"), "{rows:#?}");
    let log = serving.stop(LIMIT).await;
    assert!(!log.contains("panicked"), "{log}");
}

#[tokio::test]
async fn manage_message_edits_and_deletes_the_bots_own_messages_and_nothing_else() {
    let tg = TelegramFixture::start().await;
    let llm = ScriptedLlm::start(vec![]).await;
    // The user's own message id, learnt from the first exchange.
    let users_message = Arc::new(Mutex::new(0i64));
    let theirs = users_message.clone();
    llm.set_responder(move |body| {
        if last_user(body) != "tidy up" {
            return echo(body);
        }
        let results = results(body);
        let id = |n: usize| results[n]["output"]["message_id"].as_i64().unwrap_or(-1);
        let user_id = *theirs.lock().unwrap();
        match results.len() {
            0 => Step::tool_call("send_message", json!({"text": "draft v1"})),
            1 => Step::tool_call(
                "manage_message",
                json!({"action": "edit", "message_id": id(0), "text": "final v2"}),
            ),
            2 => Step::tool_call("send_message", json!({"text": "temporary note"})),
            3 => {
                Step::tool_call("manage_message", json!({"action": "delete", "message_id": id(2)}))
            }
            4 => Step::tool_call(
                "manage_message",
                json!({"action": "edit", "message_id": user_id, "text": "hacked"}),
            ),
            5 => Step::tool_call(
                "manage_message",
                json!({"action": "delete", "message_id": user_id}),
            ),
            6 => {
                Step::tool_call("manage_message", json!({"action": "delete", "message_id": id(2)}))
            }
            _ => Step::text("tidied"),
        }
    });
    let ws = TempWorkspace::init("tg-manage");
    let serving = start(&ws, &telegram_env(&llm, &tg)).await;
    let hello = tg.user_says(OWNER, OWNER, "hello").await;
    tg.wait_bot_messages(OWNER, |m| has_text(m, "echo: hello"), LIMIT).await;
    *users_message.lock().unwrap() = hello.message_id;

    tg.user_says(OWNER, OWNER, "tidy up").await;
    let messages = tg.wait_bot_messages(OWNER, |m| has_text(m, "tidied"), LIMIT).await;
    let draft = messages.iter().find(|m| m.raw == "draft v1").expect("the draft was sent");
    assert_eq!(draft.text, "final v2", "{draft:#?}");
    assert_eq!(draft.edits.len(), 1);
    let note = messages.iter().find(|m| m.raw == "temporary note").expect("the note was sent");
    assert!(note.deleted, "{note:#?}");
    // Telegram was asked to edit and delete exactly the bot's two messages.
    let edits = tg.calls("editMessageText").await;
    let deletes = tg.calls("deleteMessage").await;
    assert_eq!(edits.len(), 1, "{edits:?}");
    assert_eq!(edits[0].params["message_id"], draft.message_id);
    assert_eq!(deletes.len(), 1, "{deletes:?}");
    assert_eq!(deletes[0].params["message_id"], note.message_id);
    // No message or edit of the bot asks for a link preview (Telegram's servers would fetch
    // the link: a way out that bypasses the egress proxy).
    tg.user_says(OWNER, OWNER, "see https://exfil.example/c?d=OWNER-DATA").await;
    tg.wait_bot_messages(OWNER, |m| has_text(m, "echo: see https://exfil.example"), LIMIT).await;
    let mut sent = tg.calls("sendMessage").await;
    sent.extend(edits);
    assert!(sent.len() >= 5, "{sent:?}");
    for call in &sent {
        assert_eq!(
            call.params["link_preview_options"]["is_disabled"], true,
            "{} without link previews off: {:?}",
            call.method, call.params
        );
    }

    let results = final_results(&llm, 7);
    for n in [0, 1, 2, 3] {
        assert_eq!(results[n]["success"], true, "{n}: {results:?}");
    }
    assert_eq!(results[1]["output"]["done"], "edited");
    assert_eq!(results[3]["output"]["done"], "deleted");
    // The user's message, and the note already deleted: refused, naming the id.
    for (n, id) in [(4, hello.message_id), (5, hello.message_id), (6, note.message_id)] {
        assert_eq!(results[n]["success"], false, "{n}: {results:?}");
        let error = results[n]["error"].as_str().unwrap();
        assert!(error.contains(&format!("message {id} is not one the bot sent")), "{n}: {error}");
    }
    serving.stop(LIMIT).await;
}

/// A message too long for one Telegram message goes out in parts under one id: an edit
/// reaches every part (parts the new text does not need are deleted), and so does a delete.
#[tokio::test]
async fn manage_message_reaches_every_part_of_a_long_message() {
    let tg = TelegramFixture::start().await;
    let llm = ScriptedLlm::start(vec![]).await;
    // Three paragraphs of ~3,000 characters: three parts at Telegram's 4,096.
    let long: String =
        (0..3).map(|n| format!("PART{n} {}", "word ".repeat(600))).collect::<Vec<_>>().join("\n\n");
    let text = long.clone();
    llm.set_responder(move |body| {
        if last_user(body) != "write it long" {
            return echo(body);
        }
        let results = results(body);
        let id = results.first().map(|r| r["output"]["message_id"].clone()).unwrap_or_default();
        match results.len() {
            0 => Step::tool_call("send_message", json!({"text": text})),
            1 => Step::tool_call(
                "manage_message",
                json!({"action": "edit", "message_id": id, "text": "short now"}),
            ),
            2 => Step::tool_call("manage_message", json!({"action": "delete", "message_id": id})),
            _ => Step::text("cleaned"),
        }
    });
    let ws = TempWorkspace::init("tg-parts");
    let serving = start(&ws, &telegram_env(&llm, &tg)).await;
    tg.user_says(OWNER, OWNER, "write it long").await;
    let messages = tg.wait_bot_messages(OWNER, |m| has_text(m, "cleaned"), LIMIT).await;
    let parts: Vec<_> = messages.iter().filter(|m| m.raw.contains("PART")).collect();
    assert_eq!(parts.len(), 3, "sent in three parts: {:?}", texts(&messages));
    // The edit: the first part says the new text, the two it no longer needs were deleted;
    // then the delete took the rest.
    assert_eq!(parts[0].edits.len(), 1, "{:#?}", parts[0]);
    assert_eq!(parts[0].edits[0].text, "short now", "{:#?}", parts[0]);
    assert!(parts.iter().all(|p| p.deleted), "every part deleted: {parts:#?}");
    let deletes = tg.calls("deleteMessage").await;
    let mut deleted: Vec<i64> =
        deletes.iter().filter_map(|c| c.params["message_id"].as_i64()).collect();
    deleted.sort_unstable();
    let mut ids: Vec<i64> = parts.iter().map(|p| p.message_id).collect();
    ids.sort_unstable();
    assert_eq!(deleted, ids, "each part deleted once: {deletes:?}");
    let results = final_results(&llm, 3);
    assert!(results.iter().all(|r| r["success"] == true), "{results:?}");
    serving.stop(LIMIT).await;
}

#[tokio::test]
async fn in_the_console_ask_user_takes_the_next_line_and_send_file_prints_where_the_file_is() {
    let ws = TempWorkspace::init("chat-tools");
    std::fs::write(ws.dir.join("notes.txt"), "my notes").unwrap();
    let llm = ScriptedLlm::start(vec![]).await;
    let ask = asking(json!({}));
    llm.set_responder(move |body| {
        if last_user(body) != "send the notes" {
            return ask(body);
        }
        match tool_results(body) {
            0 => Step::tool_call("send_file", json!({"path": "notes.txt", "caption": "today"})),
            _ => Step::text("sent"),
        }
    });
    let mut chat = ChatSession::start(&ws.config(), &base_env(&llm.base_url()));
    chat.say("ask: plan").await;
    assert_eq!(chat.answer(LIMIT).await, "Question for ask: plan?");
    chat.say("Porto").await;
    assert_eq!(chat.answer(LIMIT).await, "Answer: Porto");
    chat.say("send the notes").await;
    // Moved into the console's room (the owner's, no Telegram owner configured) on start.
    let place = ws.dir.canonicalize().unwrap().join("chats/console_default/notes.txt");
    assert_eq!(chat.answer(LIMIT).await, format!("[file] {} — today", place.display()));
    assert_eq!(chat.answer(LIMIT).await, "sent");
    let (status, rest, stderr) = chat.finish(LIMIT).await;
    assert!(status.success(), "{rest}\n{stderr}");
    assert_eq!(rest, "", "nothing else was printed");
    let asked: Vec<String> = llm.chat_requests().iter().map(|r| last_user(&r.body)).collect();
    assert_eq!(asked, ["ask: plan", "ask: plan", "send the notes", "send the notes"]);
}
