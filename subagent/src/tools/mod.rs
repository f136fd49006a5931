//! The tools the subagent offers the model: one registry of specs and handlers whose names
//! are the protocol's list (`nexbot_protocol::SUBAGENT_TOOLS`), the per-task whitelist, and
//! one entry point that runs a call with its own timeout and turns every failure into text
//! the model can read (a failing tool never ends the task).

pub mod cli;
pub mod command;
pub mod files;
pub mod search;
pub mod skills;
pub mod web;
pub mod web_search;

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use nexbot_llm::ToolSpec;
use nexbot_protocol::{canonical_tool, Redactor, BLOCKED_TOOLS, SUBAGENT_TOOLS};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use crate::secrets::SecretStore;

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
    /// The blocked-pattern screen refused a command. Its own kind because the task counts
    /// these: after the request's `max_blocked_commands` the task is ended.
    #[error("{0}")]
    Screened(String),
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

/// Where the file and skill tools look, and what `use_cli` hands its CLI.
#[derive(Debug, Clone, Default)]
pub struct ToolEnv {
    pub scratch: PathBuf,
    pub skills: PathBuf,
    /// The task's search backend (`execute.search_backend`), for `search_web`.
    pub search: Option<nexbot_protocol::SearchBackend>,
    /// The task's LLM access for `use_cli` (none outside a task).
    pub cli_llm: Option<cli::CliLlm>,
    /// The task's soft deadline: `use_cli` runs at most until then.
    pub deadline: Option<tokio::time::Instant>,
    /// Skills' content hashes allowed for this task beyond the image's `NEXBOT_SKILLS_ALLOW`
    /// (`execute.skills_allow`).
    pub skills_allow: Vec<String>,
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
            search: None,
            cli_llm: None,
            deadline: None,
            skills_allow: Vec::new(),
        }
    }
}

/// The tools a task gets, and the names it asked for that it does not get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// Granted, in the registry's order.
    pub tools: Vec<&'static str>,
    /// Asked for but not offered by this program (blocked ones included), each once, in the
    /// order asked; the answer reports them (`dropped_tools`). The planning tool is not
    /// among them: every task has it.
    pub dropped: Vec<String>,
}

/// The tools a task may use: the request's whitelist (or all when absent; an alias such as
/// `fetch_page` grants its tool) minus the always-blocked ones, minus names this program does
/// not offer. Empty is an error, naming what was asked for and what exists, unless the task
/// has MCP tools (`mcp`: granted only those).
pub fn select(requested: Option<&[String]>, mcp: bool) -> Result<Selection, String> {
    let offered = offered();
    let Some(names) = requested else {
        return Ok(Selection { tools: offered, dropped: Vec::new() });
    };
    let tools: Vec<&'static str> = offered
        .iter()
        .copied()
        .filter(|tool| {
            names.iter().any(|n| canonical_tool(n) == Some(tool)) && !BLOCKED_TOOLS.contains(tool)
        })
        .collect();
    if tools.is_empty() && !mcp {
        return Err(format!(
            "no usable tools: requested {names:?}; this subagent offers {offered:?} \
             ({BLOCKED_TOOLS:?} are never granted)"
        ));
    }
    let mut dropped: Vec<String> = Vec::new();
    for name in names {
        let granted = canonical_tool(name)
            .is_some_and(|tool| tools.contains(&tool) || tool == crate::agent::TODO_TOOL);
        if !granted && !dropped.contains(name) {
            dropped.push(name.clone());
        }
    }
    Ok(Selection { tools, dropped })
}

/// The tools this program offers in this image: [`SUBAGENT_TOOLS`] minus `use_cli` when the
/// image has no CLI (what `pong` lists, and what a task can be granted).
pub fn offered() -> Vec<&'static str> {
    SUBAGENT_TOOLS.iter().copied().filter(|t| *t != "use_cli" || cli::installed()).collect()
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
        "web_fetch" | "fetch_page" | "search_web" => web::FETCH_TIMEOUT + slack,
        "search_files" | "search_text" => nexbot_fsearch::Limits::default().max_time + slack,
        _ => Duration::from_secs(20),
    }
}

