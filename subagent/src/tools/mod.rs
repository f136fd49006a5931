//! The tools the subagent offers the model: their JSON schemas, the per-task whitelist, and
//! one entry point that runs a call with its own timeout and turns every failure into text
//! the model can read (a failing tool never ends the task).

pub mod command;
pub mod files;
pub mod skills;
pub mod web;

use std::path::PathBuf;
use std::time::Duration;

use nexbot_protocol::BLOCKED_TOOLS;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use crate::secrets::SecretStore;

/// Every tool this program implements, in the order the model sees them.
pub const TOOL_NAMES: &[&str] = &[
    "web_fetch",
    "http_request",
    "run_command",
    "read_file",
    "write_file",
    "list_dir",
    "read_skill",
];

/// What one tool result may put into the conversation, in bytes.
pub const MAX_TOOL_OUTPUT: usize = 24 * 1024;

/// Environment variable overriding the scratch dir (default `/workspace/scratch`).
pub const SCRATCH_ENV: &str = "NEXBOT_SCRATCH_DIR";
/// Environment variable naming the skills dir (default `/workspace/skills`).
pub const SKILLS_ENV: &str = "SKILLS_PATH";

/// Why a tool call produced no result; the text goes back to the model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    /// A safety rule said no.
    #[error("{0}")]
    Refused(String),
    /// The arguments were wrong.
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Failed(String),
    #[error("{0}")]
    Timeout(String),
}

/// A tool's result text; `source` is set when the text came from outside (a page, a
/// response, a command's output, a file) and must be wrapped as untrusted data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    pub text: String,
    pub source: Option<String>,
}

impl ToolOutput {
    pub fn plain(text: String) -> Self {
        Self { text, source: None }
    }
    pub fn external(source: String, text: String) -> Self {
        Self { text, source: Some(source) }
    }
}

/// Where the file and skill tools look.
#[derive(Debug, Clone)]
pub struct ToolEnv {
    pub scratch: PathBuf,
    pub skills: PathBuf,
}

impl ToolEnv {
    /// From `NEXBOT_SCRATCH_DIR` and `SKILLS_PATH`, with the image's defaults.
    pub fn from_env() -> Self {
        let var = |name: &str, default: &str| {
            std::env::var(name).ok().filter(|v| !v.is_empty()).unwrap_or_else(|| default.to_owned())
        };
        Self {
            scratch: PathBuf::from(var(SCRATCH_ENV, "/workspace/scratch")),
            skills: PathBuf::from(var(SKILLS_ENV, "/workspace/skills")),
        }
    }
}

/// The tools a task may use: the request's whitelist (or all when absent) minus the
/// always-blocked ones, minus names this program does not offer. Empty is an error, naming
/// what was asked for and what exists.
pub fn select(requested: Option<&[String]>) -> Result<Vec<&'static str>, String> {
    let chosen: Vec<&'static str> = match requested {
        None => TOOL_NAMES.to_vec(),
        Some(names) => TOOL_NAMES
            .iter()
            .copied()
            .filter(|tool| names.iter().any(|n| n == tool) && !BLOCKED_TOOLS.contains(tool))
            .collect(),
    };
    if chosen.is_empty() {
        return Err(format!(
            "no usable tools: requested {:?}; this subagent offers {:?} ({:?} are never granted)",
            requested.unwrap_or_default(),
            TOOL_NAMES,
            BLOCKED_TOOLS
        ));
    }
    Ok(chosen)
}

/// The time limit of one call of `name`, given its arguments. Tools with their own timeout
/// argument get a little more, so that their own, clearer message wins.
pub fn time_limit(name: &str, args: &Value) -> Duration {
    let asked = args.get("timeout_secs").and_then(Value::as_u64).map(Duration::from_secs);
    let slack = Duration::from_secs(5);
    match name {
        "run_command" => {
            asked.unwrap_or(command::DEFAULT_TIMEOUT).min(command::MAX_TIMEOUT) + slack
        }
        "http_request" => asked.unwrap_or(web::FETCH_TIMEOUT).min(web::MAX_REQUEST_TIMEOUT) + slack,
        "web_fetch" => web::FETCH_TIMEOUT + slack,
        _ => Duration::from_secs(20),
    }
}

