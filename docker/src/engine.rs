//! The pool's conversations with the Docker engine: bring a container up (create, attach,
//! start, first pong), find out how one died, read its memory use, and remove containers by
//! label. Kept apart from the scheduling logic so that the latter reads as policy.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bollard::models::ContainerSummary;
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, CreateContainerOptionsBuilder, ListContainersOptionsBuilder,
    RemoveContainerOptionsBuilder, StatsOptionsBuilder, WaitContainerOptionsBuilder,
};
use bollard::Docker;
use futures_util::StreamExt;
use nexbot_protocol::Request;
use tokio_util::sync::CancellationToken;

use crate::config::PoolConfig;
use crate::error::PoolError;
use crate::link::{Link, LinkError};
use crate::logs::LogRing;
use crate::member::Member;
use crate::pool_owner::{self, Liveness, Owner};
use crate::removal::{Removals, Remove};
use crate::restart::RestartReason;
use crate::runtime::OciRuntime;
use crate::spec::{container_spec, LABEL_INSTANCE, LABEL_POOL};

/// How long the engine gets to remove a container before the pool stops waiting.
const REMOVE_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a dead container's exit status is awaited to explain its death. Its waiters hear
/// nothing until then, so this stays well under the promised 2 s.
const EXIT_STATUS_TIMEOUT: Duration = Duration::from_millis(800);
const INSPECT_TIMEOUT: Duration = Duration::from_millis(500);

/// What every container operation needs: the engine, the config and this pool instance.
#[derive(Debug)]
pub(crate) struct Engine {
    pub(crate) docker: Docker,
    pub(crate) config: PoolConfig,
    /// The runtime every container is made under, resolved with the engine before any is.
    pub(crate) runtime: OciRuntime,
    /// Unique per `Pool::start` (the pool *run*), so that a restarted host can tell its
    /// containers from an earlier run's.
    pub(crate) instance: String,
    /// The daemon instance the pool belongs to; its labels go on every container.
    pub(crate) owner: Owner,
    /// Fires when the pool goes away; background readers stop on it.
    pub(crate) stop: CancellationToken,
    /// Containers let go of but not removed yet (the engine was away), and their retries.
    pub(crate) removals: Removals,
}

impl Remove for Engine {
    /// Force-removes container `id`; one that is already gone counts as removed.
    async fn try_remove(&self, id: &str) -> Result<(), PoolError> {
        let options = RemoveContainerOptionsBuilder::default().force(true).v(true).build();
        let removal = self.docker.remove_container(id, Some(options));
        match tokio::time::timeout(REMOVE_TIMEOUT, removal).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            })) => Ok(()),
            Ok(Err(e)) => {
                let short: String = id.chars().take(12).collect();
                Err(PoolError::docker(format!("remove container {short}"), e))
            }
            Err(_) => Err(PoolError::EngineTimeout {
                action: "remove a container".into(),
                secs: REMOVE_TIMEOUT.as_secs(),
            }),
        }
    }
}

impl Engine {
    pub(crate) fn new(
        docker: Docker,
        instance: String,
        owner: Owner,
        config: PoolConfig,
        runtime: OciRuntime,
    ) -> Self {
        let (stop, removals) = (CancellationToken::new(), Removals::default());
        Self { docker, config, runtime, instance, owner, stop, removals }
    }

    /// Creates, attaches and starts the container for `slot`, and waits for its first pong.
    /// Anything created is removed again when a later step fails.
    pub(crate) async fn bring_up(
        self: &Arc<Self>,
        slot: usize,
        logs: Arc<LogRing>,
        ready_timeout: Duration,
    ) -> Result<Arc<Member>, PoolError> {
        let body = container_spec(&self.config, &self.runtime, &self.owner, &self.instance, slot)?;
        let suffix = uuid::Uuid::new_v4().simple().to_string();
        let name = format!("{}-{slot}-{}", self.config.name, &suffix[..8]);
        let options = CreateContainerOptionsBuilder::default().name(&name).build();
        let t0 = Instant::now();
        let created = self
            .docker
            .create_container(Some(options), body)
            .await
            .map_err(|e| PoolError::docker(format!("create container {name}"), e))?;
        let create_time = t0.elapsed();
        match self.attach_and_start(&created.id, logs, ready_timeout).await {
            Ok(member) => {
                tracing::debug!(
                    container = %member.short_id,
                    slot,
                    create_ms = create_time.as_millis() as u64,
                    total_ms = t0.elapsed().as_millis() as u64,
                    "container up"
                );
                Ok(member)
            }
            Err(e) => {
                self.remove(&created.id).await;
                Err(e)
            }
        }
    }