/// Runs one call of tool `name` with `args`.
pub async fn call(
    name: &str,
    args: Value,
    env: &ToolEnv,
    secrets: &SecretStore,
    redactor: &Arc<Redactor>,
) -> Result<ToolOutput, ToolError> {
    let Some(tool) = find(name) else {
        return Err(ToolError::Invalid(format!("unknown tool {name:?}")));
    };
    let mut limit = time_limit(name, &args);
    if name == "use_cli" {
        // The CLI may take what is left of the task; its own stop message comes first.
        let left = env.deadline.map_or(cli::DEFAULT_TIMEOUT, |d| {
            d.saturating_duration_since(tokio::time::Instant::now())
        });
        limit = left + Duration::from_secs(5);
    }
    let cx = Cx { env, secrets, redactor };
    match tokio::time::timeout(limit, (tool.run)(args, &cx)).await {
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

/// The OpenAI `tools` entries for `names` (names without a tool, aliases included, are
/// skipped: only canonical names are offered).
pub fn specs(names: &[&str]) -> Vec<ToolSpec> {
    names
        .iter()
        .filter_map(|name| REGISTRY.iter().find(|tool| tool.name == *name))
        .map(Tool::spec)
        .collect()
}

/// What a handler gets besides its arguments.
struct Cx<'a> {
    env: &'a ToolEnv,
    secrets: &'a SecretStore,
    redactor: &'a Arc<Redactor>,
}

type Run = for<'a> fn(
    Value,
    &'a Cx<'a>,
) -> Pin<Box<dyn Future<Output = Result<ToolOutput, ToolError>> + Send + 'a>>;

/// One tool: what the model is told about it and what runs it.
struct Tool {
    name: &'static str,
    description: &'static str,
    parameters: fn() -> Value,
    run: Run,
}

impl Tool {
    fn spec(&self) -> ToolSpec {
        ToolSpec::function(self.name, self.description, (self.parameters)())
    }
}

/// The tool `name` calls: its own, or the one its alias stands for (`fetch_page`).
fn find(name: &str) -> Option<&'static Tool> {
    let name = canonical_tool(name)?;
    REGISTRY.iter().find(|tool| tool.name == name)
}

macro_rules! secrets_note {
    () => {
        " Secrets are referenced by placeholder ($NAME or {{secret:NAME}}) and filled in when \
         the call runs; never ask for their values."
    };
}

