//! MCP servers' tools as the agent's tools: [`McpTools`] offers a chat the tools of every
//! server it may use; each [`McpTool`] call asks the host's [`Connector`] for the chat's
//! session with the server and calls over it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nexbot_agent::tools::{success, Tool, ToolContext, ToolError, ToolResult, ToolSource};
use nexbot_core::text::data_envelope;
use nexbot_core::{BoxFuture, ChatRef};
use serde_json::{Map, Value};

use crate::answer::Answer;
use crate::catalog::{ServerTool, ToolKind};
use crate::config::ServerConfig;
use crate::session::{Progress, Session};
use crate::McpError;

/// Extra time the agent's own limit on a call gets beyond the call's, so the call's limit (which
/// tells the server) fires first.
const AGENT_LIMIT_GRACE: Duration = Duration::from_secs(5);

/// How a call ended, for the host's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallOutcome {
    Answered,
    /// The server said the call failed (`isError`).
    ToolError,
    /// The call did not complete (no session, closed, timeout, cancelled, protocol error).
    Failed,
}

/// The host's side: which session serves a chat's calls to a server.
pub trait Connector: Send + Sync + std::fmt::Debug {
    /// The tools of `server` that `chat` would get (known without starting anything: the
    /// chat's session's, else the last list any session of the server gave).
    fn catalog(&self, server: &str, chat: &ChatRef) -> Vec<ServerTool>;
    /// The chat's session with `server`, started when there is none.
    fn session<'a>(
        &'a self,
        server: &'a str,
        chat: &'a ChatRef,
    ) -> BoxFuture<'a, Result<Arc<Session>, McpError>>;
    /// A call of `chat`'s ended (counters per server; the instance was just used).
    fn record(&self, server: &str, chat: &ChatRef, outcome: CallOutcome, took: Duration);
    /// A call's progress notification.
    fn progress(&self, server: &str, chat: &ChatRef, tool: &str, progress: &Progress) {
        let _ = (server, chat, tool, progress);
    }
    /// A call of `chat`'s to `server` ended before its answer: it passed its limit, or the
    /// user stopped the turn. The server may still be running it (a page that loops; a
    /// navigation `notifications/cancelled` does not end). The host may end the instance so
    /// that the next call starts a fresh one; what it did, for the model.
    fn ended_early<'a>(
        &'a self,
        server: &'a str,
        chat: &'a ChatRef,
        how: EndedEarly,
    ) -> BoxFuture<'a, Option<String>> {
        let _ = (server, chat, how);
        Box::pin(std::future::ready(None))
    }
    /// Resolves when the servers that start with the daemon have given their first tool
    /// lists, or the connector stopped waiting for them ([`ToolSource::ready`]).
    fn ready(&self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }
}

/// How a call ended before its answer ([`Connector::ended_early`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndedEarly {
    /// It passed its limit.
    PastLimit,
    /// The user stopped the turn (`/stop`), or the turn's deadline passed.
    Stopped,
}

/// Makes one call of a server's tool over the chat's session: what a [`CallFilter`] is handed.
pub type PlainCall<'a> = dyn Fn(String, Map<String, Value>) -> BoxFuture<'a, Result<Answer, McpError>>
    + Send
    + Sync
    + 'a;

/// What the host does around a server's calls besides making them: for the browser, a secret
/// typed into a page only where its binding allows, and its value taken back out of every
/// answer. It makes the call with `call` (as many times as it needs, any tool of the server),
/// and may refuse it (an error the model reads).
pub trait CallFilter: Send + Sync + std::fmt::Debug {
    fn call<'a>(
        &'a self,
        chat: &'a ChatRef,
        tool: &'a str,
        arguments: Map<String, Value>,
        call: &'a PlainCall<'a>,
    ) -> BoxFuture<'a, Result<Answer, McpError>>;
}

/// The [`ToolSource`] of the configured servers.
#[derive(Debug)]
pub struct McpTools {
    servers: Vec<ServerConfig>,
    connector: Arc<dyn Connector>,
    filters: Vec<(String, Arc<dyn CallFilter>)>,
}

impl McpTools {
    pub fn new(servers: Vec<ServerConfig>, connector: Arc<dyn Connector>) -> Self {
        Self { servers, connector, filters: Vec::new() }
    }

    /// Every call of `server`'s tools goes through `filter`.
    pub fn with_filter(mut self, server: &str, filter: Arc<dyn CallFilter>) -> Self {
        self.filters.push((server.to_owned(), filter));
        self
    }
}

impl ToolSource for McpTools {
    fn ready(&self) -> BoxFuture<'_, ()> {
        self.connector.ready()
    }

    fn tools(&self, chat: &ChatRef, owner: bool) -> Vec<Arc<dyn Tool>> {
        let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
        for server in self.servers.iter().filter(|s| s.allows(chat, owner)) {
            for tool in self.connector.catalog(&server.name, chat) {
                let filter = self.filters.iter().find(|(s, _)| *s == server.name);
                tools.push(Arc::new(McpTool {
                    server: server.name.clone(),
                    tool,
                    limit: Duration::from_secs(server.call_timeout_secs),
                    connector: self.connector.clone(),
                    filter: filter.map(|(_, f)| f.clone()),
                }));
            }
        }
        tools
    }
}

