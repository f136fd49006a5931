//! The internal Docker network the subagent containers live on.
//!
//! An `internal: true` network has no route beyond itself: a container on it reaches the
//! host's address on the network's bridge (the *gateway*) and nothing else. That gateway
//! address is where host-side services meant for containers (the egress proxy, the LLM relay,
//! test fixtures) listen, so [`ensure_internal_network`] returns it.
//!
//! The network is made in one place, with everything the sandbox needs of it:
//! - `internal: true`: no route off the host;
//! - inter-container traffic off (`com.docker.network.bridge.enable_icc=false`): one task's
//!   container cannot reach another's, only the gateway;
//! - no IPv6 (see [`ensure_internal_network`] for why);
//! - the labels of its [`Owner`], so that a network of another live daemon is refused.
//!
//! An existing network without those settings, or one whose owner is gone, is recreated
//! (keeping its IPv4 subnet and bridge options) once no live container uses it; one that a
//! live container still uses is refused with an error that names the fix.

use std::collections::HashMap;
use std::net::IpAddr;

use bollard::models::{Ipam, NetworkCreateRequest, NetworkInspect};
use bollard::query_parameters::{
    ListContainersOptionsBuilder, ListNetworksOptionsBuilder, RemoveContainerOptionsBuilder,
};
use bollard::Docker;
use serde::Serialize;
use tokio::sync::Mutex;

use crate::error::PoolError;
use crate::pool_owner::{self, Liveness, Owner};
use crate::spec::{LABEL_INSTANCE, LABEL_ROLE};

/// Label put on networks this crate creates, so they can be told apart from the operator's.
pub const NETWORK_LABEL: &str = "nexbot.network";
/// The bridge driver's option that turns inter-container traffic on the bridge on or off.
pub const ICC_OPTION: &str = "com.docker.network.bridge.enable_icc";

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
/// before the pool starts) asks first. Owned by this process ([`Owner::current`]).
pub async fn ensure_pool_network(docker: &Docker, name: &str) -> Result<NetworkInfo, PoolError> {
    ensure_pool_network_owned(docker, name, Owner::current()).await
}

/// [`ensure_pool_network`] on behalf of `owner` (tests stand in for another daemon with it).
pub async fn ensure_pool_network_owned(
    docker: &Docker,
    name: &str,
    owner: &Owner,
) -> Result<NetworkInfo, PoolError> {
    ensure(docker, name, &pool_network_labels(), owner).await
}

/// Engine 20.10 (API 1.41) creates a second network with the same name instead of failing,
/// unless asked not to, and bollard's request type has no such flag; serialising our own
/// creations closes the race inside one process, and [`dedupe`] closes it across processes.
static CREATE_LOCK: Mutex<()> = Mutex::const_new(());

/// Returns the internal network `name`, creating it (with `labels`, [`NETWORK_LABEL`] and
/// this process's owner labels) when it does not exist. An existing network is used when this
/// process owns it and it has the sandbox's settings; otherwise see the module's docs.
///
/// **IPv6 is off**, and a network with IPv6 is recreated without it (or refused while in
/// use), rather than the egress firewall being doubled with `ip6tables`: the egress path
/// (listener, firewall, proxy) is IPv4 on the gateway, the proxy dials IPv6 destinations from
/// the host on a container's behalf, so containers need no IPv6 of their own; and Docker 20.10
/// keeps no IPv6 isolation rules of its own (its `ip6tables` support is experimental and off by
/// default), so on an IPv6 network the internal, ICC and firewall rules would all have an
/// unguarded twin. The container spec also switches IPv6 off inside each container
/// (`net.ipv6.conf.{all,default}.disable_ipv6=1`), so not even link-local addresses exist.
pub async fn ensure_internal_network(
    docker: &Docker,
    name: &str,
    labels: &HashMap<String, String>,
) -> Result<NetworkInfo, PoolError> {
    ensure(docker, name, labels, Owner::current()).await
}

