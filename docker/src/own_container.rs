//! Which container this process runs in, as the Docker engine sees it: its labels (the compose
//! project) and where its mounts come from on the Docker host.
//!
//! Why: subagent containers get the skills folder by its path *on the Docker host* (the engine
//! resolves bind sources there), and a daemon in compose only knows its own mount point
//! (`/skills`). With host networking the hostname is the host's, so it names nothing; the
//! container's id comes from the kernel instead ([`crate::pool_owner::own_container_id`]: the
//! container's own `/etc/hostname` bind mount in `/proc/self/mountinfo`, else its cgroup), and
//! the engine is asked about that one container by id. Listing containers is not used: right
//! after `docker-compose up` recreates the service, the engine may not list the new container
//! as running yet, and a daemon that looked then took itself for a plain one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bollard::Docker;

use crate::pool_owner::own_container_id;

/// This process's own container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnContainer {
    pub id: String,
    pub labels: BTreeMap<String, String>,
    /// Mount destination in the container → source on the Docker host.
    pub mounts: BTreeMap<String, PathBuf>,
}

impl OwnContainer {
    /// The compose project this container belongs to, if any.
    pub fn compose_project(&self) -> Option<&str> {
        self.labels.get("com.docker.compose.project").map(String::as_str)
    }

    /// Where `destination` comes from on the Docker host.
    pub fn mount_source(&self, destination: &str) -> Option<&Path> {
        self.mounts.get(destination).map(PathBuf::as_path)
    }

    /// Where `path` (absolute, in this container) is on the Docker host: under the source of
    /// the deepest mount that holds it; `None` when no mount does (it is in the container's
    /// own file system, which the engine cannot hand to another container).
    pub fn host_path(&self, path: &Path) -> Option<PathBuf> {
        self.mounts
            .iter()
            .filter_map(|(destination, source)| {
                let rest = path.strip_prefix(destination).ok()?;
                Some((Path::new(destination).components().count(), source.join(rest)))
            })
            .max_by_key(|(depth, _)| *depth)
            .map(|(_, on_host)| on_host)
    }
}

/// What this process found out about its own container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SelfDiscovery {
    /// No trace of a container: a daemon started by hand or by a service manager.
    NotInContainer,
    /// The engine described this process's container.
    Found(OwnContainer),
    /// This process runs in a container, but which one, or what it is, cannot be told; the
    /// reason, for the operator.
    Unknown(String),
}

/// How many times the engine is asked about this process's container, and the pause between
/// attempts: a busy engine gets about five seconds, then the daemon says it cannot tell.
pub const DISCOVERY_ATTEMPTS: u32 = 10;
pub const DISCOVERY_PAUSE: Duration = Duration::from_millis(500);

/// Finds this process's own container: its id from the kernel, then the engine's description
/// of it, asked up to `attempts` times `pause` apart while the engine fails.
pub async fn discover_own_container(
    docker: &Docker,
    attempts: u32,
    pause: Duration,
) -> SelfDiscovery {
    let Some(id) = own_container_id() else {
        return if Path::new("/.dockerenv").exists() {
            SelfDiscovery::Unknown(
                "it runs in a container (/.dockerenv exists) but neither /proc/self/mountinfo nor \
                 /proc/self/cgroup names it"
                    .into(),
            )
        } else {
            SelfDiscovery::NotInContainer
        };
    };
    let short: String = id.chars().take(12).collect();
    let mut last = String::new();
    for attempt in 1..=attempts.max(1) {
        match docker.inspect_container(&id, None).await {
            Ok(info) => {
                let labels = info.config.and_then(|c| c.labels).unwrap_or_default();
                let mounts = info
                    .mounts
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|m| Some((m.destination?, PathBuf::from(m.source?))))
                    .collect();
                return SelfDiscovery::Found(OwnContainer {
                    id,
                    labels: labels.into_iter().collect(),
                    mounts,
                });
            }
            Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => {
                return SelfDiscovery::Unknown(format!(
                    "the Docker engine at the socket does not know its container {short} (is the \
                     socket another engine's than the one running this container?)"
                ));
            }
            Err(e) => {
                last = e.to_string();
                tracing::debug!(attempt, container = %short, error = %last, "inspecting own container");
                if attempt < attempts {
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }
    SelfDiscovery::Unknown(format!(
        "the Docker engine did not describe its container {short} ({attempts} attempts, last \
         error: {last})"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_found_under_the_deepest_mount_that_holds_it() {
        let own = OwnContainer {
            id: "x".into(),
            labels: BTreeMap::new(),
            mounts: BTreeMap::from([
                ("/data".to_owned(), PathBuf::from("/var/lib/docker/volumes/p_data/_data")),
                ("/data/chats".to_owned(), PathBuf::from("/srv/chats")),
                ("/skills".to_owned(), PathBuf::from("/home/me/skills")),
            ]),
        };
        assert_eq!(
            own.host_path(Path::new("/data/chats/telegram_1")),
            Some(PathBuf::from("/srv/chats/telegram_1"))
        );
        assert_eq!(
            own.host_path(Path::new("/data/notes")),
            Some(PathBuf::from("/var/lib/docker/volumes/p_data/_data/notes"))
        );
        assert_eq!(own.host_path(Path::new("/datadir/x")), None, "a prefix is not a folder");
        assert_eq!(own.host_path(Path::new("/etc/passwd")), None);
    }
}
