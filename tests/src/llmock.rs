//! LLMock, a third-party OpenAI-compatible mock server from PyPI (`llmock`, "chaos engineering
//! for LLM apps"), run as a child process so the LLM client is tested against someone else's
//! idea of the wire format and of how providers fail — not only against [`crate::scripted_llm`].
//!
//! LLMock answers chat completions (plain, streamed, tool calls generated from the offered
//! tools' schemas) and fails on cue through its control API (`POST /_llmock/scenario`): HTTP
//! errors with `Retry-After`, streams that are dropped, cut short without a finish reason,
//! corrupted or stalled. It also journals every attempt (`GET /_llmock/requests`) and grades
//! the client (`GET /_llmock/verdict`: Retry-After ignored, truncated stream accepted, …).
//!
//! `.ci/run` installs the pinned [`VERSION`] into a virtual environment at [`VENV`] (under the
//! workspace root). Under `CI=true` a missing LLMock fails the test; elsewhere the test is
//! skipped with a loud note. Where it is looked for, in order: the executable named by
//! `NEXBOT_LLMOCK`, [`VENV`]`/bin/llmock`, `llmock` on `PATH`, `~/.local/bin/llmock`, and
//! `python3 -m llmock.cli` when `python3` can import it.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The LLMock release the tests are written against (its fault switches and answers).
pub const VERSION: &str = "0.2.2";
/// Where `.ci/run` installs it, relative to the workspace root.
pub const VENV: &str = "target/llmock-venv";
/// Names an `llmock` executable to use instead of looking for one.
pub const ENV: &str = "NEXBOT_LLMOCK";

/// A cold Python start (FastAPI, uvicorn) on a loaded machine takes a few seconds; no answer
/// after this is a real failure.
const READY_DEADLINE: Duration = Duration::from_secs(60);
/// uvicorn's line once it listens; it carries the real port when started with `--port 0`.
const READY_LINE: &str = "Uvicorn running on http://127.0.0.1:";

/// A running LLMock on `127.0.0.1`; the process is killed when this drops.
#[derive(Debug)]
pub struct Llmock {
    child: Child,
    url: String,
    http: reqwest::Client,
    stderr: Arc<Mutex<String>>,
}

/// How to run LLMock here: the program and the arguments before `serve`.
fn locate() -> Result<(PathBuf, Vec<String>), String> {
    if let Some(path) = std::env::var_os(ENV) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok((path, Vec::new()))
        } else {
            Err(format!("{ENV}={} is not a file", path.display()))
        };
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root");
    let mut candidates = vec![root.join(VENV).join("bin/llmock")];
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path).map(|dir| dir.join("llmock")));
    }
    if let Some(home) = std::env::var_os("HOME") {
        candidates.push(PathBuf::from(home).join(".local/bin/llmock"));
    }
    if let Some(found) = candidates.into_iter().find(|p| p.is_file()) {
        return Ok((found, Vec::new()));
    }
    let importable = std::process::Command::new("python3")
        .args(["-c", "import llmock.cli"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if importable {
        return Ok((PathBuf::from("python3"), vec!["-m".into(), "llmock.cli".into()]));
    }
    Err(format!(
        "no llmock executable ({ENV} unset, none in {}/{VENV}/bin, on PATH or in ~/.local/bin, \
         and python3 cannot import it)",
        root.display()
    ))
}

fn unavailable(test: &str, reason: &str) -> Option<Llmock> {
    let how = format!(
        "`.ci/run` installs it (python3 -m venv {VENV} && {VENV}/bin/pip install llmock=={VERSION})"
    );
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test}: LLMock {VERSION} is required under CI=true, but {reason}; {how}");
    }
    eprintln!("\n!!! SKIPPED {test}: LLMock {VERSION} is required and {reason}; {how} !!!\n");
    None
}

impl Llmock {
    /// Starts LLMock with `--response-style echo` (an answer is `Hello! You said: <prompt>`)
    /// and `extra` arguments for `llmock serve`, and waits until it answers. `None` when it is
    /// not installed (the test should return); under `CI=true` that panics instead.
    pub async fn start_or_skip(test: &str, extra: &[&str]) -> Option<Self> {
        let (program, prefix) = match locate() {
            Ok(found) => found,
            Err(reason) => return unavailable(test, &reason),
        };
        let llmock = Self::start(&program, &prefix, extra).await;
        let health = llmock.get("/health").await;
        if health["version"] != VERSION {
            let reason = format!("{} is version {}", program.display(), health["version"]);
            return unavailable(test, &reason);
        }
        Some(llmock)
    }

