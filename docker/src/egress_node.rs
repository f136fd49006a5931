//! The egress node's container on a remote engine (the node itself: `nexbot_egress::run_node`;
//! why it exists: docs/remote.md).
//!
//! Made by the daemon on the engine that runs the pool, from the daemon's own image: on that
//! machine's network (it must listen on the pool network's gateway and set its firewall rules
//! there), as root with only `NET_ADMIN` and `NET_RAW` (iptables), a read-only root and small
//! limits. Its stdin and stdout are the link: attached here, through the engine's mutually
//! authenticated API, so the node needs no port, certificate or key of its own.

use std::collections::HashMap;
use std::net::SocketAddr;

use bollard::container::LogOutput;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{CreateContainerOptionsBuilder, RemoveContainerOptionsBuilder};
use bollard::Docker;
use futures_util::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::error::PoolError;

/// The label every egress node carries (its value: the pool it serves).
pub const LABEL_EGRESS_NODE: &str = "nexbot.egress-node";

/// What the node container is made of.
#[derive(Debug, Clone)]
pub struct EgressNodeSpec {
    /// The container's name (one per pool: a leftover of that name is replaced).
    pub name: String,
    /// An image with `nexbot` (and iptables) as its entrypoint: the daemon's own.
    pub image: String,
    /// The pool's name, for the label.
    pub pool: String,
    /// Where it listens: the pool network's gateway there, and the port.
    pub listen: SocketAddr,
    /// The pool network's bridge there, confined to `listen`.
    pub bridge: String,
}

/// A running node: its container, and the link (its stdin and stdout).
pub struct EgressNodeLink {
    pub id: String,
    pub io: Box<dyn NodeIo>,
}

/// Both halves of the attached stdio, as one stream.
pub trait NodeIo: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> NodeIo for T {}

impl std::fmt::Debug for EgressNodeLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EgressNodeLink").field("id", &self.id).finish_non_exhaustive()
    }
}

/// Replaces any container named `spec.name`, then creates, attaches and starts the node.
/// Its stderr (its log) goes to this process's log.
pub async fn start_egress_node(
    docker: &Docker,
    spec: &EgressNodeSpec,
) -> Result<EgressNodeLink, PoolError> {
    remove_egress_node(docker, &spec.name).await?;
    let body = ContainerCreateBody {
        image: Some(spec.image.clone()),
        cmd: Some(
            ["egress-node", "--listen", &spec.listen.to_string(), "--bridge", &spec.bridge]
                .map(str::to_owned)
                .to_vec(),
        ),
        user: Some("0".into()),
        attach_stdin: Some(true),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        open_stdin: Some(true),
        stdin_once: Some(true),
        tty: Some(false),
        labels: Some(HashMap::from([(LABEL_EGRESS_NODE.to_owned(), spec.pool.clone())])),
        host_config: Some(HostConfig {
            network_mode: Some("host".into()),
            cap_drop: Some(vec!["ALL".into()]),
            cap_add: Some(vec!["NET_ADMIN".into(), "NET_RAW".into()]),
            readonly_rootfs: Some(true),
            tmpfs: Some(HashMap::from([("/run".to_owned(), "rw,nosuid,nodev,size=1m".to_owned())])),
            security_opt: Some(vec!["no-new-privileges:true".into()]),
            memory: Some(128 << 20),
            pids_limit: Some(64),
            ..HostConfig::default()
        }),
        ..ContainerCreateBody::default()
    };
    let options = CreateContainerOptionsBuilder::default().name(&spec.name).build();
    let created = docker
        .create_container(Some(options), body)
        .await
        .map_err(|e| PoolError::docker(format!("create the egress node {}", spec.name), e))?;
    let attached = crate::engine::attach_stdio(docker, &created.id, &spec.name).await?;
    docker
        .start_container(&created.id, None::<bollard::query_parameters::StartContainerOptions>)
        .await
        .map_err(|e| PoolError::docker(format!("start the egress node {}", spec.name), e))?;
    let name = spec.name.clone();
    let stdout = attached.output.filter_map(move |item| {
        let item = match item {
            Ok(LogOutput::StdOut { message }) => Some(Ok(message)),
            Ok(LogOutput::StdErr { message }) => {
                let line = String::from_utf8_lossy(&message);
                tracing::info!(node = %name, "{}", line.trim_end());
                None
            }
            Ok(_) => None,
            Err(e) => Some(Err(std::io::Error::other(e))),
        };
        std::future::ready(item)
    });
    let reader = tokio_util::io::StreamReader::new(Box::pin(stdout));
    let io = tokio::io::join(reader, attached.input);
    Ok(EgressNodeLink { id: created.id, io: Box::new(io) })
}

/// Removes the node named `name` (a stop, or a leftover), whatever its state.
pub async fn remove_egress_node(docker: &Docker, name: &str) -> Result<(), PoolError> {
    let remove = RemoveContainerOptionsBuilder::default().force(true).build();
    match docker.remove_container(name, Some(remove)).await {
        Ok(()) => Ok(()),
        Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => Ok(()),
        Err(e) => Err(PoolError::docker(format!("remove the egress node {name}"), e)),
    }
}
