//! `make bench`: what the warm pool buys over a container per task, measured in one run on
//! this machine against the real engine. Prints figures; asserts nothing.
//!
//! - pool start: time from `Pool::start` to all N containers answering (cold: fresh images
//!   cache aside, no container of the pool exists);
//! - bare attach echo: one line through an attached `cat` container (the floor for any
//!   attached-stdio design);
//! - warm `ping` and `execute` dispatch round trips (the execute carries no LLM settings, so
//!   the subagent answers it at once: what is measured is the pool's dispatch path);
//! - a fresh `docker run --rm -i` per request, the alternative other agents use;
//! - idle memory of one subagent container.

use std::time::{Duration, Instant};

use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, CreateContainerOptionsBuilder, RemoveContainerOptionsBuilder,
};
use bollard::Docker;
use futures_util::StreamExt;
use nexbot_docker::{Pool, PoolConfig};
use nexbot_protocol::Request;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

const IMAGE: &str = "nexbot-subagent:dev";
const ROUND_TRIPS: usize = 2_000;
const FRESH_RUNS: usize = 20;
const POOL_SIZE: usize = 4;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

struct Stats {
    p50: Duration,
    p99: Duration,
    mean: Duration,
}

fn stats(mut samples: Vec<Duration>) -> Stats {
    samples.sort();
    let mean = samples.iter().sum::<Duration>() / samples.len() as u32;
    Stats { p50: percentile(&samples, 0.5), p99: percentile(&samples, 0.99), mean }
}

fn row(name: &str, n: usize, s: &Stats) {
    println!(
        "{name:<44} n={n:<5} p50={:>10.3} ms  p99={:>10.3} ms  mean={:>10.3} ms",
        s.p50.as_secs_f64() * 1e3,
        s.p99.as_secs_f64() * 1e3,
        s.mean.as_secs_f64() * 1e3
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let docker = Docker::connect_with_local_defaults().expect("Docker engine");
    docker.ping().await.expect("the Docker engine answers (is dockerd running?)");
    docker.inspect_image(IMAGE).await.expect("image nexbot-subagent:dev (run `make image`)");
    let config = PoolConfig {
        name: format!("nxp-bench-{}", std::process::id()),
        network: "nxp-bench".into(),
        size: POOL_SIZE,
        queue_capacity: 64,
        max_tasks_per_container: u64::MAX, // measure dispatch, not recycling
        ..PoolConfig::default()
    };
    println!("nexbot pool benchmark ({} round trips, {} fresh runs)\n", ROUND_TRIPS, FRESH_RUNS);

    // Pool start, three times: each start is cold for the pool (no container of it exists).
    let mut starts = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        let pool = Pool::start(docker.clone(), config.clone()).await.expect("pool starts");
        starts.push(started.elapsed());
        pool.shutdown().await.expect("shutdown");
    }
    for (i, t) in starts.iter().enumerate() {
        println!(
            "pool of {POOL_SIZE} ready (start {})           {:>10.1} ms",
            i + 1,
            t.as_secs_f64() * 1e3
        );
    }

    let bare = bare_attach_echo(&docker).await;
    row("bare attach echo (cat)", ROUND_TRIPS, &bare);

    let pool = Pool::start(docker.clone(), config.clone()).await.expect("pool starts");
    let target = pool.snapshot()[0].id.clone();
    for _ in 0..200 {
        pool.ping(&target).await.expect("warm-up ping");
    }
    let mut pings = Vec::with_capacity(ROUND_TRIPS);
    for _ in 0..ROUND_TRIPS {
        let t = Instant::now();
        pool.ping(&target).await.expect("ping");
        pings.push(t.elapsed());
    }
    let ping = stats(pings);
    row("warm pool ping", ROUND_TRIPS, &ping);

    let mut executes = Vec::with_capacity(ROUND_TRIPS);
    for i in 0..ROUND_TRIPS {
        let request = Request::execute(format!("bench-{i}"), "dispatch only");
        let t = Instant::now();
        let answer = pool.execute(request, CancellationToken::new()).await.expect("execute");
        executes.push(t.elapsed());
        assert!(answer.is_final());
    }
    let execute = stats(executes);
    row("warm pool execute (dispatch)", ROUND_TRIPS, &execute);

    let memory: Vec<u64> = pool.snapshot().iter().filter_map(|s| s.memory_bytes).collect();
    pool.shutdown().await.expect("shutdown");

    let fresh = fresh_docker_run(FRESH_RUNS).await;
    row("fresh `docker run --rm -i` per request", FRESH_RUNS, &fresh);

    println!();
    println!(
        "ratio fresh/warm ping (p50)      {:>10.0}x",
        fresh.p50.as_secs_f64() / ping.p50.as_secs_f64()
    );
    println!(
        "ratio fresh/warm execute (p50)   {:>10.0}x",
        fresh.p50.as_secs_f64() / execute.p50.as_secs_f64()
    );
    println!(
        "warm ping p50 / bare echo p50    {:>10.2}x",
        ping.p50.as_secs_f64() / bare.p50.as_secs_f64()
    );
    match memory.iter().max() {
        Some(max) => println!(
            "idle subagent memory             {:>10.1} MiB (max of {} containers)",
            *max as f64 / (1024.0 * 1024.0),
            memory.len()
        ),
        None => println!("idle subagent memory             (no sample yet)"),
    }
    let _ = nexbot_docker::remove_network(&docker, "nxp-bench").await;
}

