//! `make bench`: what the warm pool buys over a container per task, measured in one run on
//! this machine against the real engine, each headline figure next to the target the project
//! promises (handed to the final summary). Prints figures; asserts nothing about speed.
//!
//! - pool start: `Pool::start` until all N containers have answered a ping — first with the
//!   internal network absent (the pool creates it), then with it already there (a restart);
//!   and a pool of one, to show what starting four at once costs on this machine;
//! - the floor: one line echoed through an attached busybox `cat` of the same image, and a
//!   ping answered by a subagent attached directly (no pool);
//! - warm `ping` round trips through the pool to one container;
//! - a real one-step `execute` against the scripted LLM on the network's gateway; its overhead
//!   is the end-to-end time minus the LLM server's own handling time, which the fixture records.
//!   Measured on the pool as deployed (default `PoolConfig`, so containers are recycled every
//!   100 tasks, in the middle of the run) and again on a pool that never recycles, together
//!   with an `execute` the subagent refuses at once (no LLM settings): the dispatch path alone;
//! - the alternative, in the same run: a fresh `docker run --rm -i` per request, for a ping and
//!   for the same one-step task;
//! - the subagent's idle memory inside its container (VmRSS of the process, read with
//!   `docker exec` from /proc; the cgroup figure of `docker stats` is printed beside it) after
//!   pings only and after serving tasks, and the image's size.
//!
//! - the clean room between tasks, two designs side by side on pools of the same size, with
//!   the same instant one-step task: **scrubbed reuse** (the default: the subagent kills every
//!   other process and empties its folders after each task, the pool reuses a container it
//!   reports clean) and **single use** (`max_tasks_per_container = 1`: every task gets a fresh
//!   container, replaced behind it). For each: sustained tasks/s with as many tasks in flight
//!   as containers, end-to-end latency p50/p99, the machine's CPU per task (all processes,
//!   from `/proc/stat`: dockerd and containerd included), and a burst of 3× the pool size
//!   submitted at once (time until the last answer).
//!
//! - rooms (a container serves one chat only), on a pool of the same size that never
//!   recycles: a chat's next task on its own warm container (dispatch overhead p50/p99, next to
//!   the shared pool's above); a new chat's first task on a blank once the pool's blanks are
//!   gone (each blank taken makes another room's container give way, so a replacement starts
//!   beside the task); and 20 chats sending tasks round-robin with as many in flight as
//!   containers (sustained tasks/s, waits with no blank ready, containers started per second,
//!   and the longest stretch with tasks waiting and no blank ready, next to one container's
//!   start), next to the engine's own ceiling for that churn (bare create + start + remove of
//!   the pool's container, as many at once, on its network and with none). Then on a pool
//!   with more blanks than chats: each chat's first task while blanks last, and the same
//!   round-robin.
//!
//! - the same under gVisor (`runsc`) when the engine has it, each figure beside runc's
//!   (`pool/gvisor.rs`): start, warm ping, execute overhead, the scrub between tasks, one
//!   container's create to first pong, memory per warm container from the host's side, and
//!   the round-robin on a pool as large as the chats.
//!
//! - the same on a remote engine over mutual TLS (`pool/remote.rs`), each figure beside the
//!   local engine's: the image copied by id, start from cold, warm ping, the dispatch path
//!   and a new chat's first task.
//!
//! Sizes are in decimal megabytes (10^6 bytes), as `docker images` shows them; /proc's "kB"
//! are KiB and are converted.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use bollard::exec::{CreateExecOptions, StartExecResults};
use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, CreateContainerOptionsBuilder, RemoveContainerOptionsBuilder,
};
use bollard::Docker;
use futures_util::StreamExt;
use nexbot_docker::{Pool, PoolConfig, Room, TaskIo};
use nexbot_protocol::{Request, Response, ResponseBody, TaskFile};
use nexbot_tests::bench::{
    containers_labelled, load_average, ms, number, record, DockerCleanup, Figure, Stats, Target,
};
use nexbot_tests::scripted_llm::{ScriptedLlm, Step};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

#[path = "pool/gvisor.rs"]
mod gvisor;
#[path = "pool/remote.rs"]
mod remote;
#[path = "pool/warm.rs"]
mod warm;

/// The subagent image: `NEXBOT_TEST_IMAGE` (as the Docker tests read it), else the one
/// `make image` builds.
fn image_name() -> String {
    std::env::var("NEXBOT_TEST_IMAGE").unwrap_or_else(|_| "nexbot-subagent:dev".to_owned())
}
/// `NEXBOT_BENCH_SHORT=1`: CI's short form (`tests/run-suites.sh`): the floor, the warm ping
/// and the executes with and without recycling, fewer of each, their ratios to the floor, and
/// nothing else. It keeps the bench's code running and the ratios in every CI log.
fn short() -> bool {
    static SHORT: std::sync::LazyLock<bool> =
        std::sync::LazyLock::new(|| std::env::var_os("NEXBOT_BENCH_SHORT").is_some());
    *SHORT
}
/// `full`, or `short` in the short form.
fn count(full: usize, short_form: usize) -> usize {
    if short() {
        short_form
    } else {
        full
    }
}
/// `var` when it is set to a number (a profiler wants longer runs, see
/// `NEXBOT_BENCH_ONLY=warm`), else [`count`]`(full, short_form)`.
fn count_or(var: &str, full: usize, short_form: usize) -> usize {
    std::env::var(var).ok().and_then(|n| n.parse().ok()).unwrap_or_else(|| count(full, short_form))
}
/// Round trips per figure (`NEXBOT_BENCH_ROUNDS`).
fn round_trips() -> usize {
    count_or("NEXBOT_BENCH_ROUNDS", 2_000, 500)
}
const WARM_UP: usize = 200;
fn refused_executes() -> usize {
    count(500, 100)
}
/// Executes per run: in the short form still more than one container's task budget (100), so
/// the run with recycling recycles (`NEXBOT_BENCH_EXECUTES`).
fn executes() -> usize {
    count_or("NEXBOT_BENCH_EXECUTES", 300, 150)
}
const EXECUTE_WARM_UP: usize = 20;
const FRESH_PINGS: usize = 20;
const FRESH_EXECUTES: usize = 10;
const POOL_SIZE: usize = 4;
const POOL_STARTS: usize = 3;
/// Labels every container this bench creates outside the pool (which labels its own).
const RUN_LABEL: &str = "nxb.run";
/// Every wait in this bench is bounded.
const LIMIT: Duration = Duration::from_secs(60);

