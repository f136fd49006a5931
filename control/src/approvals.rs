//! The egress approvals' endpoints (`nexbot-ctl approvals ls|allow|deny`, `nexbot-ctl egress
//! rules ls|rm`): bodies and paths. All of them are new; no older request changed.

use serde::{Deserialize, Serialize};

/// The approvals' paths.
pub mod approvals_paths {
    /// `GET`: the egress mode and the questions waiting ([`super::ApprovalList`]).
    pub const APPROVALS: &str = "/v1/approvals";
    /// `POST` an [`super::ApprovalAnswer`]: answers one.
    pub const APPROVALS_ANSWER: &str = "/v1/approvals/answer";
    /// `GET ?chat=CHATREF`: the chats' "always" rules ([`super::EgressRuleList`]).
    pub const EGRESS_RULES: &str = "/v1/egress/rules";
    /// `POST` an [`super::EgressRuleRemove`]: removes one.
    pub const EGRESS_RULES_REMOVE: &str = "/v1/egress/rules/remove";
}

/// A question waiting for an answer: a task's held request to a destination no rule allows,
/// a task's first use of a `--confirm` secret, or a tool's step `agent.confirm` lists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingApproval {
    pub id: i64,
    pub task_id: String,
    /// The chat that owns the task (`telegram:<id>`, `console:<name>`).
    pub chat: String,
    pub host: String,
    pub port: u16,
    /// `CONNECT` or the request's method.
    pub method: String,
    /// The request's path without its query (none for a tunnel).
    pub path: Option<String>,
    /// Whether a proxy-mode secret would be filled into the request.
    pub secret: bool,
    pub waiting_secs: u64,
    /// What it is about: `egress` (a destination; what a daemon from before kinds sends, so
    /// the default), `secret` (a `--confirm` secret's use), `send_file`, `delete`. A step's
    /// question has an empty task, host and method.
    #[serde(default = "egress_kind")]
    pub kind: String,
    /// A `secret` question's secret name; a step's file.
    #[serde(default)]
    pub subject: Option<String>,
}

fn egress_kind() -> String {
    "egress".to_owned()
}

/// `GET /v1/approvals`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalList {
    /// The egress mode in a sentence (`ask (…)`, or `open (…how to turn ask on)`).
    pub mode: String,
    pub pending: Vec<PendingApproval>,
}

/// `POST /v1/approvals/answer`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalAnswer {
    pub id: i64,
    /// `once`, `task`, `chat` (always, for the task's chat) or `deny`.
    pub answer: String,
}

/// A chat's "always" rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EgressRule {
    pub chat: String,
    pub host: String,
    pub port: u16,
    /// Unix seconds.
    pub created_at: i64,
    /// Who pressed "Always for this chat" (`telegram:<id>`, `nexbot-ctl`).
    pub created_by: String,
}

/// `GET /v1/egress/rules`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EgressRuleList {
    pub rules: Vec<EgressRule>,
}

/// `POST /v1/egress/rules/remove`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressRuleRemove {
    pub chat: String,
    pub host: String,
    pub port: u16,
}
