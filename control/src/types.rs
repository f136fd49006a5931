//! Request and response bodies, one per endpoint. Paths are in [`paths`].

use std::collections::BTreeMap;

pub use nexbot_core::SpendSummary;
use serde::{Deserialize, Serialize};

/// Every endpoint's path (all JSON but `/metrics`).
pub mod paths {
    pub const STATUS: &str = "/v1/status";
    pub const HEALTH: &str = "/v1/health";
    pub const SUBAGENTS: &str = "/v1/subagents";
    /// `/v1/subagents/{id}/logs?n=N`, `…/restart` (POST), `…/kill` (POST).
    pub fn subagent(id: &str, action: &str) -> String {
        format!("/v1/subagents/{id}/{action}")
    }
    pub const TASKS: &str = "/v1/tasks";
    /// `/v1/tasks/{id}`.
    pub fn task(id: &str) -> String {
        format!("/v1/tasks/{id}")
    }
    pub const MESSAGES: &str = "/v1/messages";
    pub const RELOAD: &str = "/v1/reload";
    pub const BACKUP: &str = "/v1/backup";
    pub const METRICS: &str = "/metrics";
    /// `GET`: every skill folder with its state.
    pub const SKILLS: &str = "/v1/skills";
    /// `POST` a [`super::SkillAllow`]: accepts a skill's current content, whose declared
    /// domains are then granted again.
    pub const SKILLS_ALLOW: &str = "/v1/skills/allow";
    /// `POST`: a one-time login link for the web dashboard ([`super::WebLogin`]); 409 when
    /// the dashboard is off.
    pub const WEB_LOGIN: &str = "/v1/web/login";
    /// `GET`: the egress audit file's hash chain walked ([`super::AuditCheck`]); 409 when
    /// there is no audit file (the sandbox is off).
    pub const AUDIT_VERIFY: &str = "/v1/audit/verify";
    /// `POST`: runs the owner's self-test and answers its report (`nexbot doctor --attack`);
    /// 409 while one runs, 503 without a sandbox.
    pub const SELFTEST: &str = "/v1/selftest";
}

/// Every error answer: a message for the operator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
    /// The daemon is still starting (its answer before the control API is up: 503). Added
    /// later: absent from other answers and from older daemons'.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub starting: bool,
}

/// `GET /v1/health`: whether the daemon serves (store open, pool warm), and what works less
/// than it could (no model key, model unreachable, no Telegram token, delegation off).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    pub ready: bool,
    /// Why it is not ready, when it is not.
    pub problems: Vec<String>,
    /// Serving, but degraded: each reason in a sentence.
    pub degraded: Vec<String>,
    /// The OCI runtime the sandboxes run under (`runc`, `runsc`), when there is a pool. A
    /// daemon older than `sandbox.runtime` sends none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    /// Where the engine is: its address, for a remote engine the certificate it presented,
    /// the last round trip. A daemon older than this sends none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_at: Option<String>,
}

/// `GET /v1/status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    pub version: String,
    pub pid: u32,
    pub uptime_secs: u64,
    pub model: String,
    pub data_dir: String,
    /// The pool, or why delegation is off.
    pub pool: Option<PoolSummary>,
    pub delegation_off: Option<String>,
    /// Each running channel and its health line.
    pub channels: Vec<ChannelStatus>,
    /// The scheduler's line (`off (...)` when it is off).
    pub scheduler: String,
    /// The secrets vault's line: on, off (why) or locked, and how many secrets it holds.
    pub vault: String,
    /// LLM tokens recorded today (UTC) by the main agent's turns.
    pub tokens_today: TokenCount,
    pub database_bytes: u64,
    /// Today's and this month's LLM spending against the caps (absent from older daemons).
    #[serde(default)]
    pub spend: SpendSummary,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenCount {
    pub prompt: u64,
    pub completion: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelStatus {
    pub name: String,
    pub health: String,
}

/// The pool as a whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolSummary {
    pub name: String,
    pub size: usize,
    /// Containers by state (`idle`, `busy`, `starting`, …).
    pub states: BTreeMap<String, usize>,
    pub queue_depth: usize,
    /// Tasks by outcome since the daemon started.
    pub tasks: BTreeMap<String, u64>,
    pub unplanned_restarts: u64,
    pub planned_replacements: u64,
    /// Containers up and never used, and containers that belong to a chat (a daemon older
    /// than rooms sends neither).
    #[serde(default)]
    pub blank: usize,
    #[serde(default)]
    pub bound: usize,
    /// Containers the pool let go of but could not remove yet (the engine was away); they
    /// are retried until gone. A daemon older than this sends none.
    #[serde(default)]
    pub pending_removal: usize,
    /// While the pool cannot reach the Docker engine: since when, why, and what to check.
    #[serde(default)]
    pub engine: Option<String>,
    /// The OCI runtime its containers run under ([`Health::runtime`]).
    #[serde(default)]
    pub runtime: Option<String>,
    /// Where the engine is ([`Health::engine_at`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_at: Option<String>,
}