// A bench's main reads as its measurement, top to bottom; split only by count it would not
// read better (test and bench code only: product functions stay under the limit).
#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::too_many_lines)]
async fn main() {
    let docker = Docker::connect_with_local_defaults().expect("Docker engine");
    docker.ping().await.expect("the Docker engine answers (is dockerd running?)");
    let image_name = image_name();
    let image = docker
        .inspect_image(&image_name)
        .await
        .unwrap_or_else(|e| panic!("image {image_name} (`make image`): {e}"));
    let run = format!("nxb-{}", std::process::id());
    let network = format!("{run}-net");
    let config = PoolConfig {
        name: format!("{run}-pool"),
        network: network.clone(),
        size: POOL_SIZE,
        image: image_name.clone(),
        ..PoolConfig::default()
    };
    let _cleanup = DockerCleanup::default()
        .label(nexbot_docker::spec::LABEL_POOL, &config.name)
        .label(RUN_LABEL, &run)
        .network(&network);
    // `NEXBOT_BENCH_ONLY=remote`: the remote engine's figures and the local ones beside them,
    // nothing else (what an operator runs to see what moving the sandboxes would cost).
    if std::env::var("NEXBOT_BENCH_ONLY").is_ok_and(|only| only == "remote") {
        if let Some(remote) = remote::run(&docker, &config).await {
            remote.record();
        }
        return;
    }
    // `NEXBOT_BENCH_ONLY=warm`: the warm figures alone, for the profiler (pool/warm.rs).
    if std::env::var("NEXBOT_BENCH_ONLY").is_ok_and(|only| only == "warm") {
        warm::run(&docker, &run, &config).await;
        return;
    }
    println!(
        "nexbot pool benchmark{}: {} round trips, {} executes, {FRESH_PINGS}+\
         {FRESH_EXECUTES} fresh runs; pool of {POOL_SIZE} with the default PoolConfig; load \
         average {}\n",
        if short() { " (short form)" } else { "" },
        round_trips(),
        executes(),
        load_average()
    );

    // Pool start: the first with no network (Pool::start creates it), then with it existing.
    let _ = nexbot_docker::remove_network(&docker, &network).await;
    let mut starts = Vec::new();
    for i in 0..count(POOL_STARTS, 1) {
        let started = Instant::now();
        let pool = Pool::start(docker.clone(), config.clone()).await.expect("pool starts");
        let took = started.elapsed();
        let created = pool.network().created;
        println!(
            "pool of {POOL_SIZE} ready, start {} (network {})  {:>10.1} ms",
            i + 1,
            if created { "created by this start" } else { "already there" },
            ms(took)
        );
        starts.push((took, created));
        pool.shutdown().await.expect("shutdown");
    }

    // For the breakdown: one container alone, to see what starting four at once costs here.
    let single = PoolConfig { size: 1, ..config.clone() };
    let started = Instant::now();
    let pool = Pool::start(docker.clone(), single).await.expect("pool of 1 starts");
    let single_start = started.elapsed();
    println!("pool of 1 ready (network already there)          {:>10.1} ms", ms(single_start));
    pool.shutdown().await.expect("shutdown");

    let echo = bare_attach(&docker, &run, Bare::Cat, ECHO_LINE).await;
    println!("{}", echo.line("bare attach: line echoed by busybox cat (floor)"));
    let unlogged = bare_attach(&docker, &run, Bare::CatUnlogged, ECHO_LINE).await;
    println!("{}", unlogged.line(FLOOR_UNLOGGED));
    let bare_ping = bare_attach(&docker, &run, Bare::Subagent, PING_LINE).await;
    println!("{}", bare_ping.line("bare attach: subagent ping (no pool)"));

    let pool = Pool::start(docker.clone(), config.clone()).await.expect("pool starts");
    let gateway = pool.network().gateway;
    let ping = warm_pings(&pool).await;
    println!("{}", ping.line("warm pool ping"));

    tokio::time::sleep(Duration::from_secs(2)).await;
    let fresh_memory = subagent_memory(&docker, &pool, false).await;
    println!("subagent idle memory, container that only answered pings: {}", fresh_memory.text());

    let llm = ScriptedLlm::start_on(SocketAddr::new(gateway, 0), vec![]).await;
    llm.set_responder(|_| Step::text("done"));
    let deployed = execute_run(&pool, &llm, gateway).await;
    deployed.print("warm pool execute (default recycling)", config.max_tasks_per_container);

    tokio::time::sleep(Duration::from_secs(2)).await;
    let served_memory = subagent_memory(&docker, &pool, true).await;
    println!("subagent idle memory, container that served tasks: {}", served_memory.text());
    let runc_memory = gvisor::host_view(&pool);
    pool.shutdown().await.expect("shutdown");
    let left = containers_labelled(nexbot_docker::spec::LABEL_POOL, &config.name);
    println!("containers of the pool left after shutdown: {}", left.len());

    // The same tasks on a pool that never recycles: the steady state between recycles, and
    // the pool's dispatch path alone (an `execute` the subagent refuses at once).
    let steady_config = PoolConfig { max_tasks_per_container: u64::MAX, ..config.clone() };
    let pool = Pool::start(docker.clone(), steady_config).await.expect("pool starts");
    let mut refused = Vec::with_capacity(refused_executes());
    for i in 0..refused_executes() {
        let request = Request::execute(format!("refused-{i}"), "no LLM settings");
        let t = Instant::now();
        let answer = tokio::time::timeout(LIMIT, pool.execute(request, CancellationToken::new()))
            .await
            .expect("execute answered in time")
            .expect("execute");
        refused.push(t.elapsed());
        assert!(
            matches!(&answer.body, ResponseBody::Error { error, .. } if error.contains("LLM not initialized")),
            "{answer:?}"
        );
    }
    let refused = Stats::of(refused);
    println!("{}", refused.line("execute refused at once (no LLM): dispatch only"));
    let steady = execute_run(&pool, &llm, gateway).await;
    steady.print("warm pool execute (no recycling)", u64::MAX);
    if short() {
        let next = next_tasks(&pool, &llm, gateway).await;
        pool.shutdown().await.expect("shutdown");
        println!("{}", against_floor(&echo, &ping, &deployed, &steady, &next));
        return;
    }
    let (with_file, without_file) = file_runs(&pool, &llm, gateway).await;
    pool.shutdown().await.expect("shutdown");

    // The clean room: scrubbed reuse (default) against single use, same tasks, same size.
    let mut isolation = Vec::new();
    for (design, max_tasks) in [("scrubbed reuse", u64::MAX), ("single use", 1)] {
        let config = PoolConfig { max_tasks_per_container: max_tasks, ..config.clone() };
        let pool = Pool::start(docker.clone(), config).await.expect("pool starts");
        let sustained = throughput(&pool, &llm, gateway, SUSTAINED_TASKS, POOL_SIZE, design).await;
        let burst = throughput(&pool, &llm, gateway, 3 * POOL_SIZE, 3 * POOL_SIZE, design).await;
        println!(
            "{}",
            sustained.line(&format!("{design}: {SUSTAINED_TASKS} tasks, {POOL_SIZE} in flight"))
        );
        println!("{}", burst.line(&format!("{design}: burst of {} at once", 3 * POOL_SIZE)));
        isolation.push((design, sustained, burst));
        pool.shutdown().await.expect("shutdown");
    }

    let rooms = rooms_run(&docker, &config, &llm, gateway).await;

    let gvisor = gvisor::run(&docker, &config, &llm, gateway).await;
    let remote = remote::run(&docker, &config).await;

    let fresh_ping = fresh_runs(&run, FRESH_PINGS, None).await;
    println!("{}", fresh_ping.answer.line("fresh `docker run --rm -i`: ping answered"));
    println!("{}", fresh_ping.exit.line("fresh `docker run --rm -i`: ping, container gone"));
    let fresh_execute = fresh_runs(&run, FRESH_EXECUTES, Some((&llm, gateway, &network))).await;
    println!("{}", fresh_execute.answer.line("fresh `docker run --rm -i`: execute answered"));
    let fresh_overhead = Stats::of(fresh_execute.overhead.clone());
    println!("{}", fresh_overhead.line("  overhead = answered − LLM handling"));
    drop(llm);

    let image_mb = image.size.unwrap_or_default() as f64 / 1e6;
    println!("image {image_name}: {image_mb:.1} MB ({} bytes)", image.size.unwrap_or_default());
    let _ = nexbot_docker::remove_network(&docker, &network).await;
    println!("load average at the end: {}\n", load_average());

    println!("{}", against_floor(&echo, &ping, &deployed, &steady, &rooms.next));
    let ratio = fresh_ping.answer.p50.as_secs_f64() / ping.p50.as_secs_f64();
    record(Figure::promised("warm-pool ping p50", ms(ping.p50), "ms", Target::AtMost(0.4)));
    record(Figure::promised("warm-pool ping p99", ms(ping.p99), "ms", Target::AtMost(2.0)));
    record(Figure::reference(
        "  alternative: fresh `docker run --rm -i` ping p50",
        &format!("{} ms", number(ms(fresh_ping.answer.p50))),
        "(container per task)",
    ));
    record(Figure::promised(
        "  ratio fresh / warm ping (p50)",
        ratio,
        "×",
        Target::AtLeast(1000.0),
    ));
    record(Figure::reference(
        "  floor: line echoed by attached `cat` p50 / p99",
        &format!("{} / {} ms", number(ms(echo.p50)), number(ms(echo.p99))),
        "(~0.27 / 1 ms seen here)",
    ));
    record(Figure::reference(
        "  the same `cat` with no log driver (as the pool's) p50 / p99",
        &format!("{} / {} ms", number(ms(unlogged.p50)), number(ms(unlogged.p99))),
        "(the engine copies no line to disk)",
    ));
    record(Figure::promised(
        "  warm ping p50 / the floor's p50",
        ms(ping.p50) / ms(echo.p50),
        "×",
        Target::AtMost(FLOOR_RATIO),
    ));
    for (i, (took, created)) in starts.iter().enumerate() {
        let network = if *created { "network created" } else { "network existed" };
        record(Figure::promised(
            &format!("pool of {POOL_SIZE} ready from cold, start {} ({network})", i + 1),
            ms(*took),
            "ms",
            Target::AtMost(1000.0),
        ));
    }
    let overhead = &deployed.overhead;
    record(Figure::reference(
        "  pool of 1 ready (network existed)",
        &format!("{} ms", number(ms(single_start))),
        "(one container alone, for comparison)",
    ));
    record(Figure::promised("execute overhead p50", ms(overhead.p50), "ms", Target::AtMost(2.0)));
    record(Figure::promised("execute overhead p99", ms(overhead.p99), "ms", Target::AtMost(5.0)));
    record(Figure::reference(
        &format!("  execute end to end p50 / p99 (n={})", executes()),
        &format!(
            "{} / {} ms",
            number(ms(deployed.end_to_end.p50)),
            number(ms(deployed.end_to_end.p99))
        ),
        &format!("(LLM's own p50 {} ms)", number(ms(deployed.llm.p50))),
    ));
    record(Figure::reference(
        "  execute overhead p50 / p99 without recycling",
        &format!("{} / {} ms", number(ms(steady.overhead.p50)), number(ms(steady.overhead.p99))),
        "(max_tasks_per_container = ∞)",
    ));
    if let Some(g) = &gvisor {
        g.record(&gvisor::Runc {
            start: starts.last().map(|s| s.0).unwrap_or_default(),
            ping: &ping,
            execute: &deployed,
            memory: runc_memory,
            round_robin: &rooms.large,
        });
    }
    if let Some(remote) = &remote {
        remote.record();
    }
    record(Figure::reference(
        "  alternative: fresh `docker run` execute overhead p50",
        &format!("{} ms", number(ms(fresh_overhead.p50))),
        "(container per task)",
    ));
    for (name, memory) in [
        ("subagent idle RSS in container (pings only)", &fresh_memory),
        ("subagent idle RSS in container (after tasks)", &served_memory),
    ] {
        match (memory.vm_rss_kib, memory.anon_kib, memory.file_kib) {
            (Some(rss), Some(anon), Some(file)) => {
                record(Figure::promised(name, mb(rss), "MB", Target::AtMost(5.0)));
                record(Figure::reference(
                    "  of which private (RssAnon) / file-backed",
                    &format!("{} / {} MB", number(mb(anon)), number(mb(file))),
                    &format!("(VmRSS = {} MiB)", number(rss as f64 / 1024.0)),
                ));
            }
            _ => record(Figure::reference(name, "not measured", "≤ 5 MB")),
        }
    }
    rooms.record(&steady, single_start);
    // 20 MB since the image carries `pdftotext` (issue 29: "the image target stays ≤ 20 MB").
    record(Figure::promised("subagent image size", image_mb, "MB", Target::AtMost(20.0)));
    let transfer = with_file.p50.saturating_sub(without_file.p50);
    record(Figure::reference(
        "a 5 MB file into a task's scratch, task end to end p50",
        &format!("{} ms", number(ms(with_file.p50))),
        &format!(
            "(the same task without a file: {} ms; p99 {} / {} ms)",
            number(ms(without_file.p50)),
            number(ms(with_file.p99)),
            number(ms(without_file.p99))
        ),
    ));
    record(Figure::reference(
        "  the transfer's cost (p50 difference)",
        &format!("{} ms", number(ms(transfer))),
        &format!(
            "({} MB/s over the task's own link: base64 chunks of 512 KiB)",
            number(FILE_BYTES as f64 / 1_048_576.0 / transfer.as_secs_f64().max(1e-6))
        ),
    ));
    for (design, sustained, burst) in &isolation {
        let promised = *design == "scrubbed reuse";
        let tasks_per_s = sustained.tasks_per_s();
        if promised {
            record(Figure::promised(
                "clean-room tasks/s sustained (scrubbed reuse)",
                tasks_per_s,
                "tasks/s",
                Target::AtLeast(5.0),
            ));
        } else {
            record(Figure::reference(
                "  alternative: single use, tasks/s sustained",
                &format!("{} tasks/s", number(tasks_per_s)),
                "(a fresh container per task)",
            ));
        }
        record(Figure::reference(
            &format!("  {design}: latency p50 / p99, CPU per task"),
            &format!(
                "{} / {} ms, {} ms CPU",
                number(ms(sustained.latency.p50)),
                number(ms(sustained.latency.p99)),
                number(sustained.cpu_ms_per_task)
            ),
            &format!("(LLM instant; {} in flight)", POOL_SIZE),
        ));
        record(Figure::reference(
            &format!("  {design}: burst of {} at once, last answer after", 3 * POOL_SIZE),
            &format!("{} ms", number(ms(burst.wall))),
            &format!("(p99 {} ms)", number(ms(burst.latency.p99))),
        ));
    }
}

