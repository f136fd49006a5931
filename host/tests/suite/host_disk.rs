//! A full disk under the real `nexbot serve`: its database on a 2 MB tmpfs of the test's own,
//! filled to the last byte while the Telegram fixture brings a message. The user is told once
//! that the disk is full and gets the real answer once space returns (exactly once); health
//! and `/status` name the disk with its number; the log has the recording failure once and
//! then its count, not a line a second.
//!
//! Needs root (it mounts the tmpfs); skipped with a note otherwise.

use crate::common::{echo, Serving, TempWorkspace};
use crate::telegram::{has_text, start, telegram_env, texts, LIMIT, OWNER};

use std::path::Path;
use std::time::Duration;

use nexbot_control::{paths, Client};
use nexbot_tests::disk::SmallDisk;
use nexbot_tests::scripted_llm::ScriptedLlm;
use nexbot_tests::telegram::TelegramFixture;

/// What the channel says when a message cannot be recorded (`telegram/src/channel/disk_full.rs`).
const NOTICE: &str = "the disk of the server I run on is full";

fn count(log: &str, needle: &str) -> usize {
    log.lines().filter(|l| l.contains(needle)).count()
}

/// The states of the ledger's rows (the database is not the workspace's).
fn ledger_states(database: &Path) -> Vec<String> {
    let db = rusqlite::Connection::open(database).unwrap();
    let mut stmt = db.prepare("SELECT state FROM telegram_updates ORDER BY update_id").unwrap();
    let rows = stmt.query_map([], |r| r.get(0)).unwrap();
    rows.map(Result::unwrap).collect()
}

async fn degraded(api: &Client) -> Vec<String> {
    let health: nexbot_control::Health = api.get(paths::HEALTH).await.unwrap();
    health.degraded
}