/// One pool slot and its current container, for `subagents ps`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Subagent {
    /// Stable slot id (`<pool>-<index>`), survives replacement.
    pub id: String,
    /// Short container id.
    pub container: Option<String>,
    pub state: String,
    /// The room (chat) its container belongs to; `None` while blank (never used). A daemon
    /// older than rooms sends none.
    #[serde(default)]
    pub room: Option<String>,
    pub uptime_secs: Option<u64>,
    pub tasks_served: u64,
    pub current_task: Option<String>,
    pub current_task_age_ms: Option<u64>,
    /// Round trip of the last health ping, microseconds.
    pub last_ping_us: Option<u64>,
    /// Unplanned replacements, and why the last replacement happened.
    pub restarts: u64,
    pub last_restart: Option<String>,
    pub planned_replacements: u64,
    pub memory_bytes: Option<u64>,
    pub last_error: Option<String>,
}

/// `GET /v1/subagents`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubagentList {
    pub subagents: Vec<Subagent>,
    /// Containers pending removal ([`PoolSummary::pending_removal`]).
    #[serde(default)]
    pub pending_removal: usize,
    /// The engine's outage, when there is one ([`PoolSummary::engine`]).
    #[serde(default)]
    pub engine: Option<String>,
    /// The OCI runtime the containers run under ([`Health::runtime`]).
    #[serde(default)]
    pub runtime: Option<String>,
    /// Where the engine is ([`Health::engine_at`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_at: Option<String>,
}

/// `GET /v1/subagents/{id}/logs`: the container's stderr JSON log lines, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLines {
    pub id: String,
    pub lines: Vec<String>,
}

/// `POST /v1/web/login`: a link that logs a browser into the dashboard, once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebLogin {
    pub url: String,
    /// How long the link works.
    pub expires_in_secs: u64,
}

/// What an action did, in a sentence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Done {
    pub message: String,
}

/// One delegated task's record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRow {
    pub id: String,
    pub chat: String,
    /// `running`, `success`, `error`, `timeout`, `cancelled`.
    pub status: String,
    /// Unix seconds.
    pub started_at: i64,
    pub duration_ms: Option<i64>,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub container: Option<String>,
    pub error: Option<String>,
}

/// `GET /v1/tasks?limit=N&chat=CHATREF`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskList {
    pub tasks: Vec<TaskRow>,
}

/// `GET /v1/tasks/{id}`: the whole record, with the egress's per-task summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskDetail {
    #[serde(flatten)]
    pub row: TaskRow,
    pub task: String,
    pub egress: Option<serde_json::Value>,
    /// The receipt the task's chat was sent, and its progress lines (absent from a daemon
    /// or a record older than the dashboard).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub progress: Vec<String>,
}

/// One Telegram update of the ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageRow {
    pub update_id: i64,
    pub chat: String,
    pub user_id: Option<i64>,
    /// `pending`, `answered`, `refused`, `failed`.
    pub state: String,
    /// Message ids sent, the rule, or the error.
    pub detail: Option<String>,
    /// As the ledger keeps it (a `/secret` value is never there).
    pub text: String,
}

/// `GET /v1/messages?failed=true&limit=N`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageList {
    pub messages: Vec<MessageRow>,
}

/// `POST /v1/reload`: what changed, and what needs a restart to take effect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReloadReport {
    pub applied: Vec<String>,
    pub needs_restart: Vec<String>,
}

/// `POST /v1/backup`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupRequest {
    /// Where to write the copy (absolute, on the daemon's machine).
    pub path: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupReport {
    pub path: String,
    pub bytes: u64,
}

/// `GET /v1/skills`: every folder of the skills directory as the daemon's last scan saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkillList {
    /// The folder the daemon reads; `None` when none is configured.
    pub dir: Option<String>,
    /// Why the folder could not be read at all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub skills: Vec<SkillRow>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkillRow {
    pub name: String,
    /// `ok` (offered to the model), `invalid`, `ineligible` or `quarantined`.
    pub state: String,
    /// Why it is not offered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `sha256:<hex>` of its files, what `[skills] allow_hashes` names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The lines the content screen flagged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<SkillFinding>,
    /// The destinations its `SKILL.md` declares (`host:port`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub domains: Vec<String>,
    /// The secret names its `SKILL.md` declares.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<String>,
    /// The content hash the daemon recorded for it (granted), when one is; differing from
    /// `hash`: the skill changed, and its domains are asked about until `skills allow`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded_hash: Option<String>,
}

/// `POST /v1/skills/allow`: accept skill `name`'s current content; `hash`, when given, must
/// be that content's (what the operator reviewed in `skills ls`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SkillAllow {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkillFinding {
    pub file: String,
    pub line: usize,
    pub rule: String,
    pub text: String,
}

/// The egress audit file's hash chain, walked oldest line first (`nexbot-ctl audit verify`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditCheck {
    /// The audit file (its rotated copies beside it).
    pub path: String,
    /// Lines and files walked (0 when the chain breaks).
    pub lines: u64,
    pub files: usize,
    /// The hash of the newest line: compare it with a copy kept off the host (empty when the
    /// chain breaks).
    pub head: String,
    /// Lines from before the chain existed (older installs), at its start.
    #[serde(default)]
    pub unlinked: u64,
    /// The oldest kept line links to one rotated away: checked from there.
    #[serde(default)]
    pub starts_after_rotation: bool,
    /// The first line that does not fit; `None`: the chain holds.
    #[serde(default)]
    pub broken: Option<AuditBreak>,
}

/// Where the chain breaks: the line after an edited, removed or moved one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditBreak {
    pub file: String,
    /// 1-based, within `file`.
    pub line: u64,
    pub reason: String,
}
