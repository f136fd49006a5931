//! The clean room between tasks: what a task leaves behind is gone before the next one starts.
//!
//! Why: the pool reuses warm containers, and everything a task's commands run as the same
//! user as this program. Without this, a task could leave a background process (`setsid`,
//! double fork) that reads a later task's secrets out of `/proc/*/environ`, files in scratch
//! or `/tmp` that a later task reads, or read this program's own memory through
//! `/proc/<pid>/mem` (an earlier task's text, the task's relay token).
//!
//! - [`harden_process`], once at start: this process is not dumpable (its `/proc/<pid>/mem`,
//!   `environ`, `maps` become root's, so a command of the same user cannot read them, nor
//!   ptrace it), and core dumps are off for it and every child.
//! - [`after_task`], after every task and before its answer: every other process this
//!   program can signal is killed (not only the command's process group) until none is left,
//!   and the scratch folder, `/tmp` and `/dev/shm` are emptied. The answer carries the
//!   account ([`Scrub`]); the host reuses the container only when it says `clean`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nexbot_protocol::Scrub;
use rustix::process::{self, Pid, Signal};

/// How long `after_task` keeps killing processes that keep appearing (a fork loop).
const KILL_DEADLINE: Duration = Duration::from_secs(2);

/// Makes this process non-dumpable and turns core dumps off. Failures are returned for the
/// log; the task still runs (the host's scrub check does not depend on them).
pub fn harden_process() -> Result<(), String> {
    process::set_dumpable_behavior(process::DumpableBehavior::NotDumpable)
        .map_err(|e| format!("cannot make the process non-dumpable: {e}"))?;
    let none = process::Rlimit { current: Some(0), maximum: Some(0) };
    process::setrlimit(process::Resource::Core, none)
        .map_err(|e| format!("cannot turn core dumps off: {e}"))?;
    Ok(())
}

/// The folders emptied after every task.
pub fn wiped_dirs(scratch: &Path) -> Vec<PathBuf> {
    vec![scratch.to_owned(), PathBuf::from("/tmp"), PathBuf::from("/dev/shm")]
}

/// Set by the subagent image (`docker/subagent.Dockerfile`): only there may [`after_task`]
/// kill processes and empty folders. The same binary run by hand or by the tests on a
/// developer's machine must never end the user's processes or empty the host's `/tmp`.
pub const SANDBOX_ENV: &str = "NEXBOT_SANDBOXED";

/// Whether this process runs in the sandbox image, as a user other than root.
pub fn in_sandbox() -> bool {
    std::env::var(SANDBOX_ENV).is_ok_and(|v| v == "1") && !process::geteuid().is_root()
}

/// Ends every other process and empties `dirs`, in the sandbox only (else it does nothing
/// and says so: not clean); says what it did and what is left.
pub fn after_task(dirs: &[PathBuf]) -> Scrub {
    if !in_sandbox() {
        return Scrub {
            clean: false,
            left: Some(format!("not scrubbed: {SANDBOX_ENV}=1 is not set or the user is root")),
            ..Scrub::default()
        };
    }
    let me = process::getpid();
    let mut killed = 0u32;
    let started = Instant::now();
    let mut left = loop {
        let others = live_others(me);
        if others.is_empty() {
            break Vec::new();
        }
        if started.elapsed() > KILL_DEADLINE {
            break others;
        }
        for pid in others {
            if process::kill_process(pid, Signal::KILL).is_ok() {
                killed += 1;
            }
        }
        // Killed processes need a moment to become zombies (or vanish).
        std::thread::sleep(Duration::from_millis(2));
    }
    .into_iter()
    .map(|pid| format!("process {}", pid.as_raw_nonzero()))
    .collect::<Vec<_>>();
    let mut removed = 0u32;
    for dir in dirs {
        match empty_dir(dir) {
            Ok(n) => removed += n,
            Err(e) => left.push(format!("{}: {e}", dir.display())),
        }
    }
    Scrub {
        clean: left.is_empty(),
        killed,
        removed,
        left: (!left.is_empty()).then(|| left.join("; ")),
    }
}

/// Every process but `me`, pid 1 (the container's init) and zombies (already dead; their
/// parent reaps them).
fn live_others(me: Pid) -> Vec<Pid> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&raw| raw != 1 && raw != me.as_raw_nonzero().get())
        .filter(|raw| !is_zombie(*raw))
        .filter_map(Pid::from_raw)
        .collect()
}

fn is_zombie(pid: i32) -> bool {
    // `/proc/<pid>/stat`: "pid (comm) S ..."; comm may hold spaces and parentheses, so the
    // state is the first field after the last ')'.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
        }
        // Gone already.
        Err(_) => true,
    }
}

/// Removes everything inside `dir` (not `dir` itself); returns how many top-level entries
/// went. Entries a task made unreadable (`chmod 000`) are made writable first: they are
/// this user's.
fn empty_dir(dir: &Path) -> std::io::Result<u32> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut removed = 0;
    for entry in entries {
        let path = entry?.path();
        remove(&path)?;
        removed += 1;
    }
    Ok(removed)
}

fn remove(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let meta = std::fs::symlink_metadata(path)?;
    if !meta.is_dir() {
        return std::fs::remove_file(path);
    }
    // Own directory with its permissions taken away: give them back to descend.
    if meta.permissions().mode() & 0o700 != 0o700 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))?;
    }
    for entry in std::fs::read_dir(path)? {
        remove(&entry?.path())?;
    }
    std::fs::remove_dir(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn emptying_takes_hidden_locked_and_nested_entries_and_keeps_the_folder() {
        let dir = std::env::temp_dir().join(format!("nxs-scrub-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("a/b/c")).unwrap();
        std::fs::write(dir.join(".hidden"), "x").unwrap();
        std::fs::write(dir.join("a/b/c/secret"), "x").unwrap();
        std::os::unix::fs::symlink("/etc/hostname", dir.join("link")).unwrap();
        std::fs::set_permissions(dir.join("a/b"), std::fs::Permissions::from_mode(0o000)).unwrap();
        // (Not `after_task`: outside the image it must do nothing, see the next test.)
        assert_eq!(empty_dir(&dir).unwrap(), 3);
        assert!(dir.is_dir());
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        assert!(
            std::path::Path::new("/etc/hostname").exists(),
            "a symlink's target is not touched"
        );
        std::fs::remove_dir(&dir).unwrap();
    }

    #[test]
    fn outside_the_sandbox_nothing_is_touched() {
        let dir = std::env::temp_dir().join(format!("nxs-keep-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("kept"), "x").unwrap();
        assert!(!in_sandbox(), "the unit tests run outside the image");
        let scrub = after_task(std::slice::from_ref(&dir));
        assert!(!scrub.clean && scrub.killed == 0 && scrub.removed == 0, "{scrub:?}");
        assert!(scrub.left.unwrap().contains(SANDBOX_ENV));
        assert!(dir.join("kept").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_folder_is_empty() {
        assert_eq!(empty_dir(Path::new("/nonexistent/nexbot-scrub")).unwrap(), 0);
    }

    #[test]
    fn zombies_and_the_gone_are_not_alive() {
        assert!(is_zombie(i32::MAX), "a pid that does not exist");
        assert!(!is_zombie(std::process::id() as i32));
    }
}
