//! One daemon per data directory: a lock file (`<data dir>/nexbot.lock`) that the running
//! daemon holds for its lifetime.
//!
//! Why `flock`: the kernel releases it when the process dies, however it dies (SIGKILL, OOM),
//! so a lock left by a dead daemon is simply taken over; there is no stale-PID guessing. The
//! file holds the holder's pid, so the refusal can say which process holds it.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use rustix::fs::{flock, FlockOperation};
use thiserror::Error;

/// The lock file's name in the data directory.
pub const LOCK_FILE: &str = "nexbot.lock";

#[derive(Debug, Error)]
pub enum LockError {
    #[error(
        "another nexbot daemon (pid {pid}) is running on the data directory {dir}; stop it \
         first (`nexbot-ctl status` talks to it), or give this one another data directory"
    )]
    Held { dir: PathBuf, pid: String },
    #[error("cannot lock the data directory {dir}: {reason}")]
    Io { dir: PathBuf, reason: String },
}

/// Held while the daemon runs; dropping it (or the process ending) releases the directory.
#[derive(Debug)]
pub struct DataDirLock {
    _file: File,
    path: PathBuf,
}

impl DataDirLock {
    /// Takes the data directory `dir` for this process, or says who holds it.
    pub fn acquire(dir: &Path) -> Result<Self, LockError> {
        let io = |e: std::io::Error| LockError::Io { dir: dir.to_owned(), reason: e.to_string() };
        std::fs::create_dir_all(dir).map_err(io)?;
        make_private(dir).map_err(io)?;
        let path = dir.join(LOCK_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        if flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
            let mut pid = String::new();
            let _ = file.read_to_string(&mut pid);
            let pid = pid.trim();
            let pid = if pid.is_empty() { "unknown".to_owned() } else { pid.to_owned() };
            return Err(LockError::Held { dir: dir.to_owned(), pid });
        }
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        writeln!(file, "{}", std::process::id()).map_err(io)?;
        file.flush().map_err(io)?;
        Ok(Self { _file: file, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Makes the data directory `dir` its owner's alone (0700): it holds the database, the vault,
/// backups, audit logs and every chat's files. An older install's 0755 directory is tightened
/// once, logged; what is inside is then out of other users' reach whatever its own mode.
pub fn make_private(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir)?.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        tracing::info!(dir = %dir.display(), was = format!("{mode:o}"), "the data directory is now 0700 (its owner's alone)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_data_directory_is_made_its_owners_alone() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("nxh-private-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let lock = DataDirLock::acquire(&dir).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{mode:o}");
        drop(lock);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_second_holder_is_refused_and_told_the_first_ones_pid() {
        let dir = std::env::temp_dir().join(format!("nxh-lock-{}", uuid::Uuid::new_v4()));
        let first = DataDirLock::acquire(&dir).unwrap();
        let err = DataDirLock::acquire(&dir).unwrap_err();
        assert!(err.to_string().contains(&std::process::id().to_string()), "{err}");
        drop(first);
        // Released: taken over at once.
        let again = DataDirLock::acquire(&dir).unwrap();
        assert!(again.path().ends_with(LOCK_FILE));
        let _ = std::fs::remove_dir_all(dir);
    }
}
