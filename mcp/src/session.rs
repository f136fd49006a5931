//! One MCP session with one server, over whatever transport the caller gives (the host's: a
//! service container's attached stdio): `initialize`, the tool list (every page, kept fresh on
//! `notifications/tools/list_changed`), calls with progress, cancellation and a deadline.
//!
//! Why calls are not `Peer::call_tool`: a call must end when the turn is stopped or its limit
//! passes, and the server must be told (`notifications/cancelled`), and its progress must
//! reach the caller by the call's own progress token. So a call is a cancellable request whose
//! answer is awaited beside the turn's token and the deadline.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotificationParam, ClientCapabilities,
    ClientConfig, ClientRequest, Implementation, ProgressNotificationParam, ProgressToken,
    ServerResult,
};
use rmcp::service::{NotificationContext, Peer, PeerRequestOptions, RunningService};
use rmcp::transport::IntoTransport;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Map, Value};
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;

use nexbot_core::text::{clip, visible_controls};

use crate::answer::{self, Answer};
use crate::catalog::{self, PromptRef, ResourceRef, ServerTool, Skipped};
use crate::McpError;

/// Characters of a server's error message kept (the model reads it; a server may say a lot).
const MAX_ERROR_CHARS: usize = 2000;

/// A progress notification of a call.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    pub progress: f64,
    pub total: Option<f64>,
    pub message: Option<String>,
}

/// What a session shares with its handler (the notifications' side).
#[derive(Debug, Default)]
struct Shared {
    server: String,
    tools: RwLock<(Vec<ServerTool>, Vec<Skipped>)>,
    progress: Mutex<HashMap<ProgressToken, mpsc::UnboundedSender<Progress>>>,
    list_changed: Notify,
    closed: CancellationToken,
    /// Why the session ended, when it has.
    reason: Mutex<Option<String>>,
}

