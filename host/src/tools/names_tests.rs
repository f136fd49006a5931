//! Every tool name the model reads exists: in the default prompt files (`src/defaults/*.md`)
//! and in the descriptions and schemas of the host's own tools, a name that looks like a tool
//! must be a tool of the real registry (as `runtime::build_agent` assembles it, delegation
//! on) or of a sub-agent (`nexbot_protocol::SUBAGENT_TOOLS`, `update_todos`). A prompt that
//! names `fetch_url` or `browse_web` teaches the model a call that cannot work.
//!
//! What "looks like a tool": a snake_case identifier quoted in backticks (the prompts' and the
//! descriptions' convention), or, in a description, in double quotes (JSON examples). Words
//! the host's own schemas define — argument names and enum values such as `source` or
//! `tool_result` — are arguments, not tools.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use nexbot_protocol::{is_subagent_tool, Request, Response};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::ToolRegistry;
use crate::config::Config;
use crate::delegation::{
    AccessEnd, LlmAccess, SubagentError, SubagentOutcome, SubagentRunner, TaskLlm,
};
use crate::runtime::{build_agent, open_store, Delegation};
use crate::BoxFuture;

/// Words in backticks in the prompts that are neither tools nor schema words.
const NOT_TOOLS: &[&str] = &[];

/// Delegation is offered only with something to run tasks on; nothing is run here.
#[derive(Debug)]
struct NoPool;

impl SubagentRunner for NoPool {
    fn execute(
        &self,
        _: &nexbot_core::ChatRef,
        _: Request,
        _: CancellationToken,
        _: Option<mpsc::Sender<Response>>,
        _: Option<Arc<dyn nexbot_protocol::McpCalls>>,
        _: Vec<nexbot_protocol::TaskFile>,
    ) -> BoxFuture<'_, Result<SubagentOutcome, SubagentError>> {
        Box::pin(async { Err(SubagentError::new("no pool in this test")) })
    }
}

impl LlmAccess for NoPool {
    fn issue(&self, _: &str, _: Option<u64>) -> Result<TaskLlm, String> {
        Err("no relay in this test".into())
    }
    fn revoke(&self, _: &str) -> AccessEnd {
        AccessEnd::default()
    }
}

/// The registry the daemon offers the model, delegation included.
async fn real_registry(dir: &Path) -> ToolRegistry {
    let config =
        Config::from_parts("", &dir.join("config.toml"), dir, Vec::<(String, String)>::new())
            .unwrap();
    let store = open_store(&config).await.unwrap();
    let delegation = Delegation {
        runner: Arc::new(NoPool),
        tokens: Arc::new(NoPool),
        approvals: None,
        mcp: None,
        traps: Arc::default(),
        built: Arc::default(),
    };
    build_agent(&config, store, Some(delegation)).unwrap().tools().clone()
}

fn is_identifier(word: &str) -> bool {
    let mut parts = word.split('_');
    let first = parts.next().unwrap_or_default();
    first.starts_with(|c: char| c.is_ascii_lowercase())
        && word.split('_').all(|p| {
            !p.is_empty() && p.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        })
}

/// The identifiers quoted with `quote` in `text`.
fn quoted(text: &str, quote: char) -> Vec<&str> {
    text.split(quote).skip(1).step_by(2).filter(|w| is_identifier(w)).collect()
}

/// Every `description` string in a JSON schema.
fn descriptions<'a>(schema: &'a Value, out: &mut Vec<&'a str>) {
    match schema {
        Value::Object(map) => {
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("description", Value::String(text)) => out.push(text),
                    _ => descriptions(value, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| descriptions(v, out)),
        _ => {}
    }
}

