//! The pool's configuration: one serde-readable struct whose defaults are the safe ones, so
//! that a host config file only has to name what it changes, and a check that refuses
//! settings that would weaken the sandbox or leak a secret into a container's environment.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::PoolError;

/// Everything the pool needs to know. `Default` gives a hardened pool of 4 containers from
/// `nexbot-subagent:dev` on the internal network `nexbot-subagents`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PoolConfig {
    /// Scopes labels, container names and start-up reaping: two pools with different names
    /// never touch each other's containers, and a name whose containers belong to another
    /// live daemon is refused (see [`crate::owner`]). `[A-Za-z0-9][A-Za-z0-9_.-]*`, at most
    /// 40 chars.
    pub name: String,
    /// Image every container is created from.
    pub image: String,
    /// Number of long-lived containers (one task each at a time).
    pub size: usize,
    /// Tasks that may wait for a free container; one more gets "pool busy" at once.
    pub queue_capacity: usize,
    /// Longest a task waits in the queue before it gives up with a clear error.
    pub queue_timeout_secs: u64,
    /// Internal Docker network the containers are attached to (created if missing, with
    /// inter-container traffic and IPv6 off; see [`crate::ensure_internal_network`]). Pools of
    /// one process may share it; another live daemon's is refused.
    pub network: String,
    /// User the container process runs as: numeric `uid[:gid]`, never 0.
    pub user: String,
    /// Memory limit in bytes; swap is capped to the same value (no extra swap).
    pub memory_bytes: i64,
    /// CPU limit in CPUs (fractions allowed).
    pub cpus: f64,
    /// Largest number of processes/threads in a container.
    pub pids_limit: i64,
    /// Size of the `/tmp` tmpfs, bytes.
    pub tmp_size_bytes: u64,
    /// Size of the scratch tmpfs at [`SCRATCH_DIR`](crate::spec::SCRATCH_DIR), bytes.
    pub scratch_size_bytes: u64,
    /// Host directory with skills, mounted read-only at
    /// [`SKILLS_DIR`](crate::spec::SKILLS_DIR); none when unset.
    pub skills_dir: Option<PathBuf>,
    /// A volume mounted read-only at [`SKILLS_DIR`](crate::spec::SKILLS_DIR) instead: a remote
    /// engine's copy of the skills folder ([`skills_volume`](crate::skills_volume)).
    pub skills_volume: Option<String>,
    /// OCI runtime name (e.g. `runsc`); the engine's default when unset.
    pub runtime: Option<String>,
    /// Extra, NON-secret environment for every container (e.g. `HTTP_PROXY`, `NO_PROXY` set by
    /// the egress proxy). Names that look like secrets and URLs with credentials are refused.
    pub env: BTreeMap<String, String>,
    /// How many recent stderr log lines are kept per container for `logs`.
    pub log_lines_kept: usize,
    /// Period of the health pings.
    pub ping_interval_ms: u64,
    /// A ping unanswered for this long marks the container unhealthy and replaces it.
    pub ping_timeout_ms: u64,
    /// Soft task timeout sent to the subagent when a request names none.
    pub default_task_timeout_secs: u64,
    /// The host's hard limit is the task's timeout plus this; see
    /// `docs/protocol-limits.md#deadlines`.
    pub hard_limit_grace_secs: u64,
    /// After a `cancel`, how long the final answer is awaited before the container is recycled.
    pub cancel_grace_ms: u64,
    /// A container is replaced after serving at most this many tasks: each container's own
    /// budget is this less a random share of up to a quarter, so that containers started
    /// together are not all replaced together (and its successor starts during its last task).
    pub max_tasks_per_container: u64,
    /// A container whose budget is spent is retired at once, but its successor's start and
    /// its removal wait until no task has been dispatched for this long (or a task needs the
    /// capacity, or 10 s have passed), so that engine work does not compete with a run of
    /// quick tasks. 0: at once.
    pub recycle_pause_ms: u64,
    /// How long the whole pool may take to become ready in [`Pool::start`](crate::Pool::start).
    pub startup_timeout_secs: u64,
    /// First and largest delay between failed attempts to (re)create a container.
    pub backoff_initial_ms: u64,
    pub backoff_max_ms: u64,
    /// The most containers one room (chat) may hold at once, busy or idle, so one chat
    /// cannot take the whole pool; `0` means half the pool, rounded up
    /// ([`PoolConfig::room_limit`]).
    pub max_containers_per_room: usize,
    /// A container idle in its room for longer than this is removed, and a blank takes its
    /// place.
    pub room_idle_secs: u64,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            name: "nexbot".into(),
            image: "nexbot-subagent:dev".into(),
            size: 4,
            queue_capacity: 16,
            queue_timeout_secs: 600,
            network: "nexbot-subagents".into(),
            user: "65532:65532".into(),
            memory_bytes: 256 * 1024 * 1024,
            cpus: 1.0,
            pids_limit: 64,
            tmp_size_bytes: 16 * 1024 * 1024,
            scratch_size_bytes: 64 * 1024 * 1024,
            skills_dir: None,
            skills_volume: None,
            runtime: None,
            env: BTreeMap::new(),
            log_lines_kept: 200,
            ping_interval_ms: 10_000,
            ping_timeout_ms: 3_000,
            default_task_timeout_secs: 300,
            hard_limit_grace_secs: 30,
            cancel_grace_ms: 5_000,
            max_tasks_per_container: 100,
            recycle_pause_ms: 50,
            startup_timeout_secs: 30,
            backoff_initial_ms: 250,
            backoff_max_ms: 30_000,
            max_containers_per_room: 0,
            room_idle_secs: 900,
        }
    }
}

