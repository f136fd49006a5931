//! Service containers: a long-lived program other than the subagent (an MCP server) as the main
//! process of a container the pool makes, hardened exactly like its own, with the container's
//! stdout and stdin handed to the caller as plain bytes.
//!
//! Why here: the hardening (non-root, read-only root, no capabilities, limits, the internal
//! network) is [`crate::spec::container_spec`]'s, and the start-up reaping and the shutdown
//! removal go by the pool run's labels. A service container carries them, so a dead daemon's
//! service containers are removed by the next start, and [`crate::Pool::shutdown`] removes this
//! run's. What the bytes mean is the caller's business: this module knows no MCP.
//!
//! Its stderr lines go to the host's log (with the container's id) and into a ring the
//! operator reads; when its output ends, [`Service::exited`] fires with the engine's account
//! (exit code, OOM) and the stdout the caller reads ends.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bollard::container::LogOutput;
use bollard::models::{Mount, MountType};
use bollard::query_parameters::CreateContainerOptionsBuilder;
use futures_util::StreamExt;
use tokio::io::{AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio_util::sync::CancellationToken;

use crate::engine::Engine;
use crate::error::PoolError;
use crate::lines::LineSplitter;
use crate::logs::LogRing;
use crate::spec::{container_spec, LABEL_ROLE, LABEL_SLOT};

/// Label naming what a service container serves (e.g. `mcp:everything`).
pub const LABEL_SERVICE: &str = "nexbot.service";
/// Stderr lines longer than this are cut before they are logged and kept.
const MAX_LOG_LINE: usize = 16 * 1024;
/// How many bytes of stdout may wait in the pipe before the reader stops reading the container
/// (back-pressure instead of memory).
const STDOUT_PIPE_BYTES: usize = 1024 * 1024;
/// Stderr lines kept per service for the operator.
const LOG_LINES: usize = 200;

/// What to run: an image's command, with exactly this environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceSpec {
    /// The role label (`mcp`): what kind of service it is.
    pub role: String,
    /// What it serves (the [`LABEL_SERVICE`] label), e.g. `mcp:everything`.
    pub service: String,
    /// Part of the container's name (letters, digits, `-`), e.g. `mcp-everything-3f2a`.
    pub name: String,
    pub image: String,
    /// The command and its arguments (the image's entrypoint is replaced by the first).
    pub command: Vec<String>,
    /// The whole environment (nothing of the pool's is added). Visible to `docker inspect`:
    /// never a secret.
    pub env: BTreeMap<String, String>,
    /// More labels (e.g. which room it serves).
    pub labels: BTreeMap<String, String>,
    /// Who it runs as (`uid:gid`); the pool's user when `None`. The caller's choice, for a
    /// service that writes files another process of that user reads (a chat's room).
    pub user: Option<String>,
    /// Folders it sees besides its own `/tmp`.
    pub mounts: Vec<ServiceMount>,
    /// Limits of its own where the pool's do not fit it (a browser needs more memory and
    /// processes than a sub-agent); the pool's where `None`.
    pub limits: ServiceLimits,
}

/// A service container's own limits, each replacing the pool's (`PoolConfig`) when set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServiceLimits {
    /// Memory and memory+swap (no swap), bytes.
    pub memory_bytes: Option<i64>,
    /// Processes and threads.
    pub pids_limit: Option<i64>,
    /// Size of its `/tmp` (and of its empty folders), bytes.
    pub tmp_size_bytes: Option<u64>,
}

impl ServiceLimits {
    /// Refuses limits the engine would reject or a container could not run under, naming the
    /// field.
    pub fn check(&self) -> Result<(), String> {
        if let Some(bytes) = self.memory_bytes.filter(|b| *b < 6 * 1024 * 1024) {
            return Err(format!("memory: {bytes} bytes is below Docker's 6 MiB minimum"));
        }
        if let Some(pids) = self.pids_limit.filter(|p| *p < 8) {
            return Err(format!("pids: {pids} is below 8"));
        }
        if let Some(bytes) = self.tmp_size_bytes.filter(|b| *b < 1024 * 1024) {
            return Err(format!("tmp: {bytes} bytes is below 1 MiB"));
        }
        Ok(())
    }
}

