//! Looking at a container under gVisor from the host, where its processes are not host
//! processes: the host holds only gVisor's own (`runsc-sandbox`, its file proxy, the
//! platform's stubs), and what runs inside is asked of `runsc` with the state folder the
//! engine started the sandbox with.

/// The host pids of every process of `container` (by its cgroup), under any runtime.
pub fn host_pids(container: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else { return pids };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        if cgroup.contains(container) {
            pids.push(pid);
        }
    }
    pids
}

/// The command line of host process `pid`, its arguments joined by spaces.
pub fn cmdline(pid: u32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    String::from_utf8_lossy(&raw).replace('\0', " ").trim_end().to_owned()
}

/// The state folder (`--root`) gVisor's sandbox process among host processes `pids` was
/// started with, or `None` when none of them is gVisor's sandbox (`runsc-sandbox`).
pub fn sandbox_root(pids: &[u32]) -> Option<String> {
    pids.iter().map(|pid| cmdline(*pid)).find_map(|line| {
        let args = line.strip_prefix("runsc-sandbox ")?;
        args.split(' ').find_map(|arg| arg.strip_prefix("--root=")).map(str::to_owned)
    })
}

/// Runs `runsc --root <its root> <args>` for `container` (which must run under gVisor) and
/// returns its stdout; panics with its stderr when it fails.
pub fn runsc(container: &str, args: &[&str]) -> String {
    let root = sandbox_root(&host_pids(container))
        .unwrap_or_else(|| panic!("{container} has no runsc-sandbox process on this host"));
    runsc_at(&root, args)
}

/// Runs `runsc --root <root> <args>` and returns its stdout; panics with its stderr when it
/// fails.
pub fn runsc_at(root: &str, args: &[&str]) -> String {
    let out = std::process::Command::new("runsc")
        .args(["--root", root])
        .args(args)
        .output()
        .expect("run runsc");
    assert!(out.status.success(), "runsc {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}
