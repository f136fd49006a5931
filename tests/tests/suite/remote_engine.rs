//! The pool on an engine on "another machine" ([`nexbot_tests::remote::RemoteHost`]: a
//! `dockerd` in a network namespace of the test's own, reached only over TCP with mutual TLS):
//! images copied by id, the pool's containers made there and nowhere else, hardened as here,
//! unable to reach anything; a wrong certificate on either side refused; the engine's restart
//! survived.

use crate::pool_common;

use std::time::Duration;

use nexbot_docker::{sync_image, ImageSync, Pool, SlotState};
use nexbot_protocol::ResponseBody;
use nexbot_tests::remote::RemoteHost;
use pool_common::{containers_of, eventually, setup};
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn a_pool_runs_on_a_remote_engine_over_mutual_tls_and_nothing_of_it_runs_here() {
    let Some((local, mut config)) = setup("remote").await else { return };
    let remote = RemoteHost::start();
    let (docker, reach) = nexbot_docker::connect_reach(&remote.sandbox())
        .await
        .expect("the remote engine answers over mutual TLS");
    assert!(reach.remote());
    let line = reach.line();
    assert!(line.starts_with(&remote.url()), "{line}");
    assert!(line.contains(&remote.server_fingerprint), "the engine's identity: {line}");
    assert!(line.contains("round trip"), "{line}");

    // The image by id: the empty engine gets it copied, then has it.
    assert_eq!(remote.docker(&["images", "-q"]).as_deref(), Some(""));
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let seen = sent.clone();
    let copied = sync_image(&local, &docker, &config.image, move |n, _| {
        seen.store(n, std::sync::atomic::Ordering::Relaxed)
    })
    .await
    .expect("the image is copied");
    let ImageSync::Copied { id, bytes } = copied else { panic!("{copied:?}") };
    assert!(bytes > 0 && sent.load(std::sync::atomic::Ordering::Relaxed) == bytes);
    let local_id = local.inspect_image(&config.image).await.unwrap().id.unwrap();
    assert_eq!(id, local_id);
    let again = sync_image(&local, &docker, &config.image, |_, _| {}).await.unwrap();
    assert_eq!(again, ImageSync::Same { id: local_id.clone() });
    // Another image under the same tag there is replaced, not trusted by its name.
    remote.docker(&["create", "--name", "stale", &config.image]).expect("a container");
    remote
        .docker(&["commit", "--change", "LABEL nexbot.test=stale", "stale", &config.image])
        .expect("committed");
    remote.docker(&["rm", "-f", "stale"]);
    let replaced = sync_image(&local, &docker, &config.image, |_, _| {}).await.unwrap();
    assert!(matches!(&replaced, ImageSync::Copied { id, .. } if *id == local_id), "{replaced:?}");

    config.size = 2;
    let name = config.name.clone();
    let pool = Pool::start(docker.clone(), config).await.expect("the pool starts there");
    pool.set_reach(reach.clone());
    assert!(pool.engine_place().is_some_and(|p| p.contains(&remote.server_fingerprint)));
    for p in pool.ping_all().await {
        assert!(p.round_trip.is_ok(), "{p:?}");
    }
    // Made there, and nothing here.
    let there = containers_of(&docker, &name).await;
    assert_eq!(there.len(), 2);
    assert!(containers_of(&local, &name).await.is_empty(), "nothing of the pool runs here");
    let listed = remote.docker(&["ps", "-q", "--no-trunc"]).unwrap();
    for id in &there {
        assert!(listed.contains(id.as_str()), "{id} not on the remote host: {listed}");
        // Hardened as a local one.
        let inspected = docker.inspect_container(id, None).await.unwrap();
        let host = inspected.host_config.unwrap();
        assert_eq!(host.cap_drop, Some(vec!["ALL".to_owned()]));
        assert_eq!(host.readonly_rootfs, Some(true));
        assert!(host.memory.is_some_and(|m| m > 0));
        let user = inspected.config.and_then(|c| c.user).unwrap_or_default();
        assert!(!user.is_empty() && !user.starts_with("0") && user != "root", "{user:?}");
    }
    // A request goes through and is answered (the task is refused for want of LLM settings:
    // nothing out there would answer one).
    let answer = tokio::time::timeout(
        Duration::from_secs(30),
        pool.execute(
            nexbot_protocol::Request::execute("remote-1", "no LLM settings"),
            CancellationToken::new(),
        ),
    )
    .await
    .expect("answered in time")
    .expect("execute on the remote engine");
    assert!(matches!(answer.body, ResponseBody::Error { .. }), "{answer:?}");
    // From a container there, this machine (the veth's far end, where a listener waits) is
    // out of reach: nothing leaves the internal network there.
    let listener = tokio::net::TcpListener::bind((remote.peer, 0)).await.expect("a listener here");
    let url = format!("http://{}/", listener.local_addr().unwrap());
    let (code, out) =
        pool_common::exec(&docker, &there[0], &format!("wget -T 3 -q -O- {url} && echo REACHED"))
            .await;
    assert!(code != 0 && !out.contains("REACHED"), "{code}: {out}");
    let accepted = tokio::time::timeout(Duration::from_millis(200), listener.accept()).await;
    assert!(accepted.is_err(), "a connection came from the remote pool");

    // The engine restarts: the pool notices, then comes back by itself.
    let mut remote = remote;
    remote.stop();
    let down =
        eventually(Duration::from_secs(30), || async { pool.engine_outage().is_some() }).await;
    assert!(down, "the outage is seen: {:?}", pool.snapshot());
    remote.restart();
    let back = eventually(Duration::from_secs(90), || async {
        pool.snapshot().iter().all(|s| s.state == SlotState::Idle) && pool.engine_outage().is_none()
    })
    .await;
    assert!(back, "the pool came back: {:?}", pool.snapshot());
    for p in pool.ping_all().await {
        assert!(p.round_trip.is_ok(), "{p:?}");
    }
    pool.shutdown().await.expect("clean shutdown");
    assert!(containers_of(&docker, &name).await.is_empty());
}

