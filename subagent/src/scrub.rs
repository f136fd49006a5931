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
//!   program can signal is killed (not only the command's process group) until none is alive
//!   in any thread — a process whose main thread exited looks like a zombie but is not — and
//!   reaped (this program is the container's pid 1, so orphans are its children; while a
//!   task runs, [`reap_orphans`] takes those it did not spawn itself on every SIGCHLD); the
//!   container's System V IPC objects are removed, and the scratch folder, `/tmp`, `/dev/shm`
//!   and `/dev/mqueue` are emptied. Being pid 1 is itself a check: an init in front of it
//!   would be a process of the same user that cannot be killed from inside and whose memory a
//!   task could rewrite. The answer carries the account ([`Scrub`]); the host reuses the
//!   container only when it says `clean`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
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

/// Refuses to every command the IPC the scrub could not remove. It removes POSIX message
/// queues through `/dev/mqueue` and System V objects by their `/proc/sysvipc` listings. gVisor
/// has neither (measured, runsc 2022-12): a queue made by one task was there for the next,
/// and `mq_unlink` was refused; a System V segment made by one task was there for the next,
/// and gVisor's counts of them (`SHM_INFO`) stay up after a removal and `msgctl(IPC_RMID)`
/// says yes to ids that do not exist, so they cannot be found without a listing either. There
/// a seccomp filter on this process, inherited by every command it starts, answers the calls
/// that make them (`mq_open`; `shmget`, `semget`, `msgget`) with `ENOSYS`. Called at start,
/// before any command runs; returns what it refused.
pub fn seal_unscrubbable_ipc() -> Result<Vec<&'static str>, String> {
    if !in_sandbox() {
        return Ok(Vec::new());
    }
    let mut calls = Vec::new();
    if Unscrubbable::Queues.unlisted() {
        calls.push((libc::SYS_mq_open, "mq_open"));
    }
    if Unscrubbable::SystemV.unlisted() {
        calls.extend([
            (libc::SYS_shmget, "shmget"),
            (libc::SYS_semget, "semget"),
            (libc::SYS_msgget, "msgget"),
        ]);
    }
    if calls.is_empty() {
        return Ok(Vec::new());
    }
    use seccompiler::{apply_filter_all_threads, BpfProgram, SeccompAction, SeccompFilter};
    let arch = std::env::consts::ARCH.try_into().map_err(|e| format!("seccomp: {e}"))?;
    let filter = SeccompFilter::new(
        calls.iter().map(|(nr, _)| (*nr, Vec::new())).collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .map_err(|e| format!("seccomp filter: {e}"))?;
    let program: BpfProgram = filter.try_into().map_err(|e| format!("seccomp program: {e}"))?;
    apply_filter_all_threads(&program)
        .map_err(|e| format!("cannot load the seccomp filter: {e}"))?;
    IPC_SEALED.store(true, std::sync::atomic::Ordering::SeqCst);
    Ok(calls.into_iter().map(|(_, name)| name).collect())
}

/// Whether [`seal_unscrubbable_ipc`] loaded its filter. Where it was needed and did not load,
/// every scrub says so (the container is not clean, so it is replaced after each task).
static IPC_SEALED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The IPC the scrub removes through what the kernel lists.
#[derive(Debug, Clone, Copy)]
enum Unscrubbable {
    Queues,
    SystemV,
}

impl Unscrubbable {
    /// Whether the kernel lists none of it (so the scrub cannot remove it).
    fn unlisted(self) -> bool {
        match self {
            Unscrubbable::Queues => !Path::new("/dev/mqueue").is_dir(),
            Unscrubbable::SystemV => !Path::new("/proc/sysvipc").is_dir(),
        }
    }
}

/// What is left of `kind` when the kernel lists none of it and no filter refuses it.
fn unsealed(kind: Unscrubbable) -> Option<String> {
    let sealed = IPC_SEALED.load(std::sync::atomic::Ordering::SeqCst);
    let what = match kind {
        Unscrubbable::Queues => "POSIX message queues: no /dev/mqueue to empty, none refused",
        Unscrubbable::SystemV => "System V IPC: no /proc/sysvipc listing, none refused",
    };
    (kind.unlisted() && !sealed).then(|| what.to_owned())
}