/// Tasks of one run of [`throughput`].
const SUSTAINED_TASKS: usize = 60;

/// What [`throughput`] measured.
struct Throughput {
    tasks: usize,
    wall: Duration,
    latency: Stats,
    /// Busy CPU time of the whole machine per task, in ms (`/proc/stat`).
    cpu_ms_per_task: f64,
}

impl Throughput {
    fn tasks_per_s(&self) -> f64 {
        self.tasks as f64 / self.wall.as_secs_f64()
    }

    fn line(&self, name: &str) -> String {
        format!(
            "{name}: {} tasks/s, latency p50 {} / p99 {} ms, {} ms CPU per task, {} ms in all",
            number(self.tasks_per_s()),
            number(ms(self.latency.p50)),
            number(ms(self.latency.p99)),
            number(self.cpu_ms_per_task),
            number(ms(self.wall))
        )
    }
}

/// Busy and total jiffies of all CPUs.
fn cpu_jiffies() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let fields: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    let total: u64 = fields.iter().sum();
    // idle + iowait are not busy.
    let idle = fields.get(3).copied().unwrap_or(0) + fields.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

/// Runs `tasks` one-step tasks keeping `in_flight` of them running at once; every task's
/// end-to-end latency, the wall time, and the machine's CPU per task.
async fn throughput(
    pool: &Pool,
    llm: &ScriptedLlm,
    gateway: IpAddr,
    tasks: usize,
    in_flight: usize,
    design: &str,
) -> Throughput {
    let tag: String = design.chars().filter(|c| c.is_ascii_alphanumeric()).collect();
    let semaphore = std::sync::Arc::new(tokio::sync::Semaphore::new(in_flight));
    let (busy_before, _) = cpu_jiffies();
    let started = Instant::now();
    let runs = (0..tasks).map(|i| {
        let semaphore = semaphore.clone();
        let request =
            one_step_task(&format!("{tag}-{i}-{}", started.elapsed().as_nanos()), llm, gateway);
        async move {
            let _permit = semaphore.acquire().await.expect("open");
            let t = Instant::now();
            let answer =
                tokio::time::timeout(LIMIT, pool.execute(request, CancellationToken::new()))
                    .await
                    .expect("execute answered in time")
                    .expect("execute");
            assert!(matches!(answer.body, ResponseBody::Success { .. }), "{answer:?}");
            t.elapsed()
        }
    });
    let latencies = futures_util::future::join_all(runs).await;
    let wall = started.elapsed();
    let (busy_after, _) = cpu_jiffies();
    // USER_HZ is 100 on Linux: a jiffy is 10 ms.
    let cpu_ms_per_task = (busy_after - busy_before) as f64 * 10.0 / tasks as f64;
    Throughput { tasks, wall, latency: Stats::of(latencies), cpu_ms_per_task }
}

