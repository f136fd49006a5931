//! `make bench`: the scheduler's own overhead.
//!
//! 1. 1,000 one-shot jobs due in the same second, in the real `App` (SQLite, agent, scripted
//!    LLM answering at once): the delay from each job's due time to the moment its run was
//!    handed to the worker queue (`job_runs.handed_at_ms`), p50/p99.
//! 2. The release `nexbot serve`'s resident memory, idle, with 0 and with 10,000 stored jobs
//!    (delegation off: the pool is measured by `serve_idle`).
//!
//! Prints figures and hands the headline ones to the final summary; asserts nothing about
//! speed or size.

// The daemon's tests and benches drive `nexbot` (and docker, kill) as processes; the crate's
// clippy config refuses that to the daemon's own code only.
#![allow(clippy::disallowed_methods)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use nexbot_core::{ChannelKind, ChatRef};
use nexbot_host::app::App;
use nexbot_host::channels::console::ConsoleChannel;
use nexbot_host::config::Config;
use nexbot_host::scheduler::jobs::{Missed, NewJob};
use nexbot_host::scheduler::{create_job, JobSpec};
use nexbot_host::store::{unix_now, Store};
use nexbot_tests::bench::{proc_status_kib, record, Figure, Stats, Target};
use nexbot_tests::daemon::{Daemon, Workspace};
use nexbot_tests::scripted_llm::{ScriptedLlm, Step};

/// The daemon benched: the images' static binary under `make bench`, else this build's.
static NEXBOT: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| nexbot_tests::bench::daemon_binary(env!("CARGO_BIN_EXE_nexbot")));
const DUE_JOBS: usize = 1_000;
const STORED_JOBS: usize = 10_000;
const LIMIT: Duration = Duration::from_secs(120);
const IDLE: Duration = Duration::from_secs(5);

fn workspace(tag: &str) -> Workspace {
    Workspace::init(NEXBOT.as_str(), &format!("nxb-sched-{tag}-{}", std::process::id()))
}

fn env(llm: &ScriptedLlm) -> Vec<(String, String)> {
    [
        ("NEXBOT_LLM__BASE_URL", llm.base_url()),
        ("NEXBOT_LLM__MODEL", "scripted".to_owned()),
        ("NEXBOT_SUBAGENT__ENABLED", "false".to_owned()),
        ("NEXBOT_SCHEDULER__WORKERS", "8".to_owned()),
        ("NEXBOT_SCHEDULER__QUEUE", "2000".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

async fn handoff(llm: &ScriptedLlm) {
    let workspace = workspace("due");
    let dir = workspace.dir();
    let text = std::fs::read_to_string(workspace.config()).unwrap();
    let config = Config::from_parts(&text, &workspace.config(), dir, env(llm)).unwrap();
    let mut app = App::start(&config).await.expect("app");
    let (console, mut out) = ConsoleChannel::new(4096);
    app.add_channel(ChannelKind::Console, Arc::new(console));
    tokio::spawn(async move { while out.recv().await.is_some() {} });
    // Created ahead, all due at the start of one second.
    let due = unix_now() + 15;
    let at = chrono::DateTime::from_timestamp(due, 0).unwrap().to_rfc3339();
    let mut ids = Vec::with_capacity(DUE_JOBS);
    for i in 0..DUE_JOBS {
        let spec = JobSpec { task: "noop".into(), at: Some(at.clone()), ..JobSpec::default() };
        let chat = ChatRef::console(&format!("bench{i}")).unwrap();
        ids.push(create_job(app.store(), &chat, spec, chrono_tz::Tz::UTC).await.unwrap().id);
    }
    assert!(unix_now() < due, "creating the jobs took too long");
    let started = Instant::now();
    let delays = loop {
        let runs = app.store().job_runs(None, (DUE_JOBS * 2) as i64).await.unwrap();
        let handed: Vec<i64> = runs.iter().filter_map(|r| r.handed_at_ms).collect();
        if handed.len() >= DUE_JOBS {
            break handed
                .iter()
                .map(|ms| Duration::from_millis((ms - due * 1000).max(0) as u64))
                .collect::<Vec<_>>();
        }
        assert!(started.elapsed() < LIMIT, "only {} of {DUE_JOBS} runs handed over", handed.len());
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let stats = Stats::of(delays);
    println!("{}", stats.line("due → handed to the worker queue (1,000 in one second)"));
    record(Figure::promised(
        "scheduler: 1,000 jobs due in one second, due → handed over p50",
        stats.p50.as_secs_f64() * 1e3,
        "ms",
        Target::AtMost(1000.0),
    ));
    record(Figure::promised(
        "scheduler: 1,000 jobs due in one second, due → handed over p99",
        stats.p99.as_secs_f64() * 1e3,
        "ms",
        Target::AtMost(1000.0),
    ));
    app.stop().await;
}

/// Idle RSS (KiB) of `nexbot serve` on `workspace`.
async fn serve_rss(workspace: &Workspace, llm: &ScriptedLlm) -> u64 {
    let daemon = Daemon::serve(NEXBOT.as_str(), &workspace.config(), env(llm), LIMIT).await;
    tokio::time::sleep(IDLE).await;
    let rss = proc_status_kib(daemon.pid(), "VmRSS:").expect("VmRSS");
    daemon.stop(LIMIT).await;
    rss
}

async fn memory(llm: &ScriptedLlm) {
    let empty = workspace("rss0");
    let base = serve_rss(&empty, llm).await;
    let full = workspace("rss10k");
    {
        let store = Store::open(&full.database()).await.unwrap();
        let next = unix_now() + 30 * 86_400;
        for i in 0..STORED_JOBS {
            store
                .add_job(NewJob {
                    chat: ChatRef::Telegram(1_000 + (i % 500) as i64),
                    name: format!("job {i}"),
                    task: format!("check item {i} and report anything unusual"),
                    cron: Some(format!("0 {} {} * * *", i % 60, i % 24)),
                    at: None,
                    time_zone: "Europe/Berlin".into(),
                    missed: Missed::Skip,
                    next_run: Some(next),
                    heartbeat: false,
                    created_by: Default::default(),
                    token_budget: None,
                    origin: None,
                })
                .await
                .unwrap();
        }
    }
    let with_jobs = serve_rss(&full, llm).await;
    println!(
        "nexbot serve idle RSS (delegation off): {:.1} MiB with no jobs, {:.1} MiB with {STORED_JOBS} stored jobs",
        base as f64 / 1024.0,
        with_jobs as f64 / 1024.0
    );
    record(Figure::reference(
        "scheduler: serve idle RSS with 0 stored jobs (delegation off)",
        &format!("{:.1} MiB", base as f64 / 1024.0),
        "reference",
    ));
    record(Figure::promised(
        "scheduler: serve idle RSS with 10,000 stored jobs (delegation off)",
        with_jobs as f64 / 1024.0,
        "MiB",
        Target::AtMost(base as f64 / 1024.0 + 16.0),
    ));
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    println!("scheduler overhead (load average {})", nexbot_tests::bench::load_average());
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(|_| Step::text("ok"));
    handoff(&llm).await;
    memory(&llm).await;
}
