//! Which container this process runs in, as the Docker engine sees it: its labels (the compose
//! project) and where its mounts come from on the Docker host.
//!
//! Why: subagent containers get the skills folder by its path *on the Docker host* (the engine
//! resolves bind sources there), and a daemon in compose only knows its own mount point
//! (`/skills`). With host networking the hostname is the host's, so the container cannot be
//! found by hostname or id; instead its mount table (`/proc/self/mountinfo`) says which path of
//! the host's filesystem is mounted at a probe mount point (the data volume), and the one
//! running container whose mount there has that source is this one.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use bollard::query_parameters::ListContainersOptionsBuilder;
use bollard::Docker;

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
}

/// The `root` (path within its filesystem) of the mount at `mount_point`, from a mountinfo
/// table (`/proc/self/mountinfo`'s text). Octal escapes (`\040` for a space) are decoded.
pub fn mount_root(mountinfo: &str, mount_point: &str) -> Option<String> {
    mountinfo.lines().rev().find_map(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        (fields.len() > 4 && unescape(fields[4]) == mount_point).then(|| unescape(fields[3]))
    })
}

fn unescape(field: &str) -> String {
    let mut out = Vec::with_capacity(field.len());
    let bytes = field.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 3 < bytes.len() {
            if let Ok(n) = u8::from_str_radix(&field[i + 1..i + 4], 8) {
                out.push(n);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Finds this process's container among the running ones labelled `label` (e.g.
/// `nexbot.role=host`), by the source of its mount at `probe` (e.g. `/data`). `None` when this
/// process is not in a container, nothing matches, or more than one does.
pub async fn find_own_container(docker: &Docker, label: &str, probe: &str) -> Option<OwnContainer> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let root = mount_root(&mountinfo, probe)?;
    let filters = HashMap::from([("label", vec![label.to_owned()])]);
    let options = ListContainersOptionsBuilder::default().filters(&filters).build();
    let listed = docker.list_containers(Some(options)).await.ok()?;
    let mut found: Vec<OwnContainer> = listed
        .into_iter()
        .filter_map(|c| {
            let mounts: BTreeMap<String, PathBuf> = c
                .mounts
                .unwrap_or_default()
                .into_iter()
                .filter_map(|m| Some((m.destination?, PathBuf::from(m.source?))))
                .collect();
            let source = mounts.get(probe)?;
            source.to_string_lossy().ends_with(root.as_str()).then(|| OwnContainer {
                id: c.id.unwrap_or_default(),
                labels: c.labels.unwrap_or_default().into_iter().collect(),
                mounts,
            })
        })
        .collect();
    (found.len() == 1).then(|| found.remove(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
624 540 0:58 / / ro,relatime master:1 - overlay overlay rw
625 624 0:61 / /proc rw,nosuid - proc proc rw
640 624 253:0 /var/lib/docker/volumes/nexbot_data/_data /data rw,relatime - ext4 /dev/vda rw
641 624 253:0 /home/me/nex\\040bot/skills /skills ro,relatime - ext4 /dev/vda rw
";

    #[test]
    fn the_root_of_a_mount_point_is_read_and_unescaped() {
        assert_eq!(
            mount_root(MOUNTINFO, "/data").as_deref(),
            Some("/var/lib/docker/volumes/nexbot_data/_data")
        );
        assert_eq!(mount_root(MOUNTINFO, "/skills").as_deref(), Some("/home/me/nex bot/skills"));
        assert_eq!(mount_root(MOUNTINFO, "/nothing"), None);
    }
}
