//! One task: what it was asked, how it is stopped, and how it ends in exactly one final
//! response.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use nexbot_protocol::{Redactor, SecretMap};
use tokio_util::sync::CancellationToken;

use crate::llm::LlmSettings;

/// Soft limit when the request names none (or 0).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// The longest soft limit honoured; a container is recycled long before.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);

/// The soft limit for a request's `timeout` field.
pub fn soft_timeout(requested_secs: Option<u64>) -> Duration {
    match requested_secs {
        None | Some(0) => DEFAULT_TIMEOUT,
        Some(secs) => Duration::from_secs(secs).min(MAX_TIMEOUT),
    }
}

/// Everything a task needs, taken from its `execute` request.
#[derive(Debug)]
pub struct TaskSpec {
    pub id: String,
    pub correlation_id: Option<String>,
    pub task: String,
    pub context: Option<String>,
    pub tools: Vec<&'static str>,
    /// Names the request's `tools` granted that this program does not offer; the final
    /// answer reports them.
    pub dropped_tools: Vec<String>,
    /// The one granted tool the task runs directly, without the agent loop
    /// (`execute.run_tool`: `use_cli`).
    pub run_tool: Option<&'static str>,
    pub timeout: Duration,
    /// Dropped (so zeroized) when the task ends, whatever its outcome.
    pub secrets: SecretMap,
    /// Proxy-mode secrets (names and hosts only; the egress proxy holds the values).
    pub proxy_secrets: Vec<nexbot_protocol::ProxySecret>,
    /// Where `search_web` queries.
    pub search_backend: Option<nexbot_protocol::SearchBackend>,
    pub llm: LlmSettings,
    /// Commands the blocked-pattern screen may refuse before the task is ended
    /// (`execute.max_blocked_commands`, default 3).
    pub max_blocked_commands: u32,
    /// Search and fetch calls the task may make (`execute.search_budget`, default 20).
    pub search_budget: u32,
    /// Scrubs the task's secrets and LLM credentials from everything it emits.
    pub redactor: Arc<Redactor>,
    /// The MCP tools granted (`execute.mcp_tools`), called through the host.
    pub mcp_tools: Vec<nexbot_protocol::McpToolSpec>,
    /// Its MCP calls waiting for the host's answers (the stdin reader delivers them).
    pub mcp: Arc<crate::mcp::Waiting>,
    /// The files the host put for it (`put_file`), in the scratch folder: names and sizes.
    pub files_in: Vec<(String, u64)>,
    /// Whether the host takes files back (`execute.return_files`): the model gets
    /// `return_file`.
    pub return_files: bool,
    /// Skills' content hashes the operator allowed since the container started
    /// (`execute.skills_allow`), for `read_skill`.
    pub skills_allow: Vec<String>,
}

/// Stops a running task; the reason ends up in its final response.
#[derive(Debug, Clone, Default)]
pub struct Cancel {
    token: CancellationToken,
    reason: Arc<OnceLock<String>>,
}

impl Cancel {
    /// Asks the task to stop. The first reason given wins.
    pub fn cancel(&self, reason: impl Into<String>) {
        let _ = self.reason.set(reason.into());
        self.token.cancel();
    }

    /// The token behind it, for calls that take one.
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// Resolves once the task was asked to stop.
    pub async fn cancelled(&self) {
        self.token.cancelled().await
    }

    /// The text for the final response of a cancelled task.
    pub fn reason(&self) -> String {
        self.reason.get().cloned().unwrap_or_else(|| "task cancelled".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn soft_timeout_has_a_default_and_a_ceiling() {
        assert_eq!(soft_timeout(None), DEFAULT_TIMEOUT);
        assert_eq!(soft_timeout(Some(0)), DEFAULT_TIMEOUT);
        assert_eq!(soft_timeout(Some(7)), Duration::from_secs(7));
        assert_eq!(soft_timeout(Some(u64::MAX)), MAX_TIMEOUT);
    }
}