    async fn attach_and_start(
        self: &Arc<Self>,
        id: &str,
        logs: Arc<LogRing>,
        ready_timeout: Duration,
    ) -> Result<Arc<Member>, PoolError> {
        let short: String = id.chars().take(12).collect();
        let attached = self.attach(id, &short).await?;
        let link = Link::new(short.clone(), attached.input);
        self.spawn_reader(id.to_owned(), link.clone(), attached.output, logs);
        self.docker
            .start_container(id, None)
            .await
            .map_err(|e| PoolError::docker(format!("start container {short}"), e))?;
        let started = Instant::now();
        let ip = self.container_ip(id).await?;
        let ready = Request::brief_ping(format!("nexbot-pool-ready-{short}"));
        match link.roundtrip(&ready, ready_timeout).await {
            Ok(_) => {}
            Err(LinkError::Closed(reason)) => {
                return Err(PoolError::ContainerFailed {
                    container: short,
                    request: "its first ping".into(),
                    reason,
                })
            }
            Err(_) => {
                link.fail("did not answer its first ping");
                return Err(PoolError::PingTimeout {
                    container: short,
                    timeout_ms: ready_timeout.as_millis() as u64,
                });
            }
        }
        let budget = crate::member::random_task_budget(self.config.max_tasks_per_container);
        Ok(Arc::new(Member::new(id.to_owned(), ip, started, link, budget)))
    }

    /// Attaches to the stdio of created container `id` (`name` for errors), before it starts:
    /// nothing it writes is missed.
    pub(crate) async fn attach(
        &self,
        id: &str,
        name: &str,
    ) -> Result<bollard::container::AttachContainerResults, PoolError> {
        attach_stdio(&self.docker, id, name).await
    }

    /// Reads the container's output until it ends, then fails the link with the best
    /// explanation of the container's death that the engine can give.
    fn spawn_reader(
        self: &Arc<Self>,
        id: String,
        link: Arc<Link>,
        output: crate::link::Output,
        logs: Arc<LogRing>,
    ) {
        let engine = self.clone();
        tokio::spawn(async move {
            let stop = engine.stop.clone();
            let (cause, reason) = match link.read_output(output, &logs, &stop).await {
                Some(ended) => engine.explain_death(&id, &ended).await,
                None => (None, "the pool was shut down".to_owned()),
            };
            link.fail_because(cause, &reason);
        });
    }

    /// "was OOM-killed", "exited with code N", or `fallback` when the engine cannot say; with
    /// the cause as a value when the engine could tell.
    pub(crate) async fn explain_death(
        &self,
        id: &str,
        fallback: &str,
    ) -> (Option<RestartReason>, String) {
        let wait_options = WaitContainerOptionsBuilder::default().condition("not-running").build();
        let mut wait = self.docker.wait_container(id, Some(wait_options));
        // A non-zero exit arrives as an error item; either way the container is down.
        let _ = tokio::time::timeout(EXIT_STATUS_TIMEOUT, wait.next()).await;
        let inspect =
            tokio::time::timeout(INSPECT_TIMEOUT, self.docker.inspect_container(id, None));
        match inspect.await {
            Err(_) => (None, fallback.to_owned()),
            Ok(Ok(info)) => {
                let state = info.state.unwrap_or_default();
                if state.oom_killed == Some(true) {
                    (Some(RestartReason::OomKilled), self.oom_reason())
                } else if state.running == Some(true) {
                    (None, fallback.to_owned())
                } else {
                    let code = state.exit_code.unwrap_or(-1);
                    (
                        Some(RestartReason::Exited { code }),
                        format!("container exited with code {code}"),
                    )
                }
            }
            Ok(Err(_)) => (None, format!("{fallback} (container is gone)")),
        }
    }

    pub(crate) fn oom_reason(&self) -> String {
        format!(
            "container was OOM-killed (memory limit {} MiB)",
            self.config.memory_bytes / (1024 * 1024)
        )
    }

    pub(crate) async fn container_ip(&self, id: &str) -> Result<Option<IpAddr>, PoolError> {
        let info = self
            .docker
            .inspect_container(id, None)
            .await
            .map_err(|e| PoolError::docker(format!("inspect container {id}"), e))?;
        Ok(info
            .network_settings
            .and_then(|n| n.networks)
            .and_then(|mut nets| nets.remove(&self.config.network))
            .and_then(|n| n.ip_address)
            .and_then(|ip| ip.parse().ok()))
    }

    /// Memory in use by the container (page cache excluded), from one non-streaming stats
    /// sample.
    pub(crate) async fn memory_use(&self, id: &str) -> Option<u64> {
        let options = StatsOptionsBuilder::default().stream(false).one_shot(true).build();
        let mut stats = self.docker.stats(id, Some(options));
        // Off every hot path, so a slow engine may take its time.
        let sample =
            tokio::time::timeout(Duration::from_secs(5), stats.next()).await.ok()??.ok()?;
        let memory = sample.memory_stats?;
        let usage = memory.usage?;
        let cache = memory
            .stats
            .as_ref()
            .and_then(|s| s.get("total_inactive_file").or_else(|| s.get("inactive_file")).copied());
        Some(usage.saturating_sub(cache.unwrap_or(0)))
    }

