//! What the engine says of a pool container's walls (`docker inspect`), for the owner's
//! self-test: read from the engine, not from the spec the pool meant to give, so a setting
//! lost on the way (an engine that ignores an option, a runtime fallback) shows. And a
//! command run in a room's container between its tasks (`docker exec`, as its user): what a
//! process left behind could do while no task runs.

use crate::pool::Pool;
use crate::PoolError;

/// A container's hardening as the engine reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hardening {
    /// The container's short id.
    pub container: String,
    /// `Config.User` (`""`: the image's, which may be root).
    pub user: String,
    pub privileged: bool,
    pub cap_add: Vec<String>,
    pub cap_drop: Vec<String>,
    pub read_only_root: bool,
    /// Limits; 0 = none.
    pub memory_bytes: i64,
    pub pids_limit: i64,
    pub nano_cpus: i64,
    pub security_opt: Vec<String>,
    /// The OCI runtime (`runc`, `runsc`, …).
    pub runtime: String,
    pub network_mode: String,
}

impl Pool {
    /// The full id of the container serving `room`.
    fn container_of_room(&self, room: &str) -> Result<String, PoolError> {
        self.snapshot()
            .into_iter()
            .find(|s| s.room.as_deref() == Some(room))
            .and_then(|s| s.container_id)
            .ok_or_else(|| PoolError::UnknownContainer(format!("the container of room {room}")))
    }

    /// Runs `sh -c command` in the container serving `room` (`docker exec`, as the
    /// container's user, with its environment) while no task runs there; its output, cut
    /// off after `limit`.
    pub async fn exec_in_room(
        &self,
        room: &str,
        command: &str,
        limit: std::time::Duration,
    ) -> Result<String, PoolError> {
        use bollard::exec::StartExecResults;
        use bollard::models::ExecConfig;
        use futures_util::StreamExt;

        let id = self.container_of_room(room)?;
        let docker = &self.inner.engine.docker;
        let config = ExecConfig {
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            cmd: Some(vec!["/bin/sh".into(), "-c".into(), command.into()]),
            ..Default::default()
        };
        let created = docker
            .create_exec(&id, config)
            .await
            .map_err(|e| PoolError::docker(format!("exec in container {id}"), e))?;
        let started = docker
            .start_exec(&created.id, None)
            .await
            .map_err(|e| PoolError::docker(format!("exec in container {id}"), e))?;
        let mut output = String::new();
        if let StartExecResults::Attached { output: mut stream, .. } = started {
            let read = async {
                while let Some(Ok(chunk)) = stream.next().await {
                    output.push_str(&chunk.to_string());
                }
            };
            let _ = tokio::time::timeout(limit, read).await;
        }
        Ok(output)
    }

    /// The hardening of the container serving `room` (as [`crate::ContainerSnapshot::room`]
    /// names it), or [`PoolError::UnknownContainer`] when no container serves it.
    pub async fn hardening_of_room(&self, room: &str) -> Result<Hardening, PoolError> {
        let id = self.container_of_room(room)?;
        let info = self
            .inner
            .engine
            .docker
            .inspect_container(&id, None)
            .await
            .map_err(|e| PoolError::docker(format!("inspect container {id}"), e))?;
        let config = info.config.unwrap_or_default();
        let host = info.host_config.unwrap_or_default();
        Ok(Hardening {
            container: id.chars().take(12).collect(),
            user: config.user.unwrap_or_default(),
            privileged: host.privileged.unwrap_or(false),
            cap_add: host.cap_add.unwrap_or_default(),
            cap_drop: host.cap_drop.unwrap_or_default(),
            read_only_root: host.readonly_rootfs.unwrap_or(false),
            memory_bytes: host.memory.unwrap_or(0),
            pids_limit: host.pids_limit.unwrap_or(0),
            nano_cpus: host.nano_cpus.unwrap_or(0),
            security_opt: host.security_opt.unwrap_or_default(),
            runtime: host.runtime.unwrap_or_default(),
            network_mode: host.network_mode.unwrap_or_default(),
        })
    }
}
