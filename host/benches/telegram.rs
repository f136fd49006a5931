//! `make bench`: the Telegram channel measured end to end on the release `nexbot serve`,
//! through the tests' Bot API fixture in front of the third-party emulator, with an instant
//! scripted LLM and a pool of 4:
//! - the answer's latency, from the user's message entering the emulator to the bot's
//!   `sendMessage` being recorded (p50, p99), next to the measurement's own floor (inject a
//!   message and see a recorded call, no bot involved);
//! - `/stop` to the cancelled turn's "Stopped." (p50, p99);
//! - updates handled per second across 20 chats;
//! - host RSS with the channel running, after the runs.
//!
//! Prints figures; asserts nothing about speed.

// The daemon's tests and benches drive `nexbot` (and docker, kill) as processes; the crate's
// clippy config refuses that to the daemon's own code only.
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use nexbot_tests::bench::{proc_status_kib, record, DockerCleanup, Figure, Stats, Target};
use nexbot_tests::daemon::{Daemon, Workspace};
use nexbot_tests::scripted_llm::{last_user, ScriptedLlm, Step};
use nexbot_tests::telegram::TelegramFixture;

/// The daemon benched: the images' static binary under `make bench`, else this build's.
static NEXBOT: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| nexbot_tests::bench::daemon_binary(env!("CARGO_BIN_EXE_nexbot")));
const LIMIT: Duration = Duration::from_secs(120);
const OWNER: i64 = 7001;
const ROUNDS: usize = 100;
const STOPS: usize = 20;
const CHATS: i64 = 20;
const PER_CHAT: usize = 10;

fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

fn status_kib(pid: u32, field: &str) -> u64 {
    proc_status_kib(pid, field).unwrap_or(0)
}

