//! A container a test starts for itself ([`OwnedContainer`]): made and started through the
//! engine's API from a locally built image, removed (with its anonymous volumes) when its handle
//! drops, also when the test fails.
//!
//! Why not testcontainers: it did the same for these tests, but it turns on bollard's BuildKit
//! support, and with it a gRPC stack (tonic, prost) and about thirty other crates that CI built
//! for every run and no test used (issue 45 §4, docs/development.md). Nothing is pulled here
//! either: an image missing locally fails the test at once.

use std::collections::HashMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::time::Duration;

use bollard::container::LogOutput;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, LogsOptionsBuilder, RemoveContainerOptions,
    RemoveContainerOptionsBuilder,
};
use bollard::Docker;
use futures_util::{StreamExt, TryStreamExt};
use tokio::io::AsyncBufRead;

/// What a test's container is: the image, its command and where it runs. Everything else
/// (hardening, limits, stdin) goes into [`host`](Self::host) and [`body`](Self::body). Nothing
/// is pulled: a missing image fails [`OwnedContainer::start`].
#[derive(Debug, Clone, Default)]
pub struct ContainerSpec {
    /// The engine's create request; [`ContainerSpec::new`] fills the image, labels and network.
    pub body: ContainerCreateBody,
}

impl ContainerSpec {
    /// A container of `image` on `network` (`"bridge"`, `"none"`, or a network's name),
    /// labelled `label=value` so the suites' clean-up finds it after a crash.
    pub fn new(image: &str, network: &str, label: (&str, &str)) -> Self {
        let body = ContainerCreateBody {
            image: Some(image.to_owned()),
            labels: Some(HashMap::from([(label.0.to_owned(), label.1.to_owned())])),
            host_config: Some(HostConfig {
                network_mode: Some(network.to_owned()),
                ..HostConfig::default()
            }),
            ..ContainerCreateBody::default()
        };
        Self { body }
    }

    /// The program and its arguments, in place of the image's entrypoint and command.
    pub fn run(mut self, argv: &[&str]) -> Self {
        let (program, args) = argv.split_first().expect("a program to run");
        self.body.entrypoint = Some(vec![(*program).to_owned()]);
        self.body.cmd = Some(args.iter().map(|a| (*a).to_owned()).collect());
        self
    }

    /// One more `KEY=value` in the container's environment.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.body.env.get_or_insert_with(Vec::new).push(format!("{key}={value}"));
        self
    }

    /// The host configuration, to add hardening and limits to.
    pub fn host(&mut self) -> &mut HostConfig {
        self.body.host_config.get_or_insert_with(HostConfig::default)
    }
}

/// A started container, removed when dropped.
#[derive(Debug)]
pub struct OwnedContainer {
    docker: Docker,
    id: String,
    removed: bool,
}

impl OwnedContainer {
    /// Creates the container named `name` from `spec` and starts it. A container of that name
    /// left by an earlier run that crashed is removed first.
    pub async fn start(
        docker: &Docker,
        name: &str,
        spec: ContainerSpec,
    ) -> Result<Self, bollard::errors::Error> {
        let _ = docker.remove_container(name, Some(force_remove())).await;
        let options = CreateContainerOptionsBuilder::default().name(name).build();
        let created = docker.create_container(Some(options), spec.body).await?;
        let container = Self { docker: docker.clone(), id: created.id, removed: false };
        docker.start_container(&container.id, None).await?;
        Ok(container)
    }

    /// The container's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Its address on `network` (`"bridge"`: Docker's default bridge).
    pub async fn address_on(&self, network: &str) -> IpAddr {
        let inspected = self.docker.inspect_container(&self.id, None).await.expect("inspect");
        let networks = inspected.network_settings.and_then(|s| s.networks).unwrap_or_default();
        let ip = networks.get(network).and_then(|n| n.ip_address.clone()).unwrap_or_default();
        ip.parse()
            .unwrap_or_else(|_| panic!("container {} has no address on {network}: {ip:?}", self.id))
    }

    /// Its exit code once it has stopped; `None` while it runs.
    pub async fn exit_code(&self) -> Option<i64> {
        let inspected = self.docker.inspect_container(&self.id, None).await.expect("inspect");
        let state = inspected.state.expect("a container state");
        if state.running == Some(true) {
            return None;
        }
        Some(state.exit_code.unwrap_or(-1))
    }

    /// Waits up to `limit` for the container to stop and returns its exit code.
    pub async fn wait_exit(&self, limit: Duration) -> i64 {
        let exited = async {
            loop {
                if let Some(code) = self.exit_code().await {
                    return code;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        tokio::time::timeout(limit, exited).await.expect("the container exited in time")
    }

    /// What it writes to stdout (`stdout`) or to stderr, as it writes it: a reader that ends
    /// when the container does.
    pub fn follow(&self, stdout: bool) -> Pin<Box<dyn AsyncBufRead + Send>> {
        let options =
            LogsOptionsBuilder::default().follow(true).stdout(stdout).stderr(!stdout).build();
        let bytes = self.docker.logs(&self.id, Some(options)).map(|item| {
            item.map(LogOutput::into_bytes).map_err(|e| std::io::Error::other(e.to_string()))
        });
        Box::pin(tokio_util::io::StreamReader::new(bytes))
    }

    /// Everything it wrote to stdout and to stderr so far.
    pub async fn output(&self) -> (String, String) {
        let options = LogsOptionsBuilder::default().stdout(true).stderr(true).build();
        let logs: Vec<LogOutput> =
            self.docker.logs(&self.id, Some(options)).try_collect().await.expect("logs");
        let (mut out, mut err) = (String::new(), String::new());
        for entry in logs {
            match entry {
                LogOutput::StdErr { message } => err.push_str(&String::from_utf8_lossy(&message)),
                other => out.push_str(&String::from_utf8_lossy(&other.into_bytes())),
            }
        }
        (out, err)
    }

    /// Removes it now (and its anonymous volumes), failing the test if the engine refuses.
    pub async fn remove(mut self) {
        let removal = self.docker.remove_container(&self.id, Some(force_remove())).await;
        removal.expect("remove the container");
        self.removed = true;
    }
}

impl Drop for OwnedContainer {
    /// Removes the container however the test ends. The test's runtime may be the one this
    /// runs on (and busy dropping), so the removal has a thread, a runtime and a connection of
    /// its own (to the local engine, where these tests start their containers), and is waited
    /// for.
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        let id = std::mem::take(&mut self.id);
        let removal = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
            let Ok(runtime) = runtime else { return };
            runtime.block_on(async {
                let Ok(docker) = Docker::connect_with_local_defaults() else { return };
                if let Err(err) = docker.remove_container(&id, Some(force_remove())).await {
                    eprintln!("cannot remove the test's container {id}: {err}");
                }
            });
        });
        let _ = removal.join();
    }
}

/// Removal even while it runs, with its anonymous volumes.
fn force_remove() -> RemoveContainerOptions {
    RemoveContainerOptionsBuilder::default().force(true).v(true).build()
}
