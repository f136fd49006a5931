//! A Docker engine of the test's own: a second `dockerd` with its own data root, exec root,
//! socket and bridge, which a test may stop (gracefully, as `systemctl restart docker` does)
//! and start again without touching the machine's engine or other tests.
//!
//! Why a network namespace: a second `dockerd` started in the machine's own network namespace
//! deletes the host's `docker0` and breaks the first engine (ENVIRONMENT.md). So the engine
//! refuses to start unless the process runs in a network namespace of its own;
//! [`in_own_namespaces`] re-runs a test there (`unshare --net --mount`), where the daemon under
//! test, its fixtures and this engine all meet on the namespace's loopback and bridges, and the
//! namespace (with every rule and mount made in it) goes away with the test.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Set in the environment of a test re-run by [`in_own_namespaces`]: the network namespace it
/// was started from.
pub const INSIDE: &str = "NEXBOT_TEST_OWN_NAMESPACES";

fn network_namespace() -> Option<String> {
    std::fs::read_link("/proc/self/ns/net").ok().map(|p| p.display().to_string())
}

/// Whether this process runs in a network namespace that [`in_own_namespaces`] made (not the
/// one it was started from). PID 1's is no guide: in a container it may be another one.
pub fn in_private_network_namespace() -> bool {
    let own = network_namespace();
    let parent = std::env::var(INSIDE).ok();
    own.is_some() && parent.is_some() && own != parent
}

/// Runs the test `test` of this test binary again in a new network and mount namespace (as
/// root), with [`INSIDE`] set and `env` added, streaming its output; returns whether it passed.
/// The child sets the namespaces up itself ([`prepare_namespaces`]).
pub fn in_own_namespaces(test: &str, env: &[(String, String)]) -> bool {
    let exe = std::env::current_exe().expect("the test binary's path");
    let status = Command::new("unshare")
        .args(["--net", "--mount", "--propagation", "private", "--"])
        .arg(exe)
        .args([test, "--exact", "--nocapture", "--test-threads", "1"])
        .env(INSIDE, network_namespace().expect("this process's network namespace"))
        .envs(env.iter().map(|(k, v)| (k, v)))
        .status()
        .expect("run `unshare` (util-linux)");
    status.success()
}

/// Makes the new namespaces usable: loopback up (a new network namespace starts with it down),
/// and a `/sys` of this network namespace (sysfs shows the namespace of whoever mounted it, so
/// `/sys/class/net` would list the machine's interfaces, not the test engine's bridges), with
/// the machine's cgroup mounts kept under it for the engine.
pub fn prepare_namespaces() {
    let run = |args: &[&str]| {
        let status = Command::new(args[0]).args(&args[1..]).status().expect("run a setup command");
        assert!(status.success(), "setting up the test's namespaces: {args:?} failed");
    };
    run(&["ip", "link", "set", "lo", "up"]);
    let aside = std::env::temp_dir().join(format!("nxns-cgroup-{}", std::process::id()));
    std::fs::create_dir_all(&aside).expect("a folder for the cgroup mounts");
    let aside = aside.to_str().expect("a UTF-8 temp dir");
    run(&["mount", "--rbind", "/sys/fs/cgroup", aside]);
    run(&["mount", "-t", "sysfs", "sysfs", "/sys"]);
    run(&["mount", "--move", aside, "/sys/fs/cgroup"]);
    let _ = std::fs::remove_dir(aside);
}

/// A `dockerd` of the test's own. Stopped (SIGTERM, then SIGKILL) and its folder removed on drop.
#[derive(Debug)]
pub struct TestEngine {
    dir: PathBuf,
    child: Option<Child>,
    live_restore: bool,
}

