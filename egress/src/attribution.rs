//! Tying a connection to the container it came from and the task running there.
//!
//! The proxy only sees a source address; the pool knows which container has that address on
//! the internal network and which task it is running. [`Attribution`] is the small seam
//! between them. The host implements it for its pool; [`LateAttribution`] lets the listener
//! start before the pool (whose containers need the listener's address in their environment);
//! [`AttributionTable`] is a plain table for callers that keep their own.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, OnceLock, RwLock, Weak};

/// Who sits behind a source address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attributed {
    /// Container name or id.
    pub container: String,
    /// The task the container is running now, if any.
    pub task_id: Option<String>,
    /// The container serves one identity for life (an MCP server's, `task_id`): its address
    /// alone says whose a request is, so the proxy asks no credential of it. A pool container
    /// is never dedicated (it serves one task after another).
    pub dedicated: bool,
    /// The room (chat) the container belongs to, when it has one: the listener counts a
    /// room's open connections together (`max_connections_per_chat`), however many of the
    /// room's containers they come from.
    pub room: Option<String>,
}

/// Maps a source address on the pool network to its container and current task.
/// Called once per proxied request, so it must be quick and must not block on I/O.
pub trait Attribution: Send + Sync + 'static {
    fn lookup(&self, source: IpAddr) -> Option<Attributed>;
}

/// An attribution bound once, after the listener started; knows nobody until then. Holds only
/// a weak reference, so it never keeps the pool alive (the pool's shutdown needs to own it).
#[derive(Debug, Default)]
pub struct LateAttribution {
    target: OnceLock<Weak<dyn Attribution>>,
}

impl LateAttribution {
    /// Binds the real attribution; `false` when one was bound already.
    pub fn bind(&self, target: &Arc<dyn Attribution>) -> bool {
        self.target.set(Arc::downgrade(target)).is_ok()
    }
}

impl Attribution for LateAttribution {
    fn lookup(&self, source: IpAddr) -> Option<Attributed> {
        self.target.get()?.upgrade()?.lookup(source)
    }
}

/// A table the pool keeps up to date: a container's address when it starts, its task when a
/// task starts and ends, removal when the container goes.
#[derive(Debug, Default)]
pub struct AttributionTable {
    map: RwLock<HashMap<IpAddr, Attributed>>,
}

impl AttributionTable {
    /// Registers (or replaces) the container at `ip`, with no task.
    pub fn set_container(&self, ip: IpAddr, container: impl Into<String>) {
        let entry =
            Attributed { container: container.into(), task_id: None, dedicated: false, room: None };
        self.write().insert(ip.to_canonical(), entry);
    }

    /// Sets or clears the room of the container at `ip`; `false` when no container is there.
    pub fn set_room(&self, ip: IpAddr, room: Option<String>) -> bool {
        match self.write().get_mut(&ip.to_canonical()) {
            Some(entry) => {
                entry.room = room;
                true
            }
            None => false,
        }
    }

    /// Registers (or replaces) the container at `ip` as dedicated to `identity` for life.
    pub fn set_dedicated(
        &self,
        ip: IpAddr,
        container: impl Into<String>,
        identity: impl Into<String>,
    ) {
        let entry = Attributed {
            container: container.into(),
            task_id: Some(identity.into()),
            dedicated: true,
            room: None,
        };
        self.write().insert(ip.to_canonical(), entry);
    }

    /// Sets or clears the task of the container at `ip`; `false` when no container is there.
    pub fn set_task(&self, ip: IpAddr, task_id: Option<String>) -> bool {
        match self.write().get_mut(&ip.to_canonical()) {
            Some(entry) => {
                entry.task_id = task_id;
                true
            }
            None => false,
        }
    }

    pub fn remove(&self, ip: IpAddr) {
        self.write().remove(&ip.to_canonical());
    }

    /// Removes the entry at `ip` only while it is still `container`'s: an address the engine
    /// gave a newer container meanwhile keeps that container's entry.
    pub fn remove_container(&self, ip: IpAddr, container: &str) {
        let mut map = self.write();
        let ip = ip.to_canonical();
        if map.get(&ip).is_some_and(|entry| entry.container == container) {
            map.remove(&ip);
        }
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<IpAddr, Attributed>> {
        self.map.write().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Attribution for AttributionTable {
    fn lookup(&self, source: IpAddr) -> Option<Attributed> {
        let map = self.map.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        map.get(&source.to_canonical()).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_tracks_containers_and_tasks() {
        let table = AttributionTable::default();
        let ip: IpAddr = "172.30.0.5".parse().unwrap();
        assert_eq!(table.lookup(ip), None);
        assert!(!table.set_task(ip, Some("t".into())));
        table.set_container(ip, "c1");
        assert!(table.set_task(ip, Some("t".into())));
        let mapped: IpAddr = "::ffff:172.30.0.5".parse().unwrap();
        assert_eq!(
            table.lookup(mapped),
            Some(Attributed {
                container: "c1".into(),
                task_id: Some("t".into()),
                dedicated: false,
                room: None
            })
        );
        table.remove(ip);
        assert_eq!(table.lookup(ip), None);
        table.set_dedicated(ip, "mcp-1", "mcp:everything");
        let dedicated = table.lookup(ip).unwrap();
        assert!(dedicated.dedicated && dedicated.task_id.as_deref() == Some("mcp:everything"));
        // The address went to a newer container: the old one's removal leaves it alone.
        table.set_dedicated(ip, "mcp-2", "mcp:everything");
        table.remove_container(ip, "mcp-1");
        assert_eq!(table.lookup(ip).map(|a| a.container), Some("mcp-2".to_owned()));
        table.remove_container(ip, "mcp-2");
        assert_eq!(table.lookup(ip), None);
    }

    #[test]
    fn late_attribution_knows_nobody_until_bound_and_never_owns_its_target() {
        let ip: IpAddr = "172.30.0.9".parse().unwrap();
        let late = LateAttribution::default();
        assert_eq!(late.lookup(ip), None);
        let table = Arc::new(AttributionTable::default());
        table.set_container(ip, "c9");
        let target: Arc<dyn Attribution> = table;
        assert!(late.bind(&target));
        assert!(!late.bind(&target), "bound once");
        assert_eq!(late.lookup(ip).map(|a| a.container), Some("c9".to_owned()));
        drop(target);
        assert_eq!(late.lookup(ip), None, "a dropped target is not kept alive");
    }
}
