//! A pool belongs to one daemon, against the real engine: a pool name or network owned by
//! another live nexbot instance is refused with a clear error and left untouched; once that
//! owner is gone, the next start reaps what it left (and takes its network over), and
//! `make down`'s leftovers removal (`docker/reap-leftovers.sh`) does the same.
//!
//! "Another daemon" is played by a child process (`sleep`): its pid and start time are what
//! the owner labels record, so killing it makes a dead owner, a pid that no longer exists.

use crate::pool_common;

use std::process::{Child, Command};

use bollard::Docker;
use nexbot_docker::pool_owner::LABEL_OWNER;
use nexbot_docker::{
    ensure_pool_network, ensure_pool_network_owned, Owner, Pool, PoolConfig, PoolError,
};
use pool_common::{containers_of, setup, Leftovers};

/// A stand-in for another nexbot daemon: alive until [`OtherDaemon::die`] (or drop).
struct OtherDaemon {
    child: Child,
    owner: Owner,
}

impl OtherDaemon {
    fn start() -> Self {
        let child = Command::new("sleep").arg("600").spawn().expect("spawn sleep");
        let owner = Owner::of_process(child.id()).expect("the child's identity");
        Self { child, owner }
    }

    fn die(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for OtherDaemon {
    fn drop(&mut self) {
        self.die();
    }
}

/// The owner instance recorded on each container of pool `name`.
async fn owners_of(docker: &Docker, name: &str) -> Vec<String> {
    let mut owners = Vec::new();
    for id in containers_of(docker, name).await {
        let info = docker.inspect_container(&id, None).await.expect("inspect");
        let labels = info.config.and_then(|c| c.labels).unwrap_or_default();
        owners.push(labels.get(LABEL_OWNER).cloned().unwrap_or_default());
    }
    owners
}

#[tokio::test]
async fn a_pool_name_of_a_live_instance_is_refused_and_a_dropped_ones_is_reaped() {
    let Some((docker, mut config)) = setup("owned").await else { return };
    config.size = 1;
    let first = Pool::start(docker.clone(), config.clone()).await.expect("first pool starts");
    let first_containers = containers_of(&docker, &config.name).await;
    assert_eq!(owners_of(&docker, &config.name).await, vec![Owner::current().instance.clone()]);

    // A second daemon instance (in this process) wants the same pool name: refused.
    let second = Owner::current().another_instance();
    let err = Pool::start_owned(docker.clone(), config.clone(), second.clone())
        .await
        .expect_err("the name belongs to a live pool");
    let text = err.to_string();
    assert!(matches!(err, PoolError::Owned { .. }), "{err:?}");
    assert!(text.contains(&format!("pool {:?}", config.name)), "{text}");
    assert!(text.contains(&format!("pid {}", std::process::id())), "{text}");
    assert!(text.contains("another name"), "{text}");
    assert_eq!(containers_of(&docker, &config.name).await, first_containers, "nothing touched");

    // The first is dropped without shutdown (its daemon crashed): the next start reaps it.
    drop(first);
    let third = Pool::start_owned(docker.clone(), config.clone(), second.clone())
        .await
        .expect("the dropped pool's name is free");
    let now = containers_of(&docker, &config.name).await;
    assert_eq!(now.len(), 1);
    assert!(first_containers.iter().all(|id| !now.contains(id)), "the old container was reaped");
    assert_eq!(owners_of(&docker, &config.name).await, vec![second.instance.clone()]);
    third.shutdown().await.expect("shutdown");
    // Shut down but not yet dropped: its name is free again (a daemon restarting its pool).
    let fourth =
        Pool::start(docker.clone(), config.clone()).await.expect("a shut-down pool's name is free");
    fourth.shutdown().await.expect("shutdown");
    drop(third);
}

#[tokio::test]
async fn another_live_daemons_pool_is_refused_and_a_dead_ones_is_reaped() {
    let Some((docker, mut config)) = setup("owned-other").await else { return };
    config.size = 1;
    let mut other = OtherDaemon::start();
    let theirs = Pool::start_owned(docker.clone(), config.clone(), other.owner.clone())
        .await
        .expect("the other daemon's pool starts");
    let their_containers = containers_of(&docker, &config.name).await;
    drop(theirs); // no shutdown: only the owner's liveness says whether it is still in use

    let err =
        Pool::start(docker.clone(), config.clone()).await.expect_err("owned by a live daemon");
    let text = err.to_string();
    assert!(matches!(err, PoolError::Owned { .. }), "{err:?}");
    assert!(text.contains(&format!("pool {:?}", config.name)), "{text}");
    assert!(text.contains(&format!("pid {}", other.child.id())), "{text}");
    assert!(text.contains("is running"), "{text}");
    assert!(text.contains("subagent.pool_name"), "{text}");
    assert_eq!(containers_of(&docker, &config.name).await, their_containers, "nothing touched");

    // The other daemon dies (its pid no longer exists): its leftovers are reaped.
    other.die();
    let ours = Pool::start(docker.clone(), config.clone()).await.expect("a dead owner's name");
    let now = containers_of(&docker, &config.name).await;
    assert!(their_containers.iter().all(|id| !now.contains(id)), "dead owner's containers reaped");
    assert_eq!(owners_of(&docker, &config.name).await, vec![Owner::current().instance.clone()]);
    ours.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn another_live_daemons_network_is_refused_and_a_dead_ones_is_taken_over() {
    let Some((docker, mut config)) = setup("owned-net").await else { return };
    let network = format!("nxp-owned-net-{}", std::process::id());
    let _leftovers = Leftovers { containers: Vec::new(), networks: vec![network.clone()] };
    config.size = 1;
    config.network = network.clone();
    let mut other = OtherDaemon::start();
    let theirs_config = PoolConfig { name: format!("{}-theirs", config.name), ..config.clone() };
    let created = ensure_pool_network_owned(&docker, &network, &other.owner)
        .await
        .expect("the other daemon's network");
    let theirs = Pool::start_owned(docker.clone(), theirs_config.clone(), other.owner.clone())
        .await
        .expect("the other daemon's pool starts on its network");
    let their_containers = containers_of(&docker, &theirs_config.name).await;
    drop(theirs);

    let err = ensure_pool_network(&docker, &network).await.expect_err("owned by a live daemon");
    let text = err.to_string();
    assert!(matches!(err, PoolError::Owned { .. }), "{err:?}");
    assert!(text.contains(&format!("network {network:?}")), "{text}");
    assert!(text.contains(&format!("pid {}", other.child.id())), "{text}");
    assert!(text.contains("subagent.network"), "{text}");
    let err = Pool::start(docker.clone(), config.clone()).await.expect_err("its network is taken");
    assert!(matches!(err, PoolError::Owned { .. }), "{err:?}");

    // Gone: its container on the network is removed and the network is made anew, ours.
    other.die();
    let ours = Pool::start(docker.clone(), config.clone()).await.expect("a dead owner's network");
    assert_ne!(ours.network().id, created.id, "the network was made anew");
    assert!(containers_of(&docker, &theirs_config.name).await.is_empty(), "{their_containers:?}");
    let labels = docker.inspect_network(&network, None).await.unwrap().labels.unwrap_or_default();
    assert_eq!(labels.get(LABEL_OWNER), Some(&Owner::current().instance));
    ours.shutdown().await.expect("shutdown");
    docker.remove_network(&network).await.expect("remove the test network");
}

/// Runs `docker/reap-leftovers.sh pool network` (what `make down` runs last).
fn reap_leftovers(pool: &str, network: &str) -> (bool, String) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../docker/reap-leftovers.sh");
    let out = Command::new("sh").arg(script).args([pool, network]).output().expect("run script");
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[tokio::test]
async fn make_down_removes_only_what_a_daemon_that_is_gone_left() {
    let Some((docker, mut config)) = setup("owned-down").await else { return };
    let network = format!("nxp-owned-down-{}", std::process::id());
    let _leftovers = Leftovers { containers: Vec::new(), networks: vec![network.clone()] };
    config.size = 1;
    config.network = network.clone();
    let mut other = OtherDaemon::start();
    ensure_pool_network_owned(&docker, &network, &other.owner).await.expect("network");
    let theirs = Pool::start_owned(docker.clone(), config.clone(), other.owner.clone())
        .await
        .expect("the other daemon's pool starts");
    let their_containers = containers_of(&docker, &config.name).await;
    drop(theirs);

    // Its daemon still runs: everything stays, and `make down` says so and fails.
    let (ok, out) = reap_leftovers(&config.name, &network);
    assert!(!ok, "{out}");
    assert!(out.contains("keeping container") && out.contains("keeping network"), "{out}");
    assert!(out.contains("pool containers remain"), "{out}");
    assert_eq!(containers_of(&docker, &config.name).await, their_containers);
    assert!(docker.inspect_network(&network, None).await.is_ok());

    // Gone: its containers and its network are removed.
    other.die();
    let (ok, out) = reap_leftovers(&config.name, &network);
    assert!(ok, "{out}");
    assert!(out.contains("removed leftover pool container"), "{out}");
    assert!(out.contains(&format!("removed network {network}")), "{out}");
    assert!(containers_of(&docker, &config.name).await.is_empty());
    assert!(docker.inspect_network(&network, None).await.is_err());

    // A pool of this live test process is never touched.
    let mine = PoolConfig { network: pool_common::network(), ..config.clone() };
    let pool = Pool::start(docker.clone(), mine.clone()).await.expect("pool starts");
    let (ok, out) = reap_leftovers(&mine.name, &format!("nxp-no-such-net-{}", std::process::id()));
    assert!(!ok, "{out}");
    assert!(out.contains("keeping container"), "{out}");
    assert_eq!(containers_of(&docker, &mine.name).await.len(), 1);
    pool.shutdown().await.expect("shutdown");
}
