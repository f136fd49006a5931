//! The egress audit file's hash chain through the real `nexbot serve` and `nexbot-ctl audit
//! verify`: lines written by delegated tasks link to an older install's lines, the chain holds
//! and its head is the newest line's hash; a line edited on disk is named by the line after
//! it, and `verify` exits non-zero. A person's answer, the job it let the model store and an
//! operator's action are lines of the same chain.

use std::time::Duration;

use crate::common::{self, base_env, is_main, tool_results, Leftovers, Serving, TempWorkspace};
use nexbot_tests::scripted_llm::{ScriptedLlm, Step};
use nexbot_tests::telegram::TelegramFixture;
use serde_json::json;
use sha2::{Digest, Sha256};

const OWNER: i64 = 6101;
const FRIEND: i64 = 6102;
const LIMIT: Duration = Duration::from_secs(90);

fn sha256_hex(line: &str) -> String {
    Sha256::digest(line.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test]
async fn the_audit_chain_holds_and_an_edited_line_is_named_by_audit_verify() {
    let Some(_docker) = nexbot_tests::docker_or_skip("audit_chain").await else { return };
    let tg = TelegramFixture::start().await;
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(|body| match (is_main(body), tool_results(body)) {
        (false, _) => Step::text("SUB-OK"),
        (true, 0) => Step::tool_call("delegate_to_sub_agent", json!({"task": "say ok"})),
        (true, _) => Step::text("turn done"),
    });
    let ws = TempWorkspace::init("audit-chain");
    // An older install's line, from before the chain.
    let audit = ws.dir.join("egress-audit.jsonl");
    std::fs::write(&audit, "{\"kind\":\"http\",\"host\":\"before-the-chain.example\"}\n").unwrap();
    let names = Leftovers::new("auditch");
    let mut env = base_env(&llm.base_url());
    env.extend(names.env());
    env.push(("NEXBOT_SUBAGENT__POOL_SIZE".into(), "1".into()));
    common::telegram_env(&mut env, &tg, OWNER);
    env.push(("NEXBOT_TELEGRAM__ALLOWED_USERS".into(), format!("[{FRIEND}]")));
    // The owner's copy of the head, sent every 2 s here (a day by default).
    env.push(("NEXBOT_EGRESS__AUDIT_HEAD_SECS".into(), "2".into()));
    let serving = Serving::start(&ws.config(), &env, LIMIT).await;
    serving.wait_log("the control API is on", LIMIT).await;

    // Two delegated tasks: their model calls through the relay are audited.
    for _ in 0..2 {
        let before = tg.bot_messages(OWNER).await.len();
        tg.user_says(OWNER, OWNER, "quick").await;
        tg.wait_bot_messages(
            OWNER,
            |m| m.len() > before && m.iter().any(|m| m.text == "turn done"),
            LIMIT,
        )
        .await;
    }
    let lines = || -> Vec<String> {
        std::fs::read_to_string(&audit).unwrap().lines().map(str::to_owned).collect()
    };
    let start = std::time::Instant::now();
    while lines().len() < 3 {
        assert!(start.elapsed() < LIMIT, "no audit lines: {:?}", lines());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let ran = common::ctl(&ws, &["audit", "verify"], "").await;
    assert_eq!(ran.code, Some(0), "{ran:?}");
    let written = lines();
    let total = written.len();
    assert!(ran.stdout.contains(&format!("the chain holds: {total} lines in 1 files")), "{ran:?}");
    assert!(ran.stdout.contains("1 older lines from before the chain"), "{ran:?}");
    assert!(ran.stdout.contains(&sha256_hex(written.last().unwrap())), "the head: {ran:?}");
    // The owner's copies: sent to their chat, and `/audit` there; another user gets neither.
    let head = sha256_hex(written.last().unwrap());
    let sent = |m: &[nexbot_tests::telegram::BotMessage]| {
        m.iter().any(|m| m.text.contains(&format!("Audit chain head: {head}")))
    };
    tg.wait_bot_messages(OWNER, sent, LIMIT).await;
    tg.user_says(FRIEND, FRIEND, "/audit").await;
    tg.wait_bot_messages(FRIEND, |m| m.iter().any(|m| m.text.starts_with("Only the owner")), LIMIT)
        .await;
    assert!(!tg.bot_messages(FRIEND).await.iter().any(|m| m.text.contains(&head)));
    let second: serde_json::Value = serde_json::from_str(&written[1]).unwrap();
    assert_eq!(second["prev"], sha256_hex(&written[0]), "linked to the older install's line");

    // A line edited on disk: the line after it is named, and verify fails.
    let mut edited = written.clone();
    edited[1] = edited[1].replacen("\"verdict\":\"allowed\"", "\"verdict\":\"denied\"", 1);
    assert_ne!(edited[1], written[1], "{}", written[1]);
    std::fs::write(&audit, edited.join("\n") + "\n").unwrap();
    let ran = common::ctl(&ws, &["audit", "verify"], "").await;
    assert_eq!(ran.code, Some(1), "{ran:?}");
    assert!(ran.stdout.contains("egress-audit.jsonl:3: does not follow"), "{ran:?}");
    let json = common::ctl(&ws, &["--json", "audit", "verify"], "").await;
    let check: nexbot_control::AuditCheck = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(check.broken.map(|b| b.line), Some(3));
    tg.user_says(OWNER, OWNER, "/audit").await;
    let broken = |m: &[nexbot_tests::telegram::BotMessage]| {
        m.iter().any(|m| m.text.contains("The audit chain is BROKEN at") && m.text.contains(":3:"))
    };
    tg.wait_bot_messages(OWNER, broken, LIMIT).await;
    serving.stop(LIMIT).await;
}

/// Not only the egress: a person's answer, the job it let the model store, and an operator's
/// action through `nexbot-ctl` are lines of the same chain; the answer changed on disk
/// afterwards is named by `audit verify`.
#[tokio::test]
async fn answers_stored_jobs_and_the_operators_actions_join_the_chain() {
    let Some(_docker) = nexbot_tests::docker_or_skip("audit_events").await else { return };
    let tg = TelegramFixture::start().await;
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(|body| match tool_results(body) {
        0 => Step::tool_call(
            "schedule_task",
            json!({"action": "create", "task": "water the plants", "cron": "0 0 9 * * *"}),
        ),
        _ => Step::text("turn done"),
    });
    let ws = TempWorkspace::init("audit-events");
    let names = Leftovers::new("auditev");
    let mut env = base_env(&llm.base_url());
    env.extend(names.env());
    common::telegram_env(&mut env, &tg, OWNER);
    let serving = Serving::start(&ws.config(), &env, LIMIT).await;
    serving.wait_log("the control API is on", LIMIT).await;

    // The model asks to store a job; the owner allows it in Telegram.
    tg.user_says(OWNER, OWNER, "water the plants every morning").await;
    let asked = tg
        .wait_bot_messages(OWNER, |m| m.iter().any(|m| m.text.contains("wants to schedule")), LIMIT)
        .await;
    let asked = asked.into_iter().find(|m| m.text.contains("wants to schedule")).unwrap();
    let allow = asked.buttons().into_iter().find(|(label, _)| label == "Allow").unwrap().1;
    tg.user_clicks(OWNER, OWNER, asked.message_id, &allow).await;
    tg.wait_bot_messages(OWNER, |m| m.iter().any(|m| m.text == "turn done"), LIMIT).await;
    // An operator's action.
    let ran = common::ctl(&ws, &["subagents", "restart", "0"], "").await;
    assert_eq!(ran.code, Some(0), "{ran:?}");

    let audit = ws.dir.join("egress-audit.jsonl");
    let events = || -> Vec<(usize, serde_json::Value)> {
        let text = std::fs::read_to_string(&audit).unwrap_or_default();
        let lines = text.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap());
        lines.enumerate().filter(|(_, l)| l["kind"] == "event").collect()
    };
    let start = std::time::Instant::now();
    while events().len() < 3 {
        assert!(start.elapsed() < LIMIT, "events: {:?}", events());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let events = events();
    let of = |event: &str| events.iter().find(|(_, l)| l["event"] == event).cloned().unwrap();
    let (answer_at, answer) = of("approval");
    assert_eq!(answer["actor"], format!("telegram:{OWNER}"), "{answer}");
    assert_eq!(answer["chat"], format!("telegram:{OWNER}"), "{answer}");
    assert!(answer["subject"].as_str().unwrap().contains("schedule"), "{answer}");
    assert_eq!(answer["outcome"], "once", "{answer}");
    let (_, job) = of("job");
    assert!(job["subject"].as_str().unwrap().contains("water the plants"), "{job}");
    assert!(job["outcome"].as_str().unwrap().starts_with("stored"), "{job}");
    let (_, action) = of("operator");
    assert_eq!(action["actor"], "nexbot-ctl", "{action}");
    assert_eq!(action["subject"], "POST /v1/subagents/0/restart", "{action}");
    assert_eq!(action["outcome"], "200", "{action}");
    let ran = common::ctl(&ws, &["audit", "verify"], "").await;
    assert_eq!(ran.code, Some(0), "{ran:?}");

    // The answer rewritten afterwards: the line after it no longer follows.
    let text = std::fs::read_to_string(&audit).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    lines[answer_at] = lines[answer_at].replace("\"outcome\":\"once\"", "\"outcome\":\"deny\"");
    std::fs::write(&audit, lines.join("\n") + "\n").unwrap();
    let ran = common::ctl(&ws, &["audit", "verify"], "").await;
    assert_eq!(ran.code, Some(1), "{ran:?}");
    let named = format!("egress-audit.jsonl:{}: does not follow", answer_at + 2);
    assert!(ran.stdout.contains(&named), "{named} in {ran:?}");
    serving.stop(LIMIT).await;
}
