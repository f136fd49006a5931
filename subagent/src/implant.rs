//! `selftest-implant NAME KEY`: what the owner's self-test (`nexbot-selftest`) plants to
//! outlive its task, in the two shapes the image's busybox cannot make: a thread group whose
//! leader exited (its one live thread named `NAME`, the leader a zombie with no command line
//! for `ps` to show), holding a System V shared memory segment of key `KEY`. The clean room
//! (`scrub.rs`) must end the one and remove the other before the next task; the self-test's
//! next task looks for both (`/proc/*/task/*/comm`, `/proc/sysvipc/shm`).
//!
//! Why in this binary: an implant is what an injected task would bring; carrying the same
//! kernel shapes here lets an owner's install be attacked with them without downloading
//! anything. It does nothing a task's own command could not do with a static helper.

use std::time::Duration;

/// Plants the segment and the thread, then ends the calling (leader) thread only.
pub fn implant(args: &[std::ffi::OsString]) -> Result<(), String> {
    let usage =
        || "usage: selftest-implant NAME KEY (NAME at most 15 bytes, KEY an i32)".to_owned();
    let [name, key] = args else { return Err(usage()) };
    let name = name.to_str().filter(|n| !n.is_empty() && n.len() <= 15).ok_or_else(usage)?;
    let key: i32 = key.to_str().and_then(|k| k.parse().ok()).ok_or_else(usage)?;
    // SAFETY: shmget takes plain integers and returns an id or -1; nothing is mapped.
    #[allow(unsafe_code)]
    let id = unsafe { libc::shmget(key, 4096, libc::IPC_CREAT | 0o600) };
    if id < 0 {
        // Refused (gVisor's seccomp filter here refuses System V IPC): the thread still goes.
        eprintln!("selftest-implant: shmget: {}", std::io::Error::last_os_error());
    }
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(|| loop {
            std::thread::sleep(Duration::from_secs(1));
        })
        .map_err(|e| format!("thread: {e}"))?;
    // SAFETY: the raw `exit` system call (not `exit_group`) ends this thread alone and never
    // returns; the spawned thread keeps the process, whose leader is now a zombie.
    #[allow(unsafe_code)]
    unsafe {
        libc::syscall(libc::SYS_exit, 0);
    }
    Ok(())
}