/// `[sandbox]` of the daemon's config: which engine makes every container the daemon runs
/// (the pool, the CLI image's, the MCP services'), and behind which wall (OCI runtime).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxConfig {
    /// The OCI runtime: `runsc` (gVisor) puts a kernel of its own between a task and the
    /// host's; unset, the engine's default (`runc` on a stock Docker). The engine must have it
    /// registered: start-up and `nexbot doctor` check, and say how.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    /// Where the engine is: `unix:///path` (a local socket, e.g. Podman's), or
    /// `tcp://HOST:PORT` (an engine on another machine, reached only over mutual TLS: the three
    /// `tls_*` files are then required); unset, `DOCKER_HOST`, else the local Docker socket.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    /// The CA that signed the remote engine's certificate (PEM); the only one trusted for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_ca: Option<PathBuf>,
    /// The daemon's client certificate for the remote engine (PEM).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_key: Option<PathBuf>,
    /// The egress node's image on a remote engine (the daemon's own, with `nexbot` and
    /// iptables); unset, [`DEFAULT_NODE_IMAGE`]. Copied there by id like the subagent's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_image: Option<String>,
}

/// The egress node's image unless `sandbox.node_image` names another (`make image` builds it).
pub const DEFAULT_NODE_IMAGE: &str = "nexbot-host:dev";

/// Where the engine `sandbox.engine` names is ([`SandboxConfig::address`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineAddress {
    /// Unset: `DOCKER_HOST`, else the local Docker socket.
    Default,
    /// `unix:///path`: a socket on this machine.
    Socket(String),
    /// `tcp://HOST:PORT`: an engine on another machine, over mutual TLS.
    Remote(RemoteEngine),
}

/// A remote engine's address and the files of the mutual TLS it is reached over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteEngine {
    pub host: String,
    pub port: u16,
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl RemoteEngine {
    /// `tcp://HOST:PORT`, as the operator wrote it.
    pub fn url(&self) -> String {
        match self.host.contains(':') {
            true => format!("tcp://[{}]:{}", self.host, self.port),
            false => format!("tcp://{}:{}", self.host, self.port),
        }
    }
}

