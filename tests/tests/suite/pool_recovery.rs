//! The pool heals itself: a frozen container is found by its health pings and replaced, a task
//! past the host's hard limit gets a `timeout` answer and a fresh container, operator
//! restart/kill replace the container, and a pool dropped without shutdown (a host crash) is
//! reaped by the next pool of its name.

use crate::pool_common;

use std::time::{Duration, Instant};

use nexbot_docker::{Pool, RestartReason, SlotState};
use nexbot_protocol::{Request, ResponseBody};
use pool_common::{containers_of, eventually, setup};
use tokio_util::sync::CancellationToken;

/// The slot's container id, once the slot is idle with a container other than `old`.
fn replaced(pool: &Pool, slot: usize, old: &str) -> Option<String> {
    let s = &pool.snapshot()[slot];
    (s.state == SlotState::Idle && s.container_id.as_deref().is_some_and(|c| c != old))
        .then(|| s.container_id.clone().unwrap())
}

#[tokio::test]
async fn a_frozen_container_is_detected_by_ping_and_replaced() {
    let Some((docker, mut config)) = setup("frozen").await else { return };
    config.size = 2;
    config.ping_interval_ms = 300;
    config.ping_timeout_ms = 500;
    let pool = Pool::start(docker.clone(), config).await.expect("pool starts");
    let old = pool.snapshot()[0].container_id.clone().unwrap();

    // Under gVisor `docker pause` froze gVisor's kernel and the engine's kill of the paused
    // sandbox never returned (it hung the engine): there its pid 1 is stopped instead.
    if nexbot_tests::expected_runtime() == "runsc" {
        nexbot_tests::gvisor::runsc(&old, &["kill", "--pid", "1", &old, "STOP"]);
    } else {
        docker.pause_container(&old).await.expect("docker pause");
    }
    let healed =
        eventually(Duration::from_secs(15), || async { replaced(&pool, 0, &old).is_some() }).await;
    assert!(healed, "frozen container not replaced: {:?}", pool.snapshot());
    let s = &pool.snapshot()[0];
    assert_eq!((s.restarts, s.planned_replacements), (1, 0), "{s:?}");
    assert_eq!(s.last_restart, Some(RestartReason::Hung), "{s:?}");
    assert!(s.last_error.as_deref().unwrap().contains("stopped answering"), "{s:?}");
    assert!(
        docker.inspect_container(&old, None).await.is_err(),
        "the frozen container was removed"
    );
    assert!(pool.logs("0").unwrap().iter().any(|l| l.contains("stopped answering")));
    // Every container answers again. With the 500 ms ping timeout set above, one ping of a
    // busy CI machine (the other suites beside it) can miss it: asked again, within seconds.
    let answering = eventually(Duration::from_secs(10), || async {
        pool.ping_all().await.iter().all(|p| p.round_trip.is_ok())
    })
    .await;
    assert!(answering, "the healed pool does not answer pings: {:?}", pool.snapshot());
    pool.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_task_past_the_hard_limit_gets_timeout_and_a_fresh_container() {
    let Some((docker, mut config)) = setup("hardlimit").await else { return };
    config.size = 1;
    config.hard_limit_grace_secs = 1;
    config.ping_interval_ms = 600_000; // only the hard limit may act here
    let pool = Pool::start(docker.clone(), config).await.expect("pool starts");
    let old = pool.snapshot()[0].container_id.clone().unwrap();

    // Freeze the subagent process itself: the container lives, the task is never answered.
    // The subagent is the container's pid 1, which ignores SIGSTOP sent from inside its pid
    // namespace (a task cannot freeze it), so the signal comes from the host, as root. Under
    // gVisor the host's pid is gVisor's kernel: stopping it froze the whole sandbox and the
    // engine's kill then never returned, so there gVisor is asked to stop its pid 1 instead.
    if nexbot_tests::expected_runtime() == "runsc" {
        nexbot_tests::gvisor::runsc(&old, &["kill", "--pid", "1", &old, "STOP"]);
    } else {
        stop_on_the_host(&docker, &old).await;
    }
    let mut request = Request::execute("hard-limit-1", "never answered");
    request.timeout = Some(1);
    let started = Instant::now();
    let answer = tokio::time::timeout(
        Duration::from_secs(20),
        pool.execute(request, CancellationToken::new()),
    )
    .await
    .expect("the hard limit ends the wait")
    .expect("a timeout is a result, not an error");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_secs(2), "answered before timeout + grace: {waited:?}");
    assert_eq!(answer.id, "hard-limit-1");
    match answer.body {
        ResponseBody::Timeout { error, report } => {
            assert!(error.contains("hard limit"), "{error}");
            let report = report.expect("timeout carries a report");
            assert_eq!(report.task_id, "hard-limit-1");
            assert_eq!(report.timeout_secs, 1);
        }
        other => panic!("expected timeout, got {other:?}"),
    }
    let fresh =
        eventually(Duration::from_secs(15), || async { replaced(&pool, 0, &old).is_some() }).await;
    assert!(fresh, "no fresh container after the hard limit: {:?}", pool.snapshot());
    assert!(pool.snapshot()[0].last_error.as_deref().unwrap().contains("hard limit"));
    pool.shutdown().await.unwrap();
}

