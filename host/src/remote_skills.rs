//! The skills folder's copy on a remote engine ([`nexbot_docker::fill_skills_volume`]): made
//! before the pool starts, and again whenever the daemon's skills watcher swaps in a new set
//! and the folder's packed bytes differ from the last copy's (a rescan that found nothing new
//! copies nothing).

use std::path::PathBuf;
use std::sync::Arc;

use nexbot_docker::{Docker, PoolConfig};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

/// The copy of one pool's skills folder in its volume there.
pub struct SkillsCopy {
    docker: Docker,
    volume: String,
    pool: String,
    image: String,
    runtime: Option<String>,
    dir: PathBuf,
    /// The digest of the last copy made.
    last: tokio::sync::Mutex<Option<[u8; 32]>>,
}

impl std::fmt::Debug for SkillsCopy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SkillsCopy").field("volume", &self.volume).field("dir", &self.dir).finish()
    }
}

impl SkillsCopy {
    /// The copy of `dir` for `pool` (whose `skills_volume` names the volume) on `docker`.
    pub fn new(pool: &PoolConfig, docker: &Docker, dir: PathBuf) -> Self {
        Self {
            docker: docker.clone(),
            volume: nexbot_docker::skills_volume(&pool.name),
            pool: pool.name.clone(),
            image: pool.image.clone(),
            runtime: pool.runtime.clone(),
            dir,
            last: tokio::sync::Mutex::new(None),
        }
    }

    /// The volume the pool mounts.
    pub fn volume(&self) -> &str {
        &self.volume
    }

    /// Copies the folder when it changed since the last copy; the bytes copied, or `None`
    /// when nothing changed. A folder that is not there copies as empty.
    pub async fn refresh(&self) -> Result<Option<usize>, String> {
        let mut last = self.last.lock().await;
        let dir = self.dir.clone();
        let packed = tokio::task::spawn_blocking(move || nexbot_docker::pack_folder(&dir))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("cannot read the skills folder {}: {e}", self.dir.display()))?;
        let digest: [u8; 32] = Sha256::digest(&packed).into();
        if *last == Some(digest) {
            return Ok(None);
        }
        let bytes = packed.len();
        let runtime = self.runtime.as_deref();
        nexbot_docker::fill_skills_volume(
            &self.docker,
            &self.volume,
            &self.pool,
            &self.image,
            runtime,
            packed,
        )
        .await
        .map_err(|e| e.to_string())?;
        *last = Some(digest);
        Ok(Some(bytes))
    }

    /// [`Self::refresh`], logged.
    pub async fn refresh_logged(&self) {
        match self.refresh().await {
            Ok(Some(bytes)) => tracing::info!(
                volume = %self.volume, bytes, "the skills folder copied to the remote engine"
            ),
            Ok(None) => {}
            Err(e) => tracing::warn!(
                volume = %self.volume, error = %e,
                "the skills folder's copy on the remote engine is stale; it is tried again on \
                 the folder's next change"
            ),
        }
    }

    /// Removes the volume (the pool is gone: a stopped daemon leaves nothing there; the next
    /// start copies the folder again).
    pub async fn remove(&self) {
        match nexbot_docker::remove_skills_volume(&self.docker, &self.volume).await {
            Ok(()) => tracing::info!(volume = %self.volume, "the skills' copy removed"),
            Err(e) => tracing::warn!(volume = %self.volume, error = %e, "the skills' copy kept"),
        }
    }

    /// Copies again after every new skill set until `stop`.
    pub async fn follow(
        self: Arc<Self>,
        mut changes: tokio::sync::watch::Receiver<u64>,
        stop: CancellationToken,
    ) {
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                changed = changes.changed() => if changed.is_err() { return },
            }
            self.refresh_logged().await;
        }
    }
}