    /// Force-removes one container, once; failures are logged (it may already be gone).
    /// Where a failure must not leave the container behind, see [`Engine::remove_in_background`].
    pub(crate) async fn remove(&self, id: &str) {
        if let Err(e) = self.try_remove(id).await {
            tracing::warn!(container = id, "could not remove container: {e}");
        }
    }

    /// Removes a container the pool let go of, in the background: retried with back-off
    /// while the engine cannot (it is away, restarting), and counted as pending removal
    /// meanwhile ([`crate::removal`]).
    pub(crate) fn remove_in_background(self: &Arc<Self>, id: &str) {
        let (engine, id) = (self.clone(), id.to_owned());
        tokio::spawn(async move {
            engine.removals.remove_until_gone(&*engine, &id, &engine.stop).await;
        });
    }

    /// Ids of the containers of this pool run.
    pub(crate) async fn list(&self) -> Result<Vec<String>, PoolError> {
        let containers = self
            .labelled(vec![
                format!("{LABEL_POOL}={}", self.config.name),
                format!("{LABEL_INSTANCE}={}", self.instance),
            ])
            .await?;
        Ok(containers.into_iter().filter_map(|c| c.id).collect())
    }

    /// Every container (running or not) carrying all of `labels` (`key=value`).
    async fn labelled(&self, labels: Vec<String>) -> Result<Vec<ContainerSummary>, PoolError> {
        let filters = HashMap::from([("label", labels)]);
        let options = ListContainersOptionsBuilder::default().all(true).filters(&filters).build();
        self.docker
            .list_containers(Some(options))
            .await
            .map_err(|e| PoolError::docker("list the pool's containers", e))
    }

    /// Removes every container of this pool run, in parallel, and returns how many there
    /// were.
    pub(crate) async fn reap(&self) -> Result<usize, PoolError> {
        let ids = self.list().await?;
        futures_util::future::join_all(ids.iter().map(|id| self.remove(id))).await;
        Ok(ids.len())
    }

    /// Start-up reaping: removes the containers of this pool name that earlier runs left,
    /// when their owner is gone, and returns how many there were. Containers of a live owner
    /// (another running daemon with this pool name) refuse the start, and nothing is removed.
    pub(crate) async fn reap_dead_runs(&self) -> Result<usize, PoolError> {
        let containers = self.labelled(vec![format!("{LABEL_POOL}={}", self.config.name)]).await?;
        // One verdict per (owner, run); the runs of this start are not there yet.
        let mut verdicts: HashMap<(Option<String>, String), Liveness> = HashMap::new();
        let mut dead = Vec::new();
        for container in containers {
            let Some(id) = container.id else { continue };
            let labels = container.labels.unwrap_or_default();
            let run = labels.get(LABEL_INSTANCE).cloned().unwrap_or_default();
            let recorded = Owner::from_labels(&labels);
            let key = (recorded.as_ref().map(|o| o.instance.clone()), run.clone());
            let verdict = match verdicts.get(&key) {
                Some(verdict) => verdict.clone(),
                None => {
                    let verdict = match &recorded {
                        Some(owner) => pool_owner::owner_of_run_is_live(&self.docker, owner, &run).await?,
                        // An older nexbot's container: dead once it stopped (its stdin closed).
                        None if container.state.as_ref().is_some_and(|s| s.to_string() == "running") => {
                            Liveness::Live("a container of it, made by an older nexbot without owner labels, is running".into())
                        }
                        None => Liveness::Dead("its container has stopped".into()),
                    };
                    verdicts.insert(key, verdict.clone());
                    verdict
                }
            };
            if let Liveness::Live(why) = verdict {
                let short: String = id.chars().take(12).collect();
                return Err(PoolError::Owned {
                    what: format!("pool {:?} (container {short})", self.config.name),
                    owner: recorded.map_or_else(|| "an older nexbot".to_owned(), |o| o.describe()),
                    why,
                    fix: "stop that daemon, or give this one another subagent.pool_name".into(),
                });
            }
            dead.push(id);
        }
        futures_util::future::join_all(dead.iter().map(|id| self.remove(id))).await;
        Ok(dead.len())
    }
}

/// Attaches to the stdio of created container `id` (`name` for errors), from now on (no
/// earlier output): the pool's link and the egress node's.
pub(crate) async fn attach_stdio(
    docker: &Docker,
    id: &str,
    name: &str,
) -> Result<bollard::container::AttachContainerResults, PoolError> {
    let options = AttachContainerOptionsBuilder::default()
        .stdin(true)
        .stdout(true)
        .stderr(true)
        .stream(true)
        .logs(false)
        .build();
    docker
        .attach_container(id, Some(options))
        .await
        .map_err(|e| PoolError::docker(format!("attach to container {name}"), e))
}
