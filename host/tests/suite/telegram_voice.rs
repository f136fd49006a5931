//! Voice answers through Telegram, end to end: the real `nexbot serve`, the Bot API emulator
//! behind the fixture, the scripted model, a scripted transcription endpoint and a scripted
//! speech endpoint answering a real Ogg/Opus recording. A voice note is answered with voice
//! (and the text); `/voice` chooses per chat; markup is not read aloud; a long answer is
//! spoken in parts; a secret is never spoken; a failing provider leaves the text with a note.

use crate::common::{echo, TempWorkspace};
use crate::telegram::{has_text, start, telegram_env, texts, LIMIT, OWNER};

use nexbot_tests::ogg::{is_ogg_opus, silent_opus};
use nexbot_tests::scripted_llm::{transcript, ScriptedLlm, Step};
use nexbot_tests::telegram::{BotMessage, MessageKind, TelegramFixture, UserMessage};

/// The daemon's own provider key, planted so an answer can carry it.
const KEY: &str = "sk-voice-test-9f3b2c7d1e";

fn voice_note() -> UserMessage {
    UserMessage {
        kind: MessageKind::Voice,
        file_content: Some(silent_opus(10)),
        ..UserMessage::private_text(OWNER, "")
    }
}

/// The bot's voice messages in `messages`.
fn voices(messages: &[BotMessage]) -> Vec<&BotMessage> {
    messages.iter().filter(|m| m.kind == "voice").collect()
}

/// What the speech endpoint was asked to say, in order.
fn spoken(llm: &ScriptedLlm) -> Vec<String> {
    let requests = llm.speech_requests();
    requests.iter().map(|r| r.body["input"].as_str().unwrap_or_default().to_owned()).collect()
}

