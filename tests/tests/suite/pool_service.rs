//! Service containers (what an MCP server runs in), against the real engine: made by the pool,
//! hardened exactly like its containers, with only the environment asked for; their stdio is
//! plain bytes both ways, their stderr goes to the log, their death is explained; a dead
//! daemon's are reaped by the next start and a pool's shutdown removes its own.
//!
//! The program is the subagent image's busybox: the module knows no MCP, so none is needed.

use crate::pool_common;

use std::collections::BTreeMap;
use std::time::Duration;

use nexbot_docker::{Owner, Pool, PoolError, ServiceLimits, ServiceSpec};
use pool_common::{containers_of, setup};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn spec(name: &str, script: &str) -> ServiceSpec {
    ServiceSpec {
        role: "test-service".into(),
        service: format!("test:{name}"),
        name: name.into(),
        image: pool_common::image(),
        command: vec!["/bin/busybox".into(), "sh".into(), "-c".into(), script.into()],
        env: BTreeMap::from([("GREETING".to_owned(), "hello".to_owned())]),
        labels: BTreeMap::from([("nexbot.test".to_owned(), name.to_owned())]),
        user: None,
        mounts: Vec::new(),
        limits: ServiceLimits::default(),
    }
}

#[tokio::test]
async fn a_service_container_is_hardened_like_the_pools_and_speaks_plain_bytes() {
    let Some((docker, mut config)) = setup("service").await else { return };
    config.size = 1;
    let pool = Pool::start(docker.clone(), config.clone()).await.expect("pool starts");

    // Planted in the daemon's own environment: nothing of it may reach the container.
    let planted = "sk-nxs-PLANTED-host-env-51f0";
    std::env::set_var("NXS_PLANTED_SECRET", planted);
    let script = "echo started >&2; env; echo ---; cat";
    let (service, mut io) = pool.start_service(&spec("echo", script)).await.expect("starts");
    let info = docker.inspect_container(service.id(), None).await.expect("inspect");
    let host = info.host_config.clone().expect("host config");
    assert_eq!(host.readonly_rootfs, Some(true));
    assert_eq!(host.cap_drop, Some(vec!["ALL".to_owned()]));
    assert_eq!(host.security_opt, Some(vec!["no-new-privileges:true".to_owned()]));
    assert_eq!(host.network_mode.as_deref(), Some(config.network.as_str()));
    assert_eq!(host.pids_limit, Some(nexbot_tests::expected_pids_limit(config.pids_limit)));
    assert_eq!(host.runtime.as_deref(), Some(nexbot_tests::expected_runtime().as_str()));
    assert_eq!(host.memory, Some(config.memory_bytes));
    assert!(host.binds.is_none(), "nothing of the host is mounted");
    let tmpfs = host.tmpfs.expect("tmpfs");
    assert_eq!(tmpfs.keys().collect::<Vec<_>>(), ["/tmp"], "no scratch, only /tmp");
    let container = info.config.expect("config");
    assert_eq!(container.user.as_deref(), Some("65532:65532"));
    let labels = container.labels.unwrap_or_default();
    assert_eq!(labels["nexbot.role"], "test-service");
    assert_eq!(labels[nexbot_docker::LABEL_SERVICE], "test:echo");
    assert_eq!(labels["nexbot.test"], "echo");
    let inspected = serde_json::to_string(&container.env).unwrap();
    assert!(!inspected.contains(planted) && !inspected.contains("HTTP_PROXY"), "{inspected}");
    assert!(service.address().is_some(), "an address on the pool network");

    // Bytes both ways; the environment inside is exactly what was asked (and the image's).
    io.stdin.write_all(b"ping \x00\xff bytes\n").await.unwrap();
    io.stdin.flush().await.unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    while !seen.ends_with(b"ping \x00\xff bytes\n") {
        let n = tokio::time::timeout_at(until, io.stdout.read(&mut buf))
            .await
            .expect("the echo comes back")
            .unwrap();
        assert!(n > 0, "stdout ended early: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&seen);
    let env = text.split("---").next().unwrap();
    assert!(env.contains("GREETING=hello"), "{env}");
    assert!(!env.contains(planted) && !env.contains("NXS_PLANTED"), "{env}");
    assert!(service.logs().iter().any(|l| l.contains("started")), "{:?}", service.logs());

    // Its death is explained, and its stdout ends.
    service.kill().await.expect("kill");
    let reason = tokio::time::timeout(Duration::from_secs(10), service.exited())
        .await
        .expect("exit noticed");
    assert!(reason.contains("exited with code 137"), "{reason}");
    assert_eq!(io.stdout.read(&mut buf).await.unwrap(), 0, "stdout ends with the container");

    // A secret-looking variable is refused before anything is created.
    let mut bad = spec("bad", "cat");
    bad.env.insert("GITHUB_TOKEN".into(), "ghp_x".into());
    let err = pool.start_service(&bad).await.expect_err("refused");
    assert!(
        matches!(&err, PoolError::InvalidConfig(text) if text.contains("env.GITHUB_TOKEN")),
        "{err}"
    );

    // Its own limits replace the pool's, and the engine holds it to them; one the engine
    // would refuse is refused first, naming it.
    let mut roomy = spec(
        "roomy",
        // cgroup v2, then v1's place (gVisor shows neither).
        "p=$(cat /sys/fs/cgroup/pids.max /sys/fs/cgroup/pids/pids.max 2>/dev/null | head -1); \
         echo \"pids=${p:-unknown}\"; df -k /tmp | tail -1; cat",
    );
    roomy.limits = ServiceLimits {
        memory_bytes: Some(3 * config.memory_bytes),
        pids_limit: Some(4 * config.pids_limit),
        tmp_size_bytes: Some(48 * 1024 * 1024),
    };
    let (roomy_service, mut roomy_io) = pool.start_service(&roomy).await.expect("starts");
    let info = docker.inspect_container(roomy_service.id(), None).await.expect("inspect");
    let host = info.host_config.expect("host config");
    assert_eq!(host.memory, Some(3 * config.memory_bytes));
    assert_eq!(host.memory_swap, Some(3 * config.memory_bytes), "no swap beyond it");
    assert_eq!(host.pids_limit, Some(nexbot_tests::expected_pids_limit(4 * config.pids_limit)));
    assert!(host.tmpfs.unwrap()["/tmp"].contains(&format!("size={}", 48 * 1024 * 1024)));
    let mut seen = String::new();
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    while seen.lines().count() < 2 {
        let n = tokio::time::timeout_at(until, roomy_io.stdout.read(&mut buf))
            .await
            .expect("its limits are printed")
            .unwrap();
        assert!(n > 0, "stdout ended early: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    let inside: Vec<&str> = seen.lines().collect();
    if !nexbot_tests::expected_runtime().contains("runsc") {
        assert_eq!(inside[0], format!("pids={}", 4 * config.pids_limit), "{seen}");
    }
    assert!(inside[1].split_whitespace().nth(1) == Some("49152"), "a 48 MiB /tmp: {seen}");
    roomy_service.stop().await;
    let mut tiny = spec("tiny", "cat");
    tiny.limits.memory_bytes = Some(1024);
    let err = pool.start_service(&tiny).await.expect_err("refused");
    assert!(
        matches!(&err, PoolError::InvalidConfig(text) if text.contains("limits: memory")),
        "{err}"
    );

    // The shutdown removes the pool's service containers with its own.
    let (second, _io) = pool.start_service(&spec("second", "cat")).await.expect("starts");
    assert!(containers_of(&docker, &config.name).await.contains(&second.id().to_owned()));
    pool.shutdown().await.expect("shutdown");
    assert!(containers_of(&docker, &config.name).await.is_empty(), "everything removed");
    let err = pool.start_service(&spec("late", "cat")).await.expect_err("after shutdown");
    assert!(matches!(err, PoolError::ShuttingDown), "{err:?}");
}

#[tokio::test]
async fn a_dead_daemons_service_containers_are_reaped_by_the_next_start() {
    let Some((docker, mut config)) = setup("service-reap").await else { return };
    config.size = 1;
    let mut sleeper = std::process::Command::new("sleep").arg("600").spawn().expect("sleep");
    let other = Owner::of_process(sleeper.id()).expect("identity");
    let theirs = Pool::start_owned(docker.clone(), config.clone(), other).await.expect("starts");
    // A service that outlives its stdin (as a careless server would).
    let (service, io) = theirs.start_service(&spec("stubborn", "sleep 600")).await.expect("starts");
    let id = service.id().to_owned();
    drop(io);
    drop(theirs); // the daemon crashed: no shutdown
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert!(containers_of(&docker, &config.name).await.contains(&id), "left behind");

    let ours = Pool::start(docker.clone(), config.clone()).await.expect("a dead owner's name");
    assert!(!containers_of(&docker, &config.name).await.contains(&id), "reaped");
    ours.shutdown().await.expect("shutdown");
}