async fn ensure(
    docker: &Docker,
    name: &str,
    labels: &HashMap<String, String>,
    owner: &Owner,
) -> Result<NetworkInfo, PoolError> {
    let _guard = CREATE_LOCK.lock().await;
    let mut template = None;
    if let Some(existing) = find_raw(docker, name).await? {
        match assess(docker, &existing, owner).await? {
            None => return info(existing),
            Some(why) => {
                take_over(docker, &existing, &why).await?;
                template = Some(existing);
            }
        }
    }
    let request = create_request(name, labels, owner, template.as_ref());
    let created = docker
        .create_network(request)
        .await
        .map_err(|e| PoolError::docker(format!("create network {name}"), e))?;
    let winner = dedupe(docker, name).await?;
    let net = inspect_raw(docker, &winner).await?;
    if winner != created.id {
        // A racer in another process won: it must be a network we may use.
        if let Some(why) = assess(docker, &net, owner).await? {
            return Err(PoolError::Network {
                name: name.into(),
                reason: format!("was created at the same time by someone else, and {why}"),
            });
        }
    }
    if winner == created.id {
        if let Some(problems) = unsafe_settings(&net) {
            // Made by this call with the safe settings, yet the engine reports otherwise: it
            // cannot keep them. Measured: Podman 4.3 drops enable_icc=false.
            let _ = docker.remove_network(&winner).await;
            return Err(PoolError::Network {
                name: name.into(),
                reason: format!(
                    "the engine made it, asked for internal, no inter-container traffic and no \
                     IPv6, but it {problems}: this engine cannot keep the sandbox's network \
                     walls (Podman's networks have no way to turn inter-container traffic off), \
                     so nothing is attached to it; run the sandboxes on Docker's engine"
                ),
            });
        }
    }
    let mut info = info(net)?;
    info.created = winner == created.id;
    Ok(info)
}

/// The request that creates the network; a `template` (the network being replaced) lends
/// its IPv4 address plan, driver options and labels, so an operator's subnet or bridge name
/// survives the replacement.
fn create_request(
    name: &str,
    labels: &HashMap<String, String>,
    owner: &Owner,
    template: Option<&NetworkInspect>,
) -> NetworkCreateRequest {
    let mut all_labels: HashMap<String, String> = template
        .and_then(|t| t.labels.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| !k.starts_with(pool_owner::LABEL_OWNER))
        .collect();
    all_labels.extend(labels.clone());
    all_labels.insert(NETWORK_LABEL.into(), name.into());
    all_labels.extend(owner.labels());
    let mut options = template.and_then(|t| t.options.clone()).unwrap_or_default();
    options.insert(ICC_OPTION.into(), "false".into());
    let ipam = template.and_then(|t| t.ipam.clone()).and_then(|ipam| {
        let v4: Vec<_> = ipam
            .config
            .unwrap_or_default()
            .into_iter()
            .filter(|c| c.subnet.as_deref().is_some_and(|s| s.contains('.')))
            .collect();
        (!v4.is_empty()).then_some(Ipam { config: Some(v4), ..ipam })
    });
    NetworkCreateRequest {
        name: name.into(),
        driver: Some("bridge".into()),
        internal: Some(true),
        enable_ipv6: Some(false),
        options: Some(options),
        ipam,
        labels: Some(all_labels),
        ..Default::default()
    }
}

/// Why the existing network may not be used as it is (`None`: use it), or an error when it
/// belongs to another live daemon.
async fn assess(
    docker: &Docker,
    net: &NetworkInspect,
    owner: &Owner,
) -> Result<Option<String>, PoolError> {
    let name = net.name.clone().unwrap_or_default();
    let recorded = net.labels.as_ref().and_then(Owner::from_labels);
    let mine = recorded.as_ref().is_some_and(|r| {
        // Pools of one process share a network.
        r.instance == owner.instance || r.same_process(Owner::current())
    });
    if !mine {
        return Ok(Some(match &recorded {
            None => "it carries no owner (made by an older nexbot or by hand)".to_owned(),
            Some(r) => match pool_owner::liveness(docker, r).await? {
                Liveness::Live(why) => {
                    return Err(PoolError::Owned {
                        what: format!("network {name:?}"),
                        owner: r.describe(),
                        why,
                        fix: "stop that daemon, or give this one another subagent.network \
                              (and subagent.pool_name)"
                            .into(),
                    })
                }
                Liveness::Dead(why) => format!("its owner, {}, is gone ({why})", r.describe()),
            },
        }));
    }
    Ok(unsafe_settings(net))
}

/// What makes `net` unfit for the sandbox, if anything.
pub(crate) fn unsafe_settings(net: &NetworkInspect) -> Option<String> {
    let mut problems = Vec::new();
    if net.internal != Some(true) {
        problems.push("is not internal (internal: true)");
    }
    let icc = net.options.as_ref().and_then(|o| o.get(ICC_OPTION)).map(String::as_str);
    if icc != Some("false") {
        problems.push("lets containers reach each other (no enable_icc=false)");
    }
    let v6_subnet =
        net.ipam.as_ref().and_then(|i| i.config.as_ref()).is_some_and(|c| {
            c.iter().any(|c| c.subnet.as_deref().is_some_and(|s| s.contains(':')))
        });
    if net.enable_ipv6 == Some(true) || v6_subnet {
        problems.push("has IPv6, which the egress firewall does not cover");
    }
    (!problems.is_empty()).then(|| problems.join(", "))
}

