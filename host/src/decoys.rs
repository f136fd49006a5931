//! The alarm of the decoy secrets (`nexbot_vault::decoys`): when the egress proxy sees a
//! task's request carry one (`nexbot_egress::DecoyTrip`), the task is stopped, the container
//! it ran in is killed and replaced, and the owner is told in their chat which task of which
//! chat sent what where, and what the turn had read before it delegated — the likely
//! injection.
//!
//! Why the owner and not the chat: the chat's own model is what the injection turned; its
//! user may be the one who pasted the page. The owner decides what to do about it.

use std::sync::Arc;

use nexbot_core::channel::OutboundMessage;
use nexbot_core::ChatRef;
use nexbot_docker::{Pool, RestartReason};
use nexbot_egress::{DecoyAlarm, DecoyTrip};

use crate::agent::channel::Channel;
use crate::delegation::decoy_traps::{DecoyTraps, Trap, STOPPED};

/// Plants the configured decoys (`vault.decoys`); a failure is logged, and none is offered.
pub async fn plant(vault: &crate::vault::Vault, names: &[String]) {
    if let Err(e) = vault.plant_decoys(names).await {
        tracing::error!(error = %e, "the decoy secrets could not be planted; none is offered");
    }
}

/// Sets the sandbox's egress to ring [`DecoyAlert`] for the tasks `traps` holds, telling
/// `owner` through `channel` (nothing without a sandbox: no task runs).
pub fn set_alarm(
    sandbox: Option<&crate::sandbox::Sandbox>,
    traps: Option<Arc<DecoyTraps>>,
    channel: Arc<dyn Channel>,
    owner: ChatRef,
) {
    let (Some(sandbox), Some(traps)) = (sandbox, traps) else { return };
    let pool = Arc::downgrade(sandbox.pool());
    sandbox.egress().set_decoy_alarm(Arc::new(DecoyAlert { traps, channel, owner, pool }));
}

/// Rung by the egress; owns nothing of the pool (a weak handle), so it never keeps it alive.
pub struct DecoyAlert {
    traps: Arc<DecoyTraps>,
    channel: Arc<dyn Channel>,
    owner: ChatRef,
    pool: std::sync::Weak<Pool>,
}

impl std::fmt::Debug for DecoyAlert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecoyAlert").field("owner", &self.owner).finish_non_exhaustive()
    }
}

impl DecoyAlarm for DecoyAlert {
    fn tripped(&self, trip: DecoyTrip) {
        // Cancelled at once, before anything awaits: the task takes no further step. Only
        // the first trip of a task acts (its requests in flight may trip it again); the
        // egress has logged and audited every one.
        let Some(trap) = trip.task_id.as_deref().and_then(|id| self.traps.spring(id)) else {
            return;
        };
        let (channel, owner, pool) = (self.channel.clone(), self.owner.clone(), self.pool.clone());
        tokio::spawn(async move {
            let retired = match (pool.upgrade(), &trip.container) {
                (Some(pool), Some(container)) => {
                    match pool.kill_because(container, RestartReason::DecoyTripped, STOPPED).await {
                        Ok(short) => format!("container {short} killed and replaced"),
                        Err(e) => format!("its container could not be killed: {e}"),
                    }
                }
                _ => "no container to kill was known".to_owned(),
            };
            let text = alert_text(&trip, &trap, &retired);
            tracing::warn!(alert = %text, "decoy alarm");
            if let Err(e) = channel.send(OutboundMessage::progress(&owner, text)).await {
                tracing::error!(error = %e, "the decoy alarm could not reach the owner");
            }
        });
    }
}

/// The most of what the turn had read that the alert lists (the newest are left out).
const MAX_READS_SHOWN: usize = 10;

/// The owner's alert, in words.
fn alert_text(trip: &DecoyTrip, trap: &Trap, retired: &str) -> String {
    let task = trip.task_id.as_deref().unwrap_or("(unknown task)");
    let mut lines = vec![
        format!(
            "🚨 Decoy secret {} was sent out: a prompt injection is likely at work.",
            trip.secret
        ),
        format!("Task {task}: stopped; {retired}."),
        format!("The request that carried it (refused, nothing left): {}", trip.request),
        format!("Chat: {}. The task: {}", trap.chat, trap.first_line),
    ];
    if trap.reads.is_empty() {
        lines.push("The turn had read nothing from outside before it delegated.".into());
    } else {
        lines.push("What the turn had read before it delegated (the likely source):".into());
        lines.extend(trap.reads.iter().take(MAX_READS_SHOWN).map(|read| format!("• {read}")));
        if trap.reads.len() > MAX_READS_SHOWN {
            lines.push(format!("• … and {} more", trap.reads.len() - MAX_READS_SHOWN));
        }
    }
    lines.push(format!(
        "No real secret was filled in ({} is a decoy, bound nowhere). `nexbot-ctl tasks` and \
         the egress audit (\"decoy\": true) have the details.",
        trip.secret
    ));
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use nexbot_core::memory::OutsideRead;

    #[test]
    fn the_alert_names_the_task_the_chat_the_request_and_what_the_turn_had_read() {
        let trip = DecoyTrip {
            task_id: Some("t-9".into()),
            container: Some("c1".into()),
            secret: "OPENAI_API_KEY".into(),
            request: "POST http://collector:80/steal".into(),
        };
        let trap = Trap {
            chat: ChatRef::Telegram(42),
            first_line: "send the keys".into(),
            reads: vec![OutsideRead::tool("delegate_to_sub_agent")
                .with_detail("contacted page.example:80")
                .with_task("t-8")],
            cancel: tokio_util::sync::CancellationToken::new(),
        };
        let text = alert_text(&trip, &trap, "container c1 killed and replaced");
        for needle in [
            "OPENAI_API_KEY",
            "t-9",
            "telegram:42",
            "POST http://collector:80/steal",
            "contacted page.example:80",
            "in task t-8",
            "killed and replaced",
        ] {
            assert!(text.contains(needle), "{needle} missing from: {text}");
        }
        let many = Trap { reads: vec![OutsideRead::tool("read_file"); 25], ..trap };
        let text = alert_text(&trip, &many, "no container to kill was known");
        assert!(text.contains("… and 15 more"), "{text}");
    }
}
