//! The pool under gVisor (`runsc`), beside runc in the same run, when the engine has it
//! (docker/register-runsc.sh): the pool's start, warm ping, execute overhead, the scrub
//! between tasks, one container's start to its first pong, memory per warm container from the
//! host's side, and the 20 chats' round-robin on a pool as large as the chats. The runc
//! figures it is set beside come from the main run, taken the same way.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use bollard::Docker;
use nexbot_docker::{Pool, PoolConfig};
use nexbot_tests::bench::{ms, number, record, Figure, Stats};
use nexbot_tests::scripted_llm::ScriptedLlm;

use super::{execute_run, round_robin, warm_pings, ExecuteRun, RoundRobin, POOL_SIZE, ROOM_CHATS};

/// Containers started (and removed) by [`first_pongs`] for each runtime.
const PROBES: usize = 5;

/// One warm container as the host sees it: its cgroup's memory, and its host processes with
/// their proportional memory (PSS: pages they share, such as gVisor's memory file mapped by
/// each of its processes, counted once in all).
#[derive(Clone, Copy, Default)]
pub struct HostView {
    cgroup_mb: f64,
    processes: usize,
    pss_mb: f64,
}

impl HostView {
    fn text(&self) -> String {
        format!(
            "cgroup {} MB; {} host processes, PSS {} MB",
            number(self.cgroup_mb),
            self.processes,
            number(self.pss_mb)
        )
    }
}

/// The average [`HostView`] of the pool's containers (cgroup v1, as Debian 12's engine runs
/// here; zeros where those files are not readable).
pub fn host_view(pool: &Pool) -> HostView {
    let views: Vec<HostView> = pool
        .snapshot()
        .into_iter()
        .filter_map(|slot| slot.container_id)
        .map(|id| {
            let cgroup = format!("/sys/fs/cgroup/memory/docker/{id}");
            let read = |file: &str| std::fs::read_to_string(format!("{cgroup}/{file}"));
            let bytes = read("memory.usage_in_bytes")
                .ok()
                .and_then(|b| b.trim().parse::<u64>().ok())
                .unwrap_or(0);
            let procs = read("cgroup.procs").unwrap_or_default();
            let pids: Vec<&str> = procs.lines().collect();
            let pss_kib: u64 = pids.iter().map(|pid| pss_kib(pid)).sum();
            HostView {
                cgroup_mb: bytes as f64 / 1e6,
                processes: pids.len(),
                pss_mb: pss_kib as f64 * 1024.0 / 1e6,
            }
        })
        .collect();
    let n = views.len().max(1) as f64;
    HostView {
        cgroup_mb: views.iter().map(|v| v.cgroup_mb).sum::<f64>() / n,
        processes: (views.iter().map(|v| v.processes).sum::<usize>() as f64 / n).round() as usize,
        pss_mb: views.iter().map(|v| v.pss_mb).sum::<f64>() / n,
    }
}