#[tokio::test]
async fn a_wrong_certificate_on_either_side_is_refused() {
    if nexbot_tests::docker_or_skip("remote-refused").await.is_none() {
        return;
    }
    let remote = RemoteHost::start();
    // A client the engine's CA never signed: the engine ends the handshake.
    let err = nexbot_docker::connect(&remote.sandbox_with(&remote.stranger, &remote.client.ca))
        .await
        .expect_err("a stranger's certificate is refused");
    eprintln!("a stranger client: {err}");
    assert!(err.to_string().contains(&remote.url()), "{err}");
    assert!(err.to_string().contains("BadCertificate"), "the engine's alert: {err}");
    // An engine whose certificate the daemon's CA did not sign: the daemon ends it.
    let err = nexbot_docker::connect(&remote.sandbox_with(&remote.client, &remote.stranger.ca))
        .await
        .expect_err("an engine of another CA is refused");
    let text = format!("{err:?}");
    eprintln!("an engine of another CA: {err}");
    assert!(text.contains("invalid peer certificate: UnknownIssuer"), "{text}");
    // Files that are not there: said with the setting's name.
    let mut missing = remote.sandbox();
    missing.tls_key = Some("/nonexistent/key.pem".into());
    let err = nexbot_docker::connect(&missing).await.expect_err("no key");
    assert!(err.to_string().contains("sandbox.tls_key /nonexistent/key.pem"), "{err}");
    // The right pair still works.
    nexbot_docker::connect(&remote.sandbox())
        .await
        .expect("the daemon's own certificate is accepted");
}

#[tokio::test]
async fn a_cut_link_ends_the_task_in_time_and_the_pool_comes_back_when_it_returns() {
    let Some((local, mut config)) = setup("remote-cut").await else { return };
    let remote = RemoteHost::start();
    let engine = remote.sandbox();
    let docker = nexbot_docker::connect(&engine).await.expect("the remote engine");
    sync_image(&local, &docker, &config.image, |_, _| {}).await.expect("the image");
    config.size = 1;
    let pool = Pool::start(docker.clone(), config).await.expect("the pool starts there");
    remote.cut();
    let mut request = nexbot_protocol::Request::execute("cut-1", "no LLM settings");
    request.timeout = Some(3);
    let started = std::time::Instant::now();
    let answer = tokio::time::timeout(
        Duration::from_secs(60),
        pool.execute(request, CancellationToken::new()),
    )
    .await
    .expect("the task ends although the link is cut");
    eprintln!("with the link cut, after {:?}: {answer:?}", started.elapsed());
    match &answer {
        Ok(response) => assert!(matches!(response.body, ResponseBody::Error { .. }), "{answer:?}"),
        Err(e) => assert!(!e.to_string().is_empty()),
    }
    let down = eventually(Duration::from_secs(30), || async {
        pool.snapshot().iter().all(|s| s.state != SlotState::Idle)
    })
    .await;
    assert!(down, "the container that cannot be heard is not offered: {:?}", pool.snapshot());
    remote.mend();
    let back = eventually(Duration::from_secs(120), || async {
        pool.snapshot().iter().all(|s| s.state == SlotState::Idle)
    })
    .await;
    assert!(back, "the pool came back: {:?}", pool.snapshot());
    for p in pool.ping_all().await {
        assert!(p.round_trip.is_ok(), "{p:?}");
    }
    // The container it could not hear is removed once the engine answers: nothing left there.
    let one = eventually(Duration::from_secs(60), || async {
        let all = remote.docker(&["ps", "-aq"]).unwrap_or_default();
        pool.pending_removals() == 0 && all.split_whitespace().count() == 1
    })
    .await;
    assert!(one, "left on the remote engine: {:?}", remote.docker(&["ps", "-a"]));
    pool.shutdown().await.expect("clean shutdown");
}
