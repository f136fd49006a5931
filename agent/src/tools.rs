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

use nexbot_core::memory::OutsideRead;
use nexbot_core::ChatRef;
use serde::de::DeserializeOwned;
use serde_json::Value;
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
    /// The skills `read_skill` returned in this turn, with the content they had: the turn's
    /// delegated tasks get their declared destinations (the host's `skill_grants`).
    pub skills_read: crate::skills::SkillsRead,
    /// Asks the chat's user before a risky step (`agent.confirm`); goes on at once when the
    /// step is not listed.
    pub confirm: Arc<dyn crate::confirm::Confirm>,
    /// What outside the chat's own words the turn has read so far (the `memory` tool's
    /// source of what it remembers).
    pub reads: TurnReads,
}

/// What outside the chat's own words a turn has read: every tool answer that
/// [`Tool::reads_outside`], and the outside entries of its memory it recalled. Shared by the
/// turn's tool calls (cheap to clone).
///
/// Why the daemon keeps it and not the model: the model decides what to remember, but where
/// the fact came from is what a prompt injection would lie about. A turn that read a page
/// remembers as from that page, whatever the model says.
#[derive(Debug, Clone, Default)]
pub struct TurnReads(Arc<std::sync::Mutex<Vec<OutsideRead>>>);

impl TurnReads {
    /// Notes that the turn read `origin` (once).
    pub fn note(&self, origin: OutsideRead) {
        let mut reads = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if !reads.contains(&origin) {
            reads.push(origin);
        }
    }

    /// Everything read so far, in the order first read.
    pub fn all(&self) -> Vec<OutsideRead> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
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
            turn: TurnOrigin::Message { user: None, message: 0 },
            task_tokens: Arc::default(),
            skills_read: Default::default(),
            confirm: Arc::new(crate::confirm::NoConfirm),
            reads: TurnReads::default(),
        }
    }
}

/// A chat nobody listens to (unit tests of tools and commands): every send fails `NotRunning`.
#[derive(Debug)]
pub struct NoChannel;

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

/// Fields a tool adds beside its output or error in the tool message (a delegation's
/// `report`, `dropped_tools`, `note`, `open_todos`).
type Extra = Vec<(&'static str, Value)>;

/// A tool's answer, typed until the tool message for the model is built ([`tool_message`]):
/// JSON is made once, there, and nothing reads it back to learn whether the tool failed.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    output: Value,
    extra: Extra,
    /// What outside the chat's words the answer carries, when the tool can say more than its
    /// name (a task's destinations, an MCP server, a file): see [`TurnReads`].
    origins: Vec<OutsideRead>,
    /// Pictures for the model (a browser's screenshot): shown in a message after the tool
    /// answers, to a provider that sees images.
    images: Vec<crate::llm::Image>,
}

impl ToolOutput {
    pub fn new(output: impl Into<Value>) -> Self {
        Self { output: output.into(), extra: Vec::new(), origins: Vec::new(), images: Vec::new() }
    }

    /// The output with pictures for the model.
    pub fn with_images(mut self, images: Vec<crate::llm::Image>) -> Self {
        self.images = images;
        self
    }

    /// Its pictures ([`Self::with_images`]).
    pub fn images(&self) -> &[crate::llm::Image] {
        &self.images
    }

    /// The output, read from `origin`.
    pub fn read_from(mut self, origin: OutsideRead) -> Self {
        self.origins.push(origin);
        self
    }

    /// Where the output was read from ([`Self::read_from`]).
    pub fn origins(&self) -> &[OutsideRead] {
        &self.origins
    }

    /// The output with `key` beside it in the tool message.
    pub fn with(mut self, key: &'static str, value: impl Into<Value>) -> Self {
        self.extra.push((key, value.into()));
        self
    }

    /// What the tool produced.
    pub fn output(&self) -> &Value {
        &self.output
    }

    /// The output as text: itself when it is a string, else its JSON.
    pub fn text(&self) -> String {
        self.to_string()
    }
}

/// The output as text (what [`ToolOutput::text`] gives).
impl std::fmt::Display for ToolOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.output {
            Value::String(text) => f.write_str(text),
            other => write!(f, "{other}"),
        }
    }
}

/// A tool failure, worded for the model (and, for a delegation, the fields beside it).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct ToolError {
    message: String,
    extra: Extra,
}

impl ToolError {
    pub fn new(message: impl Into<String>) -> Self {
        Self { message: message.into(), extra: Vec::new() }
    }