#[tokio::test]
async fn a_full_disk_is_told_to_the_user_named_by_health_and_logged_once_with_a_count() {
    let Some(disk) = SmallDisk::mount("disk-full", "2m") else { return };
    let tg = TelegramFixture::start().await;
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(echo);
    let ws = TempWorkspace::init("disk-full");
    let mut env = telegram_env(&llm, &tg);
    let database = disk.path().join("nexbot.db");
    env.push(("NEXBOT_STORAGE__DATABASE".to_owned(), database.display().to_string()));
    let serving: Serving = start(&ws, &env).await;
    let api = Client::new(disk.path().join("nexbot.sock"));

    // 2 MB is below the default 50 MB: health and /status name the disk with its number.
    let below = format!("free in {} (below 50 MB)", disk.path().display());
    let named = degraded(&api).await;
    assert!(named.iter().any(|d| d.starts_with("disk: ") && d.contains(&below)), "{named:?}");
    tg.user_says(OWNER, OWNER, "/status").await;
    let status = tg.wait_bot_messages(OWNER, |m| has_text(m, "DEGRADED: disk:"), LIMIT).await;
    assert!(texts(&status).concat().contains(&below), "{:?}", texts(&status));

    // A one-shot job comes due while the disk is full: its tick cannot be recorded.
    let job = nexbot_control::CronAdd {
        chat: format!("telegram:{OWNER}"),
        task: "the job due on a full disk".into(),
        at: Some("in 2s".into()),
        ..nexbot_control::CronAdd::default()
    };
    api.post::<_, nexbot_control::CronJob>(nexbot_control::cron_paths::CRON, &job).await.unwrap();

    // The disk fills: the message cannot be recorded; its user is told so, once.
    let filler = disk.fill();
    tg.user_says(OWNER, OWNER, "while the disk is full").await;
    tg.wait_bot_messages(OWNER, |m| has_text(m, NOTICE), LIMIT).await;
    // Health says the channel cannot record (the loop retries about once a second).
    let start_full = std::time::Instant::now();
    let mut named = degraded(&api).await;
    while !named.iter().any(|d| d.contains("cannot record incoming updates")) {
        assert!(start_full.elapsed() < LIMIT, "{named:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
        named = degraded(&api).await;
    }
    assert!(named.iter().any(|d| d.starts_with("disk: 0")), "{named:?}");
    tokio::time::sleep(Duration::from_secs(6).saturating_sub(start_full.elapsed())).await;

    // Space returns: the message is answered, exactly once; the notice was sent once.
    std::fs::remove_file(&filler).unwrap();
    tg.wait_bot_messages(OWNER, |m| has_text(m, "echo: while the disk is full"), LIMIT).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let all = texts(&tg.bot_messages(OWNER).await);
    assert_eq!(count(&all.join("\n"), "echo: while the disk is full"), 1, "{all:?}");
    assert_eq!(all.iter().filter(|t| t.contains(NOTICE)).count(), 1, "{all:?}");
    let states = ledger_states(&database);
    assert!(states.iter().all(|s| s == "answered"), "{states:?}");
    // The job ran once when space returned.
    let job_said = "the job due on a full disk";
    tg.wait_bot_messages(OWNER, |m| has_text(m, job_said), LIMIT).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let ran = texts(&tg.bot_messages(OWNER).await);
    assert_eq!(ran.iter().filter(|t| t.contains(job_said)).count(), 1, "{ran:?}");

    // The failure was logged once, then once with its count, not once a second.
    let log = serving.stop(LIMIT).await;
    let failed = count(&log, "cannot record a Telegram update;");
    let counted = count(&log, "cannot record a Telegram update (repeated ");
    assert_eq!((failed, counted), (1, 1), "{log}");
    // The scheduler's failed tick was retried once a second and logged once (the old loop
    // retried at once: a thousand lines a second).
    let ticks = count(&log, "cannot record the due jobs");
    assert!((1..=2).contains(&ticks), "{ticks} lines:\n{log}");
}

/// An answer ready while the disk is full waits for its "being sent" mark instead of going
/// unmarked; the daemon killed meanwhile, the next run answers the message, once. Before, the
/// answer went at once, unmarked: the next run handled the message again and its user got the
/// answer twice (seen in a soak: disk full, then a SIGKILL 4 s after the space returned).
#[tokio::test]
async fn an_answer_ready_on_a_full_disk_waits_for_its_mark_and_a_kill_meanwhile_doubles_nothing() {
    let Some(disk) = SmallDisk::mount("disk-mark", "2m") else { return };
    let tg = TelegramFixture::start().await;
    let llm = ScriptedLlm::start(vec![]).await;
    // The first answer comes after the disk has filled; the next run's at once.
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = calls.clone();
    llm.set_responder(move |body| {
        let step = echo(body);
        match seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
            0 => step.delayed(Duration::from_secs(3)),
            _ => step,
        }
    });
    let ws = TempWorkspace::init("disk-mark");
    let mut env = telegram_env(&llm, &tg);
    let database = disk.path().join("nexbot.db");
    env.push(("NEXBOT_STORAGE__DATABASE".to_owned(), database.display().to_string()));
    let serving: Serving = start(&ws, &env).await;

    tg.user_says(OWNER, OWNER, "answer me once").await;
    // Recorded, its turn asking the model: then the disk fills under it.
    let begun = std::time::Instant::now();
    while calls.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        assert!(begun.elapsed() < LIMIT, "the model was never asked");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let filler = disk.fill();
    // The model answers 3 s after it was asked: 2 s more, and the answer is ready.
    tokio::time::sleep(Duration::from_secs(5).saturating_sub(begun.elapsed())).await;
    let answers = |m: &[nexbot_tests::telegram::BotMessage]| {
        texts(m).iter().filter(|t| t.contains("echo: answer me once")).count()
    };
    assert_eq!(answers(&tg.bot_messages(OWNER).await), 0, "sent unmarked");
    serving.wait_log("the answer waits until it can be", LIMIT).await;

    // Killed while the answer waits; the space returns; the next run answers, once.
    serving.kill().await;
    std::fs::remove_file(&filler).unwrap();
    let serving: Serving = start(&ws, &env).await;
    tg.wait_bot_messages(OWNER, |m| answers(m) >= 1, LIMIT).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let all = tg.bot_messages(OWNER).await;
    assert_eq!(answers(&all), 1, "{:?}", texts(&all));
    serving.stop(LIMIT).await;
}
