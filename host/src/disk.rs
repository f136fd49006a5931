//! The data directory's free space: a degraded part of `health` and `/status` below
//! `storage.min_free_mb`, and a warning in the log when it drops below (and a line when it is
//! back).
//!
//! Why: with the disk full SQLite refuses every write, so the daemon cannot record an incoming
//! message, a turn or an answer; nothing else said so (health was ready, `/status` clean). The
//! check is one `statvfs` (no file is written, so it works on a full disk), read fresh each time
//! health or `/status` asks, so the number shown is today's; a task looks every
//! [`WATCH_EVERY`] only to log the crossing.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use nexbot_core::text::human_size;

use crate::status::StatusBoard;

/// How often the watcher looks, to log a drop below the threshold.
pub const WATCH_EVERY: Duration = Duration::from_secs(30);

const MB: u64 = 1024 * 1024;

/// The free space of one directory's file system against a threshold. Cheap to clone.
#[derive(Debug, Clone)]
pub struct DiskSpace {
    dir: PathBuf,
    min_free: u64,
}

impl DiskSpace {
    /// Watches `dir` (the data directory), degraded below `min_free_mb` MB (1 MB = 1,048,576
    /// bytes); 0 turns the check off.
    pub fn new(dir: impl Into<PathBuf>, min_free_mb: u64) -> Self {
        Self { dir: dir.into(), min_free: min_free_mb.saturating_mul(MB) }
    }

    /// What is wrong now, if anything: too little space, or the space cannot be read.
    pub fn problem(&self) -> Option<String> {
        if self.min_free == 0 {
            return None;
        }
        match free_bytes(&self.dir) {
            Ok(free) => low_space(&self.dir, free, self.min_free),
            Err(e) => Some(format!(
                "cannot read the free space of {} ({e}); check that the directory exists",
                self.dir.display()
            )),
        }
    }

    /// The directory whose file system it watches.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Its free space now, as the degraded text prints it (or why it cannot be read).
    pub fn free(&self) -> String {
        free_text(&self.dir)
    }

    /// Adds the check to `board` as the part `part` (`disk`, `engine disk`).
    pub fn add_to(&self, board: &StatusBoard, part: &'static str) {
        let space = self.clone();
        board.add_problem(part, move || space.problem());
    }

    /// Logs when the space drops below the threshold (with what to do) and when it is back,
    /// until `stop`.
    pub async fn watch(self, stop: CancellationToken) {
        let mut was_low = false;
        loop {
            let problem = self.problem();
            match (&problem, was_low) {
                (Some(problem), false) => tracing::warn!(
                    "disk: {problem}; free space there: while it is full nexbot cannot record \
                     messages or answers"
                ),
                (None, true) => {
                    tracing::info!("disk: free space in {} is back", self.dir.display())
                }
                _ => {}
            }
            was_low = problem.is_some();
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(WATCH_EVERY) => {}
            }
        }
    }
}

/// The engine's data directory ([`nexbot_docker::engine_root_dir`]) when this process can see
/// it (a local engine, the daemon not in a container): its free space is watched as the part
/// `engine disk`, since a full engine disk fails every container start.
pub async fn engine_disk(docker: &nexbot_docker::Docker, min_free_mb: u64) -> Option<DiskSpace> {
    let root = nexbot_docker::engine_root_dir(docker).await?;
    root.is_dir().then(|| DiskSpace::new(root, min_free_mb))
}

/// Bytes an unprivileged process may still write in `dir`'s file system.
pub fn free_bytes(dir: &Path) -> std::io::Result<u64> {
    let stat = rustix::fs::statvfs(dir)?;
    Ok(stat.f_bavail.saturating_mul(stat.f_frsize))
}

/// The free space of `dir`'s file system as [`low_space`] prints it ("1.2 MB", "812 MB"), or
/// why it cannot be read.
pub fn free_text(dir: &Path) -> String {
    match free_bytes(dir) {
        Ok(free) => human_size(free),
        Err(e) => format!("unknown ({e})"),
    }
}

/// The degraded text when `free` bytes in `dir` is below `min_free`:
/// "1.2 MB free in /data (below 50 MB)".
pub fn low_space(dir: &Path, free: u64, min_free: u64) -> Option<String> {
    (free < min_free).then(|| {
        format!("{} free in {} (below {})", human_size(free), dir.display(), human_size(min_free))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn below_the_threshold_is_named_with_the_numbers_and_above_is_fine() {
        let dir = Path::new("/data");
        let low = low_space(dir, 1_258_291, 50 * MB);
        assert_eq!(low.as_deref(), Some("1.2 MB free in /data (below 50 MB)"));
        assert_eq!(low_space(dir, 0, 50 * MB).as_deref(), Some("0 B free in /data (below 50 MB)"));
        assert_eq!(low_space(dir, 50 * MB, 50 * MB), None);
        assert_eq!(low_space(dir, 5000 * MB, 50 * MB), None);
    }

    #[test]
    fn a_real_directory_is_measured_and_a_missing_one_is_a_problem_that_says_so() {
        let here = std::env::temp_dir();
        assert!(free_bytes(&here).unwrap() > 0);
        // No disk has this much free: the check names the directory.
        let huge = DiskSpace::new(&here, u64::MAX / MB);
        let problem = huge.problem().unwrap();
        assert!(problem.contains(&format!("free in {}", here.display())), "{problem}");
        assert_eq!(DiskSpace::new(&here, 0).problem(), None, "0 turns the check off");
        let missing = DiskSpace::new("/nonexistent-nexbot-dir", 50).problem().unwrap();
        assert!(missing.contains("cannot read the free space"), "{missing}");
    }
}
