//! An answer cut off by a crash: each answer's update is marked as being sent just before the
//! send ([`crate::ledger::Ledger::sending`]), and the next run does not handle a marked update
//! again (that could answer it twice: Telegram may have taken the answer already) but tells its
//! user the answer may not have arrived, and records it as failed with that reason.

use nexbot_core::ChatRef;

use super::Inner;
use crate::ledger::{ReceivedUpdate, Settlement};

impl Inner {
    /// Marks `update_id`'s answer as on its way. A failure (a full disk) is logged and the
    /// answer sent anyway: answering beats the rare double.
    pub(super) async fn mark_sending(&self, update_id: i64) {
        if let Err(e) = self.ledger.sending(update_id).await {
            tracing::warn!(update_id, error = %e, "cannot mark a Telegram update's answer as being sent");
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