/// Runs one call of tool `name` with `args`.
pub async fn call(
    name: &str,
    args: Value,
    env: &ToolEnv,
    secrets: &SecretStore,
    redactor: &std::sync::Arc<nexbot_protocol::Redactor>,
) -> Result<ToolOutput, ToolError> {
    let limit = time_limit(name, &args);
    let run = async {
        match name {
            "web_fetch" => web::web_fetch(secrets, parse(name, args)?).await,
            "http_request" => web::http_request(secrets, parse(name, args)?).await,
            "run_command" => {
                command::run_command(&env.scratch, secrets, redactor, parse(name, args)?).await
            }
            "read_file" => files::read_file(&env.scratch, parse(name, args)?).await,
            "write_file" => files::write_file(&env.scratch, parse(name, args)?).await,
            "list_dir" => files::list_dir(&env.scratch, parse(name, args)?).await,
            "read_skill" => skills::read_skill(&env.skills, parse(name, args)?).await,
            other => Err(ToolError::Invalid(format!("unknown tool {other:?}"))),
        }
    };
    match tokio::time::timeout(limit, run).await {
        // Redacted whole, then cut: a secret the cut would split never shows half of itself
        // (run_command's output is redacted as it streams, before its own cut).
        Ok(result) => result.map(|mut output| {
            output.text = cap_text(&redactor.redact(&output.text), MAX_TOOL_OUTPUT);
            output
        }),
        Err(_) => Err(ToolError::Timeout(format!("{name}: no result after {} s", limit.as_secs()))),
    }
}

fn parse<T: DeserializeOwned>(tool: &str, args: Value) -> Result<T, ToolError> {
    serde_json::from_value(args)
        .map_err(|e| ToolError::Invalid(format!("invalid arguments for {tool}: {e}")))
}

/// The OpenAI `tools` entries for `names`.
pub fn specs(names: &[&str]) -> Vec<Value> {
    names.iter().filter_map(|name| spec(name)).collect()
}

fn function(name: &str, description: &str, parameters: Value) -> Value {
    json!({"type": "function", "function": {"name": name, "description": description, "parameters": parameters}})
}

fn spec(name: &str) -> Option<Value> {
    let secrets_note = "Secrets are referenced by placeholder ($NAME or {{secret:NAME}}) and filled in when the call runs; never ask for their values.";
    Some(match name {
        "web_fetch" => function(
            name,
            "GET a web page or document and return it as readable text (HTML is converted). Non-text content is only described.",
            json!({"type": "object", "properties": {
                "url": {"type": "string", "description": "http or https URL"}
            }, "required": ["url"]}),
        ),
        "http_request" => function(
            name,
            &format!("Make an HTTP request (e.g. to an API) and return the status, content type and body. {secrets_note}"),
            json!({"type": "object", "properties": {
                "method": {"type": "string", "description": "GET, POST, PUT, PATCH, DELETE, HEAD; default GET"},
                "url": {"type": "string"},
                "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                "body": {"type": "string"},
                "timeout_secs": {"type": "integer", "minimum": 1, "maximum": 120}
            }, "required": ["url"]}),
        ),
        "run_command" => function(
            name,
            &format!("Run a shell command with /bin/sh -c in the scratch directory and return its exit code and (capped) output. Busybox tools are available. {secrets_note}"),
            json!({"type": "object", "properties": {
                "command": {"type": "string"},
                "timeout_secs": {"type": "integer", "minimum": 1, "maximum": 600, "description": "default 60"}
            }, "required": ["command"]}),
        ),
        "read_file" => function(
            name,
            "Read a text file from the scratch directory (paths are relative to it).",
            json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        ),
        "write_file" => function(
            name,
            "Write (or append to) a file in the scratch directory, creating parent directories.",
            json!({"type": "object", "properties": {
                "path": {"type": "string"},
                "content": {"type": "string"},
                "append": {"type": "boolean", "description": "append instead of replacing; default false"}
            }, "required": ["path", "content"]}),
        ),
        "list_dir" => function(
            name,
            "List a directory of the scratch directory (default: its root).",
            json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        ),
        "read_skill" => function(
            name,
            "Without a name: list the available skills. With a name: read that skill's SKILL.md instructions.",
            json!({"type": "object", "properties": {"name": {"type": "string"}}}),
        ),
        _ => return None,
    })
}

