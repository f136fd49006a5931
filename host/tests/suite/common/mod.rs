//! Helpers for the end-to-end tests of the `nexbot` binary: a fresh workspace written by the
//! real `nexbot init`, and running `nexbot chat` with lines on stdin, always under a timeout
//! and killed on drop.

#![allow(dead_code)] // each test file uses a different part of this module

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use nexbot_tests::daemon::{self, Daemon, Workspace};
use nexbot_tests::telegram::TelegramFixture;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

pub const NEXBOT: &str = env!("CARGO_BIN_EXE_nexbot");

/// A throwaway workspace written by the real `nexbot init` ([`nexbot_tests::daemon`]'s),
/// removed on drop.
pub struct TempWorkspace {
    pub dir: PathBuf,
    workspace: Workspace,
}

impl TempWorkspace {
    /// Runs `nexbot init` into a new temporary directory.
    pub fn init(tag: &str) -> Self {
        let workspace = Workspace::init(NEXBOT, &format!("nxh-e2e-{tag}-{}", std::process::id()));
        Self { dir: workspace.dir().to_owned(), workspace }
    }

    pub fn config(&self) -> PathBuf {
        self.workspace.config()
    }

    pub fn database(&self) -> PathBuf {
        self.workspace.database()
    }
}

/// The environment every chat test starts from: the scripted LLM, fast retries, and no
/// delegation unless a test turns it on. Egress `open` (what `nexbot init` writes is `ask`):
/// these tests are about other things than being asked; `host_approvals` tests the asking.
pub fn base_env(llm_base_url: &str) -> Vec<(String, String)> {
    [
        ("NEXBOT_EGRESS__MODE", "open"),
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

/// Adds the Telegram channel against the fixture `tg` to `env`, `owner` its owner.
pub fn telegram_env(env: &mut Vec<(String, String)>, tg: &TelegramFixture, owner: i64) {
    env.extend(
        [
            ("NEXBOT_TELEGRAM_TOKEN", tg.token()),
            ("NEXBOT_TELEGRAM__API_URL", tg.api_url()),
            ("NEXBOT_TELEGRAM__OWNER", &owner.to_string()),
            ("NEXBOT_TELEGRAM__POLL_TIMEOUT_SECS", "5"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned())),
    );
}

/// A `nexbot` command with a clean `NEXBOT_*` environment plus `env`, killed on drop.
pub fn nexbot(args: &[&str], config: &Path, env: &[(String, String)]) -> Command {
    let mut command = Command::from(daemon::command(NEXBOT, args, config, env.iter().cloned()));
    command.kill_on_drop(true);
    command
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

/// A `nexbot chat` kept running between messages, so a test can look at what exists while it
/// lives (its pool's containers, its relay). stderr is drained all along, so verbose logs
/// never fill the pipe.
pub struct ChatSession {
    child: tokio::process::Child,
    stdin: Option<tokio::process::ChildStdin>,
    stdout: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    stderr: tokio::task::JoinHandle<String>,
}

impl ChatSession {
    pub fn start(config: &Path, env: &[(String, String)]) -> Self {
        use tokio::io::AsyncBufReadExt;
        let mut child = nexbot(&["chat"], config, env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn nexbot chat");
        let stdin = child.stdin.take();
        let stdout = tokio::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
        let mut stderr = tokio::io::BufReader::new(child.stderr.take().expect("stderr")).lines();
        let stderr = tokio::spawn(async move {
            let mut all = String::new();
            while let Ok(Some(line)) = stderr.next_line().await {
                all.push_str(&line);
                all.push('\n');
            }
            all
        });
        Self { child, stdin, stdout, stderr }
    }

    /// Sends one message (one line).
    pub async fn say(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(format!("{line}\n").as_bytes()).await.expect("write stdin");
    }

    /// The next line of the answers, waiting at most `limit`.
    pub async fn answer(&mut self, limit: Duration) -> String {
        tokio::time::timeout(limit, self.stdout.next_line())
            .await
            .expect("no answer in time")
            .expect("read stdout")
            .expect("nexbot chat ended before answering")
    }

    /// Ends the input and waits for the exit: status, remaining stdout, all of stderr.
    pub async fn finish(mut self, limit: Duration) -> (std::process::ExitStatus, String, String) {
        drop(self.stdin.take());
        let run = async {
            let mut rest = String::new();
            while let Ok(Some(line)) = self.stdout.next_line().await {
                rest.push_str(&line);
                rest.push('\n');
            }
            let status = self.child.wait().await.expect("wait for nexbot chat");
            (status, rest, self.stderr.await.unwrap_or_default())
        };
        tokio::time::timeout(limit, run).await.expect("nexbot chat did not exit in time")
    }
}

/// A running `nexbot serve` ([`nexbot_tests::daemon::Daemon`]: its stderr collected all
/// along, stopped on drop).
pub struct Serving(Daemon);

impl Serving {
    /// Starts `nexbot serve` and waits (up to `limit`) for "nexbot is serving".
    pub async fn start(config: &Path, env: &[(String, String)], limit: Duration) -> Self {
        Self::start_program(Path::new(NEXBOT), config, env, limit).await
    }

    /// [`Self::start`] with `program` in place of the `nexbot` binary (a wrapper that runs it,
    /// such as `nexbot_tests::dns::in_own_resolver`'s).
    pub async fn start_program(
        program: &Path,
        config: &Path,
        env: &[(String, String)],
        limit: Duration,
    ) -> Self {
        Self(Daemon::serve(program, config, env.iter().cloned(), limit).await)
    }

    /// SIGKILL: the daemon gets no chance to clean up (what a crash or OOM kill does).
    pub async fn kill(self) -> String {
        self.0.kill()
    }

    /// SIGTERM, then waits for a clean exit; returns the log.
    pub async fn stop(self, limit: Duration) -> String {
        self.0.stop(limit).await
    }
}

impl std::ops::Deref for Serving {
    type Target = Daemon;

    fn deref(&self) -> &Daemon {
        &self.0
    }
}

/// Removes what a test's pool left, however the test ended (the CLI, because `Drop` cannot
/// await). Each test's daemon gets a network of its own: a pool network belongs to one
/// daemon (another live one's is refused), and these daemons are separate processes.
pub struct Leftovers {
    pub pool: String,
    pub network: String,
}

impl Leftovers {
    pub fn new(tag: &str) -> Self {
        let id = std::process::id();
        Self { pool: format!("nxw-{tag}-{id}"), network: format!("nxw-{tag}-{id}") }
    }

    /// The environment that puts the daemon's pool and network on these names.
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("NEXBOT_SUBAGENT__ENABLED", "true"),
            ("NEXBOT_EGRESS__MODE", "open"),
            ("NEXBOT_SUBAGENT__POOL_SIZE", "1"),
            ("NEXBOT_SUBAGENT__POOL_NAME", &self.pool),
            ("NEXBOT_SUBAGENT__NETWORK", &self.network),
            ("NEXBOT_EGRESS__PORT", "0"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .into()
    }
}

/// Runs the `docker` CLI (for `Drop`, which cannot await); its stdout, trimmed, or nothing.
pub fn docker_cli(args: &[&str]) -> String {
    std::process::Command::new("docker")
        .args(args)
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .unwrap_or_default()
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        let docker = docker_cli;
        let filter = format!("label=nexbot.pool={}", self.pool);
        for id in docker(&["ps", "-aq", "--filter", &filter]).split_whitespace() {
            docker(&["rm", "-f", id]);
        }
        // The daemon removed its firewall rules when it stopped (a daemon killed mid-test
        // leaves the bridge's DROP behind: closed, not open, by design); the network goes.
        docker(&["network", "rm", &self.network]);
    }
}

pub use nexbot_tests::scripted_llm::is_main;

/// The tool results of a request's conversation, parsed, oldest first (a hook may add a note
/// after the JSON; the JSON is the first line; a result that is not JSON is `{"raw": …}`).
pub fn parsed_tool_results(body: &serde_json::Value) -> Vec<serde_json::Value> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            let content = m["content"].as_str().unwrap_or_default();
            let first = content.lines().next().unwrap_or_default();
            serde_json::from_str(first).unwrap_or_else(|_| serde_json::json!({"raw": content}))
        })
        .collect()
}

