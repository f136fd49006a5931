//! The pool on a remote engine (a `dockerd` in a network namespace of the bench's own, over
//! mutual TLS: `nexbot_tests::remote`), beside the local engine in the same run, measured the
//! same way on both: the image copied by id, a pool of 4 ready from cold (network absent),
//! warm ping, the dispatch path (an `execute` refused at once: a remote pool has no LLM to
//! reach yet) and a new chat's first task on a blank. An egress request through the node
//! and an approval's press to first byte need the daemon (the node is its part): measured
//! beside the local engine's in `host/benches/approvals.rs`.

use std::time::{Duration, Instant};

use bollard::Docker;
use nexbot_docker::{Pool, PoolConfig, Room};
use nexbot_protocol::{Request, ResponseBody};
use nexbot_tests::bench::{ms, number, record, Figure, Stats};
use nexbot_tests::remote::RemoteHost;
use tokio_util::sync::CancellationToken;

use super::{warm_pings, LIMIT, POOL_SIZE};

/// Tasks refused at once, per engine, after as many untimed.
const REFUSED: usize = 300;
/// New chats' first tasks, per engine.
const FIRST: usize = 12;

/// One engine's figures.
struct Leg {
    start: Duration,
    ping: Stats,
    refused: Stats,
    first: Stats,
}

/// The remote engine's figures beside the local one's.
pub struct RemoteRun {
    copy: Duration,
    bytes: u64,
    remote: Leg,
    local: Leg,
}

/// Measures both legs; `None` (said) when no remote host can be made here.
pub async fn run(local: &Docker, config: &PoolConfig) -> Option<RemoteRun> {
    if !rustix::process::geteuid().is_root() {
        println!("no remote-engine figures: making a network namespace needs root");
        return None;
    }
    let host = RemoteHost::start();
    let remote = nexbot_docker::connect(&host.sandbox()).await.expect("the remote engine answers");
    let started = Instant::now();
    let copied = nexbot_docker::sync_image(local, &remote, &config.image, |_, _| {})
        .await
        .expect("the image is copied");
    let copy = started.elapsed();
    let bytes = match copied {
        nexbot_docker::ImageSync::Copied { bytes, .. } => bytes,
        nexbot_docker::ImageSync::Same { .. } => 0,
    };
    let config = PoolConfig {
        name: format!("{}-remote", config.name),
        network: format!("{}-remote", config.network),
        max_tasks_per_container: u64::MAX,
        ..config.clone()
    };
    let remote_leg = leg("remote", &remote, &config).await;
    let local_leg = leg("local", local, &config).await;
    let _ = nexbot_docker::remove_network(local, &config.network).await;
    drop(host);
    Some(RemoteRun { copy, bytes, remote: remote_leg, local: local_leg })
}

/// One engine: a pool from cold (its network absent), warm pings, refused executes, then new
/// chats' first tasks.
async fn leg(name: &str, docker: &Docker, config: &PoolConfig) -> Leg {
    let _ = nexbot_docker::remove_network(docker, &config.network).await;
    let started = Instant::now();
    let pool = Pool::start(docker.clone(), config.clone()).await.expect("the pool starts");
    let start = started.elapsed();
    println!("{name} engine: pool of {POOL_SIZE} ready from cold {:>10.1} ms", ms(start));
    let ping = warm_pings(&pool).await;
    println!("{}", ping.line(&format!("{name} engine: warm pool ping")));
    let mut refused = Vec::with_capacity(REFUSED);
    for i in 0..2 * REFUSED {
        let t = Instant::now();
        refuse(&pool, &Room::default(), &format!("{name}-refused-{i}")).await;
        if i >= REFUSED {
            refused.push(t.elapsed());
        }
    }
    let refused = Stats::of(refused);
    println!("{}", refused.line(&format!("{name} engine: execute refused at once")));
    let mut first = Vec::with_capacity(FIRST);
    for i in 0..FIRST {
        let ready = async {
            while pool.stats().blank == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::time::timeout(LIMIT, ready).await.expect("a blank comes back");
        let room = Room::new(format!("telegram:{name}-{i}"));
        let t = Instant::now();
        refuse(&pool, &room, &format!("{name}-first-{i}")).await;
        first.push(t.elapsed());
    }
    let first = Stats::of(first);
    println!("{}", first.line(&format!("{name} engine: a new chat's first task (refused)")));
    pool.shutdown().await.expect("shutdown");
    let _ = nexbot_docker::remove_network(docker, &config.network).await;
    Leg { start, ping, refused, first }
}

/// One `execute` of `room` the subagent refuses at once (no LLM settings).
async fn refuse(pool: &Pool, room: &Room, id: &str) {
    let request = Request::execute(id, "no LLM settings");
    let run = pool.run_task(request, room, CancellationToken::new(), None);
    let run = tokio::time::timeout(LIMIT, run).await.expect("in time").expect("run_task");
    assert!(matches!(run.response.body, ResponseBody::Error { .. }), "{:?}", run.response);
}

impl RemoteRun {
    /// Each remote figure with the local engine's beside it, for the final summary.
    pub fn record(&self) {
        let pair = |a: &Stats, b: &Stats| {
            (
                format!("{} / {} ms", number(ms(a.p50)), number(ms(a.p99))),
                format!("(local: {} / {} ms)", number(ms(b.p50)), number(ms(b.p99))),
            )
        };
        let (remote, local) = (&self.remote, &self.local);
        let rows = [
            ("warm ping p50 / p99", pair(&remote.ping, &local.ping)),
            ("execute refused at once p50 / p99", pair(&remote.refused, &local.refused)),
            ("a new chat's first task p50 / p99", pair(&remote.first, &local.first)),
            (
                "pool of 4 ready from cold",
                (
                    format!("{} ms", number(ms(remote.start))),
                    format!("(local: {} ms)", number(ms(local.start))),
                ),
            ),
        ];
        for (name, (value, beside)) in rows {
            record(Figure::reference(&format!("  remote engine (TLS): {name}"), &value, &beside));
        }
        record(Figure::reference(
            "  remote engine (TLS): the image copied by id",
            &format!("{} ms", number(ms(self.copy))),
            &format!("({} MB over the link)", number(self.bytes as f64 / 1e6)),
        ));
    }
}
