//! `NEXBOT_BENCH_ONLY=warm`: the floor (a line echoed by an attached `cat`, with the engine's
//! default log driver and without), a bare subagent's ping, the warm pool's ping and a one-step
//! execute on a pool that never recycles, nothing else, each printed with the stretch its
//! measured loop ran in: what `docker/profile-warm.py` runs under `perf` and cuts by stretch.

use std::net::SocketAddr;

use bollard::Docker;
use nexbot_docker::{Pool, PoolConfig};
use nexbot_tests::scripted_llm::{ScriptedLlm, Step};

use super::{bare_attach, execute_run, warm_pings, Bare, ECHO_LINE, FLOOR_UNLOGGED, PING_LINE};

/// The warm figures of a run named `run`, each beside its stretch (`phase a..b`).
pub(super) async fn run(docker: &Docker, run: &str, config: &PoolConfig) {
    let echo = bare_attach(docker, run, Bare::Cat, ECHO_LINE).await;
    println!("{}  {}", echo.line("bare attach: line echoed by busybox cat (floor)"), last_phase());
    let unlogged = bare_attach(docker, run, Bare::CatUnlogged, ECHO_LINE).await;
    println!("{}  {}", unlogged.line(FLOOR_UNLOGGED), last_phase());
    let bare = bare_attach(docker, run, Bare::Subagent, PING_LINE).await;
    println!("{}  {}", bare.line("bare attach: subagent ping (no pool)"), last_phase());
    let pool = Pool::start(docker.clone(), config.clone()).await.expect("pool starts");
    let ping = warm_pings(&pool).await;
    println!("{}  {}", ping.line("warm pool ping"), last_phase());
    pool.shutdown().await.expect("shutdown");
    let steady = PoolConfig { max_tasks_per_container: u64::MAX, ..config.clone() };
    let pool = Pool::start(docker.clone(), steady).await.expect("pool starts");
    let gateway = pool.network().gateway;
    let llm = ScriptedLlm::start_on(SocketAddr::new(gateway, 0), vec![]).await;
    llm.set_responder(|_| Step::text("done"));
    let executed = execute_run(&pool, &llm, gateway).await;
    println!(
        "{}  {}",
        executed.overhead.line("warm pool execute overhead (no recycling)"),
        last_phase()
    );
    pool.shutdown().await.expect("shutdown");
}

/// CLOCK_MONOTONIC in seconds: the clock `perf record -k mono` stamps its samples with. The
/// measured loops print their stretch in it (`phase 12.345678..13.456789`), which is how
/// `docker/profile-warm.py` cuts one figure's samples out of a whole run's recording.
pub(super) fn monotonic() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}
/// The stretch of the latest measured loop.
static LAST_PHASE: std::sync::Mutex<Option<(f64, f64)>> = std::sync::Mutex::new(None);
/// The stretch of the latest measured loop, printed beside its figure.
fn last_phase() -> String {
    let last = *LAST_PHASE.lock().unwrap_or_else(|e| e.into_inner());
    last.map_or_else(String::new, |(start, end)| format!("phase {start:.6}..{end:.6}"))
}
pub(super) fn measured_from(start: f64) {
    *LAST_PHASE.lock().unwrap_or_else(|e| e.into_inner()) = Some((start, monotonic()));
}