impl SandboxConfig {
    /// Refuses a runtime name the engine could not have, and an engine address that is neither
    /// a local socket nor a remote engine with all three files of mutual TLS (plain TCP would
    /// hand root on the engine's machine to anyone on the path: refused, never tried).
    pub fn check(&self) -> Result<(), InvalidField> {
        if let Some(runtime) = &self.runtime {
            if !valid_name(runtime) {
                return Err(InvalidField {
                    field: "runtime".into(),
                    reason: format!(
                        "{runtime:?} must match [A-Za-z0-9][A-Za-z0-9_.-]* (≤ 40), e.g. runsc"
                    ),
                });
            }
        }
        self.address().map(|_| ())
    }

    /// Where the engine is, checked (see [`Self::check`]).
    pub fn address(&self) -> Result<EngineAddress, InvalidField> {
        let bad = |field: &str, reason: String| InvalidField { field: field.into(), reason };
        let tls =
            [("tls_ca", &self.tls_ca), ("tls_cert", &self.tls_cert), ("tls_key", &self.tls_key)];
        let Some(engine) = &self.engine else {
            return match tls.iter().find(|(_, v)| v.is_some()) {
                Some((field, _)) => Err(bad(
                    field,
                    "is only for a remote engine: set sandbox.engine = \"tcp://HOST:2376\" too, \
                     or remove it"
                        .into(),
                )),
                None => Ok(EngineAddress::Default),
            };
        };
        if let Some(rest) = engine.strip_prefix("tcp://") {
            let (host, port) = split_host_port(rest).ok_or_else(|| {
                bad(
                    "engine",
                    format!("{engine:?} is not tcp://HOST:PORT (e.g. tcp://10.0.0.2:2376)"),
                )
            })?;
            let mut files = Vec::new();
            for (field, value) in tls {
                match value {
                    Some(path) if path.is_absolute() => files.push(path.clone()),
                    Some(path) => {
                        return Err(bad(
                            field,
                            format!("{} must be an absolute path", path.display()),
                        ))
                    }
                    None => {
                        return Err(bad(
                            field,
                            format!(
                                "a remote engine ({engine}) is reached only over mutual TLS: set \
                                 sandbox.tls_ca, tls_cert and tls_key (plain TCP is refused; \
                                 docs/remote.md says how to make them)"
                            ),
                        ))
                    }
                }
            }
            let [ca, cert, key]: [PathBuf; 3] = files.try_into().expect("three TLS files");
            return Ok(EngineAddress::Remote(RemoteEngine { host, port, ca, cert, key }));
        }
        if let Some(field) = tls.iter().find(|(_, v)| v.is_some()).map(|(f, _)| *f) {
            return Err(bad(field, format!("is only for a tcp:// engine, not {engine:?}")));
        }
        self.socket_path().map(|p| EngineAddress::Socket(p.to_owned())).ok_or_else(|| {
            bad(
                "engine",
                format!(
                    "{engine:?} is neither unix:///absolute/path (a local engine's socket) nor \
                     tcp://HOST:PORT with mutual TLS (a remote engine)"
                ),
            )
        })
    }

    /// The socket `engine` names, when it is a `unix://` address of an absolute path.
    pub fn socket_path(&self) -> Option<&str> {
        let path = self.engine.as_deref()?.strip_prefix("unix://")?;
        (path.starts_with('/') && !path.contains("..")).then_some(path)
    }

    /// The egress node's image ([`SandboxConfig::node_image`]).
    pub fn node_image(&self) -> &str {
        self.node_image.as_deref().unwrap_or(DEFAULT_NODE_IMAGE)
    }

    /// Whether the engine is on another machine (`tcp://`).
    pub fn is_remote(&self) -> bool {
        matches!(self.address(), Ok(EngineAddress::Remote(_)))
    }
}

