//! `make bench`: the host daemon's idle memory with a pool of 4, measured on the real release
//! `nexbot serve` (a workspace from `nexbot init`, the LLM pointing at the scripted server, the
//! subagent pool on a bench-only network), from `/proc/<pid>/status` once the pool is ready and
//! the daemon has sat idle. Then SIGTERM, a clean exit and no container left are checked.
//! Prints figures (and hands the headline one to the final summary); asserts nothing about size.

// The daemon's tests and benches drive `nexbot` (and docker, kill) as processes; the crate's
// clippy config refuses that to the daemon's own code only.
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use nexbot_tests::bench::{
    containers_labelled, proc_status_kib, record, DockerCleanup, Figure, Target,
};
use nexbot_tests::daemon::{Daemon, Workspace, READY};
use nexbot_tests::scripted_llm::{ScriptedLlm, Step};

/// The daemon benched: the images' static binary under `make bench`, else this build's.
static NEXBOT: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| nexbot_tests::bench::daemon_binary(env!("CARGO_BIN_EXE_nexbot")));
const IMAGE: &str = "nexbot-subagent:dev";
const POOL_SIZE: usize = 4;
/// How long the daemon sits idle, pool ready, before its memory is read.
const IDLE: Duration = Duration::from_secs(5);
/// Every wait in this bench is bounded.
const LIMIT: Duration = Duration::from_secs(60);

/// The memory fields of `/proc/<pid>/status`, in KiB.
#[derive(Debug, Default)]
struct Memory {
    rss: u64,
    anon: u64,
    file: u64,
    hwm: u64,
    threads: u64,
}

fn memory(pid: u32) -> Option<Memory> {
    let field = |name: &str| proc_status_kib(pid, name);
    Some(Memory {
        rss: field("VmRSS:")?,
        anon: field("RssAnon:")?,
        file: field("RssFile:")?,
        hwm: field("VmHWM:")?,
        threads: field("Threads:")?,
    })
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let docker = bollard::Docker::connect_with_local_defaults().expect("Docker engine");
    docker.ping().await.expect("the Docker engine answers (is dockerd running?)");
    docker.inspect_image(IMAGE).await.expect("image nexbot-subagent:dev (`make image`)");
    let run = format!("nxb-{}", std::process::id());
    let pool_name = format!("{run}-serve");
    let network = format!("{run}-serve-net");
    let _cleanup = DockerCleanup::default()
        .label(nexbot_docker::spec::LABEL_POOL, &pool_name)
        .network(&network);
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(|_| Step::text("ok"));

    let workspace = Workspace::init(NEXBOT.as_str(), &format!("{run}-workspace"));
    let pool_size = POOL_SIZE.to_string();
    let env = [
        ("NEXBOT_LLM__BASE_URL", llm.base_url()),
        ("NEXBOT_LLM__MODEL", "scripted".to_owned()),
        ("NEXBOT_SUBAGENT__ENABLED", "true".to_owned()),
        ("NEXBOT_SUBAGENT__POOL_SIZE", pool_size),
        ("NEXBOT_SUBAGENT__POOL_NAME", pool_name.clone()),
        ("NEXBOT_SUBAGENT__NETWORK", network.clone()),
    ];
    println!(
        "nexbot serve idle memory: {bin}\n  workspace from `nexbot init`, \
         default config except pool size {POOL_SIZE}, pool name and network (bench-only), LLM = \
         scripted server; log level info.\n  The egress proxy and LLM relay run (as in every \
         `serve` with the sandbox), the firewall too when the bench runs as root. Telegram is off \
         here (no token): the Telegram bench measures the RSS with it polling.",
        bin = NEXBOT.as_str()
    );
    let started = Instant::now();
    let daemon = Daemon::spawn(NEXBOT.as_str(), &workspace.config(), env);
    let pid = daemon.pid();
    daemon.wait_log(READY, LIMIT).await;
    let serving_after = started.elapsed();
    let running = containers_running(&docker, &pool_name).await;
    println!(
        "  serving after {:.2} s, {running} running container(s) labelled {}={pool_name}",
        serving_after.as_secs_f64(),
        nexbot_docker::spec::LABEL_POOL
    );
    assert_eq!(running, POOL_SIZE, "the pool is not all running");

    tokio::time::sleep(IDLE).await;
    let mut samples = Vec::new();
    for _ in 0..3 {
        samples.push(memory(pid).expect("read /proc/<pid>/status of nexbot serve"));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let idle = samples.into_iter().max_by_key(|m| m.rss).expect("a sample");
    println!(
        "  idle ({} s after ready): VmRSS {:.2} MB ({} KiB: {} anonymous, {} file-backed), peak \
         VmHWM {} KiB, {} threads",
        IDLE.as_secs(),
        idle.rss as f64 * 1024.0 / 1e6,
        idle.rss,
        idle.anon,
        idle.file,
        idle.hwm,
        idle.threads
    );

    let stopped = Instant::now();
    // `stop` asserts the clean exit (the log is in its panic otherwise).
    let log = daemon.stop(LIMIT).await;
    let left = containers_labelled(nexbot_docker::spec::LABEL_POOL, &pool_name);
    println!(
        "  SIGTERM: a clean exit after {:.2} s; containers left: {}",
        stopped.elapsed().as_secs_f64(),
        left.len()
    );
    if !left.is_empty() {
        println!("  log of the run:\n    {}", log.replace('\n', "\n    "));
    }
    let _ = nexbot_docker::remove_network(&docker, &network).await;

    record(Figure::promised(
        &format!("host idle RSS, `nexbot serve` + pool of {POOL_SIZE}"),
        idle.rss as f64 * 1024.0 / 1e6,
        "MB",
        Target::AtMost(15.0),
    ));
    record(Figure::reference(
        "  of which private (RssAnon) / shared file pages",
        &format!(
            "{:.2} / {:.2} MB",
            idle.anon as f64 * 1024.0 / 1e6,
            idle.file as f64 * 1024.0 / 1e6
        ),
        &format!("(clean exit on SIGTERM, containers left: {})", left.len()),
    ));
}

async fn containers_running(docker: &bollard::Docker, pool: &str) -> usize {
    let label = format!("{}={pool}", nexbot_docker::spec::LABEL_POOL);
    let filters = std::collections::HashMap::from([
        ("label", vec![label.as_str()]),
        ("status", vec!["running"]),
    ]);
    let options = bollard::query_parameters::ListContainersOptionsBuilder::default()
        .filters(&filters)
        .build();
    docker.list_containers(Some(options)).await.expect("list containers").len()
}
