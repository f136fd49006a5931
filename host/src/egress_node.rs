//! The egress node beside a remote engine's pool, kept running: started as a container there
//! (`nexbot_docker::start_egress_node`), its link served by this daemon's egress listener
//! (`nexbot_egress::NodeLinks`), started again with back-off when it ends. While it is down the
//! pool has no way out (nothing listens on the gateway there): new tasks are refused with the
//! reason, and `health` names it. Why a node at all, and why a tunnel: docs/remote.md.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nexbot_docker::{Docker, EgressNodeSpec, NetworkInfo};
use tokio_util::sync::CancellationToken;

use crate::config::Config;

/// The port the node listens on when `egress.port` is 0 (a port the OS picks on this machine
/// means nothing there).
const NODE_PORT: u16 = 3128;
/// The longest wait between two starts of a node that keeps ending.
const MOST_BACKOFF: Duration = Duration::from_secs(30);

/// The node's state as `health` and the task refusals say it.
#[derive(Debug, Default)]
struct State {
    up: bool,
    /// Why it is not up (the last start's error, or how its link ended).
    why: Option<String>,
}

/// A running node supervisor. [`RemoteNode::stop`] ends it and removes the node's container.
#[derive(Debug)]
pub struct RemoteNode {
    /// Where containers reach it (the pool network's gateway there).
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

/// Where a node reports up or down, for the relay access ([`crate::sandbox::RelayAccess`]).
#[derive(Debug, Clone)]
pub struct NodeWatch(Arc<Mutex<State>>);

impl NodeWatch {
    /// `None` while the node is up; otherwise why tasks cannot get out.
    pub fn down(&self) -> Option<String> {
        let state = self.0.lock().unwrap_or_else(|p| p.into_inner());
        (!state.up).then(|| {
            format!(
                "the egress node beside the remote engine is not running ({}): a task there \
                 has no way out; it is being started again",
                state.why.as_deref().unwrap_or("starting")
            )
        })
    }
}

impl RemoteNode {
    /// Starts the supervisor of the node for `network` on `docker`, its links served by
    /// `links`.
    pub fn start(
        config: &Config,
        docker: &Docker,
        network: &NetworkInfo,
        links: nexbot_egress::NodeLinks,
    ) -> Self {
        let port = match config.egress.port {
            0 => NODE_PORT,
            port => port,
        };
        let addr = SocketAddr::new(network.gateway, port);
        let spec = EgressNodeSpec {
            name: format!("{}-egress-node", config.subagent.pool_name),
            image: config.sandbox.node_image().to_owned(),
            pool: config.subagent.pool_name.clone(),
            listen: addr,
            bridge: network.bridge_interface(),
        };
        let state = Arc::new(Mutex::new(State::default()));
        let stop = CancellationToken::new();
        let task =
            tokio::spawn(supervise(docker.clone(), spec, links, state.clone(), stop.clone()));
        Self { addr, state, stop, task }
    }

    pub fn watch(&self) -> NodeWatch {
        NodeWatch(self.state.clone())
    }

    /// Waits up to `limit` for the node to be up (the first start).
    pub async fn wait_up(&self, limit: Duration) -> bool {
        let start = tokio::time::Instant::now();
        while start.elapsed() < limit {
            if self.watch().down().is_none() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    /// Ends the supervisor; its node's link closes and the node's container is removed.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

fn set(state: &Mutex<State>, up: bool, why: Option<String>) {
    *state.lock().unwrap_or_else(|p| p.into_inner()) = State { up, why };
}

/// Starts the node, serves its link until it ends, and again, with back-off, until `stop`.
async fn supervise(
    docker: Docker,
    spec: EgressNodeSpec,
    links: nexbot_egress::NodeLinks,
    state: Arc<Mutex<State>>,
    stop: CancellationToken,
) {
    let mut wait = Duration::from_secs(1);
    loop {
        match nexbot_docker::start_egress_node(&docker, &spec).await {
            Ok(node) => {
                tracing::info!(node = %spec.name, listen = %spec.listen, "egress node started");
                set(&state, true, None);
                wait = Duration::from_secs(1);
                let ended = tokio::select! {
                    ended = links.serve(node.io) => ended,
                    () = stop.cancelled() => Ok(()),
                };
                let why = match ended {
                    Ok(()) => "its link ended".to_owned(),
                    Err(e) => format!("its link failed: {e}"),
                };
                set(&state, false, Some(why.clone()));
                if stop.is_cancelled() {
                    break;
                }
                tracing::warn!(node = %spec.name, "egress node: {why}; starting it again");
            }
            Err(e) => {
                tracing::warn!(node = %spec.name, "cannot start the egress node: {e}");
                set(&state, false, Some(e.to_string()));
            }
        }
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = stop.cancelled() => break,
        }
        wait = (wait * 2).min(MOST_BACKOFF);
    }
    if let Err(e) = nexbot_docker::remove_egress_node(&docker, &spec.name).await {
        tracing::warn!(node = %spec.name, "egress node not removed: {e}");
    }
}