/// Every tool this program implements, in the order of [`SUBAGENT_TOOLS`] (a test holds the
/// two equal).
const REGISTRY: &[Tool] = &[
    Tool {
        name: "web_fetch",
        description: "GET a web page or document and return it as readable text (HTML is \
                      converted). Non-text content is only described.",
        parameters: || {
            json!({"type": "object", "properties": {
                "url": {"type": "string", "description": "http or https URL"}
            }, "required": ["url"]})
        },
        run: |args, cx| {
            Box::pin(async move { web::web_fetch(cx.secrets, parse("web_fetch", args)?).await })
        },
    },
    Tool {
        name: "http_request",
        description: concat!(
            "Make an HTTP request (e.g. to an API) and return the status, content type and body.",
            secrets_note!()
        ),
        parameters: || {
            json!({"type": "object", "properties": {
                "method": {"type": "string", "description": "GET, POST, PUT, PATCH, DELETE, HEAD; default GET"},
                "url": {"type": "string"},
                "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                "body": {"type": "string"},
                "timeout_secs": {"type": "integer", "minimum": 1, "maximum": 120}
            }, "required": ["url"]})
        },
        run: |args, cx| {
            Box::pin(
                async move { web::http_request(cx.secrets, parse("http_request", args)?).await },
            )
        },
    },
    Tool {
        name: "run_command",
        description: concat!(
            "Run a shell command with /bin/sh -c in the scratch directory and return its exit \
             code and (capped) output. Busybox tools are available (busybox wget: write \
             --timeout=N, never -T; for HTTP prefer http_request or web_fetch).",
            secrets_note!()
        ),
        parameters: || {
            json!({"type": "object", "properties": {
                "command": {"type": "string"},
                "timeout_secs": {"type": "integer", "minimum": 1, "maximum": 600, "description": "default 60"}
            }, "required": ["command"]})
        },
        run: |args, cx| {
            Box::pin(async move {
                let args = parse("run_command", args)?;
                command::run_command(&cx.env.scratch, cx.secrets, cx.redactor, args).await
            })
        },
    },
    Tool {
        name: "read_file",
        description: "Read a text file from the scratch directory (paths are relative to it).",
        parameters: || json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        run: |args, cx| {
            Box::pin(
                async move { files::read_file(&cx.env.scratch, parse("read_file", args)?).await },
            )
        },
    },
    Tool {
        name: "write_file",
        description: "Write (or append to) a file in the scratch directory, creating parent \
                      directories.",
        parameters: || {
            json!({"type": "object", "properties": {
                "path": {"type": "string"},
                "content": {"type": "string"},
                "append": {"type": "boolean", "description": "append instead of replacing; default false"}
            }, "required": ["path", "content"]})
        },
        run: |args, cx| {
            Box::pin(
                async move { files::write_file(&cx.env.scratch, parse("write_file", args)?).await },
            )
        },
    },
    Tool {
        name: "list_dir",
        description: "List a directory of the scratch directory (default: its root).",
        parameters: || json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        run: |args, cx| {
            Box::pin(
                async move { files::list_dir(&cx.env.scratch, parse("list_dir", args)?).await },
            )
        },
    },
    Tool {
        name: "search_files",
        description: "Find files of the scratch directory by name with a glob: `*.md` matches \
                      names at any depth, a pattern with `/` (`src/**/*.rs`) matches paths \
                      relative to `path`. Returns up to 200 paths; symlinks are not followed.",
        parameters: || {
            json!({"type": "object", "properties": {
                "pattern": {"type": "string", "description": "glob, e.g. **/*.rs, *.md, data/*.csv"},
                "path": {"type": "string", "description": "folder to search in, relative to the scratch directory; default: all of it"}
            }, "required": ["pattern"]})
        },
        run: |args, cx| {
            Box::pin(async move {
                search::search_files(&cx.env.scratch, parse("search_files", args)?).await
            })
        },
    },
    Tool {
        name: "search_text",
        description: "Search the contents of the scratch directory's files for a regex (or, \
                      with literal, the text as it is). Returns up to 100 matching lines as \
                      path:line: text; binary files are skipped, at most 1 MiB of a file is \
                      read.",
        parameters: || {
            json!({"type": "object", "properties": {
                "pattern": {"type": "string", "description": "regular expression (Rust regex syntax), or plain text with literal"},
                "literal": {"type": "boolean", "description": "search for the pattern as plain text; default false"},
                "case_insensitive": {"type": "boolean", "description": "default false"},
                "path": {"type": "string", "description": "folder or file to search, relative to the scratch directory; default: all of it"},
                "glob": {"type": "string", "description": "only files matching this glob, e.g. *.py"}
            }, "required": ["pattern"]})
        },
        run: |args, cx| {
            Box::pin(async move {
                search::search_text(&cx.env.scratch, parse("search_text", args)?).await
            })
        },
    },
    Tool {
        name: "use_cli",
        description: "Hand a coding task to a headless coding CLI (Qwen Code) that runs in the \
                      scratch directory with its own tools and reaches the same model; returns \
                      {success, output?, error?}. Give a complete, self-contained task_text.",
        parameters: || {
            json!({"type": "object", "properties": {
                "task_text": {"type": "string", "description": "the task for the CLI"}
            }, "required": ["task_text"]})
        },
        run: |args, cx| {
            Box::pin(async move {
                let args = parse("use_cli", args)?;
                let limit = cx.env.deadline.map_or(cli::DEFAULT_TIMEOUT, |d| {
                    d.saturating_duration_since(tokio::time::Instant::now())
                });
                cli::use_cli(&cx.env.scratch, cx.env.cli_llm.as_ref(), cx.redactor, args, limit)
                    .await
            })
        },
    },
    Tool {
        name: "read_skill",
        description: "Without a name: list the available skills. With a name: read that \
                      skill's SKILL.md instructions and list its other files; with a name and \
                      a file: read that file of the skill.",
        parameters: || {
            json!({"type": "object", "properties": {
                "name": {"type": "string"},
                "file": {"type": "string", "description": "a file of the skill, relative to its folder"}
            }})
        },
        run: |args, cx| {
            Box::pin(async move {
                let args = parse("read_skill", args)?;
                skills::read_skill(&cx.env.skills, &cx.env.skills_allow, args).await
            })
        },
    },
    Tool {
        name: "search_web",
        description: "Search the web with the operator's search backend; returns up to 10 \
                      results, each a title, URL and snippet. Read a result with web_fetch.",
        parameters: || {
            json!({"type": "object", "properties": {
                "query": {"type": "string"},
                "max_results": {"type": "integer", "minimum": 1, "maximum": 10, "description": "default 5"}
            }, "required": ["query"]})
        },
        run: |args, cx| {
            Box::pin(async move {
                web_search::search_web(cx.env, cx.secrets, parse("search_web", args)?).await
            })
        },
    },
];

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
    fn whitelist_drops_unknown_and_blocked_names_and_says_which() {
        let asked: Vec<String> =
            ["run_command", "spawn", "delegate_to_sub_agent", "nope", "update_todos", "nope"]
                .map(String::from)
                .to_vec();
        let selection = select(Some(&asked), false).unwrap();
        assert_eq!(selection.tools, ["run_command"]);
        assert_eq!(selection.dropped, ["spawn", "delegate_to_sub_agent", "nope"]);
        let all = select(None, false).unwrap();
        assert_eq!((all.tools, all.dropped.len()), (offered(), 0));
        if !cli::installed() {
            let asked = vec!["use_cli".to_owned(), "list_dir".to_owned()];
            assert_eq!(
                select(Some(&asked), false).unwrap().dropped,
                ["use_cli"],
                "no CLI, no use_cli"
            );
        }
        let exact = select(Some(&["read_file".to_owned(), "list_dir".to_owned()]), false).unwrap();
        assert_eq!((exact.tools, exact.dropped.len()), (vec!["read_file", "list_dir"], 0));
        // The seed's name grants the canonical tool, and is no drop.
        let alias = select(Some(&["fetch_page".to_owned()]), false).unwrap();
        assert_eq!((alias.tools, alias.dropped.len()), (vec!["web_fetch"], 0));
    }

    #[test]
    fn nothing_usable_is_an_error_naming_the_request() {
        let asked = vec!["send_file_to_user".to_owned()];
        let err = select(Some(&asked), false).unwrap_err();
        assert!(err.contains("send_file_to_user") && err.contains("web_fetch"), "{err}");
        assert!(select(Some(&[]), false).is_err());
        // A task granted only MCP tools has none of these, and that is no error.
        let only_mcp = select(Some(&[]), true).unwrap();
        assert!(only_mcp.tools.is_empty() && only_mcp.dropped.is_empty());
    }

    #[test]
    fn the_registry_is_the_protocol_list_each_with_a_schema() {
        let names: Vec<&str> = REGISTRY.iter().map(|t| t.name).collect();
        assert_eq!(names, SUBAGENT_TOOLS, "the registry and nexbot_protocol::SUBAGENT_TOOLS");
        let all = specs(SUBAGENT_TOOLS);
        assert_eq!(all.len(), SUBAGENT_TOOLS.len());
        for (spec, name) in all.iter().zip(SUBAGENT_TOOLS) {
            assert_eq!((spec.kind.as_str(), spec.function.name.as_str()), ("function", *name));
            assert_eq!(spec.function.parameters["type"], "object", "{name}");
            assert!(!spec.function.description.is_empty(), "{name}");
        }
        assert!(specs(BLOCKED_TOOLS).is_empty());
        assert!(specs(&[crate::agent::TODO_TOOL]).is_empty(), "the planning tool is the loop's");
    }

    #[tokio::test]
    async fn every_listed_name_reaches_its_own_handler_and_no_other_name_does() {
        let dir = std::env::temp_dir().join(format!("nxs-registry-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let env =
            ToolEnv { scratch: dir.clone(), skills: dir.join("no-skills"), ..ToolEnv::default() };
        let secrets = SecretStore::new(Default::default(), crate::secrets::SECRET_TTL);
        let none = Arc::new(Redactor::new(&Default::default()));
        for name in SUBAGENT_TOOLS {
            // A bad argument: the tool's own parser answers, naming the tool.
            let err = call(
                name,
                json!({"path": 7, "url": 7, "command": 7, "name": 7, "task_text": 7}),
                &env,
                &secrets,
                &none,
            )
            .await
            .unwrap_err()
            .to_string();
            assert!(err.starts_with(&format!("invalid arguments for {name}:")), "{name}: {err}");
        }
        // An alias reaches its tool's own handler: the same argument error, under the alias.
        let err = call("fetch_page", json!({"url": 7}), &env, &secrets, &none).await.unwrap_err();
        assert!(err.to_string().starts_with("invalid arguments for web_fetch:"), "{err}");
        for name in ["fetch_url", "update_todos", "spawn", ""] {
            let err = call(name, json!({}), &env, &secrets, &none).await.unwrap_err();
            assert_eq!(err.to_string(), format!("unknown tool {name:?}"));
        }
        std::fs::remove_dir_all(&dir).unwrap();
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
        let redactor = Arc::new(Redactor::new(&map));
        let env = ToolEnv { scratch: dir.clone(), skills: dir.clone(), ..ToolEnv::default() };
        let secrets = SecretStore::new(map, crate::secrets::SECRET_TTL);
        let out =
            call("read_file", json!({"path": "big.txt"}), &env, &secrets, &redactor).await.unwrap();
        assert!(out.text.contains("bytes omitted"), "the result was cut");
        assert!(!out.text.contains(&secret[..12]) && !out.text.contains("SECRET-VALUE"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn bad_arguments_and_unknown_tools_are_errors_not_panics() {
        let env = ToolEnv {
            scratch: std::env::temp_dir(),
            skills: std::env::temp_dir(),
            ..ToolEnv::default()
        };
        let secrets = SecretStore::new(Default::default(), crate::secrets::SECRET_TTL);
        let none = Arc::new(Redactor::new(&Default::default()));
        let err = call("read_file", json!({"nope": 1}), &env, &secrets, &none).await.unwrap_err();
        assert!(err
            .to_string()
            .starts_with("invalid arguments for read_file: missing field `path`"));
        let err = call("spawn", json!({}), &env, &secrets, &none).await.unwrap_err();
        assert_eq!(err.to_string(), "unknown tool \"spawn\"");
    }
}