/// KiB (as `/proc` counts them) to decimal megabytes, the unit the targets are given in.
fn mb(kib: u64) -> f64 {
    kib as f64 * 1024.0 / 1e6
}

const FLOOR_UNLOGGED: &str = "bare attach: the same cat, no log driver (as the pool's)";
const ECHO_LINE: &[u8] = b"{\"type\":\"ping\",\"id\":\"echo\"}\n";
/// A health ping, as the pool sends it: answered by a bare pong.
const PING_LINE: &[u8] = b"{\"type\":\"ping\",\"id\":\"p\",\"brief\":true}\n";

/// What a bare attached container runs, and whether the engine logs its lines.
#[derive(Clone, Copy, PartialEq)]
enum Bare {
    /// busybox `cat`, the engine's default log driver (json-file): the floor.
    Cat,
    /// The same `cat` without a log driver, as the pool's containers run.
    CatUnlogged,
    /// The subagent alone, without a log driver.
    Subagent,
}

/// Round trips of one line through a container attached directly (no pool): with `cat` as
/// the entrypoint the line comes back as it went; with the subagent, `line` is a request and
/// the round trip ends at its answer's newline on stdout.
async fn bare_attach(docker: &Docker, run: &str, bare: Bare, line: &[u8]) -> Stats {
    let cat = bare != Bare::Subagent;
    let host_config = (bare != Bare::Cat).then(|| bollard::models::HostConfig {
        log_config: Some(bollard::models::HostConfigLogConfig {
            typ: Some("none".into()),
            config: None,
        }),
        ..Default::default()
    });
    let body = ContainerCreateBody {
        host_config,
        image: Some(image_name()),
        entrypoint: cat.then(|| vec!["/bin/cat".into()]),
        attach_stdin: Some(true),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        open_stdin: Some(true),
        network_disabled: Some(true),
        labels: Some([(RUN_LABEL.to_owned(), run.to_owned())].into()),
        ..Default::default()
    };
    let name = format!(
        "{run}-bare-{}",
        match bare {
            Bare::Cat => "cat",
            Bare::CatUnlogged => "cat-unlogged",
            Bare::Subagent => "subagent",
        }
    );
    let options = CreateContainerOptionsBuilder::default().name(&name).build();
    let id = docker.create_container(Some(options), body).await.expect("create bare").id;
    let attach = AttachContainerOptionsBuilder::default()
        .stdin(true)
        .stdout(true)
        .stderr(true)
        .stream(true)
        .build();
    let mut attached = docker.attach_container(&id, Some(attach)).await.expect("attach");
    docker.start_container(&id, None).await.expect("start bare");
    let mut samples = Vec::with_capacity(round_trips());
    let mut start = 0.0;
    for i in 0..round_trips() + WARM_UP {
        if i == WARM_UP {
            start = warm::monotonic();
        }
        let t = Instant::now();
        attached.input.write_all(line).await.expect("write");
        attached.input.flush().await.expect("flush");
        let answered = async {
            loop {
                match attached.output.next().await.expect("output").expect("frame") {
                    bollard::container::LogOutput::StdOut { message }
                        if message.ends_with(b"\n") =>
                    {
                        break
                    }
                    _ => {}
                }
            }
        };
        tokio::time::timeout(LIMIT, answered).await.expect("bare container answered");
        if i >= WARM_UP {
            samples.push(t.elapsed());
        }
    }
    warm::measured_from(start);
    let remove = RemoveContainerOptionsBuilder::default().force(true).build();
    docker.remove_container(&id, Some(remove)).await.expect("remove bare");
    Stats::of(samples)
}

/// One-step tasks run one after another on `pool`, each timed end to end and split into the
/// LLM server's own handling time and the rest (the overhead the target is about).
struct ExecuteRun {
    end_to_end: Stats,
    llm: Stats,
    overhead: Stats,
    /// The subagent's own `duration_ms` (whole milliseconds).
    inside: Stats,
    /// The scrub after each task, as the subagent timed it (`scrub.micros`).
    scrub: Stats,
    over_2ms: usize,
    /// Overheads of the tasks that were the first one of a freshly (re)created container.
    first_on_container: Vec<Duration>,
    recycled: u64,
    /// The five slowest tasks (index in the run, overhead), and the tasks after which a
    /// container was retired: whether the slow ones sit beside the recycling.
    slowest: Vec<(usize, Duration)>,
    replaced_after: Vec<usize>,
}

/// [`round_trips`] pings of the pool's first slot, timed, after [`WARM_UP`] untimed ones.
async fn warm_pings(pool: &Pool) -> Stats {
    let target = pool.snapshot()[0].id.clone();
    for _ in 0..WARM_UP {
        pool.ping(&target).await.expect("warm-up ping");
    }
    let mut pings = Vec::with_capacity(round_trips());
    let start = warm::monotonic();
    for _ in 0..round_trips() {
        let t = Instant::now();
        pool.ping(&target).await.expect("ping");
        pings.push(t.elapsed());
    }
    warm::measured_from(start);
    Stats::of(pings)
}