    /// The error with `key` beside it in the tool message.
    pub fn with(mut self, key: &'static str, value: impl Into<Value>) -> Self {
        self.extra.push((key, value.into()));
        self
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

pub type ToolResult = Result<ToolOutput, ToolError>;

pub trait Tool: Send + Sync + std::fmt::Debug {
    /// The name the model calls it by; an MCP server's tools are named at run time.
    fn name(&self) -> &str;
    fn description(&self) -> &str;
    /// JSON Schema of the arguments.
    fn parameters(&self) -> Value;
    /// A timeout of its own, longer than the agent's per-tool default (delegation).
    fn timeout(&self) -> Option<Duration> {
        None
    }
    /// Whether its answers carry words from outside the chat (a page, a file, a server, a
    /// subagent's answer): true unless the tool says otherwise, so a new tool is counted as
    /// outside until someone decides it is not. See [`TurnReads`].
    fn reads_outside(&self) -> bool {
        true
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
    /// See [`Tool::reads_outside`].
    const READS_OUTSIDE: bool = true;
    /// JSON Schema of [`Self::Args`].
    fn schema() -> Value;
    /// See [`Tool::timeout`].
    fn timeout(&self) -> Option<Duration> {
        None
    }
    fn run(&self, args: Self::Args, ctx: &ToolContext) -> impl Future<Output = ToolResult> + Send;
}

impl<T: TypedTool> Tool for T {
    fn name(&self) -> &str {
        T::NAME
    }
    fn description(&self) -> &str {
        T::DESCRIPTION
    }
    fn parameters(&self) -> Value {
        T::schema()
    }
    fn timeout(&self) -> Option<Duration> {
        TypedTool::timeout(self)
    }
    fn reads_outside(&self) -> bool {
        T::READS_OUTSIDE
    }
    fn call<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move { self.run(parse_args(T::NAME, args)?, ctx).await })
    }
}

/// Parses a tool's arguments into its struct, with an error naming the tool.
fn parse_args<T: DeserializeOwned>(tool: &str, args: Value) -> Result<T, ToolError> {
    serde_json::from_value(args)
        .map_err(|e| ToolError::new(format!("invalid arguments for {tool}: {e}")))
}

/// The normalized success form of `output`.
pub fn success(output: impl Into<Value>) -> ToolOutput {
    ToolOutput::new(output)
}

/// The tool message for the model, in the one normalized form: `{"success": true, "output":
/// …}` or `{"success": false, "error": "…"}`, with the answer's own fields beside them.
pub fn tool_message(result: &ToolResult) -> String {
    let mut object = serde_json::Map::new();
    let extra = match result {
        Ok(answer) => {
            object.insert("success".into(), Value::Bool(true));
            object.insert("output".into(), answer.output.clone());
            &answer.extra
        }
        Err(error) => {
            object.insert("success".into(), Value::Bool(false));
            object.insert("error".into(), Value::String(error.message.clone()));
            &error.extra
        }
    };
    for (key, value) in extra {
        object.insert((*key).to_owned(), value.clone());
    }
    Value::Object(object).to_string()
}

/// Tools known only at run time and per chat (an MCP server's, named `mcp__<server>__<tool>`):
/// a source is asked at the start of every turn which tools it offers that chat, so a server
/// the chat may not use is never named to its model, and a server's changed list reaches the
/// next turn.
pub trait ToolSource: Send + Sync + std::fmt::Debug {
    fn tools(&self, chat: &ChatRef, owner: bool) -> Vec<Arc<dyn Tool>>;

    /// Resolves when the source knows its first tool lists (or has given up waiting for
    /// them): a turn waits for it, so the daemon can open its doors while the source starts
    /// and the first turn is still offered its tools. At once by default.
    fn ready(&self) -> nexbot_core::BoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }
}

/// The tools offered to the model, by name; `spawn` is accepted as an alias of
/// `delegate_to_sub_agent` (the seed's name for it), and `send_file_to_user` (the protocol's
/// name) of `send_file`, `list_directory` (the seed's) of `list_dir`: one tool under one name,
/// the other spelling still understood.
#[derive(Debug, Default, Clone)]
pub struct ToolRegistry {
    tools: Vec<Arc<dyn Tool>>,
    sources: Vec<Arc<dyn ToolSource>>,
}

impl ToolRegistry {
    pub fn add(&mut self, tool: Arc<dyn Tool>) {
        self.tools.retain(|t| t.name() != tool.name());
        self.tools.push(tool);
    }

    /// Adds a source of run-time tools, asked by [`ToolRegistry::for_chat`].
    pub fn add_source(&mut self, source: Arc<dyn ToolSource>) {
        self.sources.push(source);
    }

    /// Resolves when every source is [`ToolSource::ready`].
    pub async fn sources_ready(&self) {
        for source in &self.sources {
            source.ready().await;
        }
    }

    /// The tools of one turn in `chat`: these, and what every source offers the chat. A
    /// source's tool never replaces one of these (a server cannot shadow `read_file`).
    pub fn for_chat(&self, chat: &ChatRef, owner: bool) -> ToolRegistry {
        let mut turn = ToolRegistry { tools: self.tools.clone(), sources: Vec::new() };
        for tool in self.sources.iter().flat_map(|source| source.tools(chat, owner)) {
            if turn.get(tool.name()).is_none() {
                turn.tools.push(tool);
            }
        }
        turn
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

    pub fn names(&self) -> Vec<&str> {
        self.tools.iter().map(|t| t.name()).collect()
    }

    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools
            .iter()
            .map(|t| ToolSpec::function(t.name(), t.description(), t.parameters()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The model reads one form; the answer's own fields sit beside `output` or `error`, and the
    /// loop learns a failure from the type, never from the text.
    #[test]
    fn the_tool_message_is_made_once_in_the_normalized_form() {
        let ok: ToolResult = Ok(success("done").with("note", "n"));
        let message: Value = serde_json::from_str(&tool_message(&ok)).unwrap();
        assert_eq!(message, json!({"success": true, "output": "done", "note": "n"}));
        let failed: ToolResult = Err(ToolError::new("no").with("report", Value::Null));
        let message: Value = serde_json::from_str(&tool_message(&failed)).unwrap();
        assert_eq!(message, json!({"success": false, "error": "no", "report": null}));
        // A tool whose output merely reads like a failure is still a success.
        let lookalike: ToolResult = Ok(success(r#"{"success": false}"#));
        assert!(lookalike.is_ok());
        assert_eq!(
            serde_json::from_str::<Value>(&tool_message(&lookalike)).unwrap()["success"],
            true
        );
    }
}