/// Cuts `text` to about `max` bytes, keeping its head and its tail (where errors and
/// summaries usually are) and saying how much was left out.
pub fn cap_text(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let half = max / 2;
    let mut head_end = half;
    while !text.is_char_boundary(head_end) {
        head_end -= 1;
    }
    let mut tail_start = text.len() - half;
    while !text.is_char_boundary(tail_start) {
        tail_start += 1;
    }
    let omitted = tail_start - head_end;
    format!("{}\n…[{omitted} bytes omitted]…\n{}", &text[..head_end], &text[tail_start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whitelist_drops_unknown_and_blocked_names() {
        let asked: Vec<String> =
            ["run_command", "spawn", "delegate_to_sub_agent", "nope"].map(String::from).to_vec();
        assert_eq!(select(Some(&asked)).unwrap(), ["run_command"]);
        assert_eq!(select(None).unwrap(), TOOL_NAMES);
    }

    #[test]
    fn nothing_usable_is_an_error_naming_the_request() {
        let asked = vec!["send_file_to_user".to_owned()];
        let err = select(Some(&asked)).unwrap_err();
        assert!(err.contains("send_file_to_user") && err.contains("web_fetch"), "{err}");
        assert!(select(Some(&[])).is_err());
    }

    #[test]
    fn every_tool_has_a_schema_and_blocked_ones_none() {
        let all = specs(TOOL_NAMES);
        assert_eq!(all.len(), TOOL_NAMES.len());
        for s in &all {
            assert_eq!(s["type"], "function");
            assert_eq!(s["function"]["parameters"]["type"], "object");
        }
        assert!(specs(BLOCKED_TOOLS).is_empty());
    }

    #[test]
    fn cap_keeps_head_and_tail() {
        let text = format!("{}{}", "a".repeat(100), "z".repeat(100));
        let capped = cap_text(&text, 20);
        assert!(capped.starts_with("aaaaaaaaaa\n…[180 bytes omitted]…\nzzzzzzzzzz"), "{capped}");
        assert_eq!(cap_text("short", 20), "short");
    }

    #[tokio::test]
    async fn a_secret_at_the_cut_of_a_long_result_is_redacted_before_the_cut() {
        use secrecy::SecretString;
        let secret = "Pw7-SECRET-VALUE-9xQ3-longer-than-the-seam";
        let dir = std::env::temp_dir().join(format!("nxs-cut-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let half = MAX_TOOL_OUTPUT / 2;
        let text =
            format!("{}{secret}{}", "a".repeat(half - secret.len() / 2), "b".repeat(half * 2));
        std::fs::write(dir.join("big.txt"), text).unwrap();
        let mut map = nexbot_protocol::SecretMap::new();
        map.insert("S", SecretString::from(secret.to_owned()));
        let redactor = std::sync::Arc::new(nexbot_protocol::Redactor::new(&map));
        let env = ToolEnv { scratch: dir.clone(), skills: dir.clone() };
        let secrets = SecretStore::new(map, crate::secrets::SECRET_TTL);
        let out =
            call("read_file", json!({"path": "big.txt"}), &env, &secrets, &redactor).await.unwrap();
        assert!(out.text.contains("bytes omitted"), "the result was cut");
        assert!(!out.text.contains(&secret[..12]) && !out.text.contains("SECRET-VALUE"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn bad_arguments_and_unknown_tools_are_errors_not_panics() {
        let env = ToolEnv { scratch: std::env::temp_dir(), skills: std::env::temp_dir() };
        let secrets = SecretStore::new(Default::default(), crate::secrets::SECRET_TTL);
        let none = std::sync::Arc::new(nexbot_protocol::Redactor::new(&Default::default()));
        let err = call("read_file", json!({"nope": 1}), &env, &secrets, &none).await.unwrap_err();
        assert!(err
            .to_string()
            .starts_with("invalid arguments for read_file: missing field `path`"));
        let err = call("spawn", json!({}), &env, &secrets, &none).await.unwrap_err();
        assert_eq!(err.to_string(), "unknown tool \"spawn\"");
    }
}