/// Argument names and string enum values of a schema: the words it defines.
fn schema_words(schema: &Value, out: &mut BTreeSet<String>) {
    match schema {
        Value::Object(map) => {
            if let Some(Value::Object(properties)) = map.get("properties") {
                out.extend(properties.keys().cloned());
            }
            if let Some(Value::Array(values)) = map.get("enum") {
                out.extend(values.iter().filter_map(Value::as_str).map(str::to_owned));
            }
            map.values().for_each(|v| schema_words(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| schema_words(v, out)),
        _ => {}
    }
}

/// What the model reads, as (where, text, also double quotes): the default prompt files, each
/// tool's description and every description in its schema.
fn texts(registry: &ToolRegistry) -> Vec<(String, String, bool)> {
    let mut texts: Vec<(String, String, bool)> = crate::workspace::BOOTSTRAP_FILES
        .iter()
        .map(|(name, text)| (format!("agent/src/defaults/{name}"), (*text).to_owned(), false))
        .collect();
    for name in registry.names() {
        let tool = registry.get(name).unwrap();
        texts.push((format!("{name}: description"), tool.description().to_owned(), true));
        let schema = tool.parameters();
        let mut inner = Vec::new();
        descriptions(&schema, &mut inner);
        for text in inner {
            texts.push((format!("{name}: schema"), text.to_owned(), true));
        }
    }
    texts
}

/// The tool-like names in `texts` that name no tool: `(where, name)`.
fn unknown_names(
    registry: &ToolRegistry,
    texts: &[(String, String, bool)],
) -> (Vec<(String, String)>, BTreeSet<String>) {
    let mut words = BTreeSet::new();
    for name in registry.names() {
        schema_words(&registry.get(name).unwrap().parameters(), &mut words);
    }
    let mut unknown = Vec::new();
    let mut tools_seen = BTreeSet::new();
    for (place, text, double) in texts {
        let mut names = quoted(text, '`');
        if *double {
            names.extend(quoted(text, '"'));
        }
        for name in names {
            if registry.get(name).is_some() || is_subagent_tool(name) {
                tools_seen.insert(name.to_owned());
            } else if !words.contains(name) && !NOT_TOOLS.contains(&name) {
                unknown.push((place.clone(), name.to_owned()));
            }
        }
    }
    (unknown, tools_seen)
}

#[tokio::test]
async fn every_tool_name_in_the_prompts_and_tool_descriptions_exists() {
    let dir = std::env::temp_dir().join(format!("nxw-names-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let registry = real_registry(&dir).await;
    assert!(registry.get(super::delegate::TOOL_NAME).is_some(), "delegation is offered");
    // The chat tools are offered, and the protocol's name of `send_file` is the same tool.
    for name in ["ask_user", "send_file", "manage_message", "send_message"] {
        assert!(registry.get(name).is_some(), "{name} is not offered: {:?}", registry.names());
    }
    assert_eq!(registry.get("send_file_to_user").map(|t| t.name()), Some("send_file"));
    assert_eq!(registry.get("list_directory").map(|t| t.name()), Some("list_dir"));
    assert!(!registry.names().contains(&"send_file_to_user"), "offered once, under one name");
    let (unknown, seen) = unknown_names(&registry, &texts(&registry));
    assert!(
        unknown.is_empty(),
        "names that are no tool (host tools: {:?}; sub-agent tools: {:?}):\n{}",
        registry.names(),
        nexbot_protocol::SUBAGENT_TOOLS,
        unknown
            .iter()
            .map(|(place, name)| format!("  {place}: `{name}`"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // The scan reads what it should: host and sub-agent tools are mentioned and recognised.
    for expected in ["delegate_to_sub_agent", "memory", "manage_tasks", "run_command", "web_fetch"]
    {
        assert!(seen.contains(expected), "{expected} not found among {seen:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn the_scan_catches_names_that_do_not_exist() {
    let dir = std::env::temp_dir().join(format!("nxw-names-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let registry = real_registry(&dir).await;
    let texts = [
        // What AGENTS.md and the delegation tool's description said before.
        (
            "AGENTS.md".to_owned(),
            "naming the tools it needs (for example `run_command`, `fetch_url`, `http_request`)"
                .to_owned(),
            false,
        ),
        (
            "delegate".to_owned(),
            "optionally `tools` (whitelist, e.g. [\"run_command\", \"fetch_url\"]), `context`"
                .to_owned(),
            true,
        ),
        (
            "HEARTBEAT.md".to_owned(),
            "use `browse_web` or `ask_human`; `spawn` is fine, `Some Words` are prose".to_owned(),
            false,
        ),
    ];
    let (unknown, _) = unknown_names(&registry, &texts);
    let found: Vec<(&str, &str)> =
        unknown.iter().map(|(place, name)| (place.as_str(), name.as_str())).collect();
    assert_eq!(
        found,
        [
            ("AGENTS.md", "fetch_url"),
            ("delegate", "fetch_url"),
            ("HEARTBEAT.md", "browse_web"),
            ("HEARTBEAT.md", "ask_human"),
        ]
    );
    let _ = std::fs::remove_dir_all(&dir);
}
