//! Helpers for the end-to-end tests of the `nexbot` binary: a fresh workspace written by the
//! real `nexbot init`, and running `nexbot chat` with lines on stdin, always under a timeout
//! and killed on drop.

#![allow(dead_code)] // each test file uses a different part of this module

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

pub const NEXBOT: &str = env!("CARGO_BIN_EXE_nexbot");

/// A throwaway workspace, removed on drop.
pub struct TempWorkspace {
    pub dir: PathBuf,
}

impl TempWorkspace {
    /// Runs `nexbot init` into a new temporary directory.
    pub fn init(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("nxh-e2e-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let out = std::process::Command::new(NEXBOT)
            .args(["init", "--dir"])
            .arg(&dir)
            .output()
            .expect("run nexbot init");
        assert!(out.status.success(), "init failed: {}", String::from_utf8_lossy(&out.stderr));
        Self { dir }
    }

    pub fn config(&self) -> PathBuf {
        self.dir.join("config.toml")
    }

    pub fn database(&self) -> PathBuf {
        self.dir.join("nexbot.db")
    }
}

impl Drop for TempWorkspace {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The environment every chat test starts from: the scripted LLM, fast retries, and no
/// delegation unless a test turns it on.
pub fn base_env(llm_base_url: &str) -> Vec<(String, String)> {
    [
        ("NEXBOT_LLM__BASE_URL", llm_base_url),
        ("NEXBOT_LLM__MODEL", "scripted"),
        ("NEXBOT_LLM__RETRY_INITIAL_MS", "10"),
        ("NEXBOT_LLM__TIMEOUT_SECS", "5"),
        ("NEXBOT_SUBAGENT__ENABLED", "false"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// A `nexbot` command with a clean `NEXBOT_*` environment plus `env`.
pub fn nexbot(args: &[&str], config: &Path, env: &[(String, String)]) -> Command {
    let mut cmd = Command::new(NEXBOT);
    cmd.args(args).arg("--config").arg(config).kill_on_drop(true);
    for (key, _) in std::env::vars() {
        if key.starts_with("NEXBOT_") || key == "RUST_LOG" {
            cmd.env_remove(key);
        }
    }
    cmd.envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    cmd
}

/// Runs `nexbot chat` with `lines` on stdin (then EOF) and returns its output.
pub async fn chat(
    config: &Path,
    env: &[(String, String)],
    lines: &[&str],
    limit: Duration,
) -> Output {
    let mut child = nexbot(&["chat"], config, env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn nexbot chat");
    let mut stdin = child.stdin.take().expect("stdin");
    let input: String = lines.iter().map(|l| format!("{l}\n")).collect();
    stdin.write_all(input.as_bytes()).await.expect("write stdin");
    drop(stdin);
    tokio::time::timeout(limit, child.wait_with_output())
        .await
        .expect("nexbot chat did not exit in time")
        .expect("nexbot chat output")
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
