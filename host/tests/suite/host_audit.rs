//! The egress audit file's hash chain through the real `nexbot serve` and `nexbot-ctl audit
//! verify`: lines written by delegated tasks link to an older install's lines, the chain holds
//! and its head is the newest line's hash; a line edited on disk is named by the line after
//! it, and `verify` exits non-zero.

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