/// A folder a service container sees at `target` (an absolute path in the container, not `/`,
/// `/tmp` or anything under them that the image needs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServiceMount {
    /// A folder of the Docker host (the engine resolves `source` on its own machine), read and
    /// written by the service. It must exist.
    Folder { source: PathBuf, target: String },
    /// An empty folder of its own (a tmpfs the size of `/tmp`, owned by its user, gone with
    /// it): what it sees where another instance of the same server sees a folder.
    Empty { target: String },
}

impl ServiceMount {
    pub fn target(&self) -> &str {
        match self {
            ServiceMount::Folder { target, .. } | ServiceMount::Empty { target } => target,
        }
    }
}

/// Whether `target` can be a service's mount point: absolute, normal (no `.`, `..`, empty or repeated separators),
/// neither `/` nor `/tmp` nor under `/tmp`, and no `:` or `,` (the engine's option syntax).
pub fn check_mount_target(target: &str) -> Result<(), String> {
    let normal = target.starts_with('/')
        && target.len() > 1
        && !target.ends_with('/')
        && target[1..].split('/').all(|part| !part.is_empty() && part != "." && part != "..");
    if !normal {
        return Err(format!("{target:?} is not an absolute, normal path other than /"));
    }
    if target == "/tmp" || target.starts_with("/tmp/") {
        return Err(format!("{target:?} is the container's /tmp"));
    }
    if target.contains([':', ',']) || target.chars().any(char::is_control) {
        return Err(format!("{target:?} has a ':', ',' or control character"));
    }
    Ok(())
}

/// `uid[:gid]`, both numbers (root allowed: the caller's deliberate choice).
fn parse_user(user: &str) -> Option<(u32, u32)> {
    let (uid, gid) = user.split_once(':').unwrap_or((user, user));
    Some((uid.parse().ok()?, gid.parse().ok()?))
}

/// A service container's stdio: write requests to `stdin`, read its stdout from `stdout`.
pub struct ServiceIo {
    pub stdin: std::pin::Pin<Box<dyn AsyncWrite + Send>>,
    pub stdout: DuplexStream,
}

impl std::fmt::Debug for ServiceIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceIo").finish_non_exhaustive()
    }
}

/// A running service container.
#[derive(Debug)]
pub struct Service {
    id: String,
    name: String,
    address: Option<IpAddr>,
    logs: Arc<LogRing>,
    exited: CancellationToken,
    reason: Mutex<Option<String>>,
    engine: Arc<Engine>,
}

impl Service {
    /// The container's full id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The container's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The container's address on the pool network (what the egress proxy sees).
    pub fn address(&self) -> Option<IpAddr> {
        self.address
    }

    /// Its most recent stderr lines, oldest first.
    pub fn logs(&self) -> Vec<String> {
        self.logs.snapshot()
    }

    /// Whether its output has ended (it exited, was removed, or the pool stopped).
    pub fn has_exited(&self) -> bool {
        self.exited.is_cancelled()
    }

    /// Waits until its output ends, then says why (exit code, OOM-killed, removed).
    pub async fn exited(&self) -> String {
        self.exited.cancelled().await;
        self.exit_reason().unwrap_or_else(|| "the container is gone".to_owned())
    }

