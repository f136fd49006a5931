//! The internal Docker network the subagent containers live on.
//!
//! An `internal: true` network has no route beyond itself: a container on it reaches other
//! members and the host's address on the network's bridge (the *gateway*), nothing else. That
//! gateway address is where host-side services meant for containers (the egress proxy, the
//! LLM relay, test fixtures) listen, so [`ensure_internal_network`] returns it.

use std::collections::HashMap;
use std::net::IpAddr;

use bollard::models::NetworkCreateRequest;
use bollard::query_parameters::ListNetworksOptionsBuilder;
use bollard::Docker;
use serde::Serialize;
use tokio::sync::Mutex;

use crate::error::PoolError;

/// Label put on networks this crate creates, so they can be told apart from the operator's.
pub const NETWORK_LABEL: &str = "nexbot.network";

/// What a caller needs to know about the internal network.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NetworkInfo {
    pub id: String,
    pub name: String,
    /// CIDR of the network, e.g. `172.30.0.0/16`.
    pub subnet: String,
    /// The host's address on the network: containers reach host services here.
    pub gateway: IpAddr,
    /// `true` when this call created the network (the caller may remove it later).
    pub created: bool,
    /// The bridge interface name set by the network's options, if any (see
    /// [`NetworkInfo::bridge_interface`]).
    #[serde(skip)]
    pub bridge: Option<String>,
}

impl NetworkInfo {
    /// The network's bridge interface on the host: the `com.docker.network.bridge.name`
    /// option when the network was created with one, else Docker's default name, `br-` and
    /// the first 12 characters of the id.
    pub fn bridge_interface(&self) -> String {
        match &self.bridge {
            Some(bridge) => bridge.clone(),
            None => format!("br-{}", self.id.get(..12).unwrap_or(&self.id)),
        }
    }
}

/// The labels of the pool's network, whoever creates it.
fn pool_network_labels() -> HashMap<String, String> {
    HashMap::from([(crate::spec::LABEL_ROLE.to_owned(), "subagent-network".to_owned())])
}

/// Returns the pool's internal network `name`, creating it when missing: the one place the
/// pool network is made, whether [`crate::Pool::start`] or the host (which needs its gateway
/// before the pool starts) asks first.
pub async fn ensure_pool_network(docker: &Docker, name: &str) -> Result<NetworkInfo, PoolError> {
    ensure_internal_network(docker, name, &pool_network_labels()).await
}

/// Engine 20.10 (API 1.41) creates a second network with the same name instead of failing,
/// unless asked not to, and bollard's request type has no such flag; serialising our own
/// creations closes the race inside one process, and [`dedupe`] closes it across processes.
static CREATE_LOCK: Mutex<()> = Mutex::const_new(());

/// Returns the internal network `name`, creating it (with `labels` plus [`NETWORK_LABEL`])
/// when it does not exist. An existing network that is not internal is refused: attaching
/// subagents to it would give them a route out.
pub async fn ensure_internal_network(
    docker: &Docker,
    name: &str,
    labels: &HashMap<String, String>,
) -> Result<NetworkInfo, PoolError> {
    let _guard = CREATE_LOCK.lock().await;
    if let Some(info) = find(docker, name).await? {
        return Ok(info);
    }
    let mut all_labels = labels.clone();
    all_labels.insert(NETWORK_LABEL.into(), name.into());
    let request = NetworkCreateRequest {
        name: name.into(),
        driver: Some("bridge".into()),
        internal: Some(true),
        labels: Some(all_labels),
        ..Default::default()
    };
    let created = docker
        .create_network(request)
        .await
        .map_err(|e| PoolError::docker(format!("create network {name}"), e))?;
    let winner = dedupe(docker, name).await?;
    let mut info = inspect(docker, &winner).await?;
    info.created = winner == created.id;
    Ok(info)
}

/// Removes the network `name` (containers still attached make this fail with a clear error).
pub async fn remove_network(docker: &Docker, name: &str) -> Result<(), PoolError> {
    docker
        .remove_network(name)
        .await
        .map_err(|e| PoolError::docker(format!("remove network {name}"), e))
}

/// Ids of the networks whose name is exactly `name` (the engine's filter matches substrings).
async fn ids_named(docker: &Docker, name: &str) -> Result<Vec<String>, PoolError> {
    let filters = HashMap::from([("name", vec![name])]);
    let networks = docker
        .list_networks(Some(ListNetworksOptionsBuilder::default().filters(&filters).build()))
        .await
        .map_err(|e| PoolError::docker(format!("list networks named {name}"), e))?;
    let mut ids: Vec<String> = networks
        .into_iter()
        .filter(|n| n.name.as_deref() == Some(name))
        .filter_map(|n| n.id)
        .collect();
    ids.sort();
    Ok(ids)
}

pub(crate) async fn find(docker: &Docker, name: &str) -> Result<Option<NetworkInfo>, PoolError> {
    match ids_named(docker, name).await?.first() {
        Some(id) => Ok(Some(inspect(docker, id).await?)),
        None => Ok(None),
    }
}

/// When racing creators made several networks of one name, every racer keeps the one with the
/// smallest id and removes the rest; all agree on the winner without talking to each other.
async fn dedupe(docker: &Docker, name: &str) -> Result<String, PoolError> {
    let ids = ids_named(docker, name).await?;
    let Some((winner, losers)) = ids.split_first() else {
        return Err(PoolError::Network {
            name: name.into(),
            reason: "was created but is not listed by the engine".into(),
        });
    };
    for loser in losers {
        // Another racer may remove it first; either way it is gone.
        let _ = docker.remove_network(loser).await;
    }
    Ok(winner.clone())
}

async fn inspect(docker: &Docker, id: &str) -> Result<NetworkInfo, PoolError> {
    let net = docker
        .inspect_network(id, None)
        .await
        .map_err(|e| PoolError::docker(format!("inspect network {id}"), e))?;
    let name = net.name.clone().unwrap_or_default();
    let fail = |reason: &str| PoolError::Network { name: name.clone(), reason: reason.into() };
    if net.internal != Some(true) {
        return Err(fail(
            "exists but is not internal (internal: true); refusing to attach subagents to it",
        ));
    }
    let config = net
        .ipam
        .and_then(|ipam| ipam.config)
        .and_then(|configs| {
            configs.into_iter().find(|c| c.subnet.as_deref().is_some_and(|s| s.contains('.')))
        })
        .ok_or_else(|| fail("has no IPv4 subnet in its IPAM config"))?;
    let subnet = config.subnet.unwrap_or_default();
    let gateway = config
        .gateway
        .as_deref()
        .and_then(|g| g.split('/').next())
        .and_then(|g| g.parse().ok())
        .ok_or_else(|| fail("has no gateway address in its IPAM config"))?;
    let bridge = net.options.and_then(|mut o| o.remove("com.docker.network.bridge.name"));
    Ok(NetworkInfo {
        id: net.id.unwrap_or_default(),
        name,
        subnet,
        gateway,
        created: false,
        bridge,
    })
}
