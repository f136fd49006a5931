//! The daemon killed (SIGKILL) mid-delegation, through the real binary, the Telegram fixture
//! and the real pool: the next run settles what the dead one left (the task record, the
//! metrics, the chat's progress message) and still answers the update exactly once.

use crate::common::{is_main, tool_results, Leftovers, TempWorkspace};
use crate::telegram::{has_text, settled_ledger, start, telegram_env, texts, LIMIT, OWNER};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nexbot_tests::scripted_llm::{ScriptedLlm, Step};
use nexbot_tests::telegram::TelegramFixture;
use serde_json::json;

/// Task record rows: (id, status, error).
fn records(ws: &TempWorkspace) -> Vec<(String, String, Option<String>)> {
    let db = rusqlite::Connection::open(ws.database()).unwrap();
    let mut stmt = db
        .prepare("SELECT id, status, error FROM task_records ORDER BY started_at, rowid")
        .unwrap();
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).unwrap();
    rows.map(Result::unwrap).collect()
}

/// The value of the metric line that starts with `name ` (no labels).
fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

#[tokio::test]
async fn a_task_the_daemon_was_killed_in_is_settled_as_interrupted_after_the_restart() {
    let Some(_docker) = nexbot_tests::docker_or_skip("crash_interrupted_task").await else {
        return;
    };
    let tg = TelegramFixture::start().await;
    let llm = ScriptedLlm::start(vec![]).await;
    // Before the kill the subagent lists its folder, then thinks for ever; after it, the
    // replayed request's new task answers at once.
    let killed = Arc::new(AtomicBool::new(false));
    let after_kill = killed.clone();
    llm.set_responder(move |body| {
        if !is_main(body) {
            if after_kill.load(Ordering::SeqCst) {
                return Step::text("DONE-AFTER-RESTART");
            }
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
    let ws = TempWorkspace::init("crash-task");
    let names = Leftovers::new("crashtask");
    let mut env = telegram_env(&llm, &tg);
    env.extend(names.env());
    let serving = start(&ws, &env).await;
    tg.user_says(OWNER, OWNER, "start the long task").await;
    let messages = tg.wait_bot_messages(OWNER, |m| has_text(m, "Working on"), LIMIT * 2).await;
    let progress = messages.iter().find(|m| m.text.contains("Working on")).unwrap().message_id;
    let waited = Instant::now();
    while llm.chat_requests().iter().filter(|r| !is_main(&r.body)).count() < 2 {
        assert!(waited.elapsed() < LIMIT, "the subagent never got going");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Mid-delegation: the record is running (and its progress message recorded).
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(records(&ws).len(), 1);
    assert_eq!(records(&ws)[0].1, "running");
    killed.store(true, Ordering::SeqCst);
    serving.kill().await;

    let serving = start(&ws, &env).await;
    // The request is handled again (the ledger replays it) and answered once.
    tg.wait_bot_messages(OWNER, |m| has_text(m, "the task ended"), LIMIT * 2).await;
    // No record stays running: the dead run's is interrupted, with the reason; the new
    // run's task ended.
    let waited = Instant::now();
    let rows = loop {
        let rows = records(&ws);
        if rows.iter().all(|r| r.1 != "running") {
            break rows;
        }
        assert!(waited.elapsed() < LIMIT, "a task record stayed running: {rows:#?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(rows.len(), 2, "{rows:#?}");
    assert_eq!(rows[0].1, "interrupted", "{rows:#?}");
    let reason = rows[0].2.as_deref().unwrap_or_default();
    assert!(
        reason.contains("the daemon stopped while it ran (crash or kill); started again at"),
        "{reason}"
    );
    assert_eq!(rows[1].1, "success", "{rows:#?}");
    // The metrics count only what truly runs.
    let metrics =
        nexbot_control::Client::new(ws.dir.join("nexbot.sock")).get_text("/metrics").await.unwrap();
    assert_eq!(metric(&metrics, "nexbot_tasks_running"), Some(0.0), "{metrics}");
    assert!(
        metrics.contains(r#"nexbot_tasks_finished_total{outcome="interrupted"} 1"#),
        "{metrics}"
    );
    // The dead run's progress message says the task was interrupted and is retried.
    let edited = tg
        .wait_bot_messages(
            OWNER,
            |m| m.iter().any(|x| x.message_id == progress && x.text.contains("interrupted")),
            LIMIT,
        )
        .await;
    let old = edited.iter().find(|m| m.message_id == progress).unwrap();
    assert!(old.text.contains("Task interrupted: a long task"), "{}", old.text);
    assert!(old.text.contains("handled again"), "{}", old.text);
    // Answered exactly once, as before.
    let all = tg.bot_messages(OWNER).await;
    let answers = all.iter().filter(|m| m.text == "the task ended").count();
    assert_eq!(answers, 1, "{:?}", texts(&all));
    let ledger = settled_ledger(&ws).await;
    assert_eq!((ledger.len(), ledger[0].2.as_str()), (1, "answered"), "{ledger:#?}");
    serving.stop(LIMIT).await;
}

/// The daemon killed while its answer is on the way to Telegram (here: Telegram answering
/// 500, so the send is retried): the next run does not answer the update again, which could
/// answer it twice, but tells its user the answer may not have arrived, and records why.
#[tokio::test]
async fn an_answer_cut_off_by_a_kill_is_not_sent_again_and_its_user_is_told() {
    use crate::common::echo;
    use crate::telegram::ledger;
    use nexbot_tests::telegram::Fault;

    let tg = TelegramFixture::start().await;
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(echo);
    let ws = TempWorkspace::init("crash-sending");
    let env = telegram_env(&llm, &tg);
    let serving = start(&ws, &env).await;
    tg.fail_for("sendMessage", Fault::ServerError, Duration::from_secs(300)).await;
    tg.user_says(OWNER, OWNER, "answer me once").await;
    let waited = Instant::now();
    while !ledger(&ws).iter().any(|r| r.2 == "pending" && r.3.as_deref() == Some("sending")) {
        assert!(waited.elapsed() < LIMIT, "the answer was never marked as sent: {:?}", ledger(&ws));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    serving.kill().await;
    // What the killed daemon had written is in the fixture's socket buffers; let it be read
    // (and refused: the fixture picks a fault when a request arrives) before faults clear.
    tokio::time::sleep(Duration::from_millis(300)).await;
    tg.clear_faults().await;

    let serving = start(&ws, &env).await;
    let told = "I was restarted while sending my answer to «answer me once»";
    tg.wait_bot_messages(OWNER, |m| has_text(m, told), LIMIT).await;
    let ledger = settled_ledger(&ws).await;
    assert_eq!(ledger.len(), 1, "{ledger:#?}");
    assert_eq!(ledger[0].2, "failed", "{ledger:#?}");
    assert!(ledger[0].3.as_deref().unwrap_or_default().contains("while sending"), "{ledger:#?}");
    // Not handled again: the model was asked once, and no answer went out after the restart.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(llm.chat_requests().len(), 1, "the update was handled again");
    let all = tg.bot_messages(OWNER).await;
    assert!(!all.iter().any(|m| m.text.contains("echo: answer me once")), "{:?}", texts(&all));
    serving.stop(LIMIT).await;
}
