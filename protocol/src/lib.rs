//! The host ⇄ subagent wire contract (`docs/protocol.md`, v1.0) as types and functions.
//!
//! Both sides of the attached-stdio link depend on this crate so that the contract lives in
//! exactly one place: the host builds [`Request`]s and reads [`Response`]s, the subagent does
//! the reverse, and both frame them with [`JsonLinesCodec`].
//!
//! - [`version`]: which protocol versions are accepted, which are deprecated.
//! - [`request`] / [`response`]: the messages, with the spec's exact field names.
//! - [`report`]: the partial-results report attached to `timeout` and failed tasks.
//! - [`secrets`]: per-task secrets — never printed, zeroized on drop, validated per the spec —
//!   and the redactor that scrubs their values out of text; they are `nexbot-redact`'s, named
//!   here because a request carries them.
//! - [`codec`]: JSON lines with a per-line size limit whose violation is recoverable.
//! - [`mcp`]: MCP tools granted to a task, called through the host (`mcp_call` /
//!   `mcp_result`).
//! - [`files`]: files carried into a task's scratch and back, in chunks, with their caps.
//! - [`tools`]: the names of a subagent's tools, the one list the host and the subagent read.

pub mod codec;
pub mod files;
pub mod mcp;
pub mod report;
pub mod request;
pub mod response;
pub mod tools;
pub mod version;

pub use codec::{JsonLinesCodec, LineError, MAX_REQUEST_LINE};
pub use files::{
    check_file_name, check_next_file, Assembly, TaskFile, FILE_CHUNK_BYTES, MAX_FILES,
    MAX_FILES_BYTES, MAX_FILE_BYTES,
};
pub use mcp::{McpAnswer, McpCall, McpCalls, McpToolSpec, MAX_MCP_TOOL_NAME};
pub use nexbot_redact as secrets;
pub use report::{RecentMessage, Report, ReportStatus, Todo};
pub use request::{
    block_limit, proxy_placeholder, search_budget, ProxySecret, Request, RequestError, RequestType,
    SearchBackend, DEFAULT_MAX_BLOCKED_COMMANDS, DEFAULT_SEARCH_BUDGET, DIRECT_TOOLS,
    MAX_SEARCH_BUDGET, PROXY_PLACEHOLDER,
};
pub use response::{
    truncate_result, Capabilities, ProgressEvent, Response, ResponseBody, Scrub, Usage,
    MAX_RESULT_BYTES,
};
pub use secrets::{Redactor, SecretMap, SecretsError, StreamRedactor};
pub use tools::{
    canonical_tool, closest_tool, is_subagent_tool, unknown_tools, BLOCKED_TOOLS, PLANNING_TOOL,
    SUBAGENT_TOOLS, TOOL_ALIASES,
};
pub use version::{negotiate, VersionError, VersionStatus, PROTOCOL_VERSION};