/// The folders emptied after every task. `/dev/mqueue` is the container's POSIX message
/// queue file system (Docker mounts it): removing an entry there is `mq_unlink`.
pub fn wiped_dirs(scratch: &Path) -> Vec<PathBuf> {
    let mut dirs = vec![scratch.to_owned()];
    dirs.extend(["/tmp", "/dev/shm", "/dev/mqueue"].map(PathBuf::from));
    dirs
}

/// Set by the subagent image (`docker/subagent.Dockerfile`): only there may [`after_task`]
/// kill processes and empty folders. The same binary run by hand or by the tests on a
/// developer's machine must never end the user's processes or empty the host's `/tmp`.
pub const SANDBOX_ENV: &str = "NEXBOT_SANDBOXED";

/// Whether this process runs in the sandbox image, as a user other than root.
pub fn in_sandbox() -> bool {
    std::env::var(SANDBOX_ENV).is_ok_and(|v| v == "1") && !process::geteuid().is_root()
}

/// Ends every other process, reaps them, removes the task's System V IPC objects and empties
/// `dirs`, in the sandbox only (else it does nothing and says so: not clean); says what it did
/// and what is left.
pub fn after_task(dirs: &[PathBuf]) -> Scrub {
    if !in_sandbox() {
        return Scrub {
            clean: false,
            left: Some(format!("not scrubbed: {SANDBOX_ENV}=1 is not set or the user is root")),
            ..Scrub::default()
        };
    }
    let me = process::getpid();
    let mut left = Vec::new();
    // pid 1 of the container cannot be killed from inside it; when it is not this program
    // (an init such as docker-init, of the same user and dumpable) a task can rewrite its
    // memory and keep running in it, so the container cannot be called clean.
    if !me.is_init() {
        left.push(format!(
            "pid 1 is not the subagent (it is {}): create the container without an init \
             (`init: false`, as nexbot-docker's spec does) so the subagent is pid 1",
            comm(1).unwrap_or_else(|| "unknown".to_owned())
        ));
    }
    let mut killed = 0u32;
    let started = Instant::now();
    let survivors = loop {
        // No command runs now (the task is over), so every child of this program is one the
        // scrub killed or an orphan handed to pid 1: reaping them steals no one's exit status.
        reap_children();
        let others = live_others(me);
        if others.is_empty() {
            break Vec::new();
        }
        if started.elapsed() > KILL_DEADLINE {
            break others;
        }
        for pid in others {
            // SIGKILL to the thread group id ends every thread of it, also when its leader
            // thread has exited already.
            if process::kill_process(pid, Signal::KILL).is_ok() {
                killed += 1;
            }
        }
        // Killed processes need a moment to become zombies (or vanish).
        std::thread::sleep(Duration::from_millis(2));
    };
    left.extend(survivors.into_iter().map(|pid| format!("process {}", pid.as_raw_nonzero())));
    let mut removed = 0u32;
    // After the processes: an object still attached or open goes only with its last user.
    for kind in IpcKind::ALL {
        let (gone, kept) = remove_ipc(kind);
        removed += gone;
        left.extend(kept);
    }
    for dir in dirs {
        match empty_dir(dir) {
            Ok(n) => removed += n,
            Err(e) => left.push(format!("{}: {e}", dir.display())),
        }
    }
    left.extend(unsealed(Unscrubbable::Queues));
    Scrub {
        clean: left.is_empty(),
        killed,
        removed,
        left: (!left.is_empty()).then(|| left.join("; ")),
        // Timed and counted by the caller, around this whole call.
        micros: 0,
        oom_kills: 0,
    }
}

/// Reaps every child that has exited (the subagent is the container's pid 1, so orphans of
/// a task's commands become its children). Only for when no command of this program runs:
/// it would take the exit status its `wait` is waiting for.
fn reap_children() {
    while let Ok(Some(_)) = process::wait(process::WaitOptions::NOHANG) {}
    // Every child is gone: no pid the tools spawned is waited for any more.
    own_children().clear();
}

