//! The audit chain's head for the owner: `/audit` shows it, and it is sent to the owner's
//! chat every `egress.audit_head_secs` (a day by default), so a copy lives off the host.
//!
//! Why: the chain (`nexbot_egress::audit_chain`) shows a line changed, removed or moved
//! among the kept lines, but whoever can rewrite the whole file can rewrite the whole chain;
//! a head kept in Telegram is a copy they cannot reach, and `nexbot-ctl audit verify` prints
//! the same head while nothing was changed.

use std::sync::Arc;
use std::time::Duration;

use nexbot_core::channel::OutboundMessage;
use nexbot_core::ChatRef;
use tokio_util::sync::CancellationToken;

use crate::agent::channel::Channel;
use crate::commands::{ChatCommand, CommandContext};
use crate::BoxFuture;
use nexbot_control_api::ops::AuditVerifier;

/// Reads the chain's head (walking the chain) and says it in a line for the owner.
#[derive(Clone)]
pub struct AuditHead {
    verify: Arc<AuditVerifier>,
    owner: Option<i64>,
}

impl std::fmt::Debug for AuditHead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditHead").field("owner", &self.owner).finish_non_exhaustive()
    }
}

impl AuditHead {
    pub fn new(verify: Arc<AuditVerifier>, owner: Option<i64>) -> Self {
        Self { verify, owner }
    }

    /// The head in words (blocking work on a blocking thread: it reads every kept file).
    pub async fn text(&self) -> String {
        let verify = self.verify.clone();
        match tokio::task::spawn_blocking(move || verify()).await {
            Ok(Ok(v)) => format!(
                "🔗 Audit chain head: {}\n{} lines in {} files hold. Keep this message: \
                 `nexbot-ctl audit verify` prints the same head while nothing was changed.",
                v.head, v.lines, v.files
            ),
            Ok(Err(broken)) => format!(
                "⚠️ The audit chain is BROKEN at {broken}. Someone or something changed the \
                 egress audit file; `nexbot-ctl audit verify` shows where."
            ),
            Err(e) => format!("The audit chain could not be read: {e}"),
        }
    }

    /// Sends the head to `owner_chat` every `every`, until `stop`.
    pub async fn send_every(
        self,
        every: Duration,
        owner_chat: ChatRef,
        channel: Arc<dyn Channel>,
        stop: CancellationToken,
    ) {
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(every) => {}
            }
            let text = self.text().await;
            if let Err(e) = channel.send(OutboundMessage::progress(&owner_chat, text)).await {
                tracing::warn!(error = %e, "the audit chain's head could not be sent to the owner");
            }
        }
    }

    /// Whether `user` in `chat` is the owner: the owner's private Telegram chat, or a console.
    fn owner_asks(&self, chat: &ChatRef, user: Option<i64>) -> bool {
        crate::commands::owner_in_private(self.owner, chat, user)
    }
}

/// `/audit`: the chain's head, for the owner.
#[derive(Debug)]
pub struct AuditCommand(pub AuditHead);

impl ChatCommand for AuditCommand {
    fn name(&self) -> &'static str {
        "audit"
    }
    fn summary(&self) -> &'static str {
        "the owner: the egress audit chain's head, to keep off the host"
    }
    fn run<'a>(&'a self, ctx: CommandContext<'a>) -> BoxFuture<'a, String> {
        Box::pin(async move {
            if !self.0.owner_asks(ctx.chat, ctx.user) {
                return "Only the owner sees the audit chain, in their private chat.".to_owned();
            }
            self.0.text().await
        })
    }
}