/// Waits until the fixture has recorded more than `seen` `sendMessage` calls.
async fn wait_sends(tg: &TelegramFixture, seen: usize) -> usize {
    let start = Instant::now();
    loop {
        let n = tg.calls("sendMessage").await.len();
        if n > seen {
            return n;
        }
        assert!(start.elapsed() < LIMIT, "no answer within {LIMIT:?}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

// A bench's main reads as its measurement, top to bottom; split only by count it would not
// read better (test and bench code only: product functions stay under the limit).
#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::too_many_lines)]
async fn main() {
    let docker = bollard::Docker::connect_with_local_defaults().expect("Docker engine");
    docker.ping().await.expect("the Docker engine answers (is dockerd running?)");
    let run = format!("nxb-tg-{}", std::process::id());
    let _cleanup =
        DockerCleanup::default().label(nexbot_docker::spec::LABEL_POOL, &run).network(&run);
    let tg = TelegramFixture::start().await;
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(|body| {
        let text = last_user(body);
        if text.starts_with("hang") {
            Step::text("late").delayed(Duration::from_secs(600))
        } else {
            Step::text(&format!("echo: {text}"))
        }
    });
    let workspace = Workspace::init(NEXBOT.as_str(), &format!("{run}-workspace"));

    let users: Vec<String> = (0..CHATS).map(|i| (8000 + i).to_string()).collect();
    let env = [
        ("NEXBOT_LLM__BASE_URL", llm.base_url()),
        ("NEXBOT_LLM__MODEL", "scripted".into()),
        ("NEXBOT_SUBAGENT__ENABLED", "true".into()),
        ("NEXBOT_SUBAGENT__POOL_SIZE", "4".into()),
        ("NEXBOT_SUBAGENT__POOL_NAME", run.clone()),
        ("NEXBOT_SUBAGENT__NETWORK", run.clone()),
        ("NEXBOT_EGRESS__PORT", "0".into()),
        ("NEXBOT_TELEGRAM_TOKEN", tg.token().to_owned()),
        ("NEXBOT_TELEGRAM__API_URL", tg.api_url().to_owned()),
        ("NEXBOT_TELEGRAM__OWNER", OWNER.to_string()),
        ("NEXBOT_TELEGRAM__ALLOWED_USERS", format!("[{}]", users.join(","))),
        ("NEXBOT_BUS__MAX_PARALLEL_TURNS", "20".into()),
    ];
    let daemon = Daemon::spawn(NEXBOT.as_str(), &workspace.config(), env);
    let pid = daemon.pid();
    daemon.wait_log("the Telegram channel is on", LIMIT).await;
    println!(
        "Telegram through the emulator: {bin}, pool of 4, instant scripted LLM",
        bin = NEXBOT.as_str()
    );

    // Warm up (first turn opens the database session, the first connections).
    let before = tg.calls("sendMessage").await.len();
    tg.user_says(OWNER, OWNER, "warm up").await;
    wait_sends(&tg, before).await;

    // Idle, with the channel polling, the control API listening and the pool warm.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle_rss = rss_kib(pid) as f64 * 1024.0 / 1e6;
    let (anon, file) = (status_kib(pid, "RssAnon:"), status_kib(pid, "RssFile:"));
    println!(
        "  host RSS idle (Telegram polling, control API, pool of 4): {idle_rss:.2} MB \
         ({:.2} MB private, {:.2} MB file-backed)",
        anon as f64 * 1024.0 / 1e6,
        file as f64 * 1024.0 / 1e6
    );

    // The measurement's floor: inject a message and see a recorded call, no bot involved.
    let mut floor = Vec::new();
    for _ in 0..ROUNDS {
        let start = Instant::now();
        tg.user_says(9, 9, "floor").await; // a stranger: refused once, then recorded only
        let _ = tg.calls("getMe").await;
        floor.push(start.elapsed());
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut sends = tg.calls("sendMessage").await.len();

    let mut latency = Vec::new();
    for i in 0..ROUNDS {
        let start = Instant::now();
        tg.user_says(OWNER, OWNER, &format!("ping {i}")).await;
        sends = wait_sends(&tg, sends).await;
        latency.push(start.elapsed());
    }
    let latency = Stats::of(latency);
    let floor = Stats::of(floor);
    println!("  {}", latency.line("answer latency (message in → sendMessage recorded)"));
    println!("  {}", floor.line("measurement floor (inject + one fixture query)"));

    // /stop: a turn waiting on the model, stopped.
    let mut stops = Vec::new();
    for i in 0..STOPS {
        tg.user_says(OWNER, OWNER, &format!("hang {i}")).await;
        let asked = Instant::now();
        while !llm.chat_requests().iter().any(|r| last_user(&r.body) == format!("hang {i}")) {
            assert!(asked.elapsed() < LIMIT, "the hanging turn never reached the model");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let before = tg.bot_messages(OWNER).await.len();
        let start = Instant::now();
        tg.user_says(OWNER, OWNER, "/stop").await;
        loop {
            let messages = tg.bot_messages(OWNER).await;
            if messages[before..].iter().any(|m| m.text == "Stopped.") {
                break;
            }
            assert!(start.elapsed() < LIMIT, "the turn was not stopped");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        stops.push(start.elapsed());
    }
    let stops = Stats::of(stops);
    println!("  {}", stops.line("/stop → \"Stopped.\" (turn cancelled)"));

    // 20 chats at once.
    sends = tg.calls("sendMessage").await.len();
    let start = Instant::now();
    for round in 0..PER_CHAT {
        for user in 0..CHATS {
            let id = 8000 + user;
            tg.user_says(id, id, &format!("burst {round}")).await;
        }
    }
    let total = CHATS as usize * PER_CHAT;
    loop {
        let n = tg.calls("sendMessage").await.len();
        if n >= sends + total {
            break;
        }
        assert!(start.elapsed() < LIMIT, "only {} of {total} answered", n - sends);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let per_sec = total as f64 / start.elapsed().as_secs_f64();
    println!(
        "  {total} messages across {CHATS} chats answered in {:.2} s: {per_sec:.1}/s",
        start.elapsed().as_secs_f64()
    );

    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss = rss_kib(pid) as f64 * 1024.0 / 1e6;
    println!("  host RSS with the Telegram channel and a pool of 4, after the runs: {rss:.2} MB");
    daemon.stop(LIMIT).await;
    let _ = nexbot_docker::remove_network(&docker, &run).await;

    record(Figure::promised(
        "Telegram answer via emulator, instant model, p50",
        nexbot_tests::bench::ms(latency.p50),
        "ms",
        Target::AtMost(50.0),
    ));
    record(Figure::reference(
        "  p99 / measurement floor p50",
        &format!(
            "{:.1} / {:.1} ms",
            nexbot_tests::bench::ms(latency.p99),
            nexbot_tests::bench::ms(floor.p50)
        ),
        "(floor: inject + one fixture query, no bot)",
    ));
    record(Figure::reference(
        "Telegram /stop → cancelled, p50 / p99",
        &format!(
            "{:.1} / {:.1} ms",
            nexbot_tests::bench::ms(stops.p50),
            nexbot_tests::bench::ms(stops.p99)
        ),
        "(a turn waiting on the model)",
    ));
    record(Figure::reference(
        "Telegram updates handled, 20 chats",
        &format!("{per_sec:.1}/s"),
        &format!("({total} messages, answered)"),
    ));
    record(Figure::promised(
        "host idle RSS with Telegram, control API, pool of 4",
        idle_rss,
        "MB",
        Target::AtMost(20.0),
    ));
    record(Figure::reference(
        "  host RSS after the runs above",
        &format!("{rss:.2} MB"),
        "(heap grown by 300+ turns and 200 at once)",
    ));
}
