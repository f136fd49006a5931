//! The engine goes away under a running pool and comes back: the pool names the engine while
//! it is away, keeps what it could not remove pending, and removes it once the engine is back.
//!
//! The pool reaches the real engine through a Unix-socket relay of this test's own; closing
//! the relay is, to the pool, the engine gone (every call fails with "client error
//! (Connect)", the attach streams end), while the real engine — shared with other tests —
//! stays up and can be asked what was left behind. It is the path of an engine restarted
//! under `live-restore`; a stopped engine, whose containers exit, leaves the pool the same
//! failures. Skipped when no engine answers or the subagent image is missing.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bollard::Docker;
use nexbot_docker::{Pool, PoolConfig, SlotState};
use tokio::net::{UnixListener, UnixStream};
use tokio::task::JoinSet;

/// A relay from a socket of its own to the engine's; `None` while it is down.
struct Relay {
    path: PathBuf,
    target: PathBuf,
    running: Option<JoinSet<()>>,
}

impl Relay {
    fn new(path: PathBuf, target: PathBuf) -> Self {
        Self { path, target, running: None }
    }

    fn start(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        let listener = UnixListener::bind(&self.path).expect("bind the relay socket");
        let target = self.target.clone();
        let mut tasks = JoinSet::new();
        tasks.spawn(async move {
            let mut connections = JoinSet::new();
            loop {
                let Ok((mut client, _)) = listener.accept().await else { return };
                let target = target.clone();
                connections.spawn(async move {
                    let Ok(mut engine) = UnixStream::connect(&target).await else { return };
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut engine).await;
                });
            }
        });
        self.running = Some(tasks);
    }

    /// Closes the socket and every connection through it: to the pool, the engine is gone.
    async fn stop(&mut self) {
        if let Some(mut tasks) = self.running.take() {
            // Aborting the accept loop drops its set, which aborts every relayed connection.
            tasks.shutdown().await;
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn engine_socket() -> Option<PathBuf> {
    match std::env::var("DOCKER_HOST") {
        Ok(host) if !host.is_empty() => host.strip_prefix("unix://").map(PathBuf::from),
        _ => Some(PathBuf::from("/var/run/docker.sock")),
    }
}

async fn eventually<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    check().await
}

async fn gone(engine: &Docker, id: &str) -> bool {
    matches!(
        engine.inspect_container(id, None).await,
        Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. })
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_pool_could_not_remove_while_the_engine_was_away_is_removed_when_it_returns() {
    let test = "engine_outage";
    let Some(target) = engine_socket().filter(|p| Path::new(p).exists()) else {
        eprintln!("\n!!! SKIPPED {test}: no local Docker socket !!!\n");
        return;
    };
    let engine = Docker::connect_with_local_defaults().expect("a client for the engine");
    if engine.ping().await.is_err() {
        eprintln!("\n!!! SKIPPED {test}: the Docker engine does not answer !!!\n");
        return;
    }
    let image = std::env::var("NEXBOT_TEST_IMAGE")
        .ok()
        .filter(|i| !i.trim().is_empty())
        .unwrap_or_else(|| "nexbot-subagent:dev".to_owned());
    if engine.inspect_image(&image).await.is_err() {
        eprintln!("\n!!! SKIPPED {test}: image {image} is missing (`make image`) !!!\n");
        return;
    }
    let pid = std::process::id();
    let mut relay = Relay::new(std::env::temp_dir().join(format!("nxp-outage-{pid}.sock")), target);
    relay.start();
    let path = relay.path.to_string_lossy().into_owned();
    let docker = Docker::connect_with_unix(&path, 30, bollard::API_DEFAULT_VERSION).unwrap();
    let name = format!("nxp-outage-{pid}");
    let config = PoolConfig {
        name: name.clone(),
        network: name.clone(),
        image,
        size: 1,
        ping_interval_ms: 1_000,
        ping_timeout_ms: 2_000,
        backoff_initial_ms: 200,
        backoff_max_ms: 1_000,
        ..PoolConfig::default()
    };
    let pool = Pool::start(docker, config).await.expect("pool starts");
    let old = pool.snapshot()[0].container_id.clone().unwrap();

    relay.stop().await;
    let named = eventually(Duration::from_secs(20), || async {
        pool.engine_outage().is_some() && pool.pending_removals() == 1
    })
    .await;
    let outage = pool.engine_outage();
    assert!(named, "engine outage {outage:?}, pending {}", pool.pending_removals());
    let outage = outage.unwrap();
    assert!(outage.error.contains("Connect"), "{outage:?}");
    assert!(pool.stats().pending_removal == 1, "{:?}", pool.stats());
    // The old container is still there: the pool could not remove it.
    assert!(!gone(&engine, &old).await, "removed without the engine?");

    relay.start();
    let healed = eventually(Duration::from_secs(60), || async {
        let s = &pool.snapshot()[0];
        s.state == SlotState::Idle
            && s.container_id.as_deref() != Some(old.as_str())
            && pool.pending_removals() == 0
            && gone(&engine, &old).await
    })
    .await;
    let left = engine.inspect_container(&old, None).await.map(|c| c.state);
    assert!(
        healed,
        "after the engine came back: {:?}, pending {}, old container {left:?}",
        pool.snapshot(),
        pool.pending_removals()
    );
    assert_eq!(pool.engine_outage(), None, "the outage ends with a container up");

    pool.shutdown().await.unwrap();
    relay.stop().await;
    let _ = nexbot_docker::remove_network(&engine, &name).await;
}
