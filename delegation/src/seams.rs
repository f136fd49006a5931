//! The seams between the main agent and whatever runs subagent tasks: who runs them
//! ([`SubagentRunner`]) and how each one reaches the LLM ([`LlmAccess`]).
//!
//! Why traits: delegation logic (task records, secrets by name, cancellation, turning a
//! response or report into text for the model) must not care how containers are supervised
//! or how LLM access is granted. The daemon plugs in the warm Docker pool (`nexbot-docker`)
//! and the egress relay's per-task tokens (the host's `pool_runner.rs` and `sandbox.rs`).

use nexbot_core::ChatRef;
use std::sync::Arc;

use nexbot_protocol::{McpCalls, Request, Response, TaskFile};
use secrecy::SecretString;
use thiserror::Error;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub use nexbot_core::BoxFuture;

/// A subagent's final answer and, when known, the container that produced it.
#[derive(Debug, Clone)]
pub struct SubagentOutcome {
    pub response: Response,
    pub container: Option<String>,
    /// The files the task returned (`execute.return_files`), whole and named in its answer.
    pub files: Vec<TaskFile>,
}

/// Why a task could not be run or finished (pool busy, container died, …).
#[derive(Debug, Error)]
#[error("{message}")]
pub struct SubagentError {
    pub message: String,
    /// The operator killed the task's container (`nexbot-ctl subagents kill`): the receipt
    /// and the record say so, not "error".
    pub killed_by_operator: bool,
    /// The container the task ran in, when it got one before it failed (its record names it).
    pub container: Option<String>,
}

impl SubagentError {
    pub fn new(message: impl Into<String>) -> Self {
        Self { message: message.into(), killed_by_operator: false, container: None }
    }
}

/// Runs one `execute` request of `chat` to completion, in that chat's room: on a container
/// that has run no other chat's task, ever. When `cancel` fires, the runner must send the
/// subagent a `cancel` for the task and return what it answered. The task's `progress`
/// responses go to `progress` as they arrive (dropped rather than waited for when it is
/// full: progress is for showing, never a reason to slow a task). Its `mcp_call`s are
/// answered by `mcp` (the MCP tools the delegation granted; `None`: none), each answer
/// written back to the task as an `mcp_result` while it runs. `files` go into the task's
/// scratch folder before it starts (`docs/protocol-files.md#files`).
pub trait SubagentRunner: Send + Sync + std::fmt::Debug {
    fn execute(
        &self,
        chat: &ChatRef,
        request: Request,
        cancel: CancellationToken,
        progress: Option<mpsc::Sender<Response>>,
        mcp: Option<Arc<dyn McpCalls>>,
        files: Vec<TaskFile>,
    ) -> BoxFuture<'_, Result<SubagentOutcome, SubagentError>>;
}

/// How one task's subagent reaches the LLM; the delegation tool copies it into the request.
pub enum TaskLlm {
    /// Through the host's LLM relay with a per-task token (`llm_base_url` + `llm_token`).
    Relay { base_url: String, token: SecretString },
    /// Straight to the provider (through the egress proxy) with the real key in
    /// `llm_api_key`: the seed's field, only with the explicit opt-in
    /// `egress.relay.send_provider_key_to_subagents`. `None` for a provider without a key.
    ProviderKey { base_url: String, key: Option<SecretString> },
}

impl std::fmt::Debug for TaskLlm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Relay { base_url, .. } => write!(f, "TaskLlm::Relay({base_url})"),
            Self::ProviderKey { base_url, .. } => write!(f, "TaskLlm::ProviderKey({base_url})"),
        }
    }
}

/// What ending a task's access hands back.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AccessEnd {
    /// The LLM tokens the relay charged the task, when it went through the relay.
    pub relay_tokens: Option<u64>,
    /// What those calls cost by the answering providers' prices.
    pub relay_cost: Option<nexbot_egress::TaskCost>,
    /// What the task did through the egress (destinations allowed and denied, bytes), for
    /// its receipt and task record: records never depend on reading the audit log back.
    pub egress: Option<nexbot_egress::TaskSummary>,
}

