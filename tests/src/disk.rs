//! A small disk of the test's own: a tmpfs mounted on a new folder, which a test fills to the
//! last byte (ENOSPC) and frees again, for the full-disk tests and the soak run. Needs root.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs mounted on a new directory, unmounted and removed on drop (however the test ends).
#[derive(Debug)]
pub struct SmallDisk(PathBuf);

impl SmallDisk {
    /// Mounts a tmpfs of `size` (`mount`'s syntax: `2m`, `256m`) on `<temp>/nxh-<tag>-<pid>`;
    /// `None` (with a note) when not root.
    pub fn mount(tag: &str, size: &str) -> Option<Self> {
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped: mounting a tmpfs needs root");
            return None;
        }
        let dir = std::env::temp_dir().join(format!("nxh-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let disk = Self(dir);
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&disk.0)
            .status()
            .expect("run mount");
        assert!(mounted.success(), "cannot mount a tmpfs on {}", disk.0.display());
        Some(disk)
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Writes a file until the disk refuses (ENOSPC); returns the file, which frees the space
    /// when removed.
    pub fn fill(&self) -> PathBuf {
        use std::io::Write;
        let path = self.0.join("filler");
        let mut file = std::fs::File::create(&path).unwrap();
        let chunk = vec![0u8; 64 * 1024];
        loop {
            match file.write(&chunk) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(28) => break,
                Err(e) => panic!("filling {}: {e}", path.display()),
            }
        }
        // The last bytes below a chunk.
        loop {
            match file.write(&[0u8; 512]) {
                Ok(0) => break,
                Ok(_) => {}
                Err(_) => break,
            }
        }
        let _ = file.sync_all();
        path
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