#[tokio::test]
async fn a_voice_note_is_answered_with_voice_and_text_as_the_chat_chooses() {
    let tg = TelegramFixture::start().await;
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(echo);
    let ws = TempWorkspace::init("tg-voice");
    let config = std::fs::read_to_string(ws.config()).unwrap();
    let endpoints = format!(
        "\n[llm.transcription]\nbase_url = \"{0}\"\nmodel = \"whisper-test\"\nmax_retries = 0\n\
         \n[llm.speech]\nbase_url = \"{0}\"\nmodel = \"tts-test\"\nvoice = \"nova\"\n\
         max_retries = 0\nmax_chars_per_part = 100\nmax_parts = 2\nprice_per_mchar = 15.0\n",
        llm.base_url()
    );
    std::fs::write(ws.config(), config + &endpoints).unwrap();
    let mut env = telegram_env(&llm, &tg);
    env.push(("NEXBOT_LLM_API_KEY".into(), KEY.into()));
    // A cost cap, so money is counted; the scripted model has no price, so it is allowed.
    env.push(("NEXBOT_LLM__CAPS__COST_PER_DAY_USD".into(), "5".into()));
    env.push(("NEXBOT_LLM__CAPS__UNPRICED".into(), "allow".into()));
    let serving = start(&ws, &env).await;

    // A voice note: heard, answered as a voice message replying to it, then the text.
    llm.push_transcription(200, &transcript("read me the plan for today"));
    llm.push(Step::text("Here is the **plan**: buy [oat milk](https://shop.example/m)."));
    let note = tg.user_sends(voice_note()).await;
    let seen = tg.wait_bot_messages(OWNER, |m| has_text(m, "Here is the plan"), LIMIT).await;
    let said = voices(&seen);
    assert_eq!(said.len(), 1, "{:?}", texts(&seen));
    let answer = seen.iter().rev().find(|m| m.text.starts_with("Here is the plan")).unwrap();
    assert!(said[0].message_id < answer.message_id, "the voice comes before the text");
    assert_eq!(said[0].reply_to_message_id, Some(note.message_id));
    let audio = tg.sent_file_bytes(said[0]).await;
    assert!(is_ogg_opus(&audio) && audio == silent_opus(50), "the provider's recording, whole");
    let requests = llm.speech_requests();
    assert_eq!(requests.len(), 1);
    let body = &requests[0].body;
    assert_eq!((body["model"].as_str(), body["voice"].as_str()), (Some("tts-test"), Some("nova")));
    assert_eq!(body["response_format"], "opus");
    assert_eq!(spoken(&llm), ["Here is the plan: buy oat milk."], "markup read aloud");

    // `/voice off`: a voice note gets text only.
    tg.user_says(OWNER, OWNER, "/voice off").await;
    tg.wait_bot_messages(OWNER, |m| has_text(m, "Voice answers here: off."), LIMIT).await;
    llm.push_transcription(200, &transcript("quietly please"));
    tg.user_sends(voice_note()).await;
    tg.wait_bot_messages(OWNER, |m| has_text(m, "quietly please"), LIMIT).await;
    assert_eq!(llm.speech_requests().len(), 1, "spoken with voice off");

    // `/voice on`: a typed message is spoken too. The menu shows the choice made.
    tg.user_says(OWNER, OWNER, "/voice").await;
    let menu = tg.wait_bot_messages(OWNER, |m| has_text(m, "Voice answers here: off ("), LIMIT);
    let menu = menu.await;
    let shown =
        menu.iter().rev().find(|m| m.text.starts_with("Voice answers here: off (")).unwrap();
    assert!(
        shown
            .buttons()
            .iter()
            .any(|(label, data)| label == "✅ Never speak" && data == "/voice off"),
        "{:?}",
        shown.buttons()
    );
    tg.user_says(OWNER, OWNER, "/voice on").await;
    tg.wait_bot_messages(OWNER, |m| has_text(m, "Voice answers here: on."), LIMIT).await;
    tg.user_says(OWNER, OWNER, "typed, but speak").await;
    let seen = tg.wait_bot_messages(OWNER, |m| has_text(m, "echo: typed, but speak"), LIMIT).await;
    assert_eq!(voices(&seen).len(), 2, "{:?}", texts(&seen));
    assert_eq!(spoken(&llm).last().unwrap(), "echo: typed, but speak");

    // An answer carrying the daemon's key: blocked before it is spoken, as in the text.
    llm.push(Step::text(&format!("the key is {KEY}, keep it")));
    tg.user_says(OWNER, OWNER, "what is the key?").await;
    let seen = tg.wait_bot_messages(OWNER, |m| has_text(m, "keep it"), LIMIT).await;
    assert!(texts(&seen).iter().all(|t| !t.contains(KEY)), "{:?}", texts(&seen));
    let last = spoken(&llm).last().unwrap().clone();
    assert!(last.contains("keep it") && !last.contains(KEY), "spoken: {last}");

    // A long answer: spoken in parts of at most 100 characters, two at most; the text says so.
    let sentence = "This sentence has exactly forty chars. ";
    llm.push(Step::text(&sentence.repeat(8)));
    let before = llm.speech_requests().len();
    tg.user_says(OWNER, OWNER, "a long one").await;
    let seen = tg.wait_bot_messages(OWNER, |m| has_text(m, "🔊 Spoken: the first 2"), LIMIT).await;
    let parts = &spoken(&llm)[before..];
    assert_eq!(parts.len(), 2, "{parts:?}");
    assert!(parts.iter().all(|p| p.chars().count() <= 100 && p.ends_with('.')), "{parts:?}");
    assert_eq!(voices(&seen).len(), 2 + 2 + 1, "{:?}", texts(&seen));

    // The provider failing: the answer is text, with one line saying why.
    llm.push_speech(503, br#"{"error":{"message":"speech overloaded"}}"#);
    tg.user_says(OWNER, OWNER, "and now?").await;
    let seen = tg.wait_bot_messages(OWNER, |m| has_text(m, "echo: and now?"), LIMIT).await;
    let text = seen.iter().rev().find(|m| m.text.starts_with("echo: and now?")).unwrap();
    assert!(text.text.contains("🔇 I could not speak this answer: the speech service failed"));
    assert!(text.text.contains("speech overloaded"), "{}", text.text);
    assert_eq!(voices(&seen).len(), 5, "a voice message for a failed speech");

    // The speech was priced and counted: today's spend is no longer zero.
    tg.user_says(OWNER, OWNER, "/status").await;
    let seen = tg.wait_bot_messages(OWNER, |m| has_text(m, "Spend today"), LIMIT).await;
    let status = seen.iter().rev().find(|m| m.text.contains("Spend today")).unwrap();
    assert!(status.text.contains("of $5.00 today"), "{}", status.text);
    assert!(!status.text.contains("$0.0000 of $5.00 today"), "{}", status.text);
    serving.stop(LIMIT).await;
}