async fn execute_run(pool: &Pool, llm: &ScriptedLlm, gateway: IpAddr) -> ExecuteRun {
    // Every replacement, planned (the task budget) or not.
    let replaced = |pool: &Pool| -> u64 {
        pool.snapshot().iter().map(|s| s.restarts + s.planned_replacements).sum()
    };
    let restarts_before = replaced(pool);
    let mut end_to_end = Vec::with_capacity(executes());
    let mut llm_time = Vec::with_capacity(executes());
    let mut overhead = Vec::with_capacity(executes());
    let mut inside = Vec::with_capacity(executes());
    let mut scrub = Vec::with_capacity(executes());
    let mut first_on_container = Vec::new();
    let mut replaced_after = Vec::new();
    let mut replacements = replaced(pool);
    let mut start = 0.0;
    for i in 0..EXECUTE_WARM_UP + executes() {
        if i == EXECUTE_WARM_UP {
            start = warm::monotonic();
        }
        let before = llm.chat_handling_times().len();
        let served_before: Vec<(Option<String>, u64)> =
            pool.snapshot().into_iter().map(|s| (s.container_id, s.tasks_served)).collect();
        let request = one_step_task(&format!("task-{i}"), llm, gateway);
        let t = Instant::now();
        let answer = tokio::time::timeout(LIMIT, pool.execute(request, CancellationToken::new()))
            .await
            .expect("execute answered in time")
            .expect("execute");
        let took = t.elapsed();
        let scrubbed = Duration::from_micros(answer.scrub.as_ref().map_or(0, |s| s.micros));
        let ResponseBody::Success { duration_ms, .. } = answer.body else {
            panic!("the one-step task failed: {answer:?}")
        };
        let calls = llm.chat_handling_times().split_off(before);
        assert_eq!(calls.len(), 1, "a one-step task makes one LLM call");
        let own: Duration = calls.iter().map(|c| c.expect("handled before answering")).sum();
        if i >= EXECUTE_WARM_UP {
            end_to_end.push(took);
            llm_time.push(own);
            overhead.push(took.saturating_sub(own));
            inside.push(Duration::from_millis(duration_ms.unwrap_or_default()));
            scrub.push(scrubbed);
            let first =
                pool.snapshot().into_iter().zip(served_before).any(|(now, (id, n))| {
                    now.tasks_served == 1 && (n == 0 || now.container_id != id)
                });
            if first {
                first_on_container.push(took.saturating_sub(own));
            }
            let now = replaced(pool);
            if now != replacements {
                replaced_after.push(i - EXECUTE_WARM_UP);
                replacements = now;
            }
        }
    }
    warm::measured_from(start);
    let mut slowest: Vec<(usize, Duration)> = overhead.iter().copied().enumerate().collect();
    slowest.sort_by_key(|(_, d)| std::cmp::Reverse(*d));
    slowest.truncate(5);
    let recycled = replaced(pool) - restarts_before;
    ExecuteRun {
        end_to_end: Stats::of(end_to_end),
        llm: Stats::of(llm_time),
        over_2ms: overhead.iter().filter(|d| ms(**d) > 2.0).count(),
        overhead: Stats::of(overhead),
        inside: Stats::of(inside),
        scrub: Stats::of(scrub),
        first_on_container,
        recycled,
        slowest,
        replaced_after,
    }
}

impl ExecuteRun {
    fn print(&self, name: &str, max_tasks: u64) {
        println!("{}", self.end_to_end.line(&format!("{name}, one LLM step, end to end")));
        println!("{}", self.llm.line("  of which the LLM server's own handling"));
        println!("{}", self.overhead.line("  overhead = end to end − LLM handling"));
        println!("{}", self.inside.line("  the subagent's own duration_ms (1 ms steps)"));
        println!("{}", self.scrub.line("  the scrub after each task (subagent's own timing)"));
        let max_tasks = if max_tasks == u64::MAX { "∞".into() } else { max_tasks.to_string() };
        println!(
            "  {} of {} tasks over 2 ms of overhead; {} were the first task of a fresh \
             container (overheads {:?} ms); {} container(s) recycled during the run \
             (max_tasks_per_container = {max_tasks})",
            self.over_2ms,
            executes(),
            self.first_on_container.len(),
            self.first_on_container.iter().map(|d| number(ms(*d))).collect::<Vec<_>>(),
            self.recycled,
        );
        let slowest: Vec<String> =
            self.slowest.iter().map(|(i, d)| format!("#{i} {} ms", number(ms(*d)))).collect();
        println!(
            "  slowest: {}; a container retired (its replacement due) after tasks {:?}",
            slowest.join(", "),
            self.replaced_after
        );
    }
}

/// Tasks of [`file_runs`], each way, after two warm-up pairs.
const FILE_RUNS: usize = 20;
/// The file [`file_runs`] puts into each task's scratch: the "5 MB from Telegram".
const FILE_BYTES: usize = 5 * 1024 * 1024;

/// The one-step task with a [`FILE_BYTES`] file put into its scratch (`put_file` chunks
/// before its `execute`), alternating with the same task without one, in one room: end to
/// end, each way.
async fn file_runs(pool: &Pool, llm: &ScriptedLlm, gateway: IpAddr) -> (Stats, Stats) {
    let room = Room::new("bench-files");
    let file = TaskFile {
        name: "upload.bin".into(),
        bytes: (0..FILE_BYTES).map(|i| (i % 251) as u8).collect(),
    };
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for i in 0..2 + FILE_RUNS {
        for carried in [true, false] {
            let request = one_step_task(&format!("file-{i}-{carried}"), llm, gateway);
            let files = if carried { vec![file.clone()] } else { Vec::new() };
            let io = TaskIo { files, ..TaskIo::default() };
            let t = Instant::now();
            let run = pool.run_task_with(request, &room, CancellationToken::new(), io);
            let done = tokio::time::timeout(LIMIT, run).await.expect("in time").expect("ran");
            let took = t.elapsed();
            assert!(
                matches!(done.response.body, ResponseBody::Success { .. }),
                "{:?}",
                done.response
            );
            if i >= 2 {
                if carried {
                    with.push(took)
                } else {
                    without.push(took)
                }
            }
        }
    }
    let (with, without) = (Stats::of(with), Stats::of(without));
    println!("{}", with.line("one-step task with a 5 MB file put into its scratch"));
    println!("{}", without.line("  the same task without a file"));
    (with, without)
}

/// An `execute` whose LLM is the scripted server, reached through the network's gateway with
/// a per-task token, as the host sends it.
fn one_step_task(id: &str, llm: &ScriptedLlm, gateway: IpAddr) -> Request {
    let mut request = Request::execute(id, "Answer with the word done.");
    request.llm_base_url = Some(llm.base_url_for_host(&gateway.to_string()));
    request.llm_model = Some("scripted".into());
    request.llm_token = Some(secrecy::SecretString::from(format!("nxb-token-{id}")));
    request.timeout = Some(60);
    request
}

struct FreshRuns {
    /// From `docker run` to the answer line.
    answer: Stats,
    /// From `docker run` until the container has exited and been removed.
    exit: Stats,
    /// Answer time minus the LLM's handling (executes only).
    overhead: Vec<Duration>,
}