pub use nexbot_tests::scripted_llm::tool_results;

/// `[[mcp.servers]]`: the reference server (in `nexbot-mcp:dev`), one container for every
/// chat.
pub const MCP_EVERYTHING_SHARED: &str = r#"
[[mcp.servers]]
name = "everything"
command = "mcp-server-everything"
args = ["stdio"]
scope = "shared"
"#;

/// Echoes the user's words, so each answer names its message.
pub fn echo(body: &serde_json::Value) -> nexbot_tests::scripted_llm::Step {
    let text = nexbot_tests::scripted_llm::last_user(body);
    nexbot_tests::scripted_llm::Step::text(&format!("echo: {text}"))
}

/// `target/<profile>/nexbot-ctl`, next to the `nexbot` these tests run.
pub fn ctl_binary() -> PathBuf {
    let ctl = std::path::Path::new(NEXBOT).with_file_name("nexbot-ctl");
    assert!(
        ctl.exists(),
        "build nexbot-ctl first: cargo build -p nexbot-ctl ({} is missing)",
        ctl.display()
    );
    ctl
}

/// How long one `nexbot-ctl` run may take.
pub const CTL_LIMIT: Duration = Duration::from_secs(60);

/// What one `nexbot-ctl` run did.
pub struct Ran {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl std::fmt::Debug for Ran {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit {:?}\nstdout: {}\nstderr: {}", self.code, self.stdout, self.stderr)
    }
}

/// Runs `nexbot-ctl --socket <ws>/nexbot.sock ARGS` with `stdin` piped in (async: the
/// daemon's log is read on this runtime, and a blocked runtime would stall it).
pub async fn ctl(ws: &TempWorkspace, args: &[&str], stdin: &str) -> Ran {
    let mut child = tokio::process::Command::new(ctl_binary())
        .env_remove("NEXBOT_SOCKET")
        .env_remove("NEXBOT_CONFIG")
        .arg("--socket")
        .arg(ws.dir.join("nexbot.sock"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn nexbot-ctl");
    let mut pipe = child.stdin.take().expect("stdin");
    // The command may exit before reading (a usage error): a broken pipe is fine.
    let _ = pipe.write_all(stdin.as_bytes()).await;
    drop(pipe);
    let out = tokio::time::timeout(CTL_LIMIT, child.wait_with_output())
        .await
        .expect("nexbot-ctl did not exit in time")
        .expect("nexbot-ctl output");
    Ran { code: out.status.code(), stdout: text(&out.stdout), stderr: text(&out.stderr) }
}

/// The tool messages after the last user message of `body` (this turn's, not the history's),
/// as the model got them; tool answers' pictures, a user message, are not the user's.
pub fn this_turns_results(body: &serde_json::Value) -> Vec<String> {
    use nexbot_tests::scripted_llm::is_tool_pictures;
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let start = messages
        .iter()
        .rposition(|m| m["role"] == "user" && !is_tool_pictures(m))
        .map_or(0, |i| i + 1);
    messages[start..]
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}