/// Round trips of one line through an attached container running `cat`.
async fn bare_attach_echo(docker: &Docker) -> Stats {
    let body = ContainerCreateBody {
        image: Some(IMAGE.into()),
        entrypoint: Some(vec!["/bin/cat".into()]),
        attach_stdin: Some(true),
        attach_stdout: Some(true),
        open_stdin: Some(true),
        network_disabled: Some(true),
        ..Default::default()
    };
    let name = format!("nxp-bench-echo-{}", std::process::id());
    let options = CreateContainerOptionsBuilder::default().name(&name).build();
    let id = docker.create_container(Some(options), body).await.expect("create echo").id;
    let attach =
        AttachContainerOptionsBuilder::default().stdin(true).stdout(true).stream(true).build();
    let mut attached = docker.attach_container(&id, Some(attach)).await.expect("attach");
    docker.start_container(&id, None).await.expect("start echo");
    let line = b"{\"type\":\"ping\",\"id\":\"echo\"}\n";
    let mut samples = Vec::with_capacity(ROUND_TRIPS);
    for i in 0..ROUND_TRIPS + 200 {
        let t = Instant::now();
        attached.input.write_all(line).await.expect("write");
        attached.input.flush().await.expect("flush");
        let mut got = 0;
        while got < line.len() {
            let chunk = attached.output.next().await.expect("echo output").expect("frame");
            got += chunk.as_ref().len();
        }
        if i >= 200 {
            samples.push(t.elapsed());
        }
    }
    let remove = RemoveContainerOptionsBuilder::default().force(true).build();
    docker.remove_container(&id, Some(remove)).await.expect("remove echo");
    stats(samples)
}

/// A fresh `docker run --rm -i` per request: start, one ping line, its answer, exit.
async fn fresh_docker_run(runs: usize) -> Stats {
    let mut samples = Vec::with_capacity(runs);
    for i in 0..runs {
        let t = Instant::now();
        let mut child = tokio::process::Command::new("docker")
            .args(["run", "--rm", "-i", "--network", "none", "--name"])
            .arg(format!("nxp-bench-fresh-{}-{i}", std::process::id()))
            .arg(IMAGE)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("docker run");
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"{\"type\":\"ping\",\"id\":\"fresh\"}\n").await.expect("write");
        let mut stdout = tokio::io::BufReader::new(child.stdout.take().unwrap());
        let mut answer = String::new();
        tokio::time::timeout(Duration::from_secs(30), stdout.read_line(&mut answer))
            .await
            .expect("fresh container answered")
            .expect("read");
        assert!(answer.contains("pong"), "{answer}");
        drop(stdin);
        tokio::time::timeout(Duration::from_secs(30), child.wait())
            .await
            .expect("fresh container exited")
            .expect("wait");
        samples.push(t.elapsed());
    }
    stats(samples)
}