/// A fresh `docker run --rm -i` per request: start, one request line, its answer, exit. With
/// `llm`, the request is the same one-step task the pool ran, on the same network.
async fn fresh_runs(
    run: &str,
    runs: usize,
    llm: Option<(&ScriptedLlm, IpAddr, &str)>,
) -> FreshRuns {
    let mut answers = Vec::with_capacity(runs);
    let mut exits = Vec::with_capacity(runs);
    let mut overhead = Vec::with_capacity(runs);
    for i in 0..runs {
        let (line, network) = match llm {
            Some((llm, gateway, network)) => {
                let id = format!("fresh-{i}");
                let line = serde_json::json!({
                    "type": "execute", "id": id, "task": "Answer with the word done.",
                    "llm_base_url": llm.base_url_for_host(&gateway.to_string()),
                    "llm_model": "scripted", "llm_token": format!("nxb-token-{id}"), "timeout": 60,
                });
                (format!("{line}\n"), Some(network))
            }
            None => ("{\"type\":\"ping\",\"id\":\"fresh\"}\n".to_owned(), None),
        };
        let before = llm.map(|(llm, ..)| llm.chat_handling_times().len()).unwrap_or(0);
        let mut command = tokio::process::Command::new("docker");
        command.args(["run", "--rm", "-i", "--label", &format!("{RUN_LABEL}={run}")]);
        command.args(["--name", &format!("{run}-fresh-{}-{i}", llm.is_some())]);
        if let Some(network) = network {
            command.args(["--network", network]);
        }
        let t = Instant::now();
        let mut child = command
            .arg(image_name())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("docker run");
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(line.as_bytes()).await.expect("write");
        let mut stdout = tokio::io::BufReader::new(child.stdout.take().expect("stdout"));
        let answer = async {
            loop {
                let mut text = String::new();
                let n = stdout.read_line(&mut text).await.expect("read");
                assert!(n > 0, "the fresh container closed stdout without a final answer");
                if let Ok(response) = serde_json::from_str::<Response>(&text) {
                    if response.is_final() {
                        return response;
                    }
                }
            }
        };
        let answer = tokio::time::timeout(LIMIT, answer).await.expect("fresh container answered");
        let answered = t.elapsed();
        assert!(
            matches!(answer.body, ResponseBody::Pong { .. } | ResponseBody::Success { .. }),
            "{answer:?}"
        );
        drop(stdin);
        tokio::time::timeout(LIMIT, child.wait())
            .await
            .expect("fresh container exited")
            .expect("wait");
        exits.push(t.elapsed());
        answers.push(answered);
        if let Some((llm, ..)) = llm {
            let own: Duration =
                llm.chat_handling_times()[before..].iter().map(|c| c.unwrap_or_default()).sum();
            overhead.push(answered.saturating_sub(own));
        }
    }
    FreshRuns { answer: Stats::of(answers), exit: Stats::of(exits), overhead }
}

/// The subagent's memory inside one pool container, read by `docker exec` from the process's
/// `/proc/<pid>/status` (the figure the target is about), with the container's whole cgroup
/// usage minus page cache (what `docker stats` shows: also docker-init and kernel objects).
struct ContainerMemory {
    vm_rss_kib: Option<u64>,
    anon_kib: Option<u64>,
    file_kib: Option<u64>,
    status: String,
    cgroup_bytes: Option<u64>,
}

impl ContainerMemory {
    fn text(&self) -> String {
        let cgroup = match self.cgroup_bytes {
            Some(bytes) => format!("{:.2} MB", bytes as f64 / 1e6),
            None => "unknown".into(),
        };
        format!("{} | container cgroup (docker stats): {cgroup}", self.status)
    }
}

