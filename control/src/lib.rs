//! The control plane's shared vocabulary: the request and response types of the daemon's
//! control API (HTTP + JSON over `<data dir>/nexbot.sock`), and [`Client`], the small client
//! `nexbot-ctl` uses, and the human form of their numbers ([`human`]) that both `nexbot-ctl`
//! and the daemon's dashboard show.
//!
//! Why a crate of its own: the daemon's server and `nexbot-ctl` must agree on every field, and
//! `nexbot-ctl` must stay a small, fast binary that links neither the daemon, nor Docker's
//! client, nor axum. Types mirror the daemon's own (the pool's snapshot, task records, the
//! Telegram ledger) instead of reusing them, so this crate depends on nothing of Nexbot but
//! `nexbot-core`, the vocabulary every part shares (no daemon code).

pub mod approvals;
mod client;
pub mod cron;
pub mod human;
pub mod mcp;
pub mod memory;
pub mod secrets;
pub mod types;

pub use approvals::{
    approvals_paths, ApprovalAnswer, ApprovalList, EgressRule, EgressRuleList, EgressRuleRemove,
    PendingApproval,
};
pub use client::{Client, ClientError};
pub use cron::{cron_paths, CronAdd, CronJob, CronJobList, CronRun, CronRunList};
pub use mcp::{
    mcp_paths, McpInstance, McpServer, McpServerList, McpSkippedTool, McpTool, McpToolList,
};
pub use memory::{memory_paths, MemoryEntry, MemoryForget, MemoryList};
pub use secrets::{
    secrets_paths, SecretEntry, SecretList, SecretRemove, SecretSet, SecretValue, OPERATOR_SCOPE,
};
pub use types::*;

/// The socket's file name in the data directory.
pub const SOCKET_FILE: &str = "nexbot.sock";
/// The variable that names the socket (`nexbot-ctl --socket` wins over it).
pub const SOCKET_ENV: &str = "NEXBOT_SOCKET";

/// Percent-encodes `s` for a path segment or a query value: everything but the unreserved
/// characters and `:` (which chat refs like `telegram:42` contain, and which both allow).
/// `nexbot-ctl`'s requests and the dashboard's links both use it.
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for byte in s.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~' | b':') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}
