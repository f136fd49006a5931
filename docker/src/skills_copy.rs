//! The skills folder on a remote engine: a copy in a volume there.
//!
//! Why: a local pool bind-mounts the daemon's skills folder read-only; on a remote engine a
//! bind mount would name a folder of *that* machine. So the daemon keeps a volume there
//! ([`skills_volume`]) holding a copy of its folder, made again whenever the folder changes,
//! and the pool mounts the volume read-only where the folder would be
//! ([`PoolConfig::skills_volume`](crate::PoolConfig::skills_volume)). The copy is written by a
//! short-lived container of the pool's image (no network, no capabilities, a read-only root)
//! that empties the volume; the folder is then put into it through the engine's archive API.

use std::path::Path;

use bollard::models::{ContainerCreateBody, HostConfig, VolumeCreateRequest};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, RemoveContainerOptionsBuilder, UploadToContainerOptionsBuilder,
};
use bollard::Docker;
use futures_util::StreamExt;

use crate::error::PoolError;
use crate::spec::LABEL_POOL;

/// Where the copying container sees the volume.
const MOUNT: &str = "/skills";

/// The volume that holds pool `pool`'s copy of the skills folder.
pub fn skills_volume(pool: &str) -> String {
    format!("{pool}-skills")
}

/// The folder `dir` as a tar stream (symbolic links kept as links, not followed: a link out
/// of the folder copies nothing of what it points to); an empty one when `dir` is not there.
pub fn pack_folder(dir: &Path) -> std::io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    builder.follow_symlinks(false);
    if dir.is_dir() {
        builder.append_dir_all(".", dir)?;
    }
    builder.into_inner()
}

/// Replaces the contents of `volume` (made when missing) with the tar stream `packed`, using
/// `image` (which has `/bin/sh` and `find`) under `runtime`. Nothing is left running.
pub async fn fill_skills_volume(
    docker: &Docker,
    volume: &str,
    pool: &str,
    image: &str,
    runtime: Option<&str>,
    packed: Vec<u8>,
) -> Result<(), PoolError> {
    let request = VolumeCreateRequest {
        name: Some(volume.to_owned()),
        labels: Some([(LABEL_POOL.to_owned(), pool.to_owned())].into()),
        ..VolumeCreateRequest::default()
    };
    docker
        .create_volume(request)
        .await
        .map_err(|e| PoolError::docker(format!("create the skills volume {volume}"), e))?;
    let name = format!("{volume}-copy");
    let remove = RemoveContainerOptionsBuilder::default().force(true).build();
    let _ = docker.remove_container(&name, Some(remove.clone())).await;
    let body = ContainerCreateBody {
        image: Some(image.to_owned()),
        entrypoint: Some(vec!["/bin/sh".into()]),
        cmd: Some(vec![
            "-c".into(),
            format!("find {MOUNT} -mindepth 1 -maxdepth 1 -exec rm -rf {{}} +"),
        ]),
        user: Some("0".into()),
        host_config: Some(HostConfig {
            binds: Some(vec![format!("{volume}:{MOUNT}")]),
            network_mode: Some("none".into()),
            cap_drop: Some(vec!["ALL".into()]),
            readonly_rootfs: Some(true),
            security_opt: Some(vec!["no-new-privileges:true".into()]),
            runtime: runtime.map(str::to_owned),
            ..HostConfig::default()
        }),
        ..ContainerCreateBody::default()
    };
    let options = CreateContainerOptionsBuilder::default().name(&name).build();
    let created = docker
        .create_container(Some(options), body)
        .await
        .map_err(|e| PoolError::docker(format!("create {name}"), e))?;
    let filled = empty_then_fill(docker, &created.id, &name, packed).await;
    let _ = docker.remove_container(&created.id, Some(remove)).await;
    filled
}

/// Runs the emptying container to its end, then unpacks `packed` into the volume through it.
async fn empty_then_fill(
    docker: &Docker,
    id: &str,
    name: &str,
    packed: Vec<u8>,
) -> Result<(), PoolError> {
    docker
        .start_container(id, None::<bollard::query_parameters::StartContainerOptions>)
        .await
        .map_err(|e| PoolError::docker(format!("start {name}"), e))?;
    let mut waited = docker.wait_container(id, None);
    while let Some(status) = waited.next().await {
        let what = format!("empty the skills volume ({name})");
        match status {
            Ok(_) => {}
            Err(e @ bollard::errors::Error::DockerContainerWaitError { code, .. }) => {
                return Err(PoolError::docker(format!("{what}, exit code {code}"), e));
            }
            Err(e) => return Err(PoolError::docker(what, e)),
        }
    }
    let options = UploadToContainerOptionsBuilder::default().path(MOUNT).build();
    docker
        .upload_to_container(id, Some(options), bollard::body_full(packed.into()))
        .await
        .map_err(|e| PoolError::docker(format!("copy the skills folder ({name})"), e))
}

/// Removes `volume` (once nothing mounts it).
pub async fn remove_skills_volume(docker: &Docker, volume: &str) -> Result<(), PoolError> {
    docker
        .remove_volume(volume, None::<bollard::query_parameters::RemoveVolumeOptions>)
        .await
        .map_err(|e| PoolError::docker(format!("remove the skills volume {volume}"), e))
}
