//! The audit trail's seam: what a part other than the egress writes into the one
//! tamper-evident audit (the egress's file, each line chained to the one before it by hash):
//! a person's answer to a question, a job stored, an operator's action.
//!
//! Why a trait here: the approvals, the scheduling tool and the control API must not depend
//! on the egress for one call, and a chain is only as strong as its single writer — so every
//! line goes through the writer that owns the chain ([`AuditTrail`], implemented by
//! `nexbot_egress`'s audit log), in the order it is written.

/// One event for the audit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEvent {
    /// What happened: `approval`, `job`, `operator`.
    pub event: &'static str,
    /// Who did it: a chat's user (`telegram:42`), `nexbot-ctl`, `the dashboard`.
    pub actor: String,
    /// The chat it concerns, if one.
    pub chat: Option<String>,
    /// What it was about: a question's destination, a job's name, a request's method and path.
    pub subject: String,
    /// How it ended: the answer, `stored`, the status code.
    pub outcome: String,
}

/// Where events are written. Writing never fails the caller: a line not written is counted
/// and logged by the writer.
pub trait AuditTrail: Send + Sync + std::fmt::Debug {
    fn record(&self, event: AuditEvent);
}
