//! The gate of `ask` and `allowlist` modes: a destination no `egress.allow` rule covers is
//! refused (allowlist) or held while the injected [`Approver`] asks (ask), and a proxy-mode
//! secret stored with `--confirm` waits for the user's yes before it is filled in. A held
//! request always ends: the answer, `egress.approval_timeout_secs` (and a grace), the task's
//! end or the proxy's stop.
//!
//! Why apart from the forwarding: this is the one place the proxy waits on a person; the
//! rest of the proxy only checks, dials and meters.

use std::collections::BTreeSet;

use http::{Response, StatusCode};

use crate::approval::{Approval, ApprovalRequest, Approver, EgressMode, NO_ANSWER};
use crate::audit::{ConnAudit, Verdict};
use crate::credentials::TaskSecrets;
use crate::meter::ResponseBody;
use crate::policy::Target;
use crate::Shared;

use super::refuse;

/// How much longer than `egress.approval_timeout_secs` the proxy waits for an approver that
/// does not keep its own deadline.
const APPROVER_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// What the approver is told about a request the gate holds (see `approval.rs`).
pub(super) struct Held {
    pub(super) method: String,
    /// Without the query.
    pub(super) path: Option<String>,
    pub(super) secret: bool,
    /// Whether the request carries a body; `false` for a tunnel.
    pub(super) body: bool,
    /// The request's URL length; 0 for a tunnel.
    pub(super) url_len: usize,
}

impl Held {
    /// A CONNECT: no method, path or body the proxy can see.
    pub(super) fn tunnel() -> Self {
        Self { method: "CONNECT".to_owned(), path: None, secret: false, body: false, url_len: 0 }
    }
}

/// The allow decision of `ask` and `allowlist` modes, after the deny list and the name rules
/// passed and before the name is looked up. `Ok`: allowed (at once, or after being held until
/// an answer came); `Err`: the refusal to send. A held request always ends: the approver's
/// answer, `egress.approval_timeout_secs`, the task's end or the proxy's stop.
pub(super) async fn gate(
    target: &Target,
    held: Held,
    audit: &ConnAudit,
    shared: &Shared,
) -> Result<(), Response<ResponseBody>> {
    let config = &shared.config;
    let mode = config.effective_mode();
    if mode == EgressMode::Open || config.allows(&target.host, target.port) {
        return Ok(());
    }
    let destination = match target.host.contains(':') {
        true => format!("[{}]:{}", target.host, target.port),
        false => format!("{}:{}", target.host, target.port),
    };
    let deny = |reason: String| refuse(audit, Verdict::Denied, StatusCode::FORBIDDEN, reason);
    if mode == EgressMode::Allowlist {
        return Err(deny(format!(
            "not_allowed: {destination} is on no egress.allow rule (egress.mode = \
             \"allowlist\"); the operator can add it to egress.allow"
        )));
    }
    let Some(task_id) = audit.origin().task_id.clone() else {
        return Err(deny(format!(
            "not_allowed: {destination} is on no egress.allow rule, and a request of no task \
             has nobody to ask (egress.mode = \"ask\")"
        )));
    };
    let Some(approver) = shared.approver.get() else {
        return Err(deny(format!(
            "not_allowed: {destination} is on no egress.allow rule and nobody can be asked \
             yet (the daemon has not set up its questions)"
        )));
    };
    let request = ApprovalRequest {
        task_id,
        host: target.host.clone(),
        port: target.port,
        method: held.method,
        path: held.path,
        secret: held.secret,
        secret_name: None,
        body: held.body,
        url_len: held.url_len,
    };
    match held_for_answer(approver.as_ref(), request, audit, shared).await {
        Approval::Allow => Ok(()),
        Approval::Refuse(why) => Err(deny(format!("not_approved: {destination}: {why}"))),
    }
}

/// Asks `approver` about a held request and waits for its answer — but never longer than
/// `egress.approval_timeout_secs` (and a grace), the task's life or the proxy's.
async fn held_for_answer(
    approver: &dyn Approver,
    request: ApprovalRequest,
    audit: &ConnAudit,
    shared: &Shared,
) -> Approval {
    // The approver owns the deadline (it says "no answer" and records it); the proxy's own
    // bound, a little later, only guards against an approver that never answers.
    let wait = shared.config.approval_timeout() + APPROVER_GRACE;
    let task_cut = audit.task_cut();
    let task_end = async {
        match &task_cut {
            Some(cut) => cut.cancelled().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        answer = tokio::time::timeout(wait, approver.approve(request)) => match answer {
            Ok(answer) => answer,
            Err(_) => Approval::Refuse(NO_ANSWER.to_owned()),
        },
        () = task_end => Approval::Refuse("the task ended while it waited for an answer".into()),
        () = shared.stop.cancelled() => {
            Approval::Refuse("the proxy is stopping (daemon stop or restart)".into())
        }
    }
}

/// For each secret filled into a request that was stored with `--confirm`, the approver's
/// yes before the request goes anywhere (it remembers a yes for the task, so only a task's
/// first use waits). A no, or no answer, refuses the request: it is never sent without the
/// value, nor with it.
pub(super) async fn confirm_secrets(
    filled: &BTreeSet<String>,
    secrets: &TaskSecrets,
    to: (&str, u16),
    held: &Held,
    audit: &ConnAudit,
    shared: &Shared,
) -> Result<(), Response<ResponseBody>> {
    let asked = filled.iter().filter(|name| secrets.get(name).is_some_and(|c| c.confirm));
    for name in asked {
        let deny = |why: String| {
            let reason = format!(
                "secret_not_confirmed: the secret {name} was stored with --confirm and is \
                 filled in only once the user allows it for this task: {why}; the request \
                 was not sent"
            );
            refuse(audit, Verdict::Denied, StatusCode::FORBIDDEN, reason)
        };
        let Some(task_id) = audit.origin().task_id.clone() else {
            return Err(deny("a request of no task has nobody to ask".into()));
        };
        let Some(approver) = shared.approver.get() else {
            return Err(deny(
                "nobody can be asked yet (the daemon has not set up its questions)".into(),
            ));
        };
        let request = ApprovalRequest {
            task_id,
            host: to.0.to_owned(),
            port: to.1,
            method: held.method.clone(),
            path: held.path.clone(),
            secret: true,
            secret_name: Some(name.clone()),
            body: held.body,
            url_len: held.url_len,
        };
        if let Approval::Refuse(why) =
            held_for_answer(approver.as_ref(), request, audit, shared).await
        {
            return Err(deny(why));
        }
    }
    Ok(())
}
