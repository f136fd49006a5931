//! The tool trait and the registry that offers tools to the model (the host's tools implement
//! it, in `nexbot-host`'s `tools`).
//!
//! Why this shape: every tool answers the model in one normalized JSON form —
//! `{"success": true, "output": ...}` or `{"success": false, "error": "..."}` — so the model
//! learns one convention and a failing tool never crashes the turn. Arguments are checked
//! against each tool's own struct (`deny_unknown_fields`), so a wrong call gets an error that
//! says what was wrong.

use std::future::Future;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use nexbot_core::ChatRef;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::channel::Channel;
use crate::llm::ToolSpec;
use crate::turns::TurnOrigin;
use crate::BoxFuture;

/// What a tool knows about the turn that called it.
#[derive(Debug, Clone)]
pub struct ToolContext {
    pub chat: ChatRef,
    pub session_id: i64,
    /// A child of the turn's token: cancelled when the turn is stopped or times out.
    pub cancel: CancellationToken,
    /// Reaches the chat (whatever channel it is on) while the turn runs.
    pub channel: Arc<dyn Channel>,
    /// Whether the chat is the owner's (the console, or the owner's private Telegram chat):
    /// only then may tools touch `USER.md` and `MEMORY.md`.
    pub owner: bool,
    /// What started the turn (a message, a scheduled job, a heartbeat check).
    pub turn: TurnOrigin,
    /// Tokens the turn's delegated tasks used: a tool that delegates adds to it, so that a
    /// turn's budget (a scheduled job's) counts them.
    pub task_tokens: Arc<AtomicU64>,
}

impl ToolContext {
    /// A context for unit tests of tools (here and in the host's): chat `console:test`,
    /// nothing cancelled, and no channel (a tool that sends gets a "not running" error).
    #[doc(hidden)]
    pub fn for_tests() -> Self {
        Self {
            chat: ChatRef::console("test").expect("valid"),
            session_id: 1,
            cancel: CancellationToken::new(),
            channel: Arc::new(NoChannel),
            owner: true,
            turn: TurnOrigin::Message,
            task_tokens: Arc::default(),
        }
    }
}

/// A chat nobody listens to (tool unit tests).
#[derive(Debug)]
struct NoChannel;

impl Channel for NoChannel {
    fn send(
        &self,
        message: crate::channel::OutboundMessage,
    ) -> BoxFuture<'_, Result<Option<crate::channel::MessageId>, crate::channel::ChannelError>>
    {
        let err = crate::channel::ChannelError::NotRunning {
            channel: message.chat.kind(),
            chat: message.chat,
        };
        Box::pin(async move { Err(err) })
    }
}

/// A tool failure, worded for the model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ToolError(pub String);

impl ToolError {
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}

pub type ToolResult = Result<String, ToolError>;

pub trait Tool: Send + Sync + std::fmt::Debug {
    fn name(&self) -> &'static str;
    fn description(&self) -> &'static str;
    /// JSON Schema of the arguments.
    fn parameters(&self) -> Value;
    /// A timeout of its own, longer than the agent's per-tool default (delegation).
    fn timeout(&self) -> Option<Duration> {
        None
    }
    fn call<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolResult>;
}

/// A tool whose arguments are one typed struct (or action-tagged enum); it implements [`Tool`]
/// through the blanket impl below.
///
/// Why: every tool did the same around its own work — parse the JSON arguments into its
/// `deny_unknown_fields` type, with an error that names the tool, and box the future — so a
/// tool now says only its name, description, schema and what it does with parsed arguments.
pub trait TypedTool: Send + Sync + std::fmt::Debug {
    type Args: DeserializeOwned + Send;
    const NAME: &'static str;
    const DESCRIPTION: &'static str;
    /// JSON Schema of [`Self::Args`].
    fn schema() -> Value;
    /// See [`Tool::timeout`].
    fn timeout(&self) -> Option<Duration> {
        None
    }
    fn run(&self, args: Self::Args, ctx: &ToolContext) -> impl Future<Output = ToolResult> + Send;
}

impl<T: TypedTool> Tool for T {
    fn name(&self) -> &'static str {
        T::NAME
    }
    fn description(&self) -> &'static str {
        T::DESCRIPTION
    }
    fn parameters(&self) -> Value {
        T::schema()
    }
    fn timeout(&self) -> Option<Duration> {
        TypedTool::timeout(self)
    }
    fn call<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move { self.run(parse_args(T::NAME, args)?, ctx).await })
    }
}

/// Parses a tool's arguments into its struct, with an error naming the tool.
fn parse_args<T: DeserializeOwned>(tool: &str, args: Value) -> Result<T, ToolError> {
    serde_json::from_value(args)
        .map_err(|e| ToolError(format!("invalid arguments for {tool}: {e}")))
}

/// The normalized success form.
pub fn success(output: impl Into<Value>) -> String {
    json!({"success": true, "output": output.into()}).to_string()
}

/// The normalized failure form.
pub fn failure(error: impl std::fmt::Display) -> String {
    json!({"success": false, "error": error.to_string()}).to_string()
}

/// The tools offered to the model, by name; `spawn` is accepted as an alias of
/// `delegate_to_sub_agent` (the seed's name for it), and `send_file_to_user` (the protocol's
/// name) of `send_file`, `list_directory` (the seed's) of `list_dir`: one tool under one name,
/// the other spelling still understood.
#[derive(Debug, Default, Clone)]
pub struct ToolRegistry {
    tools: Vec<Arc<dyn Tool>>,
}

impl ToolRegistry {
    pub fn add(&mut self, tool: Arc<dyn Tool>) {
        self.tools.retain(|t| t.name() != tool.name());
        self.tools.push(tool);
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        let name = match name {
            // The seed's names for the host's delegation and file-sending tools.
            "spawn" => "delegate_to_sub_agent",
            "send_file_to_user" => "send_file",
            "list_directory" => "list_dir",
            other => other,
        };
        self.tools.iter().find(|t| t.name() == name)
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.tools.iter().map(|t| t.name()).collect()
    }

    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools
            .iter()
            .map(|t| ToolSpec::function(t.name(), t.description(), t.parameters()))
            .collect()
    }
}