/// The pids of the children this program spawned itself (`run_command`'s shell, `use_cli`'s
/// CLI) and whose exit status tokio's `wait` collects: [`reap_orphans`] leaves them alone.
fn own_children() -> std::sync::MutexGuard<'static, BTreeSet<i32>> {
    static OWN: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());
    OWN.lock().unwrap_or_else(|e| e.into_inner())
}

/// A child this program spawned and waits for itself, marked so from its spawn until its
/// wait returned ([`OwnChild::waited`]). Made by [`OwnChild::spawn`], which starts the child
/// and marks it under the lock [`reap_orphans`] holds while it looks and reaps: a child that
/// exits at once is never taken for an orphan between its spawn and its mark, whatever thread
/// the reaper runs on (the unit tests run it on another thread; measured: a `true` spawned by
/// one test was reaped by another's reaper before it was marked, and its `wait` failed). A
/// child dropped unwaited (a timeout) stays marked until the scrub, which reaps everything.
#[derive(Debug)]
pub struct OwnChild(Option<i32>);

impl OwnChild {
    /// Runs `spawn` and marks the child it started (its pid as `id` reads it), both under
    /// the reaper's lock. A failed spawn marks nothing.
    pub fn spawn<C, E>(
        spawn: impl FnOnce() -> Result<C, E>,
        id: impl FnOnce(&C) -> Option<u32>,
    ) -> Result<(C, Self), E> {
        let mut own = own_children();
        let child = spawn()?;
        let pid = id(&child).and_then(|pid| i32::try_from(pid).ok());
        if let Some(pid) = pid {
            own.insert(pid);
        }
        Ok((child, Self(pid)))
    }

    /// Its wait returned: the pid is reaped and may be reused by anything.
    pub fn waited(self) {
        if let Some(pid) = self.0 {
            own_children().remove(&pid);
        }
    }
}

/// Reaps the orphans of a running task: zombies whose parent is this program (its pid 1, to
/// which the kernel hands every orphan) and that it did not spawn itself, so a task that
/// leaves many short-lived background processes does not fill the pids limit with zombies.
/// Safe while commands run: it waits only for those pids, never for "any child". Returns how
/// many it reaped.
pub fn reap_orphans() -> u32 {
    let me = process::getpid().as_raw_nonzero().get();
    let Ok(entries) = std::fs::read_dir("/proc") else { return 0 };
    let mut reaped = 0;
    // Held while looking and reaping: a child being spawned is marked before it is looked at.
    let own = own_children();
    for pid in entries.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok()) {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let orphan = state(&stat) == Some('Z') && parent(&stat) == Some(me);
        if !orphan || own.contains(&pid) {
            continue;
        }
        if let Some(pid) = Pid::from_raw(pid) {
            if let Ok(Some(_)) = process::waitpid(Some(pid), process::WaitOptions::NOHANG) {
                reaped += 1;
            }
        }
    }
    reaped
}

/// The parent pid of a `stat` line: the field after the state.
fn parent(stat: &str) -> Option<i32> {
    stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
}

/// Every process but `me` that is alive in any thread (see [`alive`]).
fn live_others(me: Pid) -> Vec<Pid> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&raw| raw != 1 && raw != me.as_raw_nonzero().get())
        .filter(|&raw| alive(raw))
        .filter_map(Pid::from_raw)
        .collect()
}