#[tokio::test]
async fn operator_restart_and_kill_replace_the_container() {
    let Some((docker, mut config)) = setup("opctl").await else { return };
    config.size = 2;
    let pool = Pool::start(docker.clone(), config).await.expect("pool starts");
    let first = pool.snapshot()[0].container_id.clone().unwrap();
    let second = pool.snapshot()[1].container_id.clone().unwrap();

    assert!(pool.restart("no-such-container").is_err());
    assert_eq!(pool.restart(&first[..12]).unwrap(), first[..12]);
    let killed = pool.kill(&pool.snapshot()[1].id.clone()).await.unwrap();
    assert_eq!(killed, second[..12]);

    let healed = eventually(Duration::from_secs(15), || async {
        replaced(&pool, 0, &first).is_some() && replaced(&pool, 1, &second).is_some()
    })
    .await;
    assert!(healed, "not replaced: {:?}", pool.snapshot());
    let snap = pool.snapshot();
    assert!(snap[0].last_error.as_deref().unwrap().contains("restarted by the operator"));
    assert_eq!(snap[0].last_restart, Some(RestartReason::RestartedByOperator));
    assert_eq!((snap[0].restarts, snap[0].planned_replacements), (0, 1), "{snap:?}");
    // A kill is unplanned, and says who did it rather than only "exited with code 137".
    assert!(snap[1].last_error.as_deref().unwrap().contains("killed by the operator"), "{snap:?}");
    assert_eq!(snap[1].last_restart, Some(RestartReason::KilledByOperator));
    assert_eq!((snap[1].restarts, snap[1].planned_replacements), (1, 0), "{snap:?}");
    assert_eq!(containers_of(&docker, &pool.config().name).await.len(), 2);
    pool.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_crashed_hosts_containers_are_reaped_by_the_next_pool() {
    let Some((docker, config)) = setup("reap").await else { return };
    let name = config.name.clone();
    let crashed = Pool::start(docker.clone(), config.clone()).await.expect("first pool starts");
    let old: Vec<String> = crashed.snapshot().into_iter().filter_map(|s| s.container_id).collect();
    drop(crashed); // no shutdown: as if the host died
    assert_eq!(containers_of(&docker, &name).await.len(), 3, "containers outlive a crash");
    // Their stdin closed with the host's connection, so they stop rather than run unattended.
    let stopped = eventually(Duration::from_secs(15), || async {
        let mut running = 0;
        for id in &old {
            let state = docker.inspect_container(id, None).await.unwrap().state.unwrap();
            running += usize::from(state.running == Some(true));
        }
        running == 0
    })
    .await;
    assert!(stopped, "orphaned containers kept running");

    let pool = Pool::start(docker.clone(), config).await.expect("second pool starts");
    let now = containers_of(&docker, &name).await;
    assert_eq!(now.len(), 3);
    assert!(old.iter().all(|id| !now.contains(id)), "old containers were not reaped");
    pool.shutdown().await.unwrap();
    assert!(containers_of(&docker, &name).await.is_empty());
}

/// SIGSTOP to the container's main process, from the host.
async fn stop_on_the_host(docker: &bollard::Docker, container: &str) {
    let pid = docker
        .inspect_container(container, None)
        .await
        .unwrap()
        .state
        .and_then(|state| state.pid)
        .filter(|pid| *pid > 0)
        .expect("the subagent's pid on the host");
    let stopped = std::process::Command::new("kill")
        .args(["-STOP", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(stopped.success(), "kill -STOP {pid} (the tests run as root)");
}
