//! One harness for the `nexbot` binary, used by the tests and benches of every crate: a
//! workspace written by the real `nexbot init`, a command with a clean environment, and
//! `nexbot serve` run as a child whose stderr is collected all along.
//!
//! Why one: each test file and bench used to write its own `init`, environment scrub, stderr
//! drain and readiness wait (seven copies, each with its own small differences: one forgot to
//! drain stderr, one waited on a different line). Here the daemon is a plain
//! [`std::process::Child`] drained by a thread, so the same type serves `#[tokio::test]`s,
//! benches and synchronous tests; the waits come in both forms.

use std::ffi::OsStr;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The line `nexbot serve` logs once everything it starts is up.
pub const READY: &str = "nexbot is serving";

/// A throwaway workspace written by `nexbot init`; removed on drop.
#[derive(Debug)]
pub struct Workspace {
    dir: PathBuf,
}

impl Workspace {
    /// Runs `nexbot init` into `<temp dir>/<name>` (emptied first).
    pub fn init(nexbot: impl AsRef<Path>, name: &str) -> Self {
        let dir = std::env::temp_dir().join(name);
        let _ = std::fs::remove_dir_all(&dir);
        let out = Command::new(nexbot.as_ref())
            .args(["init", "--dir"])
            .arg(&dir)
            .output()
            .expect("run nexbot init");
        assert!(out.status.success(), "nexbot init: {}", String::from_utf8_lossy(&out.stderr));
        Self { dir }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn config(&self) -> PathBuf {
        self.dir.join("config.toml")
    }

    pub fn database(&self) -> PathBuf {
        self.dir.join("nexbot.db")
    }

    /// The control API's socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.join("nexbot.sock")
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `nexbot <args> --config <config>` with none of the caller's `NEXBOT_*` variables or
/// `RUST_LOG` (a developer's shell must not leak in), plus `env`.
pub fn command<K, V>(
    nexbot: impl AsRef<Path>,
    args: &[&str],
    config: &Path,
    env: impl IntoIterator<Item = (K, V)>,
) -> Command
where
    K: AsRef<OsStr>,
    V: AsRef<OsStr>,
{
    let mut command = Command::new(nexbot.as_ref());
    command.args(args).arg("--config").arg(config);
    for (key, _) in std::env::vars() {
        if key.starts_with("NEXBOT_") || key == "RUST_LOG" {
            command.env_remove(key);
        }
    }
    // The wall the test run asked for; a test's own setting (in `env`) still wins.
    if let Some(runtime) = crate::test_runtime() {
        command.env("NEXBOT_SANDBOX__RUNTIME", runtime);
    }
    command.envs(env);
    command
}

/// A running `nexbot serve`. Its stderr is collected all along (a full pipe would block the
/// daemon, and a failing test shows the log). Dropped: SIGTERM, a few seconds for a clean
/// stop, then SIGKILL.
#[derive(Debug)]
pub struct Daemon {
    child: Mutex<Child>,
    pid: u32,
    log: Arc<Mutex<String>>,
}

impl Daemon {
    /// Starts `nexbot serve` on `config` with `env` (see [`command`]); does not wait.
    pub fn spawn<K, V>(
        nexbot: impl AsRef<Path>,
        config: &Path,
        env: impl IntoIterator<Item = (K, V)>,
    ) -> Self
    where
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        let mut child = command(nexbot, &["serve"], config, env)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn nexbot serve");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { return };
                let mut log = sink.lock().unwrap_or_else(|p| p.into_inner());
                log.push_str(&line);
                log.push('\n');
            }
        });
        Self { pid: child.id(), child: Mutex::new(child), log }
    }

    /// Starts `nexbot serve` and waits (up to `limit`) until it logs [`READY`].
    pub async fn serve<K, V>(
        nexbot: impl AsRef<Path>,
        config: &Path,
        env: impl IntoIterator<Item = (K, V)>,
        limit: Duration,
    ) -> Self
    where
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        let daemon = Self::spawn(nexbot, config, env);
        daemon.wait_log(READY, limit).await;
        daemon
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The exit status, once the daemon exited.
    pub fn exited(&self) -> Option<std::process::ExitStatus> {
        self.child.lock().unwrap_or_else(|p| p.into_inner()).try_wait().ok().flatten()
    }

    /// Everything logged so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Waits until the log contains `needle`; panics with the log when `limit` passes or the
    /// daemon exits first.
    pub async fn wait_log(&self, needle: &str, limit: Duration) {
        let start = Instant::now();
        while !self.log().contains(needle) {
            self.check_waiting(needle, start, limit);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// [`Daemon::wait_log`] for synchronous tests.
    pub fn wait_log_blocking(&self, needle: &str, limit: Duration) {
        let start = Instant::now();
        while !self.log().contains(needle) {
            self.check_waiting(needle, start, limit);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn check_waiting(&self, needle: &str, start: Instant, limit: Duration) {
        assert!(
            start.elapsed() < limit,
            "no {needle:?} in the log within {limit:?}:\n{}",
            self.log()
        );
        if let Some(status) = self.exited() {
            // The drain thread may still be adding the last lines.
            std::thread::sleep(Duration::from_millis(100));
            panic!("nexbot serve exited ({status}) before logging {needle:?}:\n{}", self.log());
        }
    }

    /// SIGKILL: the daemon gets no chance to clean up (what a crash or an OOM kill does).
    /// Returns the log.
    pub fn kill(self) -> String {
        {
            let mut child = self.child.lock().unwrap_or_else(|p| p.into_inner());
            let _ = child.kill();
            let _ = child.wait();
        }
        self.log()
    }

    /// SIGTERM, then waits (up to `limit`) for a clean exit, which it asserts; returns the log.
    pub async fn stop(self, limit: Duration) -> String {
        self.terminate();
        let start = Instant::now();
        let status = loop {
            if let Some(status) = self.exited() {
                break status;
            }
            assert!(start.elapsed() < limit, "nexbot serve did not stop in time:\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let log = self.log();
        assert!(status.success(), "nexbot serve exited with {status:?}:\n{log}");
        log
    }

    fn terminate(&self) {
        let _ = Command::new("kill").args(["-TERM", &self.pid().to_string()]).status();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.exited().is_some() {
            return;
        }
        self.terminate();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.exited().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut child = self.child.lock().unwrap_or_else(|p| p.into_inner());
        let _ = child.kill();
        let _ = child.wait();
    }
}
