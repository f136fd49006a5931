//! Reaching the Docker engine, and the few questions the host asks it outside a pool.
//!
//! The host talks to Docker only through this crate: [`connect`] makes the one connection (and
//! says clearly why there is none), [`engine_version`], [`image_present`], [`image_program`]
//! and [`network_gateway`] answer `nexbot doctor`, and the connection is then handed to
//! [`crate::Pool::start`] and [`crate::ensure_pool_network`].

use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use bollard::Docker;

use crate::config::{EngineAddress, SandboxConfig};
use crate::error::PoolError;

/// How long the engine gets to answer the first ping (and the version question).
pub const ENGINE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the engine cannot be used; the message says what was tried and what went wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineUnreachable {
    #[error("cannot connect to the Docker engine: {0}")]
    Connect(String),
    #[error("the Docker engine does not answer: {0}")]
    Refused(String),
    #[error("the Docker engine gave no answer within {} s", ENGINE_TIMEOUT.as_secs())]
    Timeout,
}

/// Connects to the engine `sandbox.engine` names (its socket, a remote engine over mutual TLS;
/// unset: `DOCKER_HOST`, else the local socket) and checks that it answers a ping within
/// [`ENGINE_TIMEOUT`].
pub async fn connect(sandbox: &SandboxConfig) -> Result<Docker, EngineUnreachable> {
    connect_reach(sandbox).await.map(|(docker, _)| docker)
}

/// [`connect`], and where the engine is, as [`EngineReach`] says it (address, the remote
/// engine's certificate, round trip).
pub async fn connect_reach(
    sandbox: &SandboxConfig,
) -> Result<(Docker, EngineReach), EngineUnreachable> {
    let address = sandbox.address().map_err(|e| EngineUnreachable::Connect(e.to_string()))?;
    let (docker, identity, place) = match &address {
        EngineAddress::Socket(path) => (
            Docker::connect_with_unix(path, 120, bollard::API_DEFAULT_VERSION),
            None,
            format!("unix://{path}"),
        ),
        EngineAddress::Default => {
            (Docker::connect_with_local_defaults(), None, "the local engine".to_owned())
        }
        EngineAddress::Remote(remote) => {
            let (docker, seen) = crate::remote::connect(remote)?;
            (Ok(docker), Some(seen), remote.url())
        }
    };
    let docker = docker.map_err(|e| EngineUnreachable::Connect(e.to_string()))?;
    let reach = EngineReach::new(place, identity);
    match tokio::time::timeout(ENGINE_TIMEOUT, reach.probe(&docker)).await {
        Ok(Ok(_)) => Ok((docker, reach)),
        Ok(Err(e)) => Err(EngineUnreachable::Refused(format!("{}: {}", reach.place, causes(&e)))),
        Err(_) => Err(EngineUnreachable::Timeout),
    }
}

/// `error` and each of its causes, `: `-separated: the HTTP client says only "client error
/// (Connect)"; the cause (refused, a certificate of an unknown issuer, a closed handshake) is
/// what the operator needs.
fn causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(cause) = next {
        let said = cause.to_string();
        if !text.contains(&said) {
            text.push_str(&format!(": {said}"));
        }
        next = cause.source();
    }
    text
}

/// Where the engine is and how it last answered: its address, for a remote engine the
/// certificate it presented, and the round trip of the last ping. Shared: clones see the same
/// figures.
#[derive(Debug, Clone)]
pub struct EngineReach {
    /// `unix:///…`, `tcp://HOST:PORT` or "the local engine".
    pub place: String,
    identity: Option<crate::remote::SeenIdentity>,
    last_rtt: Arc<Mutex<Option<Duration>>>,
}

impl EngineReach {
    fn new(place: String, identity: Option<crate::remote::SeenIdentity>) -> Self {
        Self { place, identity, last_rtt: Arc::default() }
    }

    /// Whether the engine is on another machine, reached over mutual TLS.
    pub fn remote(&self) -> bool {
        self.identity.is_some()
    }

    /// Pings the engine and records the round trip.
    pub async fn probe(&self, docker: &Docker) -> Result<Duration, bollard::errors::Error> {
        let start = std::time::Instant::now();
        docker.ping().await?;
        let rtt = start.elapsed();
        *self.last_rtt.lock().unwrap_or_else(|p| p.into_inner()) = Some(rtt);
        Ok(rtt)
    }

    /// Pings every `every` while `docker` lives in the caller's runtime, so the figures stay
    /// fresh (a failed ping leaves the last round trip; the outage is the pool's to report).
    pub fn watch(&self, docker: Docker, every: Duration) -> tokio::task::JoinHandle<()> {
        let reach = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let _ = tokio::time::timeout(ENGINE_TIMEOUT, reach.probe(&docker)).await;
            }
        })
    }

    /// One line: `tcp://10.0.0.2:2376 over mutual TLS (engine sha256:1a2b…), 1.3 ms`.
    pub fn line(&self) -> String {
        let mut line = self.place.clone();
        if let Some(identity) = &self.identity {
            let seen = identity.get().unwrap_or_else(|| "not yet seen".into());
            line.push_str(&format!(" over mutual TLS (engine certificate {seen})"));
        }
        if let Some(rtt) = *self.last_rtt.lock().unwrap_or_else(|p| p.into_inner()) {
            line.push_str(&format!(", round trip {:.1} ms", rtt.as_secs_f64() * 1e3));
        }
        line
    }
}

