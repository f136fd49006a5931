//! `make bench`: an egress question answered from Telegram, measured end to end on the release
//! `nexbot serve` in `egress.mode = "ask"`, with the real pool and proxy, the tests' Bot API
//! fixture in front of the third-party emulator, and an instant scripted LLM:
//! - from the owner's press of **Allow once** entering the emulator to the held request's
//!   first byte reaching the destination (a local HTTP server) (p50, p99), next to the
//!   measurement's own floor (inject a press and see one fixture query answered, no bot);
//! - a subagent's step through the egress once the chat allows the destination: one fetch
//!   and one model call (through the relay), from one fetch's arrival at the server to the
//!   next's.
//!
//! Each figure twice in the same run: the pool on the local engine beside its proxy, and the
//! pool on a remote engine (`nexbot_tests::remote`: a `dockerd` in a network namespace over
//! mutual TLS) whose traffic goes through the egress node there, tunnelled to the daemon.
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
use nexbot_tests::remote::RemoteHost;
use nexbot_tests::scripted_llm::{is_main, last_user, tool_results, ScriptedLlm, Step};
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

/// Fetches in the chained task (within `subagent.search_budget`, 20 by default).
const CHAIN: usize = 15;
const CHAIN_TASK: &str = "fetch it 15 times";

/// Where a leg's pool runs.
#[derive(Clone, Copy)]
enum Place<'a> {
    Local,
    Remote(&'a RemoteHost),
}

impl Place<'_> {
    fn name(&self) -> &'static str {
        match self {
            Place::Local => "local engine, its proxy",
            Place::Remote(_) => "remote engine (TLS), its egress node",
        }
    }
}

/// One leg's figures.
struct Leg {
    presses: Stats,
    floor: Stats,
    steps: Stats,
}

/// Waits until the server has seen more than `before` requests; when it did. Panics with the
/// daemon's log and the chat after [`LIMIT`].
async fn arrival(seen: &Seen, before: usize, daemon: &Daemon, tg: &TelegramFixture) -> Instant {
    let start = Instant::now();
    while seen.lock().unwrap().len() <= before {
        if start.elapsed() > LIMIT {
            let chat: Vec<String> =
                tg.bot_messages(OWNER).await.into_iter().map(|m| m.text).collect();
            let log = daemon.log();
            let tail = &log[log.len().saturating_sub(4000)..];
            panic!("request {} never arrived; the chat: {chat:#?}\nthe log: {tail}", before + 1);
        }
        tokio::time::sleep(Duration::from_micros(100)).await;
    }
    Instant::now()
}

type Seen = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let docker = bollard::Docker::connect_with_local_defaults().expect("Docker engine");
    docker.ping().await.expect("the Docker engine answers (is dockerd running?)");
    let local = leg(&docker, Place::Local).await;
    let remote = if rustix::process::geteuid().is_root() {
        let host = RemoteHost::start();
        Some(leg(&docker, Place::Remote(&host)).await)
    } else {
        println!("no remote-engine figures: making a network namespace needs root");
        None
    };
    let both = |f: fn(&Leg) -> &Stats| -> String {
        let one = |leg: &Leg| format!("{:.1} / {:.1} ms", ms(f(leg).p50), ms(f(leg).p99));
        match &remote {
            Some(remote) => format!("{} (remote engine: {})", one(&local), one(remote)),
            None => one(&local),
        }
    };
    record(Figure::reference(
        "egress question: press → first byte, p50 / p99",
        &both(|l| &l.presses),
        &format!("(floor: inject + query {:.1} ms; Telegram fixture, pool)", ms(local.floor.p50)),
    ));
    record(Figure::reference(
        "subagent step through the egress (fetch + model call), p50 / p99",
        &both(|l| &l.steps),
        "(local proxy; remote: through the egress node)",
    ));
}