/// Whether any thread of process `pid` is still running (in any state but zombie or dead).
/// Not the process's own state: a process whose main thread has exited shows the leader's
/// `Z` in `/proc/<pid>/stat` while its other threads run on (an attacker's way to look dead),
/// so every thread listed in `/proc/<pid>/task` is looked at. A process that is there but lists
/// no thread counts as alive: gVisor shows a thread group whose leader exited as a zombie with
/// no `task` folder while its other thread runs on (measured: the implant of the clean-room
/// attack tests survived the scrub under runsc and read the next task's secret). Killing a
/// real zombie does nothing, and it is reaped once its parent is gone.
fn alive(pid: i32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        // Gone already, unless it is still there without a `task` folder (gVisor).
        return std::path::Path::new(&format!("/proc/{pid}/stat")).exists();
    };
    let mut listed = false;
    for task in tasks.filter_map(|t| t.ok()) {
        listed = true;
        let stat = std::fs::read_to_string(task.path().join("stat"));
        // A thread that vanished between the listing and the read is not alive.
        if stat.is_ok_and(|stat| !matches!(state(&stat), Some('Z' | 'X' | 'x'))) {
            return true;
        }
    }
    !listed
}

/// The state letter of a `stat` line: "pid (comm) S ..."; comm may hold spaces and
/// parentheses, so the state is the first field after the last ')'.
fn state(stat: &str) -> Option<char> {
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// The name of process `pid`, for messages.
fn comm(pid: i32) -> Option<String> {
    Some(std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?.trim().to_owned())
}

/// The System V IPC objects, each listed by the kernel in `/proc/sysvipc/<file>` (namespaced:
/// the container's own) and removed with `IPC_RMID`.
#[derive(Debug, Clone, Copy)]
enum IpcKind {
    Shm,
    Sem,
    Msg,
}

impl IpcKind {
    const ALL: [IpcKind; 3] = [IpcKind::Shm, IpcKind::Sem, IpcKind::Msg];

    fn file(self) -> &'static str {
        match self {
            IpcKind::Shm => "/proc/sysvipc/shm",
            IpcKind::Sem => "/proc/sysvipc/sem",
            IpcKind::Msg => "/proc/sysvipc/msg",
        }
    }

    fn name(self) -> &'static str {
        match self {
            IpcKind::Shm => "shared memory segment",
            IpcKind::Sem => "semaphore set",
            IpcKind::Msg => "message queue",
        }
    }
}

/// The ids in a `/proc/sysvipc/*` listing: a header line, then one object a line whose
/// second column is its id.
fn ipc_ids(listing: &str) -> Vec<i32> {
    listing
        .lines()
        .skip(1)
        .filter_map(|line| line.split_whitespace().nth(1)?.parse().ok())
        .collect()
}

/// Removes every object of `kind`; returns how many went and what is left (also an object
/// that is still listed after its removal, or a listing that cannot be read: the scrub
/// cannot vouch for what it cannot see).
fn remove_ipc(kind: IpcKind) -> (u32, Vec<String>) {
    let listing = match std::fs::read_to_string(kind.file()) {
        Ok(listing) => listing,
        // Unlisted (gVisor): refused to every command by [`seal_unscrubbable_ipc`], or left.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return (0, unsealed(Unscrubbable::SystemV).into_iter().collect())
        }
        Err(e) => return (0, vec![format!("{}: {e}", kind.file())]),
    };
    let mut removed = 0;
    let mut left = Vec::new();
    for id in ipc_ids(&listing) {
        match ipc_rmid(kind, id) {
            Ok(()) => removed += 1,
            Err(e) => left.push(format!("{} {id}: {e}", kind.name())),
        }
    }
    if let Ok(listing) = std::fs::read_to_string(kind.file()) {
        for id in ipc_ids(&listing) {
            let still = format!("{} {id}", kind.name());
            if !left.iter().any(|l| l.starts_with(&format!("{still}:"))) {
                left.push(format!("{still}: still there after its removal"));
            }
        }
    }
    (removed, left)
}