async fn subagent_memory(docker: &Docker, pool: &Pool, busiest: bool) -> ContainerMemory {
    let snapshot = pool.snapshot();
    let slot = if busiest {
        snapshot.iter().max_by_key(|s| s.tasks_served).expect("a slot")
    } else {
        &snapshot[0]
    };
    let id = slot.container_id.clone().expect("the slot has a container");
    // comm is cut at 15 characters, which is exactly `nexbot-subagent`.
    let script = "for d in /proc/[0-9]*; do \
        if [ \"$(cat $d/comm 2>/dev/null)\" = nexbot-subagent ]; then \
        grep -E '^(VmRSS|RssAnon|RssFile|VmHWM):' $d/status; fi; done";
    let exec = CreateExecOptions::<String> {
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        cmd: Some(vec!["/bin/sh".into(), "-c".into(), script.into()]),
        ..Default::default()
    };
    let read = async {
        let created = docker.create_exec(&id, exec).await.expect("create exec");
        let mut output = String::new();
        if let StartExecResults::Attached { output: mut stream, .. } =
            docker.start_exec(&created.id, None).await.expect("start exec")
        {
            while let Some(chunk) = stream.next().await {
                output.push_str(&chunk.expect("exec output").to_string());
            }
        }
        output
    };
    let output = tokio::time::timeout(LIMIT, read).await.expect("docker exec finished");
    let field = |name: &str| -> Option<u64> {
        output
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    };
    let vm_rss_kib = field("VmRSS:");
    let status = match (vm_rss_kib, field("RssAnon:"), field("RssFile:"), field("VmHWM:")) {
        (Some(rss), Some(anon), Some(file), Some(hwm)) => format!(
            "VmRSS {:.2} MB ({rss} KiB: {anon} anonymous, {file} file-backed; peak {hwm} KiB), \
             {} tasks served",
            mb(rss),
            slot.tasks_served
        ),
        _ => format!("unreadable: {output:?}"),
    };
    // The pool's health check records docker stats' figure; wait for one to exist.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut cgroup_bytes = None;
    while cgroup_bytes.is_none() && Instant::now() < deadline {
        cgroup_bytes =
            pool.snapshot().iter().find(|s| s.id == slot.id).and_then(|s| s.memory_bytes);
        if cgroup_bytes.is_none() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    ContainerMemory {
        vm_rss_kib,
        anon_kib: field("RssAnon:"),
        file_kib: field("RssFile:"),
        status,
        cgroup_bytes,
    }
}

/// Chats sending tasks round-robin in the rooms run.
const ROOM_CHATS: usize = 20;
/// Tasks of the round-robin run.
const ROOM_TASKS: usize = 100;
/// New chats' first tasks measured on a blank.
const FIRST_TASKS: usize = 20;

/// What [`rooms_run`] measured.
struct RoomsRun {
    /// A chat's next task on its own warm container: end to end − LLM handling.
    next: Stats,
    /// A new chat's first task, blanks lasting: end to end − LLM handling.
    first: Stats,
    /// The same while the blank taken makes another room's container give way, so that a
    /// replacement starts beside the task.
    churn: Stats,
    /// 20 chats round-robin on the pool of 4, and on a pool as large as the chats.
    small: RoundRobin,
    large: RoundRobin,
    /// The engine's own ceiling for that churn, measured right after the pool of 4's run.
    ceiling: EngineCeiling,
}

/// One one-step task of `room`; end to end, the LLM server's own handling (only when no
/// other task runs: the fixture's list is shared), and whether it took a blank.
async fn room_task(
    pool: &Pool,
    llm: &ScriptedLlm,
    gateway: IpAddr,
    room: &Room,
    id: &str,
) -> (Duration, Duration, bool) {
    let (took, fresh, calls) = room_task_alone(pool, llm, gateway, room, id).await;
    let own: Duration = calls.iter().map(|c| c.expect("handled before answering")).sum();
    (took, own, fresh)
}

/// One one-step task of `room`: end to end, whether it took a blank, and the LLM calls the
/// fixture recorded meanwhile.
async fn room_task_alone(
    pool: &Pool,
    llm: &ScriptedLlm,
    gateway: IpAddr,
    room: &Room,
    id: &str,
) -> (Duration, bool, Vec<Option<Duration>>) {
    let before = llm.chat_handling_times().len();
    let request = one_step_task(id, llm, gateway);
    let t = Instant::now();
    let run = pool.run_task(request, room, CancellationToken::new(), None);
    let run = tokio::time::timeout(LIMIT, run).await.expect("in time").expect("run_task");
    let took = t.elapsed();
    assert!(matches!(run.response.body, ResponseBody::Success { .. }), "{:?}", run.response);
    (took, run.fresh, llm.chat_handling_times().split_off(before))
}

/// The warm ping's target: within this many times the floor's p50 (issue 52).
const FLOOR_RATIO: f64 = 1.5;

/// The warm path against the floor measured in the same run, each figure beside its target
/// and marked where it misses.
fn against_floor(
    echo: &Stats,
    ping: &Stats,
    recycling: &ExecuteRun,
    steady: &ExecuteRun,
    next: &Stats,
) -> String {
    let floor = ms(echo.p50);
    let mark = |met: bool| if met { "ok" } else { "MISS" };
    let ratio = ms(ping.p50) / floor;
    let mut block = format!(
        "the warm path against the floor of this run (a line echoed by an attached `cat`, \
         p50 {floor:.3} ms):\n  {:<44} {:>8.3} ms = {ratio:>5.2}× the floor  target ≤ \
         {FLOOR_RATIO}× and ≤ 0.4 ms  {}\n  {:<44} {:>8.3} ms = {:>5.2}× the floor  target ≤ 2 ms  {}",
        "warm ping p50",
        ms(ping.p50),
        mark(ratio <= FLOOR_RATIO && ms(ping.p50) <= 0.4),
        "warm ping p99",
        ms(ping.p99),
        ms(ping.p99) / floor,
        mark(ms(ping.p99) <= 2.0),
    );
    for (name, stats) in [
        ("execute overhead, recycling every 100 tasks", &recycling.overhead),
        ("execute overhead, no recycling", &steady.overhead),
        ("a chat's next task, overhead", next),
    ] {
        let (p50, p99) = (ms(stats.p50), ms(stats.p99));
        block.push_str(&format!(
            "\n  {name:<44} {p50:>8.3} / {p99:.3} ms (p50 / p99) = {:.1}× / {:.1}× the floor  \
             target ≤ 2 / ≤ 5 ms  {}",
            p50 / floor,
            p99 / floor,
            mark(p50 <= 2.0 && p99 <= 5.0)
        ));
    }
    block
}

/// A chat's next task: its own warm container, every time (its first, untimed, takes a blank).
async fn next_tasks(pool: &Pool, llm: &ScriptedLlm, gateway: IpAddr) -> Stats {
    let own = Room::new("telegram:1");
    let mut next = Vec::with_capacity(executes());
    for i in 0..EXECUTE_WARM_UP + executes() {
        let (took, llm_own, fresh) =
            room_task(pool, llm, gateway, &own, &format!("next-{i}")).await;
        if i >= EXECUTE_WARM_UP {
            assert!(!fresh, "the chat's next task took a blank");
            next.push(took.saturating_sub(llm_own));
        }
    }
    let next = Stats::of(next);
    println!("{}", next.line("rooms: a chat's next task, overhead (own container)"));
    next
}

/// Rooms on a pool like the steady one (no recycling): see the module's documentation.
async fn rooms_run(
    docker: &Docker,
    config: &PoolConfig,
    llm: &ScriptedLlm,
    gateway: IpAddr,
) -> RoomsRun {
    let config = PoolConfig { max_tasks_per_container: u64::MAX, ..config.clone() };
    let pool = Pool::start(docker.clone(), config.clone()).await.expect("pool starts");

    let next = next_tasks(&pool, llm, gateway).await;

    // A new chat's first task on a blank while a replacement starts beside it: after the
    // pool's blanks are gone, each blank taken makes another room's idle container give way.
    let churn = first_tasks(&pool, llm, gateway, "churn").await;
    println!("{}", churn.line("rooms: a new chat's first task, a replacement starting"));

    // 20 chats round-robin, 4 in flight: on this pool of 4, then on one as large as the chats.
    let small = round_robin(&pool, llm, gateway).await;
    pool.shutdown().await.expect("shutdown");
    let ceiling = engine_ceiling(docker, &config).await;
    let sized = PoolConfig { size: ROOM_CHATS + POOL_SIZE, ..config.clone() };
    let pool = Pool::start(docker.clone(), sized).await.expect("pool starts");
    // While blanks last: the round-robin's chats' first tasks, one after another, each on a
    // blank of this pool (which has more blanks than chats, so nothing is replaced meanwhile).
    let first = first_tasks(&pool, llm, gateway, "rr").await;
    println!("{}", first.line("rooms: a new chat's first task, blanks lasting"));
    let large = round_robin(&pool, llm, gateway).await;
    pool.shutdown().await.expect("shutdown");
    RoomsRun { next, first, churn, small, large, ceiling }
}

/// [`FIRST_TASKS`] new chats' first tasks, one after another, each once a blank is ready
/// (waiting for one is not timed): end to end − LLM handling. The chats are named like the
/// round-robin's (`<prefix>-<n>`), so on a pool of their own their first tasks come first.
async fn first_tasks(pool: &Pool, llm: &ScriptedLlm, gateway: IpAddr, prefix: &str) -> Stats {
    let mut first = Vec::with_capacity(FIRST_TASKS);
    for i in 0..FIRST_TASKS {
        let ready = async {
            while pool.stats().blank == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::time::timeout(LIMIT, ready).await.expect("a blank comes back");
        let room = Room::new(format!("telegram:{prefix}-{i}"));
        let (took, llm_own, fresh) =
            room_task(pool, llm, gateway, &room, &format!("{prefix}-first-{i}")).await;
        assert!(fresh, "a new chat's first task ran on a used container");
        first.push(took.saturating_sub(llm_own));
    }
    Stats::of(first)
}

/// Container lifecycles measured by [`engine_ceiling`].
const CEILING_LIFECYCLES: usize = 24;

/// What the engine alone can do for the round-robin on a pool smaller than its chats: there
/// every task's room needs a new container and one of another room must go, so the rate is
/// bounded by create + start + remove, whatever the pool does around them.
struct EngineCeiling {
    /// Lifecycles per second with the pool's own spec (hardened, on its internal network).
    deployed: f64,
    /// The same spec with no network at all (`network_mode: none`): what a network-less
    /// design would lift the bound to.
    no_network: f64,
}

/// [`CEILING_LIFECYCLES`] bare lifecycles (create, start, force-remove; no attach, no ping),
/// [`POOL_SIZE`] at once, of the container the pool itself would create for `config`, then the
/// same with no network.
async fn engine_ceiling(docker: &Docker, config: &PoolConfig) -> EngineCeiling {
    let owner = nexbot_docker::Owner::current();
    let run = format!("nxb-{}", std::process::id());
    let runtime = nexbot_docker::resolve_runtime(docker, config.runtime.as_deref())
        .await
        .expect("the engine's runtime");
    let rate = |network_less: bool| {
        let (run, runtime) = (run.clone(), runtime.clone());
        async move {
            let mut body = nexbot_docker::spec::container_spec(config, &runtime, owner, &run, 0)
                .expect("the pool's spec");
            body.labels.get_or_insert_with(Default::default).insert(RUN_LABEL.into(), run);
            if network_less {
                body.networking_config = None;
                if let Some(host) = body.host_config.as_mut() {
                    host.network_mode = Some("none".into());
                }
            }
            let semaphore = std::sync::Arc::new(tokio::sync::Semaphore::new(POOL_SIZE));
            let started = Instant::now();
            let lifecycles = (0..CEILING_LIFECYCLES).map(|_| {
                let (semaphore, body) = (semaphore.clone(), body.clone());
                async move {
                    let _permit = semaphore.acquire().await.expect("open");
                    let id = docker.create_container(None, body).await.expect("create").id;
                    docker.start_container(&id, None).await.expect("start");
                    let remove = RemoveContainerOptionsBuilder::default().force(true).build();
                    docker.remove_container(&id, Some(remove)).await.expect("remove");
                }
            });
            futures_util::future::join_all(lifecycles).await;
            CEILING_LIFECYCLES as f64 / started.elapsed().as_secs_f64()
        }
    };
    let deployed = rate(false).await;
    let no_network = rate(true).await;
    println!(
        "engine alone: {CEILING_LIFECYCLES} create + start + remove of the pool's container, \
         {POOL_SIZE} at once: {} /s on the pool's network, {} /s with no network",
        number(deployed),
        number(no_network)
    );
    EngineCeiling { deployed, no_network }
}

/// What [`round_robin`] measured.
struct RoundRobin {
    pool_size: usize,
    sustained: Throughput,
    blank_empty_waits: u64,
    /// Containers started (blanks replacing containers retired for their room) per second.
    started_per_s: f64,
    /// The longest stretch with tasks waiting and no idle container at all (the pool empty).
    longest_empty: Duration,
}

/// [`ROOM_TASKS`] one-step tasks of [`ROOM_CHATS`] chats in turn, 4 in flight, while a
/// sampler watches for tasks waiting with no idle container in the pool.
async fn round_robin(pool: &Pool, llm: &ScriptedLlm, gateway: IpAddr) -> RoundRobin {
    let before = pool.stats();
    let stop = CancellationToken::new();
    let sampler = {
        let stop = stop.clone();
        async move {
            let (mut longest, mut since) = (Duration::ZERO, None::<Instant>);
            while !stop.is_cancelled() {
                let stats = pool.stats();
                if stats.queue_depth > 0 && stats.warm == stats.busy {
                    let at = *since.get_or_insert_with(Instant::now);
                    longest = longest.max(at.elapsed());
                } else {
                    since = None;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            longest
        }
    };
    let in_flight = POOL_SIZE;
    let run = async {
        let semaphore = std::sync::Arc::new(tokio::sync::Semaphore::new(in_flight));
        let (busy_before, _) = cpu_jiffies();
        let started = Instant::now();
        let runs = (0..ROOM_TASKS).map(|i| {
            let semaphore = semaphore.clone();
            let room = Room::new(format!("telegram:rr-{}", i % ROOM_CHATS));
            async move {
                let _permit = semaphore.acquire().await.expect("open");
                let id = format!("rr-{i}-{}", pool.config().size);
                room_task_alone(pool, llm, gateway, &room, &id).await.0
            }
        });
        let latencies = futures_util::future::join_all(runs).await;
        let wall = started.elapsed();
        let (busy_after, _) = cpu_jiffies();
        stop.cancel();
        let cpu_ms_per_task = (busy_after - busy_before) as f64 * 10.0 / ROOM_TASKS as f64;
        Throughput { tasks: ROOM_TASKS, wall, latency: Stats::of(latencies), cpu_ms_per_task }
    };
    let (sustained, longest_empty) = tokio::join!(run, sampler);
    let after = pool.stats();
    let replaced = (after.rooms.yielded + after.rooms.idle_retired)
        - (before.rooms.yielded + before.rooms.idle_retired);
    let blank_empty_waits = after.rooms.blank_empty_waits - before.rooms.blank_empty_waits;
    let started_per_s = replaced as f64 / sustained.wall.as_secs_f64();
    let pool_size = pool.config().size;
    println!(
        "{}",
        sustained.line(&format!(
            "rooms: {ROOM_CHATS} chats round-robin, {in_flight} in flight, pool of {pool_size}"
        ))
    );
    println!(
        "  {blank_empty_waits} waits with no blank ready; {replaced} containers started \
         ({} /s); longest stretch with tasks waiting and no idle container: {} ms",
        number(started_per_s),
        number(ms(longest_empty))
    );
    RoundRobin { pool_size, sustained, blank_empty_waits, started_per_s, longest_empty }
}

impl RoomsRun {
    fn record(&self, shared: &ExecuteRun, one_start: Duration) {
        record(Figure::promised(
            "rooms: a chat's next task, overhead p50",
            ms(self.next.p50),
            "ms",
            Target::AtMost(2.0),
        ));
        record(Figure::promised(
            "rooms: a chat's next task, overhead p99",
            ms(self.next.p99),
            "ms",
            Target::AtMost(5.0),
        ));
        record(Figure::reference(
            "  shared pool (any idle container), overhead p50 / p99",
            &format!(
                "{} / {} ms",
                number(ms(shared.overhead.p50)),
                number(ms(shared.overhead.p99))
            ),
            "(same run, no recycling)",
        ));
        record(Figure::promised(
            "rooms: a new chat's first task (blank), overhead p50",
            ms(self.first.p50),
            "ms",
            Target::AtMost(5.0),
        ));
        record(Figure::reference(
            "  new chat's first task p99",
            &format!("{} ms", number(ms(self.first.p99))),
            "(blanks lasting)",
        ));
        record(Figure::reference(
            "  with a replacement starting beside it, p50 / p99",
            &format!("{} / {} ms", number(ms(self.churn.p50)), number(ms(self.churn.p99))),
            "(pool of 4, blanks gone)",
        ));
        for run in [&self.small, &self.large] {
            let pool = run.pool_size;
            record(Figure::promised(
                &format!("rooms: {ROOM_CHATS} chats round-robin, pool of {pool}, sustained"),
                run.sustained.tasks_per_s(),
                "tasks/s",
                Target::AtLeast(5.0),
            ));
            if pool < ROOM_CHATS {
                record(Figure::reference(
                    "  the engine's ceiling: create + start + remove /s",
                    &format!(
                        "{} ({} with no network)",
                        number(self.ceiling.deployed),
                        number(self.ceiling.no_network)
                    ),
                    &format!("(same spec, {POOL_SIZE} at once, no attach or ping)"),
                ));
            }
            record(Figure::reference(
                "  waits with no blank / containers started per s",
                &format!("{} / {}", run.blank_empty_waits, number(run.started_per_s)),
                &format!(
                    "(latency p50 {} / p99 {} ms)",
                    number(ms(run.sustained.latency.p50)),
                    number(ms(run.sustained.latency.p99))
                ),
            ));
            record(Figure::promised(
                &format!("  pool of {pool}: longest stretch empty while tasks wait"),
                ms(run.longest_empty),
                "ms",
                Target::AtMost(ms(one_start)),
            ));
        }
    }
}