/// One tool of one server.
#[derive(Debug)]
pub struct McpTool {
    server: String,
    tool: ServerTool,
    limit: Duration,
    connector: Arc<dyn Connector>,
    filter: Option<Arc<dyn CallFilter>>,
}

impl McpTool {
    async fn run(&self, args: Value, ctx: &ToolContext) -> (CallOutcome, ToolResult) {
        let failed = |message: String| (CallOutcome::Failed, Err(ToolError::new(message)));
        let Value::Object(arguments) = args else {
            return failed(format!("arguments for {} must be a JSON object", self.tool.function));
        };
        let session = match self.connector.session(&self.server, &ctx.chat).await {
            Ok(session) => session,
            Err(e) => return failed(format!("{}: {e}", self.tool.function)),
        };
        let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
        let forward = async {
            while let Some(progress) = receiver.recv().await {
                self.connector.progress(&self.server, &ctx.chat, &self.tool.tool, &progress);
            }
        };
        let answer = match self.tool.kind {
            ToolKind::Call => match &self.filter {
                Some(filter) => {
                    drop(sender);
                    let plain = |tool: String, args: Map<String, Value>| {
                        let session = session.clone();
                        let cancel = ctx.cancel.clone();
                        let limit = self.limit;
                        Box::pin(
                            async move { session.call(&tool, args, limit, &cancel, None).await },
                        ) as BoxFuture<'_, Result<Answer, McpError>>
                    };
                    filter.call(&ctx.chat, &self.tool.tool, arguments, &plain).await
                }
                None => {
                    let call = session.call(
                        &self.tool.tool,
                        arguments,
                        self.limit,
                        &ctx.cancel,
                        Some(sender),
                    );
                    tokio::join!(call, forward).0
                }
            },
            ToolKind::ReadResource => {
                let Some(Value::String(uri)) = arguments.get("uri") else {
                    return failed(format!("{} needs a `uri` string", self.tool.function));
                };
                session.read_resource(uri, self.limit, &ctx.cancel).await
            }
            ToolKind::GetPrompt => {
                let Some(Value::String(name)) = arguments.get("name") else {
                    return failed(format!("{} needs a `name` string", self.tool.function));
                };
                let prompt_args = match arguments.get("arguments") {
                    None | Some(Value::Null) => Map::new(),
                    Some(Value::Object(args)) => args.clone(),
                    Some(_) => {
                        return failed(format!(
                            "{}: `arguments` must be an object",
                            self.tool.function
                        ))
                    }
                };
                session.get_prompt(name, prompt_args, self.limit, &ctx.cancel).await
            }
        };
        let envelope = |text: &str| {
            data_envelope(
                "MCP_RESULT",
                &format!("server={} tool={}", self.server, self.tool.tool),
                &format!("MCP server `{}`, a program outside Nexbot", self.server),
                text,
            )
        };
        match answer {
            Ok(answer) if answer.is_error => (
                CallOutcome::ToolError,
                Err(ToolError::new(format!(
                    "{} failed; the server said:\n{}",
                    self.tool.function,
                    envelope(&answer.text)
                ))),
            ),
            Ok(answer) => {
                let output = success(envelope(&answer.text));
                let output = match answer.images.len() {
                    0 => output,
                    n => output
                        .with("images", format!("{n} picture(s), shown after the tool answers"))
                        .with_images(answer.images),
                };
                let output = match answer.cut {
                    Some(bytes) => output
                        .with("cut", format!("the result was {bytes} bytes; the start is shown")),
                    None => output,
                };
                (CallOutcome::Answered, Ok(output))
            }
            Err(e @ (McpError::Timeout { .. } | McpError::Cancelled)) => {
                let how = match e {
                    McpError::Cancelled => EndedEarly::Stopped,
                    _ => EndedEarly::PastLimit,
                };
                let after = self.connector.ended_early(&self.server, &ctx.chat, how).await;
                let after = after.map(|what| format!("; {what}")).unwrap_or_default();
                failed(format!("{}: {e}{after}", self.tool.function))
            }
            Err(e) => failed(format!("{}: {e}", self.tool.function)),
        }
    }
}

impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.tool.function
    }
    fn description(&self) -> &str {
        &self.tool.description
    }
    fn parameters(&self) -> Value {
        self.tool.schema.clone()
    }
    fn timeout(&self) -> Option<Duration> {
        Some(self.limit + AGENT_LIMIT_GRACE)
    }
    fn call<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move {
            let started = Instant::now();
            let (outcome, result) = self.run(args, ctx).await;
            self.connector.record(&self.server, &ctx.chat, outcome, started.elapsed());
            let origin = nexbot_core::memory::OutsideRead::tool(self.name())
                .with_detail(format!("MCP server {}", self.server));
            result.map(|out| out.read_from(origin))
        })
    }
}