/// Makes way for a new network `net` (unfit because `why`): removes the containers on it
/// whose owner is gone, then the network. A live container on it stops everything, with an
/// error naming it and the fix.
async fn take_over(docker: &Docker, net: &NetworkInspect, why: &str) -> Result<(), PoolError> {
    let name = net.name.clone().unwrap_or_default();
    let id = net.id.clone().unwrap_or_default();
    let filters = HashMap::from([("network", vec![id.clone()])]);
    let options = ListContainersOptionsBuilder::default().all(true).filters(&filters).build();
    let attached = docker
        .list_containers(Some(options))
        .await
        .map_err(|e| PoolError::docker(format!("list the containers on network {name}"), e))?;
    for container in attached {
        let Some(cid) = container.id.clone() else { continue };
        let short: String = cid.chars().take(12).collect();
        let labels = container.labels.unwrap_or_default();
        let running = container.state.as_ref().is_some_and(|s| s.to_string() == "running");
        let verdict = match Owner::from_labels(&labels) {
            Some(owner) => {
                let run = labels.get(LABEL_INSTANCE).cloned().unwrap_or_default();
                let verdict = pool_owner::owner_of_run_is_live(docker, &owner, &run).await?;
                if let Liveness::Live(live) = &verdict {
                    if owner.same_process(Owner::current()) {
                        return Err(PoolError::Network {
                            name,
                            reason: format!(
                                "{why}, but a pool of this process uses it (container {short}); \
                                 shut that pool down first"
                            ),
                        });
                    }
                    return Err(PoolError::Owned {
                        what: format!("network {name:?} (container {short} on it)"),
                        owner: owner.describe(),
                        why: live.clone(),
                        fix: "stop that daemon, or give this one another subagent.network".into(),
                    });
                }
                verdict
            }
            None if running => {
                let whose = if labels.contains_key(LABEL_ROLE) {
                    "an older nexbot's"
                } else {
                    "not nexbot's"
                };
                return Err(PoolError::Network {
                    name,
                    reason: format!(
                        "{why}, but running container {short} ({whose}) uses it; stop it, or \
                         remove the network yourself (docker network rm), or choose another \
                         subagent.network"
                    ),
                });
            }
            // A stopped container nexbot cannot attribute is left alone.
            None => continue,
        };
        tracing::info!(network = %name, container = %short, ?verdict, "removing a dead owner's container");
        let remove = RemoveContainerOptionsBuilder::default().force(true).v(true).build();
        match docker.remove_container(&cid, Some(remove)).await {
            Ok(())
            | Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => {}
            Err(e) => return Err(PoolError::docker(format!("remove container {short}"), e)),
        }
    }
    match docker.remove_network(&id).await {
        Ok(())
        | Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => {}
        Err(e) => {
            return Err(PoolError::Network {
                name,
                reason: format!(
                    "{why}, and it could not be removed to be recreated: {e}; remove it \
                     yourself (docker network rm) or choose another subagent.network"
                ),
            })
        }
    }
    tracing::warn!(network = %name, "network recreated: {why}");
    Ok(())
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

async fn find_raw(docker: &Docker, name: &str) -> Result<Option<NetworkInspect>, PoolError> {
    match ids_named(docker, name).await?.first() {
        Some(id) => Ok(Some(inspect_raw(docker, id).await?)),
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

async fn inspect_raw(docker: &Docker, id: &str) -> Result<NetworkInspect, PoolError> {
    docker
        .inspect_network(id, None)
        .await
        .map_err(|e| PoolError::docker(format!("inspect network {id}"), e))
}

/// What a caller needs of a network this crate may use.
fn info(net: NetworkInspect) -> Result<NetworkInfo, PoolError> {
    if let Some(problems) = unsafe_settings(&net) {
        return Err(PoolError::Network {
            name: net.name.unwrap_or_default(),
            reason: format!("{problems}; refusing to attach subagents to it"),
        });
    }
    addresses(net)
}

/// The network `name` as it is, if it exists (for `nexbot doctor`, which changes nothing: a
/// network without ICC off or with IPv6 is fixed when the daemon starts, keeping its
/// addresses). One that is not internal is an error.
pub(crate) async fn find(docker: &Docker, name: &str) -> Result<Option<NetworkInfo>, PoolError> {
    let Some(net) = find_raw(docker, name).await? else { return Ok(None) };
    if net.internal != Some(true) {
        return Err(PoolError::Network {
            name: name.into(),
            reason: "exists but is not internal (internal: true)".into(),
        });
    }
    addresses(net).map(Some)
}

fn addresses(net: NetworkInspect) -> Result<NetworkInfo, PoolError> {
    let name = net.name.clone().unwrap_or_default();
    let fail = |reason: &str| PoolError::Network { name: name.clone(), reason: reason.into() };
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