/// A secret a task uses through the egress: proxy mode (bound `hosts`, the proxy fills the
/// value in for them) or, with no hosts, a stdin-mode value the relay only scans for.
pub struct TaskSecret {
    pub name: String,
    pub value: SecretString,
    pub hosts: Vec<nexbot_egress::Binding>,
    /// Stored with `--confirm`: the egress asks the chat's user before the task's first use.
    pub confirm: bool,
    /// A decoy: bound nowhere, never filled in; a request carrying it rings the alarm.
    pub decoy: bool,
}

impl std::fmt::Debug for TaskSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskSecret")
            .field("name", &self.name)
            .field("hosts", &self.hosts)
            .field("confirm", &self.confirm)
            .field("decoy", &self.decoy)
            .finish_non_exhaustive()
    }
}

/// Grants each delegated task its LLM access (and its secrets at the egress) while it runs.
/// Where the egress proxy's questions about a task go (`egress.mode = "ask"`,
/// `nexbot-approvals`): the delegation tool registers each task with its chat, and the receipt
/// lists what was asked. A trait, so the tools know no more of it than this.
pub trait TaskQuestions: Send + Sync + std::fmt::Debug {
    /// A task starts in `chat`; `unattended`: a scheduled job's or a heartbeat check's, with
    /// nobody to ask; `user`: who wrote the message whose turn started it (in a group, the
    /// member who may answer its questions besides the owner).
    fn task_started(
        &self,
        task_id: &str,
        chat: &ChatRef,
        task: &str,
        unattended: bool,
        user: Option<i64>,
    );
    /// The task ended: what it was allowed goes, its waiting questions expire.
    fn task_ended(&self, task_id: &str);
    /// The task may reach `destinations` without a question while it runs: what the skills
    /// its turn read declare (`skill_grants`). `false`: not granted, because the task runs
    /// unattended and `egress.unattended` does not let its chat's rules through (a job's
    /// turn reading a skill is no person's yes to the hosts the skill names).
    fn grant(&self, task_id: &str, destinations: &[nexbot_skill::Destination]) -> bool;
    /// The receipt's lines: what was asked, answered and by whom.
    fn receipt_lines<'a>(&'a self, task_id: &'a str) -> BoxFuture<'a, Vec<String>>;
}

pub trait LlmAccess: Send + Sync + std::fmt::Debug {
    /// Called before the task is sent to a container. `budget_cap`: the most the task may
    /// use (what the chat's caps have left today), below the configured task budget.
    fn issue(&self, task_id: &str, budget_cap: Option<u64>) -> Result<TaskLlm, String>;
    /// Called however the task ended (answer, error, timeout, cancellation, abandonment):
    /// ends its access (and its open connections) and hands over what it used.
    fn revoke(&self, task_id: &str) -> AccessEnd;
    /// The task's egress credential (`execute.egress_token`), after [`LlmAccess::issue`];
    /// [`LlmAccess::revoke`] ends it. `None` without an egress proxy to present it to.
    fn egress_token(&self, task_id: &str) -> Result<Option<SecretString>, String> {
        let _ = task_id;
        Ok(None)
    }
    /// While the returned guard lasts, what `chat`'s MCP server `server` reaches through the
    /// egress counts for the task too: a granted tool's call made for it (a browser's pages)
    /// is then in its receipt. `None` without an egress proxy.
    fn lend(
        &self,
        server: &str,
        chat: &nexbot_core::ChatRef,
        task_id: &str,
    ) -> Option<Box<dyn std::any::Any + Send>> {
        let _ = (server, chat, task_id);
        None
    }
    /// Hands the egress the task's secrets, after [`LlmAccess::issue`]; [`LlmAccess::revoke`]
    /// takes them back. Without an egress proxy, proxy-mode secrets cannot work.
    /// `watched`: the other values of the task's chat and the operator's (`(label name,
    /// value)`, an empty name for one whose name the chat must not see), which the relay scans
    /// the task's LLM calls for though the task was not given them.
    fn grant_secrets(
        &self,
        task_id: &str,
        secrets: Vec<TaskSecret>,
        watched: Vec<(String, SecretString)>,
    ) -> Result<(), String> {
        let _ = (task_id, watched);
        if secrets.iter().any(|s| !s.hosts.is_empty()) {
            return Err(
                "proxy-mode secrets need the egress proxy, which this sandbox does not run"
                    .to_owned(),
            );
        }
        Ok(())
    }
}
