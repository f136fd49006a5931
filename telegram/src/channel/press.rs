//! A pressed button's answer. Telegram shows a spinner on the button until the press is
//! answered (`answerCallbackQuery`), and that answer can carry a short notice shown over the
//! chat for a moment. The command a button runs (an approval's "Allowed once.", a menu's
//! choice) is answered there, not as one more message: the question the button belongs to is
//! already edited to show the outcome, and the message said it a second time (issue 48: "a
//! button press also sends a redundant confirmation message"). An answer too long for the
//! notice, with buttons of its own, or that takes longer than [`PRESS_WAIT`] comes as a
//! message, as before; the spinner stops either way.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use teloxide_core::payloads::setters::*;
use teloxide_core::requests::{Request, Requester};
use teloxide_core::types::CallbackQueryId;

use super::{said, Inner};

/// How long a press's spinner waits for its command's answer. After it the press is answered
/// empty and the command's answer, whenever it comes, is a message.
pub(super) const PRESS_WAIT: Duration = Duration::from_secs(5);

/// The longest notice Telegram shows for a press (`answerCallbackQuery`'s `text`: 0–200
/// characters).
pub(super) const MAX_NOTICE_CHARS: usize = 200;

/// Presses handed to the bus and not answered yet, by update id.
#[derive(Debug, Default)]
pub(super) struct Presses(Mutex<HashMap<i64, CallbackQueryId>>);

impl Presses {
    fn take(&self, update_id: i64) -> Option<CallbackQueryId> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(&update_id)
    }
}

/// Whether `text` is shown as a press's notice rather than a message: one line that fits.
pub(super) fn fits_a_notice(text: &str, has_buttons: bool) -> bool {
    let text = text.trim();
    !has_buttons && !text.contains('\n') && text.chars().count() <= MAX_NOTICE_CHARS
}

impl Inner {
    /// Holds the press of update `update_id` for its command's answer, at most [`PRESS_WAIT`].
    pub(super) fn hold_press(self: &Arc<Self>, update_id: i64, query: CallbackQueryId) {
        self.presses.0.lock().unwrap_or_else(|p| p.into_inner()).insert(update_id, query);
        let me = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(PRESS_WAIT).await;
            me.answer_press(update_id, None).await;
        });
    }

    /// Answers the press of update `update_id`, if it still waits: with `notice`, or empty
    /// (the spinner stops). Returns whether the press was waiting.
    pub(super) async fn answer_press(&self, update_id: i64, notice: Option<&str>) -> bool {
        let Some(query) = self.presses.take(update_id) else { return false };
        answer_query(self, query, notice).await;
        true
    }
}

/// `answerCallbackQuery`, best effort: a failure (a press too old) is logged at debug level.
pub(super) async fn answer_query(inner: &Inner, query: CallbackQueryId, notice: Option<&str>) {
    let mut answer = inner.bot.answer_callback_query(query);
    if let Some(notice) = notice {
        answer = answer.text(notice.trim());
    }
    if let Err(e) = answer.send().await {
        tracing::debug!(error = %said(&e), "answerCallbackQuery failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notice_is_one_short_line_without_buttons() {
        assert!(fits_a_notice("Allowed once.", false));
        assert!(fits_a_notice(&"é".repeat(MAX_NOTICE_CHARS), false), "characters, not bytes");
        assert!(!fits_a_notice(&"a".repeat(MAX_NOTICE_CHARS + 1), false));
        assert!(!fits_a_notice("two\nlines", false));
        assert!(!fits_a_notice("Pick one", true));
    }
}