/// The engine's version and API version, e.g. `("20.10.24", "1.41")`.
pub async fn engine_version(docker: &Docker) -> Result<(String, String), EngineUnreachable> {
    match tokio::time::timeout(ENGINE_TIMEOUT, docker.version()).await {
        Ok(Ok(v)) => Ok((v.version.unwrap_or_default(), v.api_version.unwrap_or_default())),
        Ok(Err(e)) => Err(EngineUnreachable::Refused(e.to_string())),
        Err(_) => Err(EngineUnreachable::Timeout),
    }
}

/// Where the engine keeps its images and containers (`DockerRootDir` of `docker info`), as
/// the engine names it (a path on the engine's machine: visible here only when it is local and
/// not hidden by a container's mount namespace). `None` when the engine does not say.
pub async fn engine_root_dir(docker: &Docker) -> Option<std::path::PathBuf> {
    let info = tokio::time::timeout(ENGINE_TIMEOUT, docker.info()).await.ok()?.ok()?;
    info.docker_root_dir.filter(|d| !d.is_empty()).map(std::path::PathBuf::from)
}

/// Whether `image` exists in the local engine (nothing is ever pulled).
pub async fn image_present(docker: &Docker, image: &str) -> Result<(), PoolError> {
    inspect_image(docker, image).await.map(|_| ())
}

/// The engine's account of `image`; one it does not have is [`PoolError::ImageMissing`].
pub(crate) async fn inspect_image(
    docker: &Docker,
    image: &str,
) -> Result<bollard::models::ImageInspect, PoolError> {
    match docker.inspect_image(image).await {
        Ok(inspected) => Ok(inspected),
        Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => {
            Err(PoolError::ImageMissing { image: image.to_owned() })
        }
        Err(e) => Err(PoolError::docker(format!("inspect image {image}"), e)),
    }
}

/// Where `program` is in `image`'s file system: itself when it is a path, else the first
/// folder of the image's `PATH` that holds it (`None`: nowhere). Answers `nexbot doctor`'s
/// question whether a configured command can run, without running anything: the engine
/// makes a container that is never started (no network, labelled `nexbot.role=doctor`),
/// is asked for the paths, and removes it.
pub async fn image_program(
    docker: &Docker,
    image: &str,
    program: &str,
) -> Result<Option<String>, PoolError> {
    use bollard::models::{ContainerCreateBody, HostConfig};
    use bollard::query_parameters::{ContainerArchiveInfoOptions, RemoveContainerOptions};
    let inspected = inspect_image(docker, image).await?;
    let path_var = inspected
        .config
        .and_then(|c| c.env)
        .unwrap_or_default()
        .into_iter()
        .find_map(|v| v.strip_prefix("PATH=").map(str::to_owned))
        .unwrap_or_else(|| "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into());
    let candidates: Vec<String> = match program.contains('/') {
        true => vec![program.to_owned()],
        false => path_var
            .split(':')
            .filter(|dir| dir.starts_with('/'))
            .map(|dir| format!("{}/{program}", dir.trim_end_matches('/')))
            .collect(),
    };
    let body = ContainerCreateBody {
        image: Some(image.to_owned()),
        entrypoint: Some(vec![program.to_owned()]),
        labels: Some([("nexbot.role".to_owned(), "doctor".to_owned())].into()),
        network_disabled: Some(true),
        host_config: Some(HostConfig {
            network_mode: Some("none".into()),
            ..HostConfig::default()
        }),
        ..ContainerCreateBody::default()
    };
    let created = docker
        .create_container(None::<bollard::query_parameters::CreateContainerOptions>, body)
        .await
        .map_err(|e| PoolError::docker(format!("create a container of {image}"), e))?;
    let mut found = Ok(None);
    for path in candidates {
        let options = ContainerArchiveInfoOptions { path: path.clone() };
        match docker.get_container_archive_info(&created.id, Some(options)).await {
            Ok(_) => {
                found = Ok(Some(path));
                break;
            }
            Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => {}
            Err(e) => {
                found = Err(PoolError::docker(format!("look for {path} in {image}"), e));
                break;
            }
        }
    }
    let remove = RemoveContainerOptions { force: true, ..RemoveContainerOptions::default() };
    if let Err(e) = docker.remove_container(&created.id, Some(remove)).await {
        tracing::warn!(container = %created.id, "cannot remove doctor's container: {e}");
    }
    found
}

/// The gateway address of the internal network `name` (where host services for the pool
/// listen), or `None` when the network does not exist yet. Creates nothing; a network that
/// exists but is not internal, or has no gateway, is an error.
pub async fn network_gateway(docker: &Docker, name: &str) -> Result<Option<IpAddr>, PoolError> {
    Ok(crate::network::find(docker, name).await?.map(|info| info.gateway))
}