    /// Why it ended, once it has.
    pub fn exit_reason(&self) -> Option<String> {
        self.reason.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Force-removes the container (its output ends, [`Service::exited`] fires).
    pub async fn stop(&self) {
        self.engine.remove(&self.id).await;
    }

    /// SIGKILLs the main process, leaving the container for the engine's account of its death.
    pub async fn kill(&self) -> Result<(), PoolError> {
        self.engine
            .docker
            .kill_container(&self.id, None::<bollard::query_parameters::KillContainerOptions>)
            .await
            .map_err(|e| PoolError::docker(format!("kill container {}", self.name), e))
    }
}

impl Engine {
    /// Creates, attaches and starts a service container from `spec`, hardened like the pool's
    /// own (the same create body, with the image, command, environment and labels replaced,
    /// no scratch or skills mount, working directory `/tmp`). Anything created is removed
    /// again when a later step fails.
    pub(crate) async fn start_service(
        self: &Arc<Self>,
        spec: &ServiceSpec,
    ) -> Result<(Arc<Service>, ServiceIo), PoolError> {
        for (name, value) in &spec.env {
            crate::config::check_env(name, value).map_err(|why| {
                PoolError::InvalidConfig(format!("service {}: env.{name}: {why}", spec.service))
            })?;
        }
        let invalid =
            |why: String| PoolError::InvalidConfig(format!("service {}: {why}", spec.service));
        let (uid, gid) = match &spec.user {
            Some(user) => parse_user(user)
                .ok_or_else(|| invalid(format!("user: {user:?} is not a numeric uid[:gid]")))?,
            None => self.config.uid_gid()?,
        };
        for mount in &spec.mounts {
            check_mount_target(mount.target()).map_err(|why| invalid(format!("mount: {why}")))?;
        }
        spec.limits.check().map_err(|why| invalid(format!("limits: {why}")))?;
        let config = crate::config::PoolConfig {
            memory_bytes: spec.limits.memory_bytes.unwrap_or(self.config.memory_bytes),
            pids_limit: spec.limits.pids_limit.unwrap_or(self.config.pids_limit),
            tmp_size_bytes: spec.limits.tmp_size_bytes.unwrap_or(self.config.tmp_size_bytes),
            ..self.config.clone()
        };
        let mut body = container_spec(&config, &self.runtime, &self.owner, &self.instance, 0)?;
        body.user = Some(format!("{uid}:{gid}"));
        let labels = body.labels.get_or_insert_with(HashMap::new);
        labels.remove(LABEL_SLOT);
        labels.insert(LABEL_ROLE.to_owned(), spec.role.clone());
        labels.insert(LABEL_SERVICE.to_owned(), spec.service.clone());
        labels.extend(spec.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        body.image = Some(spec.image.clone());
        let (entrypoint, cmd) = match spec.command.split_first() {
            Some((first, rest)) => (vec![first.clone()], rest.to_vec()),
            None => {
                return Err(PoolError::InvalidConfig(format!("service {}: no command", spec.name)))
            }
        };
        body.entrypoint = Some(entrypoint);
        body.cmd = Some(cmd);
        body.env = Some(spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect());
        body.working_dir = Some("/tmp".into());
        if let Some(host) = body.host_config.as_mut() {
            host.binds = None;
            if let Some(tmpfs) = host.tmpfs.as_mut() {
                tmpfs.retain(|path, _| path == "/tmp");
                // Node and Python servers write caches under /tmp and must run from it: exec
                // allowed here (the root stays read-only), unlike the subagent's /tmp.
                if let Some(options) = tmpfs.get_mut("/tmp") {
                    *options = options.replace("noexec,", "");
                }
            }
            let mut folders = Vec::new();
            for mount in &spec.mounts {
                match mount {
                    // A typed mount, not a `binds` string: no path can smuggle options in.
                    ServiceMount::Folder { source, target } => folders.push(Mount {
                        target: Some(target.clone()),
                        source: Some(source.display().to_string()),
                        typ: Some(MountType::BIND),
                        read_only: Some(false),
                        ..Mount::default()
                    }),
                    ServiceMount::Empty { target } => {
                        host.tmpfs.get_or_insert_with(HashMap::new).insert(
                            target.clone(),
                            format!(
                                "rw,noexec,nosuid,nodev,size={},uid={uid},gid={gid},mode=0700",
                                config.tmp_size_bytes
                            ),
                        );
                    }
                }
            }
            host.mounts = (!folders.is_empty()).then_some(folders);
        }
        let suffix = uuid::Uuid::new_v4().simple().to_string();
        let name = format!("{}-{}-{}", self.config.name, spec.name, &suffix[..8]);
        let options = CreateContainerOptionsBuilder::default().name(&name).build();
        let created = self
            .docker
            .create_container(Some(options), body)
            .await
            .map_err(|e| PoolError::docker(format!("create container {name}"), e))?;
        match self.attach_service(&created.id, &name).await {
            Ok(started) => Ok(started),
            Err(e) => {
                self.remove(&created.id).await;
                Err(e)
            }
        }
    }

    async fn attach_service(
        self: &Arc<Self>,
        id: &str,
        name: &str,
    ) -> Result<(Arc<Service>, ServiceIo), PoolError> {
        let attached = self.attach(id, name).await?;
        self.docker
            .start_container(id, None)
            .await
            .map_err(|e| PoolError::docker(format!("start container {name}"), e))?;
        let address = self.container_ip(id).await?;
        let service = Arc::new(Service {
            id: id.to_owned(),
            name: name.to_owned(),
            address,
            logs: Arc::new(LogRing::new(LOG_LINES)),
            exited: CancellationToken::new(),
            reason: Mutex::new(None),
            engine: self.clone(),
        });
        let (stdout, writer) = tokio::io::duplex(STDOUT_PIPE_BYTES);
        self.spawn_service_reader(service.clone(), attached.output, writer);
        Ok((service, ServiceIo { stdin: attached.input, stdout }))
    }

    /// Copies stdout into the caller's pipe and stderr lines into the log until the output
    /// ends, then records why.
    fn spawn_service_reader(
        self: &Arc<Self>,
        service: Arc<Service>,
        mut output: crate::link::Output,
        mut stdout: DuplexStream,
    ) {
        let engine = self.clone();
        tokio::spawn(async move {
            let short: String = service.id.chars().take(12).collect();
            let mut stderr = LineSplitter::new(MAX_LOG_LINE);
            let mut reader_gone = false;
            let ended = loop {
                let item = tokio::select! {
                    item = output.next() => item,
                    _ = engine.stop.cancelled() => break None,
                };
                match item {
                    Some(Ok(LogOutput::StdOut { message })) if !reader_gone => {
                        // A reader that went away (the session ended) no longer needs it;
                        // the container's output is still drained, so it never blocks.
                        reader_gone = stdout.write_all(&message).await.is_err();
                    }
                    Some(Ok(LogOutput::StdErr { message })) => {
                        for line in stderr.push(&message) {
                            crate::logs::record(&service.logs, &short, line);
                        }
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => break Some(format!("its output failed: {e}")),
                    None => break Some("its output ended".to_owned()),
                }
            };
            if let Some(line) = stderr.finish() {
                crate::logs::record(&service.logs, &short, line);
            }
            drop(stdout);
            let reason = match ended {
                Some(fallback) => engine.explain_death(&service.id, &fallback).await.1,
                None => "the pool was shut down".to_owned(),
            };
            service.logs.note("warn", &short, &format!("service ended: {reason}"));
            *service.reason.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason);
            service.exited.cancel();
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mount_target_is_an_absolute_normal_path_outside_tmp_without_option_syntax() {
        for good in ["/room", "/srv/room", "/a-b_c.d"] {
            assert_eq!(check_mount_target(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "/",
            "room",
            "/room/",
            "//room",
            "/a/../etc",
            "/./a",
            "/tmp",
            "/tmp/x",
            "/room:ro",
            "/a,b",
            "/a\nb",
        ] {
            assert!(check_mount_target(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn a_user_is_numeric_and_its_group_defaults_to_the_uid() {
        assert_eq!(parse_user("1000:100"), Some((1000, 100)));
        assert_eq!(parse_user("0"), Some((0, 0)));
        assert_eq!(parse_user("root"), None);
        assert_eq!(parse_user("1:x"), None);
    }
}