    async fn start(program: &Path, prefix: &[String], extra: &[&str]) -> Self {
        let mut command = Command::new(program);
        command.args(prefix).args([
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--log-level",
            "info",
            "--response-style",
            "echo",
        ]);
        command.args(extra);
        // The operator's own LLMock settings must not change what the tests see.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("LLMOCK_") {
                command.env_remove(key);
            }
        }
        let mut child = command
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::null())
            // The banner and the access log; nothing the tests read.
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));

        // Drain stderr for the whole life of the child (a full pipe would block it), keep it
        // for failure messages, and pass on the port from uvicorn's ready line.
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&stderr);
        let pipe = child.stderr.take().expect("piped stderr");
        let (port_tx, port_rx) = tokio::sync::oneshot::channel::<u16>();
        tokio::spawn(async move {
            let mut port_tx = Some(port_tx);
            let mut lines = BufReader::new(pipe).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(rest) = line.split(READY_LINE).nth(1) {
                    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                    if let (Some(tx), Ok(port)) = (port_tx.take(), digits.parse()) {
                        let _ = tx.send(port);
                    }
                }
                let mut all = sink.lock().unwrap_or_else(|e| e.into_inner());
                all.push_str(&line);
                all.push('\n');
            }
        });
        let port = match tokio::time::timeout(READY_DEADLINE, port_rx).await {
            Ok(Ok(port)) => port,
            other => {
                let _ = child.start_kill();
                tokio::time::sleep(Duration::from_millis(300)).await;
                let err = stderr.lock().unwrap_or_else(|e| e.into_inner()).clone();
                panic!("llmock did not get ready ({other:?}); its stderr:\n{err}");
            }
        };
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(30))
            .build()
            .expect("reqwest client");
        let llmock = Self { child, url: format!("http://127.0.0.1:{port}"), http, stderr };
        // It listens before its ready line; still, wait until it answers.
        let started = Instant::now();
        loop {
            let answer = llmock.http.get(format!("{}/health", llmock.url)).send().await;
            if answer.is_ok_and(|a| a.status().is_success()) {
                return llmock;
            }
            if started.elapsed() > READY_DEADLINE {
                panic!("llmock at {} does not answer /health:\n{}", llmock.url, llmock.stderr());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The server's root, `http://127.0.0.1:<port>`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The OpenAI-style base URL, ending in `/v1`.
    pub fn base_url(&self) -> String {
        format!("{}/v1", self.url)
    }

    /// What the server wrote to stderr so far (uvicorn's log, tracebacks).
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    async fn get(&self, path: &str) -> Value {
        let url = format!("{}{path}", self.url);
        let answer = self.http.get(&url).send().await.unwrap_or_else(|e| panic!("GET {url}: {e}"));
        let text = answer.text().await.unwrap_or_default();
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("GET {url}: not JSON ({e}): {text}"))
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        let url = format!("{}{path}", self.url);
        let answer = self
            .http
            .post(&url)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {url}: {e}"));
        let status = answer.status();
        let text = answer.text().await.unwrap_or_default();
        assert!(status.is_success(), "POST {url} {body}: {status} {text}");
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    /// Queues behaviours (LLMock's JSON form, e.g.
    /// `{"type": "fail", "status": 429, "retry_after": 1, "times": 2}`) for the next requests.
    pub async fn scenario(&self, behaviors: Value) {
        self.post("/_llmock/scenario", json!({ "behaviors": behaviors })).await;
    }

    /// Forgets the journal and the queued behaviours.
    pub async fn reset(&self) {
        self.post("/_llmock/reset", json!({})).await;
    }

    /// Every request served since the last reset, oldest first: `seq`, `status`, `fault`
    /// (e.g. `stream:truncate@3`), `retry_after`, `completed`, `started_at`, `ended_at`
    /// (seconds, monotonic), `stream`, `body`, `chunks_sent`.
    pub async fn requests(&self) -> Vec<Value> {
        let list = self.get("/_llmock/requests").await;
        list["requests"].as_array().cloned().unwrap_or_default()
    }

    /// LLMock's verdict on the client since the last reset: `passed`, `errors`, `warnings`,
    /// `findings` (each with a `code` such as `retry_after_ignored`).
    pub async fn verdict(&self) -> Value {
        self.get("/_llmock/verdict").await
    }

    /// The codes of the verdict's findings, errors and warnings alike.
    pub async fn findings(&self) -> Vec<String> {
        let verdict = self.verdict().await;
        verdict["findings"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|f| f["code"].as_str().map(str::to_owned))
            .collect()
    }
}

impl Drop for Llmock {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}
