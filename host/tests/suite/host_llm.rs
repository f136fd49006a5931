//! The LLM layer end to end: `[[llm.providers]]` fallback with its one-time notice, caps that
//! refuse a call before it is sent (also four at once at the edge), context fitting that keeps
//! a chat alive after a huge answer or a "context too long", and the unpriced policy.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{base_env, chat, text, TempWorkspace};
use nexbot_core::{ChannelKind, ChatRef};
use nexbot_host::agent::channel::OutboundKind;
use nexbot_host::app::App;
use nexbot_host::bus::InboundMessage;
use nexbot_host::channels::console::ConsoleChannel;
use nexbot_host::config::Config;
use nexbot_tests::scripted_llm::{completion, last_user, ScriptedLlm, Step};
use serde_json::{json, Value};

const LIMIT: Duration = Duration::from_secs(60);

fn env_with(base: &str, extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut env = base_env(base);
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    env
}

fn echo(body: &Value) -> Step {
    Step::text(&format!("re: {}", last_user(body)))
}

/// A completion whose usage is `prompt` tokens.
fn answer_costing(content: &str, prompt: u64) -> Step {
    let mut body = completion(json!({"role": "assistant", "content": content}), "stop");
    body["usage"] = json!({"prompt_tokens": prompt, "completion_tokens": 1});
    Step::Reply(body)
}

#[tokio::test]
async fn a_failing_primary_falls_back_and_the_user_is_told_once() {
    let ws = TempWorkspace::init("fallback");
    let primary = ScriptedLlm::start(vec![]).await;
    primary.set_responder(|_| Step::status(503, r#"{"error":{"message":"overloaded"}}"#));
    let backup = ScriptedLlm::start(vec![]).await;
    backup.set_responder(echo);
    let providers = format!(
        r#"[{{name = "primary", base_url = "{}", model = "m-primary"}},
            {{name = "backup", base_url = "{}", model = "m-backup", api_key_env = "NXT_BACKUP_KEY"}}]"#,
        primary.base_url(),
        backup.base_url()
    );
    let env = env_with(
        &primary.base_url(),
        &[
            ("NEXBOT_LLM__PROVIDERS", &providers),
            ("NEXBOT_LLM__MAX_RETRIES", "1"),
            ("NXT_BACKUP_KEY", "sk-backup-only"),
            ("NEXBOT_LLM_API_KEY", "sk-main-key"),
        ],
    );
    let out = chat(&ws.config(), &env, &["one", "two", "three"], LIMIT).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    for line in ["re: one", "re: two", "re: three"] {
        assert!(stdout.lines().any(|l| l == line), "{line:?} missing:\n{stdout}");
    }
    let notice = "The main model is not answering right now; backup answered instead.";
    assert_eq!(stdout.matches(notice).count(), 1, "{stdout}");
    // The primary was tried (with its retry) until its breaker opened; the backup got its own
    // key and model, never the primary's key.
    assert!(primary.chat_requests().len() >= 2);
    for request in backup.chat_requests() {
        assert_eq!(request.header("authorization"), Some("Bearer sk-backup-only"));
        assert_eq!(request.body["model"], "m-backup");
        assert!(!request.to_text().contains("sk-main-key"));
    }
    for request in primary.chat_requests() {
        assert_eq!(request.header("authorization"), None, "the primary names no key variable");
    }
}

#[tokio::test]
async fn a_call_that_would_pass_a_cap_is_refused_before_it_is_sent() {
    let ws = TempWorkspace::init("cap");
    let llm = ScriptedLlm::start(vec![answer_costing("first", 60_000)]).await;
    let env = env_with(
        &llm.base_url(),
        &[
            ("NEXBOT_LLM__MAX_TOKENS", "100000"),
            ("NEXBOT_LLM__CAPS__CHAT_TOKENS_PER_DAY", "150000"),
        ],
    );
    let out = chat(&ws.config(), &env, &["a", "b"], LIMIT).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines.contains(&"first"), "{stdout}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("llm.caps.chat_tokens_per_day") && l.contains("60001 tokens used")),
        "{stdout}"
    );
    // The scripted server saw only the first call.
    assert_eq!(llm.chat_requests().len(), 1);
    // The count survives a restart (it is in the database), and /status shows it.
    let out = chat(&ws.config(), &env, &["c"], LIMIT).await;
    assert!(text(&out.stdout).contains("llm.caps.chat_tokens_per_day"), "{}", text(&out.stdout));
    let out = chat(&ws.config(), &env, &["/status"], LIMIT).await;
    assert!(text(&out.stdout).contains("this chat 60001 of 150000"), "{}", text(&out.stdout));
    assert_eq!(llm.chat_requests().len(), 1);
}