/// `IPC_RMID` of object `id`. The one unsafe code of the subagent: rustix has no System V
/// IPC calls. Each call passes only integers and a null buffer, which
/// `IPC_RMID` does not read.
#[allow(unsafe_code)]
fn ipc_rmid(kind: IpcKind, id: i32) -> std::io::Result<()> {
    // SAFETY: plain integer arguments; the buffer pointer is null, which IPC_RMID ignores.
    let rc = unsafe {
        match kind {
            IpcKind::Shm => libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()),
            IpcKind::Sem => libc::semctl(id, 0, libc::IPC_RMID),
            IpcKind::Msg => libc::msgctl(id, libc::IPC_RMID, std::ptr::null_mut()),
        }
    };
    if rc == -1 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
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
    fn zombies_and_the_gone_are_not_alive_a_running_process_is() {
        assert!(!alive(i32::MAX), "a pid that does not exist");
        assert!(alive(std::process::id() as i32));
        // A child that has exited and is not reaped yet: a zombie, not alive.
        // (Marked as waited for: another test's orphan reaper must not take its status.)
        let (mut child, own) = spawn_own("true");
        let pid = child.id() as i32;
        assert!(becomes_zombie(pid), "the child became a zombie");
        assert!(!alive(pid));
        child.wait().unwrap();
        own.waited();
    }

    fn spawn_own(program: &str) -> (std::process::Child, OwnChild) {
        OwnChild::spawn(|| std::process::Command::new(program).spawn(), |c| Some(c.id())).unwrap()
    }

    #[test]
    fn a_child_that_exits_at_once_is_never_taken_by_a_reaper_on_another_thread() {
        // The reaper runs in a loop on its own thread while children that exit at once are
        // spawned: every child's own wait must get its status (the old mark-after-spawn lost
        // some to the reaper, which then made their wait fail).
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reaper = std::thread::spawn({
            let stop = stop.clone();
            move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    reap_orphans();
                    // (A std mutex is not fair: without a pause the spawner starves.)
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
        });
        let lost = (0..200)
            .filter(|_| {
                let (mut child, own) = spawn_own("true");
                let waited = child.wait();
                own.waited();
                waited.is_err()
            })
            .count();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        reaper.join().unwrap();
        assert_eq!(lost, 0, "children whose status the reaper took");
    }

    /// Waits (at most 5 s) until `pid` is a zombie.
    fn becomes_zombie(pid: i32) -> bool {
        (0..500).any(|_| {
            std::thread::sleep(Duration::from_millis(10));
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|stat| state(&stat) == Some('Z'))
        })
    }

    #[test]
    fn the_state_is_read_after_the_last_parenthesis() {
        assert_eq!(state("42 (a) b) Z) S 1 2"), Some('S'));
        assert_eq!(state("7 (cat) Z 1 7 7"), Some('Z'));
        assert_eq!(state("garbage"), None);
        assert_eq!(parent("42 (a) b) Z) S 17 2"), Some(17));
    }

    #[test]
    fn the_orphan_reaper_leaves_the_children_this_program_waits_for() {
        // An own child that has exited: the reaper must not take its status.
        let (mut child, own) = spawn_own("true");
        let pid = child.id() as i32;
        assert!(becomes_zombie(pid), "the child became a zombie");
        reap_orphans();
        assert!(child.wait().unwrap().success(), "its own wait got the status");
        own.waited();
        assert!(!own_children().contains(&pid));
    }

    #[test]
    fn ipc_listings_give_their_ids() {
        let shm = "       key      shmid perms                  size  cpid  lpid nattch   uid   gid  cuid  cgid      atime      dtime      ctime                   rss                  swap\n\
                   \x20  1234         0   600                  4096    12    12      0 65532 65532 65532 65532          0          0 1764090000                     0                     0\n\
                   \x20     0     32769   666                  8192    13     0      0 65532 65532 65532 65532          0          0 1764090001                     0                     0\n";
        assert_eq!(ipc_ids(shm), vec![0, 32769]);
        assert!(ipc_ids("       key      semid perms      nsems   uid   gid  cuid  cgid      otime      ctime\n").is_empty());
    }

    #[test]
    fn the_message_queue_folder_is_emptied_too() {
        let dirs = wiped_dirs(Path::new("/workspace/scratch"));
        assert_eq!(dirs[0], Path::new("/workspace/scratch"));
        assert!(
            dirs.contains(&PathBuf::from("/dev/mqueue"))
                && dirs.contains(&PathBuf::from("/dev/shm"))
        );
    }
}
