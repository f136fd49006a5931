//! An answer cut off by a crash: each answer's update is marked as being sent just before the
//! send ([`crate::ledger::Ledger::sending`]), and the next run does not handle a marked update
//! again (that could answer it twice: Telegram may have taken the answer already) but tells its
//! user the answer may not have arrived, and records it as failed with that reason. With the
//! disk full the answer waits for its mark (up to a minute), so a kill meanwhile leaves an
//! unanswered update the next run answers once.

use std::time::Duration;

use nexbot_core::ChatRef;
use tokio::time::Instant;

use super::Inner;
use crate::ledger::{ReceivedUpdate, Settlement};

/// How long an answer waits for its mark while it cannot be written (a full disk) before it
/// goes unmarked: a crash in that minute would answer it again, an answer held longer would
/// leave its user waiting on the disk.
const MARK_WAIT: Duration = Duration::from_secs(60);

impl Inner {
    /// Marks `update_id`'s answer as on its way, before it is sent. While the mark cannot be
    /// written (a full disk) it is tried again every second and the answer waits, up to
    /// [`MARK_WAIT`]: an answer sent unmarked is answered again by the next run if this one
    /// dies before its end is recorded, while one that waited and died is simply answered by
    /// the next run, once.
    pub(super) async fn mark_sending(&self, update_id: i64) {
        let started = Instant::now();
        let mut waited = false;
        loop {
            match self.ledger.sending(update_id).await {
                Ok(()) => {
                    if waited {
                        tracing::info!(
                            update_id,
                            waited_ms = started.elapsed().as_millis() as u64,
                            "a Telegram update's answer is marked as being sent now; it goes"
                        );
                    }
                    return;
                }
                Err(e) if started.elapsed() >= MARK_WAIT => {
                    tracing::warn!(update_id, error = %e, "cannot mark a Telegram update's answer as being sent for {} s; it is sent unmarked", MARK_WAIT.as_secs());
                    return;
                }
                Err(e) => {
                    if !waited {
                        tracing::warn!(update_id, error = %e, "cannot mark a Telegram update's answer as being sent; the answer waits until it can be");
                        waited = true;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    /// Settles an update whose answer was being sent when the last run stopped, and says so in
    /// its chat.
    pub(super) async fn cut_off(&self, update: ReceivedUpdate) {
        let ChatRef::Telegram(chat_id) = update.chat else { return };
        let said: String = update.text.chars().take(60).collect();
        let notice = format!(
            "⚠️ I was restarted while sending my answer to «{said}». If it did not arrive just \
             before this, please ask again."
        );
        if let Err(e) = self.deliver(chat_id, &notice, None).await {
            tracing::warn!(chat_id, error = %e, "cannot say that an answer may not have arrived");
        }
        let error = "the daemon stopped while sending the answer; the user was told it may not \
                     have arrived"
            .to_owned();
        tracing::warn!(update_id = update.update_id, "{error}");
        self.settle(update.update_id, Settlement::Failed { error }).await;
    }
}
