//! What the engine says of a pool container's walls (`docker inspect`), for the owner's
//! self-test: read from the engine, not from the spec the pool meant to give, so a setting
//! lost on the way (an engine that ignores an option, a runtime fallback) shows.

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
    /// The hardening of the container serving `room` (as [`crate::ContainerSnapshot::room`]
    /// names it), or [`PoolError::UnknownContainer`] when no container serves it.
    pub async fn hardening_of_room(&self, room: &str) -> Result<Hardening, PoolError> {
        let id = self
            .snapshot()
            .into_iter()
            .find(|s| s.room.as_deref() == Some(room))
            .and_then(|s| s.container_id)
            .ok_or_else(|| PoolError::UnknownContainer(format!("the container of room {room}")))?;
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
