//! Files, photos and voice notes through Telegram, end to end: the real `nexbot serve`, the
//! Bot API emulator behind the fixture (which serves `getFile` and the file download), the
//! scripted model and a scripted transcription endpoint. What arrives is kept in the chat's
//! room under a safe name and told to the model; what is too large is refused with the limit;
//! voice is heard and shown back; another chat never reaches it.

use crate::common::{echo, this_turns_results, TempWorkspace};
use crate::telegram::{
    has_text, ledger, settled_ledger, start, telegram_env, texts, FRIEND, LIMIT, OWNER,
};

use nexbot_tests::scripted_llm::{last_user, transcript, ScriptedLlm, Step};
use nexbot_tests::telegram::{MessageKind, TelegramFixture, UserMessage};
use serde_json::{json, Value};

/// The content of every tool result the model was sent in `body`.
fn tool_outputs(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .map(|m| {
            m.iter()
                .filter(|m| m["role"] == "tool")
                .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn document(chat: i64, name: &str, content: &[u8], caption: &str) -> UserMessage {
    UserMessage {
        kind: MessageKind::Document,
        text: (!caption.is_empty()).then(|| caption.to_owned()),
        file_name: Some(name.to_owned()),
        file_content: Some(content.to_vec()),
        ..UserMessage::private_text(chat, "")
    }
}

#[tokio::test]
async fn files_photos_and_voice_notes_land_in_the_chats_room_and_reach_the_model() {
    const NOTES: &str = "NOTES-CONTENT-41a7 in the owner's file";
    let tg = TelegramFixture::start().await;
    let llm = ScriptedLlm::start(vec![
        Step::tool_call("read_file", json!({"path": "inbox/notes.txt"})),
        Step::text("the file is read"),
    ])
    .await;
    llm.set_responder(echo);
    let ws = TempWorkspace::init("tg-files");
    let config = std::fs::read_to_string(ws.config()).unwrap();
    let transcription = format!(
        "\n[llm.transcription]\nbase_url = \"{}\"\nmodel = \"whisper-test\"\nmax_retries = 0\n",
        llm.base_url()
    );
    std::fs::write(ws.config(), config + &transcription).unwrap();
    let mut env = telegram_env(&llm, &tg);
    env.push(("NEXBOT_TELEGRAM__MAX_FILE_BYTES".into(), "4096".into()));
    let serving = start(&ws, &env).await;
    let room = ws.dir.join("chats").join(format!("telegram_{OWNER}"));

    // A document with a caption: kept in the owner's room, told to the model, read by a tool.
    tg.user_sends(document(OWNER, "notes.txt", NOTES.as_bytes(), "what does it say?")).await;
    tg.wait_bot_messages(OWNER, |m| has_text(m, "the file is read"), LIMIT).await;
    assert_eq!(std::fs::read_to_string(room.join("inbox/notes.txt")).unwrap(), NOTES);
    let requests = llm.chat_requests();
    let told = last_user(&requests[0].body);
    assert!(
        told.contains("[The user sent a document: inbox/notes.txt (text/plain, 38 B)"),
        "{told}"
    );
    assert!(told.ends_with("what does it say?"), "{told}");
    assert!(tool_outputs(&requests[1].body).iter().any(|t| t.contains(NOTES)), "read_file");

    // A name full of tricks: stored under its last component, cleaned, nowhere else.
    let tricky = "../../\u{202E}evil\0name.txt";
    tg.user_sends(document(OWNER, tricky, b"tricky", "")).await;
    tg.wait_bot_messages(OWNER, |m| has_text(m, "inbox/evilname.txt"), LIMIT).await;
    assert_eq!(std::fs::read(room.join("inbox/evilname.txt")).unwrap(), b"tricky");
    let rooms: Vec<_> = std::fs::read_dir(ws.dir.join("chats"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .collect();
    assert_eq!(rooms.len(), 1, "only the owner's room: {rooms:?}");
    let top: Vec<String> = std::fs::read_dir(&ws.dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(top.iter().all(|n| !n.contains("evil")), "written outside the room: {top:?}");

    // Over the limit: refused with the limit, never fetched, never the model's.
    let asked = llm.chat_requests().len();
    tg.user_sends(document(OWNER, "big.bin", &vec![7u8; 5000], "")).await;
    tg.wait_bot_messages(OWNER, |m| has_text(m, "I can take files up to 4.0 KB"), LIMIT).await;
    assert!(!room.join("inbox/big.bin").exists());
    assert_eq!(llm.chat_requests().len(), asked, "the model was asked about a refused file");

    // A photo, with no vision model: kept, and the model told it cannot see it.
    let photo = UserMessage {
        kind: MessageKind::Photo,
        text: Some("look at this".into()),
        file_content: Some(b"\xff\xd8\xff fake jpeg".to_vec()),
        ..UserMessage::private_text(OWNER, "")
    };
    tg.user_sends(photo).await;
    let seen = tg.wait_bot_messages(OWNER, |m| has_text(m, "You cannot see images"), LIMIT).await;
    assert!(has_text(&seen, "look at this"), "{:?}", texts(&seen));
    let photos: Vec<String> = std::fs::read_dir(room.join("inbox"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("photo-") && n.ends_with(".jpg"))
        .collect();
    assert_eq!(photos.len(), 1, "{photos:?}");

    // A voice note: heard by the transcription endpoint, shown back, answered.
    llm.push_transcription(200, &transcript("remind me to buy oat milk"));
    let voice = UserMessage {
        kind: MessageKind::Voice,
        file_content: Some(b"OggS fake opus".to_vec()),
        ..UserMessage::private_text(OWNER, "")
    };
    tg.user_sends(voice.clone()).await;
    let heard = tg
        .wait_bot_messages(OWNER, |m| has_text(m, "echo: [The user sent a voice note"), LIMIT)
        .await;
    assert!(has_text(&heard, "🎤 remind me to buy oat milk"), "{:?}", texts(&heard));
    let answer =
        heard.iter().rev().find(|m| m.text.starts_with("echo: [The user sent a voice")).unwrap();
    assert!(answer.text.contains("remind me to buy oat milk"), "{}", answer.text);
    let sent = llm.transcription_requests();
    assert_eq!(sent.len(), 1);
    let form = sent[0].body.as_str().unwrap();
    assert!(form.contains("whisper-test") && form.contains("OggS fake opus"), "{form}");

    // A voice note the endpoint cannot hear: kept, the user told why, no turn for nothing.
    llm.push_transcription(503, r#"{"error":{"message":"overloaded"}}"#);
    let asked = llm.chat_requests().len();
    tg.user_sends(voice).await;
    tg.wait_bot_messages(OWNER, |m| has_text(m, "could not transcribe it"), LIMIT).await;
    assert_eq!(llm.chat_requests().len(), asked, "a turn for a recording nobody heard");

    // Another chat: its model cannot reach the owner's files by any path.
    llm.push(Step::tool_calls(&[
        ("read_file", json!({"path": format!("../telegram_{OWNER}/inbox/notes.txt")})),
        ("read_file", json!({"path": room.join("inbox/notes.txt").display().to_string()})),
        ("list_dir", json!({"path": "inbox"})),
    ]));
    llm.push(Step::text("looked around"));
    tg.user_says(FRIEND, FRIEND, "read the owner's notes").await;
    tg.wait_bot_messages(FRIEND, |m| has_text(m, "looked around"), LIMIT).await;
    let last = llm.chat_requests().last().unwrap().body.clone();
    let outputs = tool_outputs(&last);
    assert_eq!(outputs.len(), 3, "{outputs:?}");
    for output in &outputs {
        assert!(!output.contains("NOTES-CONTENT") && !output.contains("notes.txt\n"), "{output}");
    }

    // Every update ended answered or refused; the file too large is refused by rule.
    let rows = settled_ledger(&ws).await;
    assert!(rows.iter().any(|r| r.3.as_deref() == Some("file-too-large")), "{rows:#?}");
    assert!(rows.iter().all(|r| r.2 == "answered" || r.2 == "refused"), "{rows:#?}");
    let log = serving.stop(LIMIT).await;
    assert!(!log.contains(tg.token()), "the token is in the log");
}

/// A document whose turn is cut by the daemon's death is handled after the restart with its
/// file: the ledger kept the reference, and the file is fetched again.
#[tokio::test]
async fn a_file_whose_turn_the_daemon_died_in_is_fetched_again_after_the_restart() {
    let tg = TelegramFixture::start().await;
    let llm = ScriptedLlm::start(vec![]).await;
    // The first call hangs (the daemon is killed during it); later ones echo.
    llm.push(Step::text("never delivered").delayed(std::time::Duration::from_secs(600)));
    llm.set_responder(echo);
    let ws = TempWorkspace::init("tg-files-kill");
    let env = telegram_env(&llm, &tg);
    let serving = start(&ws, &env).await;
    tg.user_sends(document(OWNER, "report.csv", b"a,b\n1,2\n", "chart this")).await;
    let waited = std::time::Instant::now();
    while llm.chat_requests().is_empty() {
        assert!(waited.elapsed() < LIMIT, "the model was never asked");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    serving.kill().await;
    assert_eq!(ledger(&ws)[0].2, "pending");

    let serving = start(&ws, &env).await;
    let answered = tg
        .wait_bot_messages(OWNER, |m| has_text(m, "echo: [The user sent a document"), LIMIT)
        .await;
    let answer = answered.iter().find(|m| m.text.starts_with("echo: [The user sent")).unwrap();
    assert!(answer.text.contains("chart this"), "{}", answer.text);
    let rows = settled_ledger(&ws).await;
    assert_eq!((rows.len(), rows[0].2.as_str()), (1, "answered"), "{rows:#?}");
    let room = ws.dir.join("chats").join(format!("telegram_{OWNER}"));
    assert_eq!(std::fs::read(room.join("inbox/report.csv")).unwrap(), b"a,b\n1,2\n");
    serving.stop(LIMIT).await;
}

/// With a provider that sees images (`llm.vision`), a photo reaches the model as an image
/// part beside its caption; the history keeps only the text, so the next turn carries no
/// bytes.
#[tokio::test]
async fn a_photo_reaches_a_vision_model_as_an_image_and_the_history_keeps_only_text() {
    use base64::Engine as _;
    const PIXELS: &[u8] = b"\xff\xd8\xff\xe0 fake-jpeg-PLANTED-pixels";
    let tg = TelegramFixture::start().await;
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(|_| Step::text("seen"));
    let ws = TempWorkspace::init("tg-vision");
    let mut env = telegram_env(&llm, &tg);
    env.push(("NEXBOT_LLM__VISION".into(), "true".into()));
    let serving = start(&ws, &env).await;
    let photo = UserMessage {
        kind: MessageKind::Photo,
        text: Some("what is in it?".into()),
        file_content: Some(PIXELS.to_vec()),
        ..UserMessage::private_text(OWNER, "")
    };
    tg.user_sends(photo).await;
    tg.wait_bot_messages(OWNER, |m| has_text(m, "seen"), LIMIT).await;
    let body = llm.chat_requests()[0].body.clone();
    let user = body["messages"].as_array().unwrap().last().unwrap().clone();
    let parts = user["content"].as_array().expect("content parts").clone();
    let text = parts[0]["text"].as_str().unwrap();
    assert!(
        text.contains("[The user sent a photo: inbox/photo-") && text.ends_with("what is in it?"),
        "{text}"
    );
    let encoded = base64::engine::general_purpose::STANDARD.encode(PIXELS);
    assert_eq!(parts[1]["image_url"]["url"], format!("data:image/jpeg;base64,{encoded}"));

    tg.user_says(OWNER, OWNER, "and now?").await;
    tg.wait_bot_messages(OWNER, |m| m.iter().filter(|m| m.text == "seen").count() == 2, LIMIT)
        .await;
    let next = llm.chat_requests()[1].body.to_string();
    assert!(next.contains("[The user sent a photo: inbox/photo-"), "{next}");
    assert!(
        !next.contains(&encoded) && !next.contains("image_url"),
        "the bytes stayed in the history"
    );
    serving.stop(LIMIT).await;
}

/// The first line of `texts` holding `marker`, as the model would quote it (a tool message
/// in JSON has its line breaks escaped).
fn line_with(texts: &[String], marker: &str) -> Option<String> {
    texts
        .iter()
        .flat_map(|t| t.lines())
        .flat_map(|l| l.split("\\n"))
        .find(|l| l.contains(marker))
        .map(|l| l.trim().to_owned())
}

#[tokio::test]
async fn a_pdf_is_read_and_a_csv_charted_in_the_sandbox_and_the_chart_comes_back_as_a_document() {
    let Some(_docker) = nexbot_tests::docker_or_skip("telegram_files_in_the_sandbox").await else {
        return;
    };
    const CHART: &str = "awk -F, 'NR > 1 { printf \"<rect data-month=\\\"%s\\\" height=\\\"%s\\\"/>\\n\", \
                         $1, $2 * 10 }' sales.csv > bars && { echo '<svg>'; cat bars; echo '</svg>'; } \
                         > chart.svg";
    let tg = TelegramFixture::start().await;
    let llm = ScriptedLlm::start(vec![]).await;
    let ws = TempWorkspace::init("tg-sandbox-files");
    let room = ws.dir.join("chats").join(format!("telegram_{OWNER}"));
    let owners_pdf = room.join("inbox/report.pdf").to_string_lossy().into_owned();
    llm.set_responder(move |body| {
        let results = this_turns_results(body);
        let task = last_user(body);
        if task.contains("steal") {
            // Another chat's model tries to hand the owner's file to its task.
            let tries = [
                json!(format!("../telegram_{OWNER}/inbox/report.pdf")),
                json!(owners_pdf.clone()),
                json!("inbox/report.pdf"),
            ];
            return match tries.get(results.len()) {
                Some(path) => Step::tool_call(
                    "delegate_to_sub_agent",
                    json!({"task": "read it", "tools": ["run_command"], "files": [path]}),
                ),
                None => Step::text(&format!("refusals: {}", results.join(" | "))),
            };
        }
        if !crate::common::is_main(body) {
            // The sub-agent: works on what it was given in its working folder.
            return if task.contains("report.pdf") {
                match results.len() {
                    0 => {
                        Step::tool_call("run_command", json!({"command": "pdftotext report.pdf -"}))
                    }
                    _ => Step::text(&format!(
                        "The PDF says: {}",
                        line_with(&results, "REV-").unwrap_or_else(|| "nothing".into())
                    )),
                }
            } else {
                match results.len() {
                    0 => Step::tool_call("run_command", json!({"command": CHART})),
                    1 => Step::tool_call("return_file", json!({"path": "chart.svg"})),
                    _ => Step::text("the chart is ready"),
                }
            };
        }
        // The main agent: hands the file to a sub-agent, then answers or sends what came back.
        if task.contains("inbox/report.pdf") {
            return match results.len() {
                0 => Step::tool_call(
                    "delegate_to_sub_agent",
                    json!({"task": "Extract the text of report.pdf.", "tools": ["run_command"],
                           "files": ["inbox/report.pdf"]}),
                ),
                _ => Step::text(&format!(
                    "summary: {}",
                    line_with(&results, "REV-").unwrap_or_else(|| "no text".into())
                )),
            };
        }
        match results.len() {
            0 => Step::tool_call(
                "delegate_to_sub_agent",
                json!({"task": "Chart sales.csv as chart.svg.", "tools": ["run_command"],
                       "files": ["inbox/sales.csv"]}),
            ),
            1 => {
                let path = results[0]
                    .split(|c: char| c.is_whitespace() || c == '"' || c == ',')
                    .find(|w| w.starts_with("from-tasks/"))
                    .unwrap_or("from-tasks/missing.svg")
                    .to_owned();
                Step::tool_call("send_file", json!({"path": path}))
            }
            _ => Step::text("sent the chart"),
        }
    });
    let names = crate::common::Leftovers::new("tgfiles");
    let mut env = telegram_env(&llm, &tg);
    env.extend(names.env());
    let serving = start(&ws, &env).await;

    // A PDF: read by the sandbox's pdftotext, quoted in the answer.
    let pdf = nexbot_tests::pdf::one_page(&["Quarterly report", "Revenue: REV-7731 million"]);
    tg.user_sends(document(OWNER, "report.pdf", &pdf, "what does it say?")).await;
    let answered = tg.wait_bot_messages(OWNER, |m| has_text(m, "summary:"), LIMIT * 2).await;
    assert!(
        has_text(&answered, "summary: The PDF says: Revenue: REV-7731 million"),
        "{:?}",
        texts(&answered)
    );

    // A CSV: charted in the sandbox, the chart returned into the room, sent as a document.
    let csv = b"month,amount\njan,3\nfeb,5\nmar,4\n";
    tg.user_sends(document(OWNER, "sales.csv", csv, "chart it")).await;
    let sent = tg.wait_bot_messages(OWNER, |m| has_text(m, "sent the chart"), LIMIT * 2).await;
    let chart = std::fs::read_to_string(room.join("from-tasks/chart.svg")).expect("the chart");
    assert!(chart.contains(r#"<rect data-month="feb" height="50"/>"#), "{chart}");
    let document = sent.iter().find(|m| m.kind == "document").expect("a document was sent");
    let file = document.file.as_ref().unwrap();
    assert_eq!(file.file_name.as_deref(), Some("chart.svg"));
    assert_eq!(file.size, chart.len() as u64);

    // Another chat cannot hand the owner's file to a task: not by `..`, not by its path, and
    // its own `inbox/report.pdf` does not exist. No task of its ran.
    let asked = llm.chat_requests().len();
    tg.user_says(FRIEND, FRIEND, "steal the owner's report").await;
    let refused = tg.wait_bot_messages(FRIEND, |m| has_text(m, "refusals:"), LIMIT).await;
    let said = texts(&refused).join("\n");
    assert!(said.contains(".. is refused in paths"), "{said}");
    assert!(said.contains("absolute paths are refused"), "{said}");
    assert!(said.contains("inbox/report.pdf: no such file or directory"), "{said}");
    let tasks =
        llm.chat_requests()[asked..].iter().filter(|r| !crate::common::is_main(&r.body)).count();
    assert_eq!(tasks, 0, "a task ran for the other chat");

    // Each sub-agent task was told the file it had, by its plain name and size.
    let told: Vec<String> = llm
        .chat_requests()
        .iter()
        .filter(|r| !crate::common::is_main(&r.body))
        .map(|r| last_user(&r.body))
        .filter(|t| t.contains("Files given to you"))
        .collect();
    assert!(told.iter().any(|t| t.contains(&format!("report.pdf ({} B)", pdf.len()))), "{told:?}");
    let csv_told = format!("sales.csv ({} B)", csv.len());
    assert!(told.iter().any(|t| t.contains(&csv_told)), "{told:?}");
    serving.stop(LIMIT).await;
}

#[tokio::test]
async fn a_slow_download_holds_up_no_other_chat_and_nothing_of_its_own_chat_overtakes_it() {
    let tg = TelegramFixture::start().await;
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(echo);
    let ws = TempWorkspace::init("tg-slow-file");
    let serving = start(&ws, &telegram_env(&llm, &tg)).await;

    // The owner's file takes 3 s to download; the owner writes on, and a friend writes.
    let slow = UserMessage {
        download_delay_ms: Some(3_000),
        ..document(OWNER, "slow.txt", b"slow bytes", "the slow one")
    };
    tg.user_sends(slow).await;
    tg.user_says(OWNER, OWNER, "after the file").await;
    tg.user_says(FRIEND, FRIEND, "hello from a friend").await;

    let friend = tg.wait_bot_messages(FRIEND, |m| has_text(m, "hello from a friend"), LIMIT).await;
    let owner = tg.wait_bot_messages(OWNER, |m| has_text(m, "echo: after the file"), LIMIT).await;
    let at = |messages: &[nexbot_tests::telegram::BotMessage], needle: &str| {
        messages.iter().find(|m| m.text.contains(needle)).map(|m| m.time_ms).unwrap()
    };
    let file_answered = at(&owner, "the slow one");
    // Another chat is not held up by the download.
    assert!(
        at(&friend, "hello from a friend") < file_answered,
        "the friend waited for the owner's download"
    );
    // In the owner's chat, the message sent after the file is answered after it.
    assert!(at(&owner, "echo: after the file") > file_answered, "a message overtook its file");
    assert_eq!(
        std::fs::read(ws.dir.join(format!("chats/telegram_{OWNER}/inbox/slow.txt"))).unwrap(),
        b"slow bytes"
    );
    serving.stop(LIMIT).await;
}