#[tokio::test]
async fn four_concurrent_calls_at_the_edge_of_the_daily_cap() {
    let ws = TempWorkspace::init("edge");
    let llm = ScriptedLlm::start(vec![]).await;
    // Slow answers: all four calls are in flight together, so all four reserve before any
    // settles. Each reserves max_tokens (100k) plus its prompt (a few thousand): three fit
    // under 350k, the fourth does not.
    llm.set_responder(|body| echo(body).delayed(Duration::from_millis(1500)));
    let env = env_with(
        &llm.base_url(),
        &[("NEXBOT_LLM__MAX_TOKENS", "100000"), ("NEXBOT_LLM__CAPS__TOKENS_PER_DAY", "350000")],
    );
    let text = std::fs::read_to_string(ws.config()).unwrap();
    let config = Config::from_parts(&text, &ws.config(), &ws.dir, env).unwrap();
    let mut app = App::start(&config).await.unwrap();
    let (console, mut outbound) = ConsoleChannel::new(64);
    app.add_channel(ChannelKind::Console, Arc::new(console));
    for i in 0..4u64 {
        let chat = ChatRef::console(&format!("c{i}")).unwrap();
        let message = InboundMessage {
            chat,
            id: i + 1,
            text: format!("q{i}"),
            user: None,
            files: Vec::new(),
        };
        app.inbound().send(message).await.unwrap();
    }
    let mut finals = Vec::new();
    while finals.len() < 4 {
        let m = tokio::time::timeout(LIMIT, outbound.recv()).await.unwrap().unwrap();
        if m.kind == OutboundKind::Final {
            finals.push(m.text);
        }
    }
    let answered = finals.iter().filter(|t| t.starts_with("re: q")).count();
    let refused: Vec<_> = finals.iter().filter(|t| t.contains("llm.caps.tokens_per_day")).collect();
    assert_eq!((answered, refused.len()), (3, 1), "{finals:#?}");
    assert_eq!(llm.chat_requests().len(), 3);
    app.stop().await;
}

#[tokio::test]
async fn a_huge_answer_does_not_brick_the_chat() {
    let ws = TempWorkspace::init("huge");
    let huge = "word ".repeat(200_000);
    let llm = ScriptedLlm::start(vec![Step::text(&huge), Step::text("normal answer")]).await;
    let out = chat(&ws.config(), &base_env(&llm.base_url()), &["big", "small"], LIMIT).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The user got the whole answer, and then a normal one.
    assert!(stdout.len() > huge.len() && stdout.ends_with("normal answer\n"));
    // The second call carried the first answer cut (with a note), within the window.
    let second = &llm.chat_requests()[1];
    let size = second.body.to_string().len();
    assert!(size < 32_768 * 3, "the second prompt is {size} bytes");
    assert!(second.to_text().contains("[answer cut:"), "no cut note");
}

