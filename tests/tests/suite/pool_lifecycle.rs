//! Pool life cycle against the real engine: start, ping, snapshot, shutdown leaving nothing;
//! a pool dropped without shutdown (a host crash) is reaped by the next one of its name.

use crate::pool_common;

use std::time::{Duration, Instant};

use nexbot_docker::{Pool, PoolConfig, PoolError, SlotState};
use nexbot_protocol::Request;
use pool_common::{containers_of, eventually, setup};
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn pool_of_three_starts_answers_pings_and_shutdown_leaves_nothing() {
    let Some((docker, config)) = setup("life").await else { return };
    let name = config.name.clone();
    let started = Instant::now();
    let pool = Pool::start(docker.clone(), config).await.expect("pool starts");
    eprintln!("pool of 3 ready in {:?}", started.elapsed());

    let snapshot = pool.snapshot();
    assert_eq!(snapshot.len(), 3);
    for s in &snapshot {
        assert_eq!(s.state, SlotState::Idle, "{s:?}");
        assert!(s.container.as_ref().is_some_and(|c| c.len() == 12), "{s:?}");
        assert!(s.ip.is_some(), "{s:?}");
    }
    let pings = pool.ping_all().await;
    assert_eq!(pings.len(), 3);
    for p in &pings {
        assert!(p.round_trip.is_ok(), "{p:?}");
    }
    assert_eq!(containers_of(&docker, &name).await.len(), 3);
    // The wall: every container runs under the runtime asked for (the engine's default, runc,
    // unless the run names another), and the pool says which.
    assert_eq!(pool.runtime(), nexbot_tests::expected_runtime());
    for id in containers_of(&docker, &name).await {
        let inspected = docker.inspect_container(&id, None).await.expect("inspect");
        let runtime = inspected.host_config.and_then(|h| h.runtime);
        assert_eq!(runtime.as_deref(), Some(pool.runtime()), "container {id}");
    }

    // The egress proxy's view: a source address names its container.
    for s in &snapshot {
        let (container, task) = pool.container_for_address(s.ip.unwrap()).expect("known address");
        assert_eq!(Some(container), s.container_id);
        assert_eq!(task, None);
    }
    assert!(pool.container_for_address(pool.network().gateway).is_none());
    // Memory is sampled once each container is up; its stderr log lines are kept.
    let sampled = eventually(Duration::from_secs(10), || async {
        pool.snapshot().iter().all(|s| s.memory_bytes.is_some_and(|m| m > 0))
    })
    .await;
    assert!(sampled, "{:?}", pool.snapshot());
    let logs = pool.logs(&snapshot[0].id).unwrap();
    assert!(!logs.is_empty(), "the subagent's start-up log lines are kept");
    for line in &logs {
        let parsed: serde_json::Value = serde_json::from_str(line).expect("JSON log line");
        assert!(parsed.get("level").is_some(), "{line}");
    }
    assert!(pool.logs("nxp-no-such-slot").is_err());

    // Requests the pool refuses before they reach a container.
    let cancel = CancellationToken::new;
    let ping = pool.execute(Request::ping("p"), cancel()).await.unwrap_err();
    assert!(ping.to_string().contains("only execute requests"), "{ping}");
    let no_task = pool.execute(Request::execute("t1", "  "), cancel()).await.unwrap_err();
    assert!(no_task.to_string().contains("missing field: task"), "{no_task}");
    let mut endless = Request::execute("t2", "x");
    endless.timeout = Some(u64::MAX);
    let endless = pool.execute(endless, cancel()).await.unwrap_err();
    assert!(endless.to_string().contains("timeout"), "{endless}");
    assert!(pool.snapshot().iter().all(|s| s.state == SlotState::Idle && s.tasks_served == 0));

    tokio::time::timeout(Duration::from_secs(60), pool.shutdown())
        .await
        .expect("shutdown finishes")
        .expect("shutdown succeeds");
    assert!(containers_of(&docker, &name).await.is_empty(), "containers left after shutdown");
    let late = pool.execute(Request::execute("late", "t"), CancellationToken::new()).await;
    assert!(matches!(late, Err(PoolError::ShuttingDown)), "{late:?}");
    pool.shutdown().await.expect("a second shutdown is harmless");
}

#[tokio::test]
async fn start_refuses_a_missing_image_and_a_bad_runtime_and_leaves_nothing() {
    let Some((docker, config)) = setup("refuse").await else { return };
    let name = config.name.clone();
    let missing = PoolConfig { image: "nxp-no-such-image:none".into(), ..config.clone() };
    let err = Pool::start(docker.clone(), missing).await.expect_err("no image, no pool");
    assert!(matches!(err, PoolError::ImageMissing { .. }), "{err}");
    assert!(
        err.to_string().contains("nxp-no-such-image:none")
            && err.to_string().contains("make image")
    );

    let bad_runtime = PoolConfig { runtime: Some("nxp-no-such-runtime".into()), ..config.clone() };
    let err = Pool::start(docker.clone(), bad_runtime).await.expect_err("bad runtime, no pool");
    // Refused before anything is created, naming what the engine has and how to register it.
    let PoolError::RuntimeMissing { runtime, registered, fix } = &err else { panic!("{err}") };
    assert_eq!(runtime, "nxp-no-such-runtime");
    assert!(registered.split(", ").any(|r| r == "runc"), "{err}");
    assert!(fix.contains("/etc/docker/daemon.json") && fix.contains("kill -HUP"), "{err}");
    assert!(containers_of(&docker, &name).await.is_empty(), "a failed start leaves nothing");

    let invalid = PoolConfig { size: 0, ..config };
    let err = Pool::start(docker, invalid).await.expect_err("invalid config");
    assert!(err.to_string().contains("size"), "{err}");
}

/// `sandbox.engine`: the daemon reaches the engine through the socket it names (here the local
/// engine's own), and one that is not there is said with the path, not taken for the default.
#[tokio::test]
async fn the_engine_is_reached_through_the_socket_sandbox_engine_names() {
    let Some(_) = setup("engine").await else { return };
    let socket = ["/var/run/docker.sock", "/run/docker.sock"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("the local engine's socket");
    let named = nexbot_docker::SandboxConfig {
        engine: Some(format!("unix://{socket}")),
        ..Default::default()
    };
    let docker = nexbot_docker::connect(&named).await.expect("the named socket answers");
    let (version, _) = nexbot_docker::engine_version(&docker).await.expect("version");
    assert!(!version.is_empty());
    let gone = nexbot_docker::SandboxConfig {
        engine: Some("unix:///nonexistent/nxp-engine.sock".into()),
        ..Default::default()
    };
    let err = nexbot_docker::connect(&gone).await.expect_err("no engine there");
    assert!(err.to_string().contains("/nonexistent/nxp-engine.sock"), "{err}");
}