/// `Pss:` of `/proc/<pid>/smaps_rollup`, in KiB (0 when gone or unreadable).
fn pss_kib(pid: &str) -> u64 {
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    rollup
        .lines()
        .find_map(|l| l.strip_prefix("Pss:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// [`PROBES`] containers made exactly as the pool makes them (`nexbot_docker::probe`, as
/// `nexbot doctor` does), one after another: the engine's create to the first pong.
async fn first_pongs(docker: &Docker, config: &PoolConfig) -> Stats {
    let mut took = Vec::with_capacity(PROBES);
    for _ in 0..PROBES {
        let probe = nexbot_docker::probe(docker, config, Duration::from_secs(60))
            .await
            .expect("a probe container answers");
        took.push(probe.first_pong);
    }
    Stats::of(took)
}

/// What the main run measured under runc, to set beside gVisor's.
pub struct Runc<'a> {
    pub start: Duration,
    pub ping: &'a Stats,
    pub execute: &'a ExecuteRun,
    pub memory: HostView,
    pub round_robin: &'a RoundRobin,
}

/// The figures under gVisor, and runc's start-to-first-pong taken beside them.
pub struct GvisorRun {
    start: Duration,
    ping: Stats,
    execute: ExecuteRun,
    first_pong: Stats,
    runc_first_pong: Stats,
    memory: HostView,
    round_robin: RoundRobin,
}

/// Runs the gVisor figures; `None` (said) when the engine has no runsc.
pub async fn run(
    docker: &Docker,
    config: &PoolConfig,
    llm: &ScriptedLlm,
    gateway: IpAddr,
) -> Option<GvisorRun> {
    if let Err(e) = nexbot_docker::resolve_runtime(docker, Some("runsc")).await {
        println!("no gVisor figures: {e}");
        return None;
    }
    let runc_first_pong = first_pongs(docker, config).await;
    println!("{}", runc_first_pong.line("runc: one container, create to first pong"));
    let config = PoolConfig { runtime: Some("runsc".into()), ..config.clone() };
    let first_pong = first_pongs(docker, &config).await;
    println!("{}", first_pong.line("runsc: one container, create to first pong"));
    let started = Instant::now();
    let pool = Pool::start(docker.clone(), config.clone()).await.expect("a runsc pool starts");
    let start = started.elapsed();
    println!("runsc: pool of {POOL_SIZE} ready (network already there) {:>10.1} ms", ms(start));
    let ping = warm_pings(&pool).await;
    println!("{}", ping.line("runsc: warm pool ping"));
    let execute = execute_run(&pool, llm, gateway).await;
    execute.print("runsc: warm pool execute (default recycling)", config.max_tasks_per_container);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let memory = host_view(&pool);
    println!("runsc: a warm container that served tasks, host's view: {}", memory.text());
    pool.shutdown().await.expect("shutdown");
    // The round-robin as `rooms_run` runs it on its pool as large as the chats.
    let sized = PoolConfig {
        size: ROOM_CHATS + POOL_SIZE,
        max_tasks_per_container: u64::MAX,
        ..config.clone()
    };
    let pool = Pool::start(docker.clone(), sized).await.expect("a runsc pool starts");
    let round_robin = round_robin(&pool, llm, gateway).await;
    pool.shutdown().await.expect("shutdown");
    println!(
        "{}",
        round_robin.sustained.line(&format!(
            "runsc: {ROOM_CHATS} chats round-robin, pool of {}",
            round_robin.pool_size
        ))
    );
    Some(GvisorRun { start, ping, execute, first_pong, runc_first_pong, memory, round_robin })
}

impl GvisorRun {
    /// Each figure under runsc with runc's beside it, for the final summary.
    pub fn record(&self, runc: &Runc<'_>) {
        let pair = |a: &Stats, b: &Stats| {
            (
                format!("{} / {} ms", number(ms(a.p50)), number(ms(a.p99))),
                format!("(runc: {} / {} ms)", number(ms(b.p50)), number(ms(b.p99))),
            )
        };
        let rows = [
            ("warm ping p50 / p99", pair(&self.ping, runc.ping)),
            ("execute overhead p50 / p99", pair(&self.execute.overhead, &runc.execute.overhead)),
            ("the scrub between tasks p50 / p99", pair(&self.execute.scrub, &runc.execute.scrub)),
            ("one container, create to first pong p50 / p99", {
                pair(&self.first_pong, &self.runc_first_pong)
            }),
        ];
        for (name, (value, beside)) in rows {
            record(Figure::reference(&format!("  under gVisor (runsc): {name}"), &value, &beside));
        }
        record(Figure::reference(
            &format!("  under gVisor (runsc): pool of {POOL_SIZE} ready"),
            &format!("{} ms", number(ms(self.start))),
            &format!("(runc: {} ms)", number(ms(runc.start))),
        ));
        record(Figure::reference(
            "  under gVisor (runsc): a warm container, host's view",
            &self.memory.text(),
            &format!("(runc: {})", runc.memory.text()),
        ));
        record(Figure::reference(
            &format!(
                "  under gVisor (runsc): {ROOM_CHATS} chats round-robin, pool of {}",
                self.round_robin.pool_size
            ),
            &format!("{} tasks/s", number(self.round_robin.sustained.tasks_per_s())),
            &format!("(runc: {} tasks/s)", number(runc.round_robin.sustained.tasks_per_s())),
        ));
    }
}