impl Shared {
    fn progress(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<ProgressToken, mpsc::UnboundedSender<Progress>>> {
        self.progress.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The client side's handler: asks nothing of the server beyond tools (no sampling, no roots,
/// no elicitation: a server cannot reach the model or the user through the client).
#[derive(Debug, Clone)]
struct Handler(Arc<Shared>);

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("nexbot", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        if let Some(sender) = self.0.progress().get(&params.progress_token) {
            let _ = sender.send(Progress {
                progress: params.progress,
                total: params.total,
                message: params.message.map(|m| visible_controls(&m).into_owned()),
            });
        }
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.0.list_changed.notify_one();
    }
}

/// A live session with one server.
#[derive(Debug)]
pub struct Session {
    shared: Arc<Shared>,
    peer: Peer<RoleClient>,
    server_info: Option<String>,
    stop: CancellationToken,
    /// How often a waiting request checks that the server still answers (`None`: never; see
    /// [`Session::keep_alive`]).
    heartbeat: std::sync::OnceLock<Duration>,
}

impl Session {
    /// Initializes a session over `transport` within `timeout` and reads the server's tools.
    pub async fn connect<T, E, A>(
        server: &str,
        transport: T,
        timeout: Duration,
    ) -> Result<Arc<Session>, McpError>
    where
        T: IntoTransport<RoleClient, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let shared = Arc::new(Shared { server: server.to_owned(), ..Shared::default() });
        let start = async {
            let running = Handler(shared.clone())
                .serve(transport)
                .await
                .map_err(|e| McpError::Start(format!("initialize failed: {e}")))?;
            let tools = list_tools(running.peer(), server).await?;
            Ok::<_, McpError>((running, tools))
        };
        let (running, tools) = tokio::time::timeout(timeout, start).await.map_err(|_| {
            McpError::Start(format!("no answer to initialize and tools/list within {timeout:?}"))
        })??;
        *shared.tools.write().unwrap_or_else(|e| e.into_inner()) = tools;
        let server_info = running.peer_info().and_then(|info| {
            let implementation = info.server_info.as_ref()?;
            let said = format!("{} {}", implementation.name, implementation.version);
            Some(visible_controls(&clip(&said, 200)).into_owned())
        });
        let session = Arc::new(Session {
            peer: running.peer().clone(),
            shared: shared.clone(),
            server_info,
            stop: CancellationToken::new(),
            heartbeat: std::sync::OnceLock::new(),
        });
        tokio::spawn(run(running, shared, session.stop.clone()));
        Ok(session)
    }

    /// The server's tools the model may see.
    pub fn tools(&self) -> Vec<ServerTool> {
        self.shared.tools.read().unwrap_or_else(|e| e.into_inner()).0.clone()
    }

    /// The tools it listed that are not offered, with why.
    pub fn skipped(&self) -> Vec<Skipped> {
        self.shared.tools.read().unwrap_or_else(|e| e.into_inner()).1.clone()
    }

    /// `name version` of the server, as it said in `initialize`.
    pub fn server_info(&self) -> Option<&str> {
        self.server_info.as_deref()
    }

    pub fn is_closed(&self) -> bool {
        self.shared.closed.is_cancelled()
    }

    /// Waits until the session ends, then says why.
    pub async fn closed(&self) -> String {
        self.shared.closed.cancelled().await;
        self.close_reason().unwrap_or_else(|| "the session ended".into())
    }

    pub fn close_reason(&self) -> Option<String> {
        self.shared.reason.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Ends the session (the transport closes; the server sees its input end).
    pub fn close(&self) {
        self.stop.cancel();
    }

    /// While a request waits, pings the server every `every`: one that does not answer within
    /// three of them ends the session, and its requests fail at once with why. For a server
    /// whose death nothing else reports (a remote one: its transport resumes a dropped stream
    /// and leaves the request waiting).
    pub fn keep_alive(&self, every: Duration) {
        let _ = self.heartbeat.set(every);
    }

    /// Ends the session for `reason` (kept as the reason it ended).
    fn close_for(&self, reason: String) {
        self.shared.reason.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(reason);
        self.close();
    }

    /// Resolves when the server stops answering pings (only with [`Session::keep_alive`]);
    /// what failed.
    async fn unresponsive(&self) -> String {
        let Some(every) = self.heartbeat.get().copied() else {
            return std::future::pending().await;
        };
        loop {
            tokio::time::sleep(every).await;
            let ping = self.peer.send_request(ClientRequest::PingRequest(Default::default()));
            match tokio::time::timeout(every * 3, ping).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return format!("the server stopped answering pings ({e})"),
                Err(_) => {
                    return format!("the server did not answer a ping within {:?}", every * 3)
                }
            }
        }
    }

    /// Calls `tool` (the server's name for it) with `arguments`. Ends early, telling the server
    /// (`notifications/cancelled`), when `cancel` fires or `limit` passes; `progress` gets the
    /// call's progress notifications.
    pub async fn call(
        &self,
        tool: &str,
        arguments: Map<String, Value>,
        limit: Duration,
        cancel: &CancellationToken,
        progress: Option<mpsc::UnboundedSender<Progress>>,
    ) -> Result<Answer, McpError> {
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        match self.send(request, limit, cancel, progress).await? {
            ServerResult::CallToolResult(result) => Ok(answer::render(&result)),
            _ => Err(another_kind("tools/call")),
        }
    }

    /// Reads the resource at `uri`, ending early (telling the server) as [`Session::call`]
    /// does.
    pub async fn read_resource(
        &self,
        uri: &str,
        limit: Duration,
        cancel: &CancellationToken,
    ) -> Result<Answer, McpError> {
        let params = rmcp::model::ReadResourceRequestParams::new(uri);
        let request =
            ClientRequest::ReadResourceRequest(rmcp::model::ReadResourceRequest::new(params));
        match self.send(request, limit, cancel, None).await? {
            ServerResult::ReadResourceResult(read) => Ok(answer::render_resource(&read.contents)),
            _ => Err(another_kind("resources/read")),
        }
    }

    /// Gets prompt `name` made with `arguments`, ending early (telling the server) as
    /// [`Session::call`] does.
    pub async fn get_prompt(
        &self,
        name: &str,
        arguments: Map<String, Value>,
        limit: Duration,
        cancel: &CancellationToken,
    ) -> Result<Answer, McpError> {
        let params = rmcp::model::GetPromptRequestParams::new(name).with_arguments(arguments);
        let request = ClientRequest::GetPromptRequest(rmcp::model::GetPromptRequest::new(params));
        match self.send(request, limit, cancel, None).await? {
            ServerResult::GetPromptResult(prompt) => Ok(answer::render_prompt(&prompt)),
            _ => Err(another_kind("prompts/get")),
        }
    }

    /// Sends `request` as a cancellable request and awaits its answer beside `cancel`, `limit`
    /// and the session's end; `progress` gets the notifications of its progress token.
    async fn send(
        &self,
        request: ClientRequest,
        limit: Duration,
        cancel: &CancellationToken,
        progress: Option<mpsc::UnboundedSender<Progress>>,
    ) -> Result<ServerResult, McpError> {
        if let Some(reason) = self.close_reason() {
            return Err(McpError::Closed(reason));
        }
        let handle = self
            .peer
            .send_cancellable_request(request, PeerRequestOptions::no_options())
            .await
            .map_err(|e| self.failed(e))?;
        let token = handle.progress_token.clone();
        if let Some(sender) = progress {
            self.shared.progress().insert(token.clone(), sender);
        }
        let id = handle.id.clone();
        let outcome = tokio::select! {
            answer = handle.rx => Some(answer),
            _ = cancel.cancelled() => None,
            _ = tokio::time::sleep(limit) => None,
            _ = self.shared.closed.cancelled() => Some(Ok(Err(rmcp::ServiceError::TransportClosed))),
            why = self.unresponsive() => {
                tracing::warn!(server = %self.shared.server, "MCP session ended: {why}");
                self.close_for(why);
                Some(Ok(Err(rmcp::ServiceError::TransportClosed)))
            }
        };
        self.shared.progress().remove(&token);
        match outcome {
            Some(Ok(Ok(result))) => Ok(result),
            Some(Ok(Err(e))) => Err(self.failed(e)),
            Some(Err(_)) => Err(self.failed(rmcp::ServiceError::TransportClosed)),
            None => Err(self.ended_early(id, cancel, limit).await),
        }
    }

    /// Tells the server a request ended early (stopped, or past its limit), and says which.
    async fn ended_early(
        &self,
        id: rmcp::model::RequestId,
        cancel: &CancellationToken,
        limit: Duration,
    ) -> McpError {
        let (error, reason) = if cancel.is_cancelled() {
            (McpError::Cancelled, "stopped by the user")
        } else {
            (McpError::Timeout { secs: limit.as_secs() }, "the call's time limit passed")
        };
        let note = CancelledNotificationParam::new(Some(id), Some(reason.to_owned()));
        let _ = self.peer.notify_cancelled(note).await;
        error
    }

    /// What `error` means for the caller; a server's own words (its error message) with their
    /// control characters shown and cut, as they reach the model and the log.
    fn failed(&self, error: rmcp::ServiceError) -> McpError {
        let said = |text: &str| visible_controls(&clip(text, MAX_ERROR_CHARS)).into_owned();
        match error {
            rmcp::ServiceError::McpError(e) => McpError::Protocol(said(&e.message)),
            rmcp::ServiceError::TransportClosed | rmcp::ServiceError::TransportSend(_) => {
                McpError::Closed(
                    self.close_reason().unwrap_or_else(|| "the server's connection closed".into()),
                )
            }
            other => McpError::Protocol(said(&other.to_string())),
        }
    }
}

fn another_kind(method: &str) -> McpError {
    McpError::Protocol(format!("the server answered {method} with another kind of result"))
}

/// Every page of the server's tools, checked, and the tool that reads its resources when it
/// lists any (a server without the resources capability is not asked).
async fn list_tools(
    peer: &Peer<RoleClient>,
    server: &str,
) -> Result<(Vec<ServerTool>, Vec<Skipped>), McpError> {
    let listed = peer
        .list_all_tools()
        .await
        .map_err(|e| McpError::Protocol(format!("tools/list failed: {e}")))?;
    let (mut offered, skipped) = catalog::check(server, &listed);
    let has_resources = peer.peer_info().is_some_and(|info| info.capabilities.resources.is_some());
    if has_resources {
        match peer.list_all_resources().await {
            Ok(resources) => {
                let resources: Vec<ResourceRef> = resources
                    .into_iter()
                    .map(|r| ResourceRef { uri: r.uri.clone(), name: r.name.clone() })
                    .collect();
                offered.extend(catalog::read_resource_tool(server, &resources, &offered));
            }
            Err(e) => tracing::warn!(server, "resources/list failed: {e}"),
        }
    }
    let has_prompts = peer.peer_info().is_some_and(|info| info.capabilities.prompts.is_some());
    if has_prompts {
        match peer.list_all_prompts().await {
            Ok(prompts) => {
                let prompts: Vec<PromptRef> = prompts
                    .into_iter()
                    .map(|p| PromptRef {
                        arguments: p
                            .arguments
                            .unwrap_or_default()
                            .into_iter()
                            .map(|a| {
                                let mark = if a.required == Some(true) { "*" } else { "" };
                                format!("{}{mark}", a.name)
                            })
                            .collect(),
                        name: p.name,
                    })
                    .collect();
                offered.extend(catalog::get_prompt_tool(server, &prompts, &offered));
            }
            Err(e) => tracing::warn!(server, "prompts/list failed: {e}"),
        }
    }
    Ok((offered, skipped))
}

/// Runs the session until it ends or is closed: re-reads the tool list on every
/// `list_changed`, and records why it ended.
async fn run(
    running: RunningService<RoleClient, Handler>,
    shared: Arc<Shared>,
    stop: CancellationToken,
) {
    let peer = running.peer().clone();
    let quit = running.cancellation_token();
    let waiting = running.waiting();
    tokio::pin!(waiting);
    let reason = loop {
        tokio::select! {
            ended = &mut waiting => break match ended {
                Ok(rmcp::service::QuitReason::Closed) => {
                    "the server's output ended (it exited or was stopped)".to_owned()
                }
                Ok(other) => format!("the session ended ({other:?})"),
                Err(e) => format!("the session's task failed: {e}"),
            },
            _ = stop.cancelled() => {
                quit.cancel();
                let _ = waiting.await;
                break "the session was closed".to_owned();
            }
            _ = shared.list_changed.notified() => match list_tools(&peer, &shared.server).await {
                Ok(tools) => {
                    tracing::info!(server = %shared.server, tools = tools.0.len(), "MCP tool list changed");
                    *shared.tools.write().unwrap_or_else(|e| e.into_inner()) = tools;
                }
                Err(e) => tracing::warn!(server = %shared.server, "re-reading the tool list failed: {e}"),
            },
        }
    };
    // A reason given when it was closed (`Session::close_for`) stays.
    shared.reason.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(reason);
    shared.progress().clear();
    shared.closed.cancel();
}
