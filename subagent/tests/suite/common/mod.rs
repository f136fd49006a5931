//! Drives the real `nexbot-subagent` binary over pipes, as the host does through a container's
//! attached stdio: write request lines, read response lines, collect the JSON log lines.

#![allow(dead_code)] // each test file uses a different part of the harness

use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

/// How long any single wait in a test may take before the test fails instead of hanging.
pub const WAIT: Duration = Duration::from_secs(30);

pub struct Subagent {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
    /// Every stdout line read so far.
    pub stdout_lines: Vec<String>,
    stderr: Arc<Mutex<Vec<String>>>,
    /// The task draining stderr; done once the process closed it.
    stderr_drain: Option<tokio::task::JoinHandle<()>>,
    pub scratch: PathBuf,
}

impl Subagent {
    /// Starts the binary with a fresh scratch dir and `env` on top of a clean environment.
    pub fn spawn(env: &[(&str, &str)]) -> Self {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let scratch = std::env::temp_dir().join(format!("nxs-scratch-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&scratch);
        std::fs::create_dir_all(&scratch).expect("scratch dir");
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_nexbot-subagent"));
        command
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("NEXBOT_SCRATCH_DIR", &scratch)
            .env("NEXBOT_LOG_LEVEL", "debug")
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().expect("start nexbot-subagent");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let sink = stderr.clone();
        let mut err_lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let stderr_drain = Some(tokio::spawn(async move {
            while let Ok(Some(line)) = err_lines.next_line().await {
                sink.lock().unwrap().push(line);
            }
        }));
        Self { child, stdin, stdout, stdout_lines: Vec::new(), stderr, stderr_drain, scratch }
    }

    pub fn pid(&self) -> u32 {
        self.child.id().expect("running")
    }

    pub async fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        tokio::time::timeout(WAIT, async {
            stdin.write_all(bytes).await?;
            stdin.flush().await
        })
        .await
        .expect("write to the subagent timed out")
        .expect("write to the subagent");
    }

    pub async fn send(&mut self, request: &Value) {
        let mut line = request.to_string();
        line.push('\n');
        self.send_raw(line.as_bytes()).await;
    }

    /// The next stdout line, parsed.
    pub async fn recv(&mut self) -> Value {
        let line = tokio::time::timeout(WAIT, self.stdout.next_line())
            .await
            .expect("no response line in time")
            .expect("read stdout")
            .expect("stdout ended");
        self.stdout_lines.push(line.clone());
        serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line}"))
    }

    /// Reads until a final line (not `progress`, not a returned file's `file` chunk);
    /// returns it and the lines before it.
    pub async fn recv_final(&mut self) -> (Value, Vec<Value>) {
        let mut progress = Vec::new();
        loop {
            let line = self.recv().await;
            if line["status"] == "progress" || line["status"] == "file" {
                progress.push(line);
            } else {
                return (line, progress);
            }
        }
    }

    pub fn close_stdin(&mut self) {
        self.stdin.take();
    }

    pub fn signal(&self, signal: &str) {
        let status = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &self.pid().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
    }

    /// Waits for the process to exit; stdout must hold nothing more than `expect_more` lines.
    pub async fn wait_exit(&mut self) -> ExitStatus {
        let status = tokio::time::timeout(WAIT, self.child.wait())
            .await
            .expect("subagent did not exit in time")
            .expect("wait");
        while let Ok(Ok(Some(line))) =
            tokio::time::timeout(Duration::from_secs(5), self.stdout.next_line()).await
        {
            self.stdout_lines.push(line);
        }
        // The last log lines (the shutdown event) may still be on their way through the
        // drain task: wait for its end of stderr, so `logs()` holds all of them.
        if let Some(drain) = self.stderr_drain.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), drain).await;
        }
        status
    }

    /// The stderr lines so far, each checked to be one JSON log object of the spec's shape.
    pub fn logs(&self) -> Vec<Value> {
        self.stderr
            .lock()
            .unwrap()
            .iter()
            .map(|line| {
                let value: Value = serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("stderr line is not JSON ({e}): {line}"));
                for key in ["time", "level", "message"] {
                    assert!(value.get(key).is_some(), "log line without {key}: {line}");
                }
                value
            })
            .collect()
    }

    pub fn stderr_text(&self) -> String {
        self.stderr.lock().unwrap().join("\n")
    }

    /// Waits until a log line satisfies `pred` (logs are written asynchronously to ours).
    pub async fn wait_log(&self, pred: impl Fn(&Value) -> bool) -> Value {
        tokio::time::timeout(WAIT, async {
            loop {
                if let Some(found) = self.logs().into_iter().find(|l| pred(l)) {
                    return found;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("log line did not appear in time")
    }
}

impl Drop for Subagent {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}
