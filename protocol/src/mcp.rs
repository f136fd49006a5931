//! MCP tools granted to a task (`docs/protocol.md#mcp-tools`): the host runs the MCP servers
//! and the calls; the subagent only offers the granted tools to its model and asks the host
//! for each call.
//!
//! - An `execute` carries the granted tools' definitions ([`McpToolSpec`], `mcp_tools`).
//! - When the model calls one, the subagent writes an `mcp_call` line ([`McpCall`], a
//!   [`crate::ResponseBody::McpCall`]) and waits, at most until the task's soft limit or its
//!   cancel, for the host's `mcp_result` request ([`McpAnswer`]) with the same `call_id`.
//! - The host answers every `mcp_call` of a task through one [`McpCalls`]: the delegating
//!   chat's own MCP tools, only those granted.

use std::fmt;

use nexbot_core::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::tools::{canonical_tool, BLOCKED_TOOLS};

/// A function name's limit at the OpenAI-compatible APIs, and so an MCP tool name's.
pub const MAX_MCP_TOOL_NAME: usize = 64;

/// One granted MCP tool, as the model is offered it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpToolSpec {
    /// The model's name for it (`mcp__<server>__<tool>`).
    pub name: String,
    /// What the model reads (the host's words naming the server, then the server's).
    #[serde(default)]
    pub description: String,
    /// JSON Schema of its arguments (an object).
    pub input_schema: Value,
}

/// A task's call of a granted MCP tool, as the subagent asks the host for it.
#[derive(Debug, Clone, PartialEq)]
pub struct McpCall {
    /// The task's id (the `execute`'s).
    pub task_id: String,
    /// Unique among the task's calls; the host's `mcp_result` names it.
    pub call_id: String,
    pub tool: String,
    pub arguments: Map<String, Value>,
}

/// The host's answer to an [`McpCall`] (an `mcp_result` request's `result` or `error`).
#[derive(Clone, PartialEq, Eq)]
pub enum McpAnswer {
    /// What the model reads: the call's result, in the host's data envelope.
    Result(String),
    /// Why there is no result (not granted, the server failed, the call was stopped, …).
    Error(String),
}

impl fmt::Debug for McpAnswer {
    /// The kind and size only: a result is the server's words, not for logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Result(text) => write!(f, "McpAnswer::Result({} bytes)", text.len()),
            Self::Error(text) => write!(f, "McpAnswer::Error({} bytes)", text.len()),
        }
    }
}

/// Answers the `mcp_call`s of one task while it runs (the host's, given to the pool with the
/// task). Each answer is written back as an `mcp_result`; a future still running when the
/// task ends is dropped.
pub trait McpCalls: Send + Sync + fmt::Debug {
    fn call(&self, call: McpCall) -> BoxFuture<'static, McpAnswer>;
}

/// Why an `execute`'s `mcp_tools` are refused (the text after `mcp tool "X": `).
pub(crate) fn check_specs(specs: &[McpToolSpec]) -> Result<(), (String, &'static str)> {
    for (i, spec) in specs.iter().enumerate() {
        let fail = |why| Err((spec.name.clone(), why));
        let name = spec.name.as_str();
        if name.is_empty()
            || name.len() > MAX_MCP_TOOL_NAME
            || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return fail("a name is 1 to 64 letters, digits, _ and -");
        }
        if canonical_tool(name).is_some() || BLOCKED_TOOLS.contains(&name) {
            return fail("it has the name of a subagent tool");
        }
        if specs[..i].iter().any(|s| s.name == spec.name) {
            return fail("it is named twice");
        }
        if !spec.input_schema.is_object() {
            return fail("its input_schema is not a JSON object");
        }
    }
    Ok(())
}