impl TestEngine {
    /// Starts an engine whose files live under `dir` (kept short: the socket path must stay
    /// under 108 bytes). Panics unless this process is in a network namespace of its own.
    pub fn start(dir: &Path) -> Self {
        assert!(
            in_private_network_namespace(),
            "a second dockerd in the machine's network namespace deletes its docker0; \
             run the test through engine::in_own_namespaces"
        );
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).expect("the engine's folder");
        let mut engine = Self { dir: dir.to_owned(), child: None, live_restore: false };
        engine.boot();
        engine
    }

    /// `unix://…` for `DOCKER_HOST`.
    pub fn host(&self) -> String {
        format!("unix://{}", self.socket().display())
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("docker.sock")
    }

    /// Whether the engine restores containers across its own restarts (`--live-restore`),
    /// from its next start.
    pub fn set_live_restore(&mut self, on: bool) {
        self.live_restore = on;
    }

    pub fn live_restore(&self) -> bool {
        self.live_restore
    }

    fn boot(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("dockerd.log"))
            .expect("the engine's log");
        let mut command = Command::new("dockerd");
        command
            .arg("--data-root")
            .arg(self.dir.join("data"))
            .arg("--exec-root")
            .arg(self.dir.join("exec"))
            .arg("--pidfile")
            .arg(self.dir.join("docker.pid"))
            .arg("-H")
            .arg(self.host())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log);
        if self.live_restore {
            command.arg("--live-restore");
        }
        let mut child = command.spawn().expect("run dockerd");
        wait_answering(&mut child, &self.host(), &self.dir, "the test's dockerd");
        self.child = Some(child);
    }

    /// The last lines of the engine's own log.
    pub fn log_tail(&self) -> String {
        dockerd_log_tail(&self.dir)
    }

    /// Runs the `docker` CLI against this engine; its stdout when it succeeded.
    pub fn docker(&self, args: &[&str]) -> Option<String> {
        docker_at(&self.host(), args)
    }

    /// Copies `image` from the machine's engine into this one (`docker save | docker load`:
    /// nothing is pulled).
    pub fn load_image(&self, image: &str) {
        let mut save = Command::new("docker")
            .args(["save", image])
            .stdout(Stdio::piped())
            .spawn()
            .expect("run docker save");
        let stdout = save.stdout.take().expect("piped");
        let load = Command::new("docker")
            .arg("-H")
            .arg(self.host())
            .arg("load")
            .stdin(stdout)
            .output()
            .expect("run docker load");
        assert!(save.wait().expect("docker save").success(), "docker save {image} failed");
        assert!(
            load.status.success(),
            "docker load of {image}: {}",
            String::from_utf8_lossy(&load.stderr)
        );
    }

    /// The engine's own graceful stop (SIGTERM, what `systemctl stop docker` sends), waiting
    /// for it to exit.
    pub fn stop(&mut self) {
        self.signal("TERM");
        self.wait_exit(Duration::from_secs(60));
    }

    /// Starts it again after [`Self::stop`].
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "the engine still runs");
        self.boot();
    }

    fn signal(&self, signal: &str) {
        if let Some(child) = &self.child {
            let _ = Command::new("kill")
                .args([&format!("-{signal}"), &child.id().to_string()])
                .status();
        }
    }

    fn wait_exit(&mut self, limit: Duration) {
        let Some(mut child) = self.child.take() else { return };
        let start = Instant::now();
        while child.try_wait().ok().flatten().is_none() {
            if start.elapsed() > limit {
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for TestEngine {
    fn drop(&mut self) {
        if self.child.is_some() {
            remove_all_containers(&self.host());
            self.stop();
        }
        // What the engine mounted lives in the test's own mount namespace and goes with it,
        // but while the namespace lives its mount points (the data root is one) cannot be
        // removed, and an empty folder stayed in /tmp after each run: they are detached first.
        for mount in mounts_under(&self.dir) {
            let _ = Command::new("umount").arg("-l").arg(&mount).status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs the `docker` CLI against the engine at `host` (`unix://…`); its stdout when it
/// succeeded.
pub(crate) fn docker_at(host: &str, args: &[&str]) -> Option<String> {
    let out = Command::new("docker").arg("-H").arg(host).args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Removes every container of the engine at `host`, whatever its state (a test engine's
/// teardown, before it stops).
pub(crate) fn remove_all_containers(host: &str) {
    if let Some(ids) = docker_at(host, &["ps", "-aq"]) {
        for id in ids.split_whitespace() {
            let _ = docker_at(host, &["rm", "-f", id]);
        }
    }
}

/// The last lines of the log a test's `dockerd` writes to `dir/dockerd.log`.
pub(crate) fn dockerd_log_tail(dir: &Path) -> String {
    let log = std::fs::read_to_string(dir.join("dockerd.log")).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// Waits until the `dockerd` `child` (`what`, logging under `dir`) answers at `host`; panics
/// with its log when it exits first or takes over a minute.
pub(crate) fn wait_answering(child: &mut Child, host: &str, dir: &Path, what: &str) {
    let start = Instant::now();
    while docker_at(host, &["version", "--format", "{{.Server.Version}}"]).is_none() {
        if let Some(status) = child.try_wait().ok().flatten() {
            panic!("{what} exited ({status}):\n{}", dockerd_log_tail(dir));
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{what} did not answer within 60 s:\n{}",
            dockerd_log_tail(dir)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The mount points under `dir` in this process's mount namespace, deepest first.
fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    // The fifth field is the mount point (spaces in it are written `\040`).
    let mut found: Vec<PathBuf> = info
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|point| PathBuf::from(point.replace("\\040", " ")))
        .filter(|point| point.starts_with(dir))
        .collect();
    found.sort();
    found.dedup();
    found.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    found
}