/// `HOST:PORT` or `[V6]:PORT` (a non-empty host without `/`, a port that is not 0).
fn split_host_port(rest: &str) -> Option<(String, u16)> {
    let (host, port) = match rest.strip_prefix('[') {
        Some(v6) => {
            let (host, port) = v6.split_once("]:")?;
            (host, port)
        }
        None => rest.rsplit_once(':')?,
    };
    let port: u16 = port.parse().ok().filter(|p| *p != 0)?;
    let bad_host = host.is_empty()
        || host.contains(['/', '@', ' '])
        || (host.contains(':') && !rest.starts_with('['));
    (!bad_host).then(|| (host.to_owned(), port))
}

/// Words that mark an environment variable name as secret-bearing.
const SECRET_NAME_WORDS: &[&str] =
    &["KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "COOKIE"];

/// A pool setting that cannot be used: the field's name and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct InvalidField {
    pub field: String,
    pub reason: String,
}

impl PoolConfig {
    /// The most containers one room may hold: `max_containers_per_room`, or half the pool
    /// (rounded up) when it is `0`; never more than the pool, never less than one.
    pub fn room_limit(&self) -> usize {
        let limit = match self.max_containers_per_room {
            0 => self.size.div_ceil(2),
            n => n,
        };
        limit.clamp(1, self.size.max(1))
    }

    pub(crate) fn room_idle(&self) -> Duration {
        Duration::from_secs(self.room_idle_secs)
    }

    /// Refuses configurations that are invalid or would weaken the sandbox, naming the field.
    pub fn validate(&self) -> Result<(), PoolError> {
        self.check().map_err(|e| PoolError::InvalidConfig(e.to_string()))
    }

    /// [`PoolConfig::validate`] as a typed answer: which field, and why. A caller that maps
    /// fields to its own config keys reads `field`, never the error's text.
    pub fn check(&self) -> Result<(), InvalidField> {
        let bad =
            |field: &str, why: String| Err(InvalidField { field: field.to_owned(), reason: why });
        if !valid_name(&self.name) {
            return bad(
                "name",
                format!("{:?} must match [A-Za-z0-9][A-Za-z0-9_.-]* (≤ 40)", self.name),
            );
        }
        if !valid_name(&self.network) {
            return bad("network", format!("{:?} is not a valid network name", self.network));
        }
        if self.image.trim().is_empty() {
            return bad("image", "must not be empty".into());
        }
        if self.size == 0 {
            return bad("size", "a pool needs at least one container".into());
        }
        if let Err(e) = self.uid_gid() {
            return bad("user", e.to_string());
        }
        if self.memory_bytes < 6 * 1024 * 1024 {
            return bad(
                "memory_bytes",
                format!("{} is below Docker's 6 MiB minimum", self.memory_bytes),
            );
        }
        if !(self.cpus > 0.0 && self.cpus <= 1024.0) {
            return bad("cpus", format!("{} is not a CPU count in (0, 1024]", self.cpus));
        }
        if self.pids_limit < 8 {
            return bad(
                "pids_limit",
                format!("{} is too low to run the subagent", self.pids_limit),
            );
        }
        for (field, value) in [
            ("tmp_size_bytes", self.tmp_size_bytes),
            ("scratch_size_bytes", self.scratch_size_bytes),
            ("ping_interval_ms", self.ping_interval_ms),
            ("ping_timeout_ms", self.ping_timeout_ms),
            ("default_task_timeout_secs", self.default_task_timeout_secs),
            ("max_tasks_per_container", self.max_tasks_per_container),
            ("startup_timeout_secs", self.startup_timeout_secs),
            ("queue_timeout_secs", self.queue_timeout_secs),
            ("backoff_initial_ms", self.backoff_initial_ms),
            ("room_idle_secs", self.room_idle_secs),
        ] {
            if value == 0 {
                return bad(field, "must be greater than 0".into());
            }
        }
        // Durations end up added to `Instant`s; absurd values would overflow them.
        const WEEK_SECS: u64 = 7 * 24 * 3600;
        for (field, secs) in [
            ("queue_timeout_secs", self.queue_timeout_secs),
            ("ping_interval_ms", self.ping_interval_ms / 1000),
            ("ping_timeout_ms", self.ping_timeout_ms / 1000),
            ("default_task_timeout_secs", self.default_task_timeout_secs),
            ("hard_limit_grace_secs", self.hard_limit_grace_secs),
            ("cancel_grace_ms", self.cancel_grace_ms / 1000),
            ("startup_timeout_secs", self.startup_timeout_secs),
            ("backoff_max_ms", self.backoff_max_ms / 1000),
            ("room_idle_secs", self.room_idle_secs),
        ] {
            if secs > WEEK_SECS {
                return bad(field, "must be at most a week".into());
            }
        }
        if self.default_task_timeout_secs > crate::MAX_TASK_TIMEOUT_SECS {
            return bad("default_task_timeout_secs", "must be at most a day".into());
        }
        if self.backoff_max_ms < self.backoff_initial_ms {
            return bad("backoff_max_ms", "must be at least backoff_initial_ms".into());
        }
        if let Some(dir) = &self.skills_dir {
            if !dir.is_absolute() {
                return bad("skills_dir", format!("{} must be an absolute path", dir.display()));
            }
            if dir.to_string_lossy().contains("docker.sock") {
                return bad("skills_dir", "the Docker socket is never mounted".into());
            }
        }
        if let Some(volume) = &self.skills_volume {
            if self.skills_dir.is_some() {
                return bad("skills_volume", "the skills come from skills_dir or a volume".into());
            }
            let named = |c: char| c.is_ascii_alphanumeric() || "_.-".contains(c);
            if volume.is_empty() || !volume.chars().all(named) {
                return bad("skills_volume", format!("{volume:?} is not a volume's name"));
            }
        }
        for (name, value) in &self.env {
            if let Err(why) = check_env(name, value) {
                return bad(&format!("env.{name}"), why.to_string());
            }
        }
        Ok(())
    }

