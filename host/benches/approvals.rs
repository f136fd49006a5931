//! `make bench`: an egress question answered from Telegram, measured end to end on the release
//! `nexbot serve` in `egress.mode = "ask"`, with the real pool and proxy, the tests' Bot API
//! fixture in front of the third-party emulator, and an instant scripted LLM:
//! - from the owner's press of **Allow once** entering the emulator to the held request's
//!   first byte reaching the destination (a local HTTP server) (p50, p99), next to the
//!   measurement's own floor (inject a press and see one fixture query answered, no bot).
//!
//! What the press has to cross: the channel's long poll hands the callback to the bus, the
//! `/egress` command answers the pending question, the proxy lets the held connection go on,
//! and the request leaves for the destination. Prints figures; asserts nothing about speed.

// The benches drive `nexbot` (and docker) as processes; the crate's clippy config refuses
// that to the daemon's own code only.
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use nexbot_tests::bench::{ms, record, DockerCleanup, Figure, Stats};
use nexbot_tests::daemon::{Daemon, Workspace};
use nexbot_tests::scripted_llm::{is_main, ScriptedLlm, Step};
use nexbot_tests::telegram::{BotMessage, TelegramFixture};
use serde_json::{json, Value};

/// The daemon benched: the images' static binary under `make bench`, else this build's.
static NEXBOT: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| nexbot_tests::bench::daemon_binary(env!("CARGO_BIN_EXE_nexbot")));
const LIMIT: Duration = Duration::from_secs(120);
const OWNER: i64 = 7001;
/// Someone on no allow-list: the floor's press.
const STRANGER: i64 = 9;
const ROUNDS: usize = 30;
const QUESTION: &str = "A task wants to reach";

/// Whether the request's conversation ends with a tool result.
fn after_tool(body: &Value) -> bool {
    body["messages"].as_array().and_then(|m| m.last()).is_some_and(|m| m["role"] == "tool")
}

/// The `nth` question (from 0) once it is there with its buttons.
async fn question(tg: &TelegramFixture, nth: usize) -> BotMessage {
    let asked = |m: &[BotMessage]| -> Vec<BotMessage> {
        m.iter().filter(|m| m.raw.contains(QUESTION)).cloned().collect()
    };
    let ready = |m: &[BotMessage]| asked(m).get(nth).is_some_and(|q| !q.buttons().is_empty());
    asked(&tg.wait_bot_messages(OWNER, ready, LIMIT).await).remove(nth)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let docker = bollard::Docker::connect_with_local_defaults().expect("Docker engine");
    docker.ping().await.expect("the Docker engine answers (is dockerd running?)");
    let run = format!("nxb-ap-{}", std::process::id());
    let _cleanup =
        DockerCleanup::default().label(nexbot_docker::spec::LABEL_POOL, &run).network(&run);
    let tg = TelegramFixture::start().await;
    let (server, seen) =
        nexbot_tests::egress::http_server_at(nexbot_tests::egress::host_address_off_network())
            .await;
    let llm = ScriptedLlm::start(vec![]).await;
    let url = format!("http://{server}/hello");
    llm.set_responder(move |body| match (is_main(body), after_tool(body)) {
        (true, false) => Step::tool_call("delegate_to_sub_agent", json!({ "task": "fetch it" })),
        (false, false) => Step::tool_call("web_fetch", json!({ "url": url })),
        (_, true) => Step::text("done"),
    });
    let workspace = Workspace::init(NEXBOT.as_str(), &format!("{run}-workspace"));
    let env = [
        ("NEXBOT_LLM__BASE_URL", llm.base_url()),
        ("NEXBOT_LLM__MODEL", "scripted".into()),
        ("NEXBOT_SUBAGENT__ENABLED", "true".into()),
        ("NEXBOT_SUBAGENT__POOL_SIZE", "2".into()),
        ("NEXBOT_SUBAGENT__POOL_NAME", run.clone()),
        ("NEXBOT_SUBAGENT__NETWORK", run.clone()),
        ("NEXBOT_EGRESS__PORT", "0".into()),
        ("NEXBOT_EGRESS__MODE", "ask".into()),
        (
            "NEXBOT_EGRESS__PROXY__ALLOW_INTERNAL",
            format!(r#"[{{ cidr = "{}", ports = [{}] }}]"#, server.ip(), server.port()),
        ),
        ("NEXBOT_TELEGRAM_TOKEN", tg.token().to_owned()),
        ("NEXBOT_TELEGRAM__API_URL", tg.api_url().to_owned()),
        ("NEXBOT_TELEGRAM__OWNER", OWNER.to_string()),
    ];
    let daemon = Daemon::spawn(NEXBOT.as_str(), &workspace.config(), env);
    daemon.wait_log("the Telegram channel is on", LIMIT).await;
    println!(
        "Egress question answered in Telegram: {bin}, mode ask, pool of 2, \
         instant scripted LLM, {ROUNDS} rounds",
        bin = NEXBOT.as_str()
    );

    let done =
        |n: usize| move |m: &[BotMessage]| m.iter().filter(|m| m.text == "done").count() >= n;
    let mut presses = Vec::new();
    let mut floor = Vec::new();
    for round in 0..ROUNDS {
        tg.user_says(OWNER, OWNER, &format!("fetch {round}")).await;
        let asked = question(&tg, round).await;
        let (_, once) = asked
            .buttons()
            .into_iter()
            .find(|(label, _)| label == "Allow once")
            .expect("an Allow once button");
        let before = seen.lock().unwrap().len();
        assert_eq!(before, round, "held: the request waits for the answer");
        let start = Instant::now();
        tg.user_clicks(OWNER, OWNER, asked.message_id, &once).await;
        while seen.lock().unwrap().len() == before {
            assert!(start.elapsed() < LIMIT, "the held request never arrived");
            tokio::time::sleep(Duration::from_micros(100)).await;
        }
        presses.push(start.elapsed());
        tg.wait_bot_messages(OWNER, done(round + 1), LIMIT).await;
        // The floor: a stranger's press (refused, decides nothing) and one fixture query.
        let start = Instant::now();
        tg.user_clicks(OWNER, STRANGER, asked.message_id, &once).await;
        let _ = tg.calls("getMe").await;
        floor.push(start.elapsed());
    }
    let presses = Stats::of(presses);
    let floor = Stats::of(floor);
    println!("  {}", presses.line("press Allow once → held request's first byte at the server"));
    println!("  {}", floor.line("measurement floor (inject a press + one fixture query)"));
    daemon.stop(LIMIT).await;
    let _ = nexbot_docker::remove_network(&docker, &run).await;

    record(Figure::reference(
        "egress question: press → first byte, p50 / p99",
        &format!("{:.1} / {:.1} ms", ms(presses.p50), ms(presses.p99)),
        &format!("(floor: inject + query {:.1} ms; Telegram fixture, pool)", ms(floor.p50)),
    ));
}