#[tokio::test]
async fn context_too_long_from_the_provider_is_fitted_harder_once() {
    let ws = TempWorkspace::init("ctxlong");
    let llm = ScriptedLlm::start(vec![
        Step::text("a1"),
        Step::text("a2"),
        Step::text("a3"),
        Step::status(
            400,
            r#"{"error":{"message":"This model's maximum context length is 8192 tokens","code":"context_length_exceeded"}}"#,
        ),
        Step::text("fits now"),
    ])
    .await;
    let env = env_with(&llm.base_url(), &[("NEXBOT_LLM__CONTEXT_WINDOW", "40000")]);
    let long = |c: char| c.to_string().repeat(9_000);
    let lines = [long('x'), long('y'), long('z'), "last".to_owned()];
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    let out = chat(&ws.config(), &env, &lines, LIMIT).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(stdout.lines().last(), Some("fits now"), "{stdout}");
    let requests = llm.chat_requests();
    assert_eq!(requests.len(), 5);
    // The retry carried about half: old messages cut (with a note) or dropped.
    let size = |i: usize| requests[i].body["messages"].to_string().len();
    assert!(size(4) * 10 < size(3) * 6, "{} then {} bytes", size(3), size(4));
    // Old messages go first (no tool result to cut here): fewer messages, or cut with a note.
    let count = |i: usize| requests[i].body["messages"].as_array().map_or(0, Vec::len);
    let cut = requests[4].to_text().contains("cut:");
    assert!(cut || count(4) < count(3), "nothing was cut or dropped");
    // The newest message is never dropped.
    assert_eq!(last_user(&requests[4].body), "last");
}

#[tokio::test]
async fn an_unpriced_model_under_a_cost_cap_follows_the_policy() {
    let ws = TempWorkspace::init("unpriced");
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(echo);
    let refuse = env_with(&llm.base_url(), &[("NEXBOT_LLM__CAPS__COST_PER_DAY_USD", "1.0")]);
    let out = chat(&ws.config(), &refuse, &["hello"], LIMIT).await;
    let stdout = text(&out.stdout);
    assert!(stdout.contains("no price") && stdout.contains("llm.caps.unpriced"), "{stdout}");
    assert_eq!(llm.chat_requests().len(), 0);
    let mut allow = refuse.clone();
    allow.push(("NEXBOT_LLM__CAPS__UNPRICED".into(), "allow".into()));
    let out = chat(&ws.config(), &allow, &["hello"], LIMIT).await;
    assert_eq!(text(&out.stdout), "re: hello\n");
    let out = chat(&ws.config(), &allow, &["/status"], LIMIT).await;
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("$0.0000 of $1.00 today") && stdout.contains("+1 unpriced"),
        "{stdout}"
    );
    // Priced: the cost counts.
    let providers = format!(
        r#"[{{base_url = "{}", model = "m", input_price_per_mtok = 1000000.0, output_price_per_mtok = 0.0}}]"#,
        llm.base_url()
    );
    let mut priced = refuse.clone();
    priced.push(("NEXBOT_LLM__PROVIDERS".into(), providers));
    priced.push(("NEXBOT_LLM__MAX_TOKENS".into(), "1".into()));
    // $1 per prompt token: the worst case of any real prompt passes the $1 cap at once.
    let out = chat(&ws.config(), &priced, &["hello"], LIMIT).await;
    let stdout = text(&out.stdout);
    assert!(stdout.contains("llm.caps.cost_per_day_usd") && stdout.contains('$'), "{stdout}");
    assert_eq!(llm.chat_requests().len(), 1);
}

#[tokio::test]
async fn a_turn_waits_for_the_model_no_longer_than_the_setting_all_calls_together() {
    let ws = TempWorkspace::init("turnwait");
    let slow = |step: Step| step.delayed(Duration::from_millis(1_200));
    let llm = ScriptedLlm::start(vec![
        slow(Step::tool_call("list_dir", json!({"path": "."}))),
        slow(Step::tool_call("list_dir", json!({"path": "."}))),
        // The next turn has its own time.
        Step::text("second turn"),
    ])
    .await;
    let env = env_with(
        &llm.base_url(),
        &[("NEXBOT_LLM__TOTAL_TIMEOUT_SECS", "2"), ("NEXBOT_LLM__MAX_RETRIES", "0")],
    );
    let started = std::time::Instant::now();
    let out = chat(&ws.config(), &env, &["work", "again"], LIMIT).await;
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    // Each call alone is under the per-attempt timeout (5 s); together they pass the turn's 2 s.
    assert!(lines[0].contains("left for the model (llm.total_timeout_secs)"), "{stdout}");
    assert_eq!(lines[1], "second turn", "{stdout}");
    assert!(started.elapsed() < Duration::from_secs(10));
}