    /// The numeric uid and gid from [`PoolConfig::user`].
    pub fn uid_gid(&self) -> Result<(u32, u32), PoolError> {
        let bad = || {
            PoolError::InvalidConfig(format!(
                "user: {:?} must be a numeric non-root uid[:gid]",
                self.user
            ))
        };
        let mut parts = self.user.splitn(2, ':');
        let uid: u32 = parts.next().and_then(|u| u.parse().ok()).ok_or_else(bad)?;
        let gid: u32 = match parts.next() {
            Some(g) => g.parse().map_err(|_| bad())?,
            None => uid,
        };
        if uid == 0 || gid == 0 {
            return Err(bad());
        }
        Ok((uid, gid))
    }

    pub fn ping_interval(&self) -> Duration {
        Duration::from_millis(self.ping_interval_ms)
    }

    pub fn ping_timeout(&self) -> Duration {
        Duration::from_millis(self.ping_timeout_ms)
    }

    pub fn nano_cpus(&self) -> i64 {
        (self.cpus * 1e9).round() as i64
    }
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 40
        && chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// Container environment is visible in `docker inspect`, so it must never carry a secret: the
/// check of one variable (the pool's, and a service container's).
pub fn check_env(name: &str, value: &str) -> Result<(), String> {
    let valid = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Err("not a valid environment variable name".into());
    }
    let upper = name.to_ascii_uppercase();
    if let Some(word) = SECRET_NAME_WORDS.iter().find(|w| upper.contains(*w)) {
        return Err(format!(
            "looks like a secret (contains {word}); secrets go over stdin, never into container env"
        ));
    }
    if value.contains('\n') || value.contains('\0') {
        return Err("value contains a newline or NUL".into());
    }
    if let Some((_, rest)) = value.split_once("://") {
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        if authority.contains('@') {
            return Err("URL carries credentials; they would show in docker inspect".into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_hardened() {
        let c = PoolConfig::default();
        c.validate().unwrap();
        assert_eq!(c.size, 4);
        assert_eq!(c.memory_bytes, 256 * 1024 * 1024);
        assert_eq!(c.pids_limit, 64);
        assert_eq!(c.nano_cpus(), 1_000_000_000);
        assert_eq!(c.uid_gid().unwrap(), (65532, 65532));
        assert_eq!(c.max_tasks_per_container, 100);
        assert_eq!(c.hard_limit_grace_secs, 30);
        assert_eq!(c.ping_interval(), Duration::from_secs(10));
    }

    #[test]
    fn a_room_holds_half_the_pool_unless_told_and_always_one_to_the_whole_pool() {
        let with =
            |size, max| PoolConfig { size, max_containers_per_room: max, ..PoolConfig::default() };
        assert_eq!(with(4, 0).room_limit(), 2);
        assert_eq!(with(5, 0).room_limit(), 3);
        assert_eq!(with(1, 0).room_limit(), 1);
        assert_eq!(with(8, 3).room_limit(), 3);
        assert_eq!(with(2, 9).room_limit(), 2, "never more than the pool");
        let err = PoolConfig { room_idle_secs: 0, ..PoolConfig::default() }.check().unwrap_err();
        assert_eq!(err.field, "room_idle_secs");
    }

    #[test]
    fn partial_toml_like_json_fills_defaults_and_rejects_unknown_fields() {
        let c: PoolConfig = serde_json::from_str(r#"{"name":"p1","size":2}"#).unwrap();
        assert_eq!(c.size, 2);
        assert_eq!(c.image, "nexbot-subagent:dev");
        let err = serde_json::from_str::<PoolConfig>(r#"{"sise":2}"#).unwrap_err();
        assert!(err.to_string().contains("sise"), "{err}");
    }

    #[test]
    fn root_user_is_refused() {
        for user in ["0", "0:0", "1000:0", "root", "", "65534:x"] {
            let c = PoolConfig { user: user.into(), ..PoolConfig::default() };
            let err = c.validate().unwrap_err().to_string();
            assert!(err.contains("user"), "{user}: {err}");
        }
        let c = PoolConfig { user: "1000".into(), ..PoolConfig::default() };
        assert_eq!(c.uid_gid().unwrap(), (1000, 1000));
    }

    #[test]
    fn secret_looking_env_is_refused() {
        for (name, value) in [
            ("OPENAI_API_KEY", "x"),
            ("GITHUB_TOKEN", "x"),
            ("db_password", "x"),
            ("HTTP_PROXY", "http://user:pw@10.0.0.1:3128"),
            ("BAD-NAME", "x"),
            ("NL", "a\nb"),
        ] {
            let mut c = PoolConfig::default();
            c.env.insert(name.into(), value.into());
            let err = c.validate().unwrap_err().to_string();
            assert!(err.contains(&format!("env.{name}")), "{err}");
        }
        let mut c = PoolConfig::default();
        c.env.insert("HTTP_PROXY".into(), "http://172.30.0.1:3128".into());
        c.env.insert("NO_PROXY".into(), "172.30.0.1".into());
        c.validate().unwrap();
    }

    #[test]
    fn bad_numbers_and_names_name_their_field() {
        let cases: Vec<(PoolConfig, &str)> = vec![
            (PoolConfig { size: 0, ..Default::default() }, "size"),
            (PoolConfig { name: "-x".into(), ..Default::default() }, "name"),
            (PoolConfig { name: "a/b".into(), ..Default::default() }, "name"),
            (PoolConfig { cpus: 0.0, ..Default::default() }, "cpus"),
            (PoolConfig { memory_bytes: 1024, ..Default::default() }, "memory_bytes"),
            (PoolConfig { ping_timeout_ms: 0, ..Default::default() }, "ping_timeout_ms"),
            (PoolConfig { skills_dir: Some("rel".into()), ..Default::default() }, "skills_dir"),
            (
                PoolConfig { skills_volume: Some("/etc:/x".into()), ..Default::default() },
                "skills_volume",
            ),
            (
                PoolConfig {
                    skills_dir: Some("/srv/skills".into()),
                    skills_volume: Some("p-skills".into()),
                    ..Default::default()
                },
                "skills_volume",
            ),
            (
                PoolConfig {
                    skills_dir: Some("/var/run/docker.sock".into()),
                    ..Default::default()
                },
                "skills_dir",
            ),
            (PoolConfig { backoff_max_ms: 1, ..Default::default() }, "backoff_max_ms"),
            (
                PoolConfig { hard_limit_grace_secs: u64::MAX, ..Default::default() },
                "hard_limit_grace_secs",
            ),
            (PoolConfig { cancel_grace_ms: u64::MAX, ..Default::default() }, "cancel_grace_ms"),
            (
                PoolConfig { default_task_timeout_secs: 90_000, ..Default::default() },
                "default_task_timeout_secs",
            ),
        ];
        for (c, field) in cases {
            let err = c.validate().unwrap_err().to_string();
            assert!(err.contains(field), "{field}: {err}");
        }
    }

    #[test]
    fn a_sandbox_names_a_runtime_a_local_socket_or_a_remote_engine_never_plain_tcp() {
        let ok = |runtime: Option<&str>, engine: Option<&str>| SandboxConfig {
            runtime: runtime.map(str::to_owned),
            engine: engine.map(str::to_owned),
            ..SandboxConfig::default()
        };
        ok(None, None).check().unwrap();
        ok(Some("runsc"), Some("unix:///run/podman/podman.sock")).check().unwrap();
        assert_eq!(
            ok(None, Some("unix:///run/podman/podman.sock")).socket_path(),
            Some("/run/podman/podman.sock")
        );
        for (runtime, engine, field, says) in [
            (Some("run sc"), None, "runtime", "run sc"),
            (Some("--privileged"), None, "runtime", "--privileged"),
            (None, Some("tcp://10.0.0.2:2375"), "tls_ca", "plain TCP is refused"),
            (None, Some("tcp://10.0.0.2"), "engine", "tcp://HOST:PORT"),
            (None, Some("http://10.0.0.2:2375"), "engine", "tcp://HOST:PORT with mutual TLS"),
            (None, Some("unix://relative.sock"), "engine", "unix:///absolute/path"),
            (None, Some("/var/run/docker.sock"), "engine", "unix:///absolute/path"),
        ] {
            let err = ok(runtime, engine).check().unwrap_err();
            assert_eq!(err.field, field);
            assert!(err.reason.contains(says), "{err}");
        }
        let tls = |engine: &str, key: &str| SandboxConfig {
            engine: Some(engine.to_owned()),
            tls_ca: Some("/etc/nexbot/ca.pem".into()),
            tls_cert: Some("/etc/nexbot/cert.pem".into()),
            tls_key: Some(key.into()),
            ..SandboxConfig::default()
        };
        let remote = tls("tcp://[fd00::2]:2376", "/etc/nexbot/key.pem");
        let Ok(EngineAddress::Remote(r)) = remote.address() else { panic!("{remote:?}") };
        assert_eq!(
            (r.host.as_str(), r.port, r.url()),
            ("fd00::2", 2376, "tcp://[fd00::2]:2376".into())
        );
        assert!(remote.is_remote());
        let err = tls("tcp://10.0.0.2:2376", "key.pem").check().unwrap_err();
        assert_eq!(err.field, "tls_key");
        assert!(err.reason.contains("absolute"), "{err}");
        let err = tls("unix:///run/docker.sock", "/k.pem").check().unwrap_err();
        assert!(err.reason.contains("only for a tcp:// engine"), "{err}");
        let stray = SandboxConfig { tls_ca: Some("/ca.pem".into()), ..SandboxConfig::default() };
        assert_eq!(stray.check().unwrap_err().field, "tls_ca");
    }
}
