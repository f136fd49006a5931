//! `make bench`: `nexbot-ctl subagents ps` end to end (process start, socket, JSON, table)
//! against the release `nexbot serve` with a pool of 8, next to the obvious alternative in the
//! same run (`docker ps` filtered by the pool's label), and the `/metrics` scrape time (the
//! client in process). Prints figures; asserts nothing about speed.
//!
//! The daemon is `target/release/nexbot`, built by the host's benches that `make bench` runs
//! first (or `cargo build --release -p nexbot-host`).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nexbot_tests::bench::{ms, record, DockerCleanup, Figure, Stats, Target};
use nexbot_tests::daemon::{Daemon, Workspace};
use nexbot_tests::scripted_llm::{ScriptedLlm, Step};

const CTL: &str = env!("CARGO_BIN_EXE_nexbot-ctl");
const POOL: usize = 8;
const ROUNDS: usize = 50;
const LIMIT: Duration = Duration::from_secs(120);

fn daemon_binary() -> PathBuf {
    let ctl = PathBuf::from(CTL);
    let nexbot = ctl.with_file_name("nexbot");
    assert!(
        nexbot.is_file(),
        "{} is missing: build it first (cargo build --release -p nexbot-host)",
        nexbot.display()
    );
    nexbot
}

fn timed(mut command: Command) -> (Duration, String) {
    let start = Instant::now();
    let out = command.stderr(Stdio::inherit()).output().expect("run");
    let took = start.elapsed();
    assert!(out.status.success(), "{command:?} failed");
    (took, String::from_utf8_lossy(&out.stdout).into_owned())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let run = format!("nxb-ctl-{}", std::process::id());
    let _cleanup = DockerCleanup::default().label("nexbot.pool", &run).network(&run);
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(|_| Step::text("ok"));
    let nexbot = daemon_binary();
    let workspace = Workspace::init(&nexbot, &format!("{run}-workspace"));
    let env = [
        ("NEXBOT_LLM__BASE_URL", llm.base_url()),
        ("NEXBOT_SUBAGENT__POOL_SIZE", POOL.to_string()),
        ("NEXBOT_SUBAGENT__POOL_NAME", run.clone()),
        ("NEXBOT_SUBAGENT__NETWORK", run.clone()),
        ("NEXBOT_EGRESS__PORT", "0".into()),
    ];
    let daemon = Daemon::spawn(&nexbot, &workspace.config(), env);
    let socket = workspace.socket();
    let client = nexbot_control::Client::new(&socket);
    let start = Instant::now();
    loop {
        let ready = client
            .get::<nexbot_control::SubagentList>(nexbot_control::paths::SUBAGENTS)
            .await
            .is_ok_and(|l| l.subagents.iter().filter(|s| s.state == "idle").count() == POOL);
        if ready {
            break;
        }
        assert!(start.elapsed() < LIMIT, "the pool of {POOL} did not become ready");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Let the health checks record a ping and the memory of each container.
    tokio::time::sleep(Duration::from_secs(12)).await;
    println!("nexbot-ctl subagents ps: release {CTL}, pool of {POOL}, {ROUNDS} runs each");

    let ctl = || {
        let mut c = Command::new(CTL);
        c.arg("--socket").arg(&socket).args(["subagents", "ps"]);
        c
    };
    let (_, table) = timed(ctl());
    println!("{table}");
    let docker = || {
        let mut c = Command::new("docker");
        c.args(["ps", "--filter", &format!("label=nexbot.pool={run}")]);
        c
    };
    let mut ps = Vec::new();
    let mut alternative = Vec::new();
    for _ in 0..ROUNDS {
        ps.push(timed(ctl()).0);
        alternative.push(timed(docker()).0);
    }
    let mut scrapes = Vec::new();
    let mut size = 0;
    for _ in 0..ROUNDS {
        let start = Instant::now();
        let text = client.get_text(nexbot_control::paths::METRICS).await.expect("metrics");
        scrapes.push(start.elapsed());
        size = text.len();
    }
    let (ps, alternative, scrapes) = (Stats::of(ps), Stats::of(alternative), Stats::of(scrapes));
    println!("  {}", ps.line("nexbot-ctl subagents ps (end to end)"));
    println!("  {}", alternative.line("alternative: docker ps --filter label (same pool)"));
    println!("  {}", scrapes.line(&format!("GET /metrics ({size} bytes)")));
    daemon.stop(LIMIT).await;

    record(Figure::promised(
        &format!("`nexbot-ctl subagents ps`, pool of {POOL}, p50"),
        ms(ps.p50),
        "ms",
        Target::AtMost(20.0),
    ));
    record(Figure::reference(
        "  p99 / alternative `docker ps --filter` p50",
        &format!("{:.1} / {:.1} ms", ms(ps.p99), ms(alternative.p50)),
        "(same run, same pool)",
    ));
    record(Figure::reference(
        "`GET /metrics` scrape p50 / p99",
        &format!("{:.2} / {:.2} ms", ms(scrapes.p50), ms(scrapes.p99)),
        &format!("({size} bytes, pool of {POOL})"),
    ));
}
