//! The hardened container spec every subagent container is created from, built in one place so
//! that each protection (non-root, read-only root, tmpfs scratch, no capabilities, resource
//! limits, internal network only, no Docker socket, no secrets) is visible and tested together.
//!
//! What goes in here is visible to anyone who can run `docker inspect`: labels, environment
//! and command line therefore carry no secret. Secrets reach a container only over its stdin.

use std::collections::HashMap;

use bollard::models::{
    ContainerCreateBody, EndpointSettings, HostConfig, HostConfigLogConfig, NetworkingConfig,
    RestartPolicy, RestartPolicyNameEnum,
};

use crate::config::PoolConfig;
use crate::error::PoolError;
use crate::pool_owner::Owner;
use crate::runtime::OciRuntime;

/// Label naming the pool a container belongs to: start-up reaping and cleanup filter on it.
pub const LABEL_POOL: &str = "nexbot.pool";
/// Label naming the pool *run* (one `Pool::start`), to tell this run from an earlier one. The
/// daemon instance that owns the run is in the [`crate::owner`] labels.
pub const LABEL_INSTANCE: &str = "nexbot.pool.instance";
/// Label with the slot index the container fills.
pub const LABEL_SLOT: &str = "nexbot.pool.slot";
/// Label marking the container as a subagent managed by this crate.
pub const LABEL_ROLE: &str = "nexbot.role";

/// Where the scratch tmpfs is mounted (the subagent's writable working area).
pub const SCRATCH_DIR: &str = "/workspace/scratch";
/// Where the skills directory is mounted read-only (the seed's default skills path).
pub const SKILLS_DIR: &str = "/workspace/skills";

/// Labels common to every container of the pool run `run`, owned by `owner`.
pub fn pool_labels(config: &PoolConfig, owner: &Owner, run: &str) -> HashMap<String, String> {
    let mut labels = owner.labels();
    labels.extend([
        (LABEL_POOL.to_owned(), config.name.clone()),
        (LABEL_INSTANCE.to_owned(), run.to_owned()),
        (LABEL_ROLE.to_owned(), "subagent".to_owned()),
    ]);
    labels
}

/// Kernel settings of every container: no IPv6 at all, not even link-local addresses, so the
/// IPv4 firewall and Docker's IPv4 isolation rules cover every way out (see
/// [`crate::ensure_internal_network`]). Namespaced, so they touch only the container.
pub fn sysctls() -> HashMap<String, String> {
    HashMap::from([
        ("net.ipv6.conf.all.disable_ipv6".to_owned(), "1".to_owned()),
        ("net.ipv6.conf.default.disable_ipv6".to_owned(), "1".to_owned()),
    ])
}

/// The engine's pids limit for a container: `pids_limit` itself under runc. gVisor counts
/// differently: its own kernel runs in the container's cgroup (41 host threads for an idle
/// subagent, measured) and its `ptrace` platform backs each process of the task with about
/// ten host threads (50 `sleep`s took 496), while inside it no per-process limit is kept. So
/// the cgroup is sized to hold `pids_limit` processes of the task: a fork bomb still meets a
/// wall on the host, where gVisor's kernel fails and the container ends (the pool replaces
/// it) instead of the fork being refused.
pub fn host_pids_limit(config: &PoolConfig, runtime: &OciRuntime) -> i64 {
    const GVISOR_KERNEL: i64 = 64;
    const HOST_THREADS_PER_PROCESS: i64 = 12;
    if runtime.gvisor {
        GVISOR_KERNEL + HOST_THREADS_PER_PROCESS * config.pids_limit
    } else {
        config.pids_limit
    }
}

