//! `nexbot-mcp` has one job: the main agent's client of MCP servers. A server's tools become
//! the agent's tools, named `mcp__<server>__<tool>`, and a call goes over that server's own
//! session, never a process on the host.
//!
//! - [`config`]: `[[mcp.servers]]` (how a server runs, its scope, which chats may use it).
//! - [`remote`]: a remote server's session, Streamable HTTP through the egress proxy's door.
//! - [`session`]: one session with one server over any byte stream (rmcp, the official SDK):
//!   `initialize`, the tool list (paginated, re-read on `list_changed`), calls with progress,
//!   cancellation (`/stop`) and a deadline, each telling the server when it ends early.
//! - [`stdio`]: a stdio server's transport, each message cut as it is read (never held whole).
//! - [`door`]: a remote server's HTTP client (through the egress door), each message cut as it
//!   is read, like stdio's (the one cutter of `cut`).
//! - [`catalog`]: what a server says about its tools is untrusted: names must fit, long or
//!   hostile descriptions are cut and marked as the server's words, schemas are checked.
//! - [`answer`]: a result as text (blocks in order, no bytes of images, cut when huge).
//! - [`tools`]: the [`nexbot_agent::tools::ToolSource`] offering a chat the tools of the
//!   servers it may use, through a [`tools::Connector`] the host implements (which container
//!   serves which chat: that is the host's, and Docker's, business, not this crate's).
//!
//! A result reaches the model inside the same data-not-instructions envelope as a sub-agent's
//! (`nexbot_core::text::data_envelope`).

pub mod answer;
pub mod catalog;
pub mod config;
mod cut;
pub mod door;
pub mod remote;
pub mod session;
pub mod stdio;
pub mod tools;

pub use config::{McpConfig, ServerConfig, ServerLimits, ServerScope};
pub use session::{Progress, Session};
pub use tools::{CallFilter, Connector, EndedEarly, McpTools, PlainCall};

/// Why an MCP operation failed, worded for the model and the operator.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum McpError {
    /// The server did not start or did not complete `initialize`.
    #[error("the MCP server did not start: {0}")]
    Start(String),
    /// The session is gone (the server exited or was stopped).
    #[error("the MCP server's connection closed: {0}")]
    Closed(String),
    /// The server answered with a protocol error.
    #[error("the MCP server answered with an error: {0}")]
    Protocol(String),
    #[error("the call passed its limit of {secs} s and was cancelled")]
    Timeout { secs: u64 },
    #[error("the call was stopped")]
    Cancelled,
    /// The chat may not use the server, or there is no such server.
    #[error("{0}")]
    Unavailable(String),
}
