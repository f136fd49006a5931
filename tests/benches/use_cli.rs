//! `make bench`: what `use_cli` costs. The CLI image variant's size, and a `use_cli` task (the
//! real Qwen Code in `nexbot-subagent-cli:dev`, one model call answered at once by the scripted
//! LLM) end to end on a warm container — attached and waiting, as the pool keeps them — next
//! to the alternative of a fresh `docker run` of the image per task. Both run the container
//! with the pool's limits (read-only root, tmpfs scratch and /tmp, 256 MiB, 64 pids, no
//! capabilities). Prints figures; asserts nothing about speed.
//!
//! Why it matters: the CLI's own start (Node loading a 100 MB bundle) is paid per task either
//! way; what a warm container saves is the container's start on top of it.

use std::process::Stdio;
use std::time::{Duration, Instant};

use nexbot_protocol::Request;
use nexbot_tests::bench::{load_average, ms, record, DockerCleanup, Figure, Stats};
use nexbot_tests::scripted_llm::{ScriptedLlm, Step};
use secrecy::SecretString;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

const IMAGE: &str = "nexbot-subagent-cli:dev";
const RUNS: usize = 5;
const LIMIT: Duration = Duration::from_secs(120);

fn docker() -> Command {
    // Debian's client: the API version the engine here speaks.
    let client =
        if std::path::Path::new("/usr/bin/docker").exists() { "/usr/bin/docker" } else { "docker" };
    Command::new(client)
}

/// This run's own internal network (the pool's kind), created here: its gateway is where the
/// containers reach the scripted LLM. (The default bridge's IPAM may list no gateway after an
/// engine restart, which made this bench fail.)
async fn own_network(name: &str) -> std::net::IpAddr {
    let docker = nexbot_docker::connect(&Default::default()).await.expect("Docker engine");
    nexbot_docker::ensure_pool_network(&docker, name)
        .await
        .unwrap_or_else(|e| panic!("network {name}: {e}"))
        .gateway
}

/// `docker run -i` of the CLI image with the pool's limits, stdin and stdout attached.
fn run_container(network: &str) -> Child {
    docker()
        .args([
            "run",
            "--rm",
            "-i",
            "--network",
            network,
            "--read-only",
            "--memory",
            "256m",
            "--pids-limit",
            "64",
        ])
        .args(["--cap-drop", "ALL", "--security-opt", "no-new-privileges"])
        .args(["--tmpfs", "/workspace/scratch:uid=65532,gid=65532", "--tmpfs", "/tmp:mode=1777"])
        .args(["--label", "nexbot.bench=use_cli", IMAGE])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("docker run")
}

fn request(id: &str, base_url: &str) -> String {
    let mut request = Request::execute(id, "print the word ready");
    request.tools = Some(vec!["use_cli".into()]);
    request.run_tool = Some("use_cli".into());
    request.llm_base_url = Some(base_url.to_owned());
    request.llm_model = Some("scripted".into());
    request.llm_token = Some(SecretString::from("nxr_bench_token".to_owned()));
    request.timeout = Some(LIMIT.as_secs());
    let mut line = serde_json::to_string(&request).expect("request JSON");
    line.push('\n');
    line
}

/// Sends one task to `child` and waits for its final answer; panics unless it succeeded.
async fn task(
    child: &mut Child,
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    id: &str,
    base_url: &str,
) {
    let stdin = child.stdin.as_mut().expect("stdin");
    stdin.write_all(request(id, base_url).as_bytes()).await.expect("write request");
    loop {
        let line = tokio::time::timeout(LIMIT, lines.next_line())
            .await
            .expect("no answer in time")
            .expect("read stdout")
            .expect("the container ended before answering");
        let value: serde_json::Value = serde_json::from_str(&line).expect("a JSON line");
        match value["status"].as_str() {
            Some("progress") | Some("pong") => continue,
            Some("success") => {
                assert!(value["result"].as_str().unwrap_or("").contains("ready"), "{line}");
                return;
            }
            _ => panic!("use_cli task failed: {line}"),
        }
    }
}

#[tokio::main]
async fn main() {
    println!("load average at the start: {}", load_average());
    let size = docker()
        .args(["image", "inspect", IMAGE, "--format", "{{.Size}}"])
        .output()
        .await
        .expect("docker image inspect");
    let bytes: u64 = String::from_utf8_lossy(&size.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("the image {IMAGE} is missing: build it with `make cli-image`"));
    let mb = bytes as f64 / 1e6;
    println!("{IMAGE}: {mb:.1} MB");
    record(Figure::reference(
        "use_cli image size (nexbot-subagent-cli)",
        &format!("{mb:.1} MB"),
        "subagent + busybox + Node 22 + Qwen Code",
    ));

    let network = format!("nxb-cli-{}", std::process::id());
    let _cleanup = DockerCleanup::default().label("nexbot.bench", "use_cli").network(&network);
    let gateway = own_network(&network).await;
    let llm = ScriptedLlm::start_on(std::net::SocketAddr::new(gateway, 0), vec![]).await;
    llm.set_responder(|_| Step::text("ready"));
    let base_url = llm.base_url();

    // Warm: one container, attached once, serving task after task (the scrub runs between).
    let mut child = run_container(&network);
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    task(&mut child, &mut lines, "warm-up", &base_url).await;
    let mut warm = Vec::new();
    for i in 0..RUNS {
        let started = Instant::now();
        task(&mut child, &mut lines, &format!("warm-{i}"), &base_url).await;
        warm.push(started.elapsed());
    }
    drop(child.stdin.take());
    let _ = tokio::time::timeout(Duration::from_secs(20), child.wait()).await;

    // Fresh: `docker run` per task, its start included.
    let mut fresh = Vec::new();
    for i in 0..RUNS {
        let started = Instant::now();
        let mut child = run_container(&network);
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        task(&mut child, &mut lines, &format!("fresh-{i}"), &base_url).await;
        fresh.push(started.elapsed());
        drop(child.stdin.take());
        let _ = tokio::time::timeout(Duration::from_secs(20), child.wait()).await;
    }
    let (warm, fresh) = (Stats::of(warm), Stats::of(fresh));
    println!("{}", warm.line("use_cli task, warm container"));
    println!("{}", fresh.line("use_cli task, fresh docker run"));
    record(Figure::reference(
        "use_cli task on a warm container (p50)",
        &format!("{:.0} ms", ms(warm.p50)),
        "the CLI's own start + 1 instant model call",
    ));
    record(Figure::reference(
        "use_cli task, fresh docker run per task (p50)",
        &format!("{:.0} ms", ms(fresh.p50)),
        "the alternative: + container start",
    ));
}