/// Builds the create body for one container of slot `slot`. The container keeps stdin open
/// and is attached before it starts; closing the attach connection closes its stdin, so a
/// crashed host leaves containers that exit on EOF rather than run on unattended.
pub fn container_spec(
    config: &PoolConfig,
    runtime: &OciRuntime,
    owner: &Owner,
    run: &str,
    slot: usize,
) -> Result<ContainerCreateBody, PoolError> {
    config.validate()?;
    let (uid, gid) = config.uid_gid()?;
    let mut labels = pool_labels(config, owner, run);
    labels.insert(LABEL_SLOT.to_owned(), slot.to_string());

    let tmpfs = HashMap::from([
        (
            "/tmp".to_owned(),
            format!("rw,noexec,nosuid,nodev,size={},mode=1777", config.tmp_size_bytes),
        ),
        (
            SCRATCH_DIR.to_owned(),
            format!(
                "rw,nosuid,nodev,size={},uid={uid},gid={gid},mode=0700",
                config.scratch_size_bytes
            ),
        ),
    ]);
    let skills = match (&config.skills_dir, &config.skills_volume) {
        (Some(dir), _) => Some(dir.display().to_string()),
        (None, volume) => volume.clone(),
    };
    let binds = skills.map(|from| vec![format!("{from}:{SKILLS_DIR}:ro")]);
    // No log driver: the pool reads a container's stderr over its attach (and keeps the last
    // lines, `Pool::logs`); the engine's copy to a json-file was a second copy of every line
    // written to the engine's disk — each pong and each task's result and log lines, another
    // chat's words among them — and about a quarter of dockerd's work per round trip
    // (`docker/profile-warm.py`: 40 of 160 µs of CPU per ping, in `logger.(*Copier)`).
    let log_config = HostConfigLogConfig { typ: Some("none".into()), config: None };
    let host_config = HostConfig {
        readonly_rootfs: Some(true),
        tmpfs: Some(tmpfs),
        binds,
        cap_drop: Some(vec!["ALL".into()]),
        security_opt: Some(vec!["no-new-privileges:true".into()]),
        privileged: Some(false),
        pids_limit: Some(host_pids_limit(config, runtime)),
        memory: Some(config.memory_bytes),
        memory_swap: Some(config.memory_bytes),
        nano_cpus: Some(config.nano_cpus()),
        // No init: the subagent is pid 1 and reaps orphans itself (`subagent/src/scrub.rs`).
        // An init would be a process of the same user that a task can rewrite through
        // `/proc/1/mem` and that nothing inside the container can kill.
        init: Some(false),
        log_config: Some(log_config),
        runtime: config.runtime.clone(),
        network_mode: Some(config.network.clone()),
        restart_policy: Some(RestartPolicy {
            name: Some(RestartPolicyNameEnum::NO),
            maximum_retry_count: None,
        }),
        auto_remove: Some(false),
        ipc_mode: Some("private".into()),
        sysctls: Some(sysctls()),
        ..Default::default()
    };
    let env: Vec<String> = config.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    Ok(ContainerCreateBody {
        image: Some(config.image.clone()),
        user: Some(config.user.clone()),
        attach_stdin: Some(true),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        open_stdin: Some(true),
        stdin_once: Some(true),
        tty: Some(false),
        env: Some(env),
        labels: Some(labels),
        working_dir: Some(SCRATCH_DIR.into()),
        network_disabled: Some(false),
        host_config: Some(host_config),
        networking_config: Some(NetworkingConfig {
            endpoints_config: Some(HashMap::from([(
                config.network.clone(),
                EndpointSettings::default(),
            )])),
        }),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner() -> Owner {
        Owner::current().clone()
    }

    fn runc() -> OciRuntime {
        OciRuntime { name: "runc".into(), gvisor: false }
    }

    fn spec(config: &PoolConfig) -> ContainerCreateBody {
        container_spec(config, &runc(), &owner(), "inst-1", 2).unwrap()
    }

    #[test]
    fn every_protection_is_in_the_spec() {
        let config = PoolConfig::default();
        let body = spec(&config);
        assert_eq!(body.user.as_deref(), Some("65532:65532"));
        assert_eq!(body.tty, Some(false));
        assert_eq!(body.open_stdin, Some(true));
        let host = body.host_config.unwrap();
        assert_eq!(host.readonly_rootfs, Some(true));
        assert_eq!(host.cap_drop, Some(vec!["ALL".to_owned()]));
        assert!(host.cap_add.is_none());
        assert_eq!(host.security_opt, Some(vec!["no-new-privileges:true".to_owned()]));
        assert_eq!(host.pids_limit, Some(64));
        assert_eq!(host.memory, Some(256 * 1024 * 1024));
        assert_eq!(host.memory_swap, host.memory, "no extra swap");
        assert_eq!(host.nano_cpus, Some(1_000_000_000));
        assert_eq!(host.init, Some(false), "the subagent is pid 1: no init a task could take over");
        assert_eq!(host.network_mode.as_deref(), Some("nexbot-subagents"));
        assert!(host.runtime.is_none());
        let tmpfs = host.tmpfs.unwrap();
        assert!(tmpfs["/tmp"].contains("size=16777216"));
        assert!(tmpfs[SCRATCH_DIR].contains("uid=65532,gid=65532"));
        assert!(tmpfs[SCRATCH_DIR].contains("size=67108864"));
        let log = host.log_config.unwrap();
        assert_eq!(
            log.typ.as_deref(),
            Some("none"),
            "no copy of a task's lines on the engine's disk"
        );
        assert!(host.binds.is_none(), "nothing mounted without a skills dir");
        let labels = body.labels.unwrap();
        assert_eq!(labels[LABEL_POOL], "nexbot");
        assert_eq!(labels[LABEL_INSTANCE], "inst-1");
        assert_eq!(labels[LABEL_SLOT], "2");
        assert_eq!(labels[crate::pool_owner::LABEL_OWNER], Owner::current().instance);
        assert_eq!(labels[crate::pool_owner::LABEL_OWNER_PID], std::process::id().to_string());
        let sysctls = host.sysctls.unwrap();
        assert_eq!(sysctls["net.ipv6.conf.all.disable_ipv6"], "1");
        assert_eq!(sysctls["net.ipv6.conf.default.disable_ipv6"], "1");
    }

    #[test]
    fn skills_are_read_only_runtime_and_env_pass_through() {
        let mut config = PoolConfig {
            skills_dir: Some("/srv/skills".into()),
            runtime: Some("runsc".into()),
            ..PoolConfig::default()
        };
        config.env.insert("HTTPS_PROXY".into(), "http://172.30.0.1:3128".into());
        let body = spec(&config);
        assert_eq!(body.env, Some(vec!["HTTPS_PROXY=http://172.30.0.1:3128".to_owned()]));
        let host = body.host_config.unwrap();
        assert_eq!(host.binds, Some(vec![format!("/srv/skills:{SKILLS_DIR}:ro")]));
        assert_eq!(host.runtime.as_deref(), Some("runsc"));
        let copy = PoolConfig { skills_volume: Some("p-skills".into()), ..PoolConfig::default() };
        let binds = spec(&copy).host_config.unwrap().binds;
        assert_eq!(binds, Some(vec![format!("p-skills:{SKILLS_DIR}:ro")]));
        // gVisor's kernel and its threads per process live in the cgroup too, whatever the
        // engine calls it; the name alone decides nothing.
        let gvisor = OciRuntime { name: "gvisor".into(), gvisor: true };
        let body = container_spec(&config, &gvisor, &owner(), "inst-1", 2).unwrap();
        assert_eq!(body.host_config.unwrap().pids_limit, Some(64 + 12 * config.pids_limit));
        assert_eq!(host.pids_limit, Some(config.pids_limit));
        assert_eq!(spec(&PoolConfig::default()).host_config.unwrap().pids_limit, Some(64));
    }

    #[test]
    fn no_docker_socket_and_no_secret_anywhere() {
        let mut config = PoolConfig::default();
        config.env.insert("OPENAI_API_KEY".into(), "sk-live-123".into());
        assert!(
            container_spec(&config, &runc(), &owner(), "i", 0).is_err(),
            "secret-looking env refused"
        );
        let body = spec(&PoolConfig::default());
        let text = serde_json::to_string(&body).unwrap();
        assert!(!text.contains("docker.sock"));
        assert!(!text.to_ascii_lowercase().contains("api_key"));
    }

    #[test]
    fn invalid_config_is_refused() {
        let config = PoolConfig { user: "0".into(), ..PoolConfig::default() };
        assert!(container_spec(&config, &runc(), &owner(), "i", 0).is_err());
    }
}