/// Both figures with the pool at `place`: a daemon of its own, its pool and network removed
/// after.
async fn leg(docker: &bollard::Docker, place: Place<'_>) -> Leg {
    let run = format!("nxb-ap-{}-{}", std::process::id(), matches!(place, Place::Remote(_)));
    let _cleanup =
        DockerCleanup::default().label(nexbot_docker::spec::LABEL_POOL, &run).network(&run);
    let tg = TelegramFixture::start().await;
    let (server, seen) =
        nexbot_tests::egress::http_server_at(nexbot_tests::egress::host_address_off_network())
            .await;
    let llm = ScriptedLlm::start(vec![]).await;
    let url = format!("http://{server}/hello");
    llm.set_responder(move |body| match (is_main(body), after_tool(body)) {
        (true, false) if last_user(body).contains("chain") => {
            Step::tool_call("delegate_to_sub_agent", json!({ "task": CHAIN_TASK }))
        }
        (true, false) => Step::tool_call("delegate_to_sub_agent", json!({ "task": "fetch it" })),
        (false, _) if body.to_string().contains(CHAIN_TASK) && tool_results(body) < CHAIN => {
            Step::tool_call("web_fetch", json!({ "url": url }))
        }
        (false, false) => Step::tool_call("web_fetch", json!({ "url": url })),
        (_, true) => Step::text("done"),
    });
    let workspace = Workspace::init(NEXBOT.as_str(), &format!("{run}-workspace"));
    let env = vec![
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
    let env = env.into_iter().map(|(name, value)| (name.to_owned(), value));
    let remote = match place {
        Place::Local => Vec::new(),
        Place::Remote(host) => host.daemon_env(),
    };
    let daemon = Daemon::spawn(NEXBOT.as_str(), &workspace.config(), env.chain(remote));
    daemon.wait_log("the Telegram channel is on", LIMIT).await;
    println!(
        "Egress question answered in Telegram ({place}): {bin}, mode ask, pool of 2, \
         instant scripted LLM, {ROUNDS} rounds",
        place = place.name(),
        bin = NEXBOT.as_str()
    );

    let done =
        |n: usize| move |m: &[BotMessage]| m.iter().filter(|m| m.text == "done").count() >= n;
    let mut presses = Vec::new();
    let mut floor = Vec::new();
    for round in 0..=ROUNDS {
        tg.user_says(OWNER, OWNER, &format!("fetch {round}")).await;
        let asked = question(&tg, round).await;
        // The last round allows the destination for the chat: the chain below goes unasked.
        let label = if round == ROUNDS { "Always for this chat" } else { "Allow once" };
        let (_, data) = asked
            .buttons()
            .into_iter()
            .find(|(l, _)| l == label)
            .unwrap_or_else(|| panic!("a {label} button"));
        let before = seen.lock().unwrap().len();
        assert_eq!(before, round, "held: the request waits for the answer");
        let start = Instant::now();
        tg.user_clicks(OWNER, OWNER, asked.message_id, &data).await;
        let arrived = arrival(&seen, before, &daemon, &tg).await;
        tg.wait_bot_messages(OWNER, done(round + 1), LIMIT).await;
        if round == ROUNDS {
            break;
        }
        presses.push(arrived - start);
        // The floor: a stranger's press (refused, decides nothing) and one fixture query.
        let start = Instant::now();
        tg.user_clicks(OWNER, STRANGER, asked.message_id, &data).await;
        let _ = tg.calls("getMe").await;
        floor.push(start.elapsed());
    }
    // One task's chain of fetches: from one arrival to the next.
    let first = seen.lock().unwrap().len();
    tg.user_says(OWNER, OWNER, "chain").await;
    let mut last = arrival(&seen, first, &daemon, &tg).await;
    let mut steps = Vec::new();
    for n in 1..CHAIN {
        let now = arrival(&seen, first + n, &daemon, &tg).await;
        steps.push(now - last);
        last = now;
    }
    tg.wait_bot_messages(OWNER, done(ROUNDS + 2), LIMIT).await;
    let leg = Leg { presses: Stats::of(presses), floor: Stats::of(floor), steps: Stats::of(steps) };
    println!(
        "  {}",
        leg.presses.line("press Allow once → held request's first byte at the server")
    );
    println!("  {}", leg.floor.line("measurement floor (inject a press + one fixture query)"));
    println!("  {}", leg.steps.line("a subagent step through the egress (fetch + model call)"));
    daemon.stop(LIMIT).await;
    let _ = nexbot_docker::remove_network(docker, &run).await;
    leg
}
