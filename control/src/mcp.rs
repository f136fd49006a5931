//! The MCP servers' endpoints (`nexbot-ctl mcp ls|tools|restart|logs`): bodies and paths. All
//! of them are new; no older request changed.

use serde::{Deserialize, Serialize};

/// The MCP servers' paths.
pub mod mcp_paths {
    /// `GET`: every configured server with its instances ([`super::McpServerList`]).
    pub const MCP: &str = "/v1/mcp";
    /// `/v1/mcp/{server}/tools` (`GET`, [`super::McpToolList`]), `…/logs?n=N` (`GET`,
    /// [`crate::LogLines`]), `…/restart` (`POST`, [`crate::Done`]).
    pub fn server(server: &str, action: &str) -> String {
        format!("/v1/mcp/{server}/{action}")
    }
}

/// `GET /v1/mcp`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpServerList {
    pub servers: Vec<McpServer>,
}

/// One `[[mcp.servers]]` entry and its instances.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpServer {
    pub name: String,
    /// `chat` (a container per chat that uses it) or `shared` (one for every chat).
    pub scope: String,
    /// The image its container runs (empty for a remote server).
    pub image: String,
    /// The program and its arguments, run as the container's main process (empty for a remote
    /// server).
    pub command: Vec<String>,
    /// A remote server's URL (Streamable HTTP, through the egress proxy). Additive: absent for a
    /// stdio server and from an older daemon.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Tools it offers, as last listed (0 before any instance answered).
    pub tools: usize,
    /// Its instances; empty while none was started (a chat-scoped server's first call starts
    /// one).
    pub instances: Vec<McpInstance>,
}

/// One instance of a server: its container and session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpInstance {
    /// `shared`, `probe` or the chat it serves (`telegram:<id>`, `console:<name>`).
    pub serves: String,
    /// `running`, `starting`, `failed` (waiting before it is started again) or `stopped`.
    pub state: String,
    /// The container's name while it runs.
    pub container: Option<String>,
    /// Tools its session lists.
    pub tools: usize,
    pub restarts: u32,
    pub last_error: Option<String>,
    pub up_secs: Option<u64>,
    /// Seconds since its last call (or start).
    pub idle_secs: Option<u64>,
}

/// `GET /v1/mcp/{server}/tools`: what the model is offered, and what was left out and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpToolList {
    pub server: String,
    pub tools: Vec<McpTool>,
    pub skipped: Vec<McpSkippedTool>,
}

/// A tool the model is offered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpTool {
    /// The model's name for it: `mcp__<server>__<tool>`.
    pub function: String,
    /// The server's name for it.
    pub tool: String,
    /// What the model reads (the server's words, cut and marked as such).
    pub description: String,
}

/// A tool the server listed that is not offered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpSkippedTool {
    pub tool: String,
    pub why: String,
}
