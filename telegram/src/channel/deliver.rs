//! Delivery: answers, progress, files, edits and deletes going out. A message is split in
//! parts (HTML, resent as plain text when Telegram rejects its entities), each part retried
//! until the delivery deadline (429 waits as told, network errors back off), and the parts of a
//! multi-part message remembered, so that an edit or a delete of the id given out reaches all
//! of them.
//!
//! Why apart from polling: nothing here reads updates; the ledger is settled by the caller
//! with the ids this returns.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use nexbot_core::channel::{Button, MessageId};
use nexbot_core::text::excerpt;
use teloxide_core::errors::{ApiError, RequestError};
use teloxide_core::payloads::setters::*;
use teloxide_core::requests::{Request, Requester};
use teloxide_core::types::{
    ChatId, InlineKeyboardButton, InlineKeyboardMarkup, InputFile, MessageId as TgMessageId,
    ParseMode, ReplyParameters,
};
use thiserror::Error;

use crate::format::{self, Part};

use super::{plain_part, said, Inner};

/// No link preview, on every message and edit the bot sends: Telegram's servers fetch the
/// first link of a message to preview it, so a model could send data out through a preview
/// URL without touching the egress proxy.
fn no_preview() -> teloxide_core::types::LinkPreviewOptions {
    teloxide_core::types::LinkPreviewOptions {
        is_disabled: true,
        url: None,
        prefer_small_media: false,
        prefer_large_media: false,
        show_above_text: false,
    }
}

/// How many multi-part messages' parts are remembered (the oldest are forgotten first; the
/// router lets tools reach only a chat's last 256 messages anyway).
const PART_GROUPS: usize = 1024;

/// The parts of multi-part messages: `(chat, the id given out)` → every part's id, in order.
#[derive(Debug, Default)]
pub(super) struct PartGroups {
    groups: HashMap<(i64, i32), Vec<i32>>,
    order: std::collections::VecDeque<(i64, i32)>,
}

impl PartGroups {
    fn remember(&mut self, chat_id: i64, key: i32, ids: Vec<i32>) {
        if self.groups.insert((chat_id, key), ids).is_none() {
            self.order.push_back((chat_id, key));
        }
        while self.order.len() > PART_GROUPS {
            if let Some(old) = self.order.pop_front() {
                self.groups.remove(&old);
            }
        }
    }

    /// The parts of the message given out as `key`: itself alone when it had one part.
    fn of(&self, chat_id: i64, key: i32) -> Vec<i32> {
        self.groups.get(&(chat_id, key)).cloned().unwrap_or_else(|| vec![key])
    }

    fn forget(&mut self, chat_id: i64, key: i32) {
        if self.groups.remove(&(chat_id, key)).is_some() {
            self.order.retain(|k| *k != (chat_id, key));
        }
    }
}

/// Why one delivery failed for good.
#[derive(Debug, Error)]
#[error("{0}")]
pub(super) struct DeliveryError(String);

/// What follows a failed send ([`Inner::after_failure`]).
enum Next {
    Wait(Duration),
    AssumeSent,
    Fail(DeliveryError),
}

impl Inner {
    /// Sends `text` to `chat_id` as one or more messages; returns their ids. A chat that
    /// missed an answer earlier first gets a short notice.
    pub(super) async fn deliver(
        &self,
        chat_id: i64,
        text: &str,
        reply_to: Option<i32>,
    ) -> Result<Vec<i32>, DeliveryError> {
        self.deliver_with(chat_id, text, reply_to, &[]).await
    }

    /// [`Self::deliver`] with `buttons` under the last part (inline keyboard buttons whose
    /// callback data is the command they press).
    pub(super) async fn deliver_with(
        &self,
        chat_id: i64,
        text: &str,
        reply_to: Option<i32>,
        buttons: &[Vec<Button>],
    ) -> Result<Vec<i32>, DeliveryError> {
        let markup = keyboard(buttons);
        let mut parts = format::render(text);
        if parts.is_empty() {
            parts.push(Part { html: "(empty)".into(), plain: "(empty)".into() });
        }
        let owed = self.owes_notice.lock().unwrap_or_else(|p| p.into_inner()).contains(&chat_id);
        let mut ids = Vec::with_capacity(parts.len());
        let last = parts.len() - 1;
        for (i, part) in parts.iter().enumerate() {
            let reply_to = if i == 0 { reply_to } else { None };
            let markup = if i == last { markup.as_ref() } else { None };
            match self.send_part_with(chat_id, part, reply_to, markup).await {
                Ok(id) => ids.extend(id),
                Err(e) => {
                    self.health.count_delivery_failure();
                    self.owes_notice.lock().unwrap_or_else(|p| p.into_inner()).insert(chat_id);
                    return Err(e);
                }
            }
        }
        if owed {
            let notice = plain_part(
                "(An earlier answer of mine could not be delivered while Telegram was \
                 unreachable; ask again if something is missing.)",
            );
            if self.send_part(chat_id, &notice, None).await.is_ok() {
                self.owes_notice.lock().unwrap_or_else(|p| p.into_inner()).remove(&chat_id);
            }
        }
        Ok(ids)
    }

    /// The id a sent message is known by (its last part's), remembering all its parts when
    /// it had several.
    pub(super) fn given_out(&self, chat_id: i64, ids: Vec<i32>) -> Option<MessageId> {
        let key = *ids.last()?;
        if ids.len() > 1 {
            self.parts.lock().unwrap_or_else(|p| p.into_inner()).remember(chat_id, key, ids);
        }
        Some(MessageId(i64::from(key)))
    }

    /// One message, retried until the delivery deadline: 429 waits as told, network errors
    /// back off, entities Telegram rejects are resent as plain text. `Ok(None)` when Telegram
    /// answered something unreadable (the message was most likely sent; not sent again).
    pub(super) async fn send_part(
        &self,
        chat_id: i64,
        part: &Part,
        reply_to: Option<i32>,
    ) -> Result<Option<i32>, DeliveryError> {
        self.send_part_with(chat_id, part, reply_to, None).await
    }

    async fn send_part_with(
        &self,
        chat_id: i64,
        part: &Part,
        reply_to: Option<i32>,
        markup: Option<&InlineKeyboardMarkup>,
    ) -> Result<Option<i32>, DeliveryError> {
        let deadline = Instant::now() + Duration::from_secs(self.config.delivery_deadline_secs);
        let mut plain = part.html.is_empty();
        let mut backoff = Duration::from_millis(500);
        loop {
            let mut request = if plain {
                self.bot.send_message(ChatId(chat_id), part.plain.clone())
            } else {
                self.bot
                    .send_message(ChatId(chat_id), part.html.clone())
                    .parse_mode(ParseMode::Html)
            };
            request = request.link_preview_options(no_preview());
            if let Some(reply_to) = reply_to {
                request = request.reply_parameters(
                    ReplyParameters::new(TgMessageId(reply_to)).allow_sending_without_reply(),
                );
            }
            if let Some(markup) = markup {
                request = request.reply_markup(markup.clone());
            }
            let wait = match request.send().await {
                Ok(message) => return Ok(Some(message.id.0)),
                Err(RequestError::Api(ApiError::CantParseEntities(why))) if !plain => {
                    tracing::warn!(chat_id, error = %why, "Telegram rejected the formatting; sending plain text");
                    plain = true;
                    continue;
                }
                Err(e) => match self.after_failure(chat_id, "message", e, &mut backoff) {
                    Next::Wait(wait) => wait,
                    Next::AssumeSent => return Ok(None),
                    Next::Fail(e) => return Err(e),
                },
            };
            self.within_deadline(deadline, wait)?;
            tokio::time::sleep(wait).await;
        }
    }

    /// Uploads the file at `path` as a document (multipart `sendDocument`, named as the file),
    /// with `caption` as plain text. A 429 is waited out as told (within the delivery
    /// deadline) and a network failure tried again; what Telegram refuses (too large, a bad
    /// chat) is the error. `Ok(None)` when the answer was unreadable (most likely sent).
    pub(super) async fn send_document(
        &self,
        chat_id: i64,
        path: std::path::PathBuf,
        contents: Option<std::path::PathBuf>,
        caption: Option<String>,
    ) -> Result<Option<i32>, DeliveryError> {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        let read_from = contents.unwrap_or(path);
        self.upload(chat_id, "file", || {
            let mut document = InputFile::file(&read_from);
            if let Some(name) = &name {
                document = document.file_name(name.clone());
            }
            let mut request = self.bot.send_document(ChatId(chat_id), document);
            if let Some(caption) = &caption {
                request = request.caption(caption.clone());
            }
            request.send()
        })
        .await
    }

    /// Uploads Ogg/Opus `audio` as a voice message (`sendVoice`), replying to `reply_to`,
    /// retried as [`Self::send_document`] is.
    pub(super) async fn send_voice(
        &self,
        chat_id: i64,
        audio: Vec<u8>,
        reply_to: Option<i32>,
    ) -> Result<Option<i32>, DeliveryError> {
        self.upload(chat_id, "voice message", || {
            let voice = InputFile::memory(audio.clone()).file_name("answer.ogg");
            let mut request = self.bot.send_voice(ChatId(chat_id), voice);
            if let Some(id) = reply_to {
                request = request.reply_parameters(
                    ReplyParameters::new(TgMessageId(id)).allow_sending_without_reply(),
                );
            }
            request.send()
        })
        .await
    }

    /// Sends what `attempt` makes until it is answered, within the delivery deadline.
    async fn upload<F, Fut>(
        &self,
        chat_id: i64,
        what: &str,
        attempt: F,
    ) -> Result<Option<i32>, DeliveryError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<teloxide_core::types::Message, RequestError>>,
    {
        let deadline = Instant::now() + Duration::from_secs(self.config.delivery_deadline_secs);
        let mut backoff = Duration::from_millis(500);
        loop {
            let wait = match attempt().await {
                Ok(message) => return Ok(Some(message.id.0)),
                Err(e) => match self.after_failure(chat_id, what, e, &mut backoff) {
                    Next::Wait(wait) => wait,
                    Next::AssumeSent => return Ok(None),
                    Next::Fail(e) => return Err(e),
                },
            };
            self.within_deadline(deadline, wait)?;
            tokio::time::sleep(wait).await;
        }
    }

    /// What a failed send (a message or a file) leads to: a 429 is waited out as told, a
    /// server error or a network failure retried with `backoff` (doubled, at most 10 s), an
    /// unreadable answer taken as sent (the emulator's and some proxies' quirk), anything
    /// Telegram refuses is the error.
    fn after_failure(
        &self,
        chat_id: i64,
        what: &str,
        error: RequestError,
        backoff: &mut Duration,
    ) -> Next {
        let mut retry = || {
            let wait = *backoff;
            *backoff = (*backoff * 2).min(Duration::from_secs(10));
            wait
        };
        match error {
            RequestError::RetryAfter(wait) => {
                self.health.count_rate_limited();
                tracing::warn!(
                    chat_id,
                    wait_secs = wait.seconds(),
                    "Telegram rate-limits sending (429); waiting as told"
                );
                Next::Wait(wait.duration())
            }
            RequestError::InvalidJson { .. } => {
                tracing::warn!(
                    chat_id,
                    "Telegram's answer to sending a {what} was unreadable; assuming it was sent"
                );
                Next::AssumeSent
            }
            RequestError::Api(ApiError::Unknown(text)) if server_error(&text) => {
                let wait = retry();
                tracing::warn!(chat_id, error = %excerpt(&text), "the Bot API failed to send a {what}; retrying");
                Next::Wait(wait)
            }
            RequestError::Api(e) => Next::Fail(DeliveryError(format!(
                "Telegram refused the {what}: {}",
                excerpt(&e.to_string())
            ))),
            RequestError::MigrateToChatId(to) => {
                Next::Fail(DeliveryError(format!("the group moved to chat {}", to.0)))
            }
            RequestError::Io(e) => {
                Next::Fail(DeliveryError(format!("cannot read the {what}: {e}")))
            }
            e => {
                let wait = retry();
                tracing::warn!(chat_id, error = %said(&e), retry_in_ms = wait.as_millis() as u64, "cannot reach Telegram to send a {what}; retrying");
                Next::Wait(wait)
            }
        }
    }

    /// An error when waiting `wait` more would pass the delivery `deadline`.
    fn within_deadline(&self, deadline: Instant, wait: Duration) -> Result<(), DeliveryError> {
        if Instant::now() + wait > deadline {
            return Err(DeliveryError(format!(
                "not delivered within {}s",
                self.config.delivery_deadline_secs
            )));
        }
        Ok(())
    }

    /// Replaces a message's text (one part; longer text is cut). "Not modified" is success.
    pub(super) async fn edit_text(
        &self,
        chat_id: i64,
        message_id: i32,
        text: &str,
    ) -> Result<(), String> {
        let part = format::render(text).into_iter().next().unwrap_or_else(|| plain_part("…"));
        self.edit_part(chat_id, message_id, &part).await
    }

    /// The message given out as `key` (every part of it) now says `text`: its parts are
    /// edited in order, parts the new text no longer needs are deleted, and parts it needs
    /// beyond them are sent after (at the chat's end).
    pub(super) async fn edit_message(
        &self,
        chat_id: i64,
        key: i32,
        text: &str,
    ) -> Result<(), String> {
        let old = self.parts.lock().unwrap_or_else(|p| p.into_inner()).of(chat_id, key);
        let mut new = format::render(text);
        if new.is_empty() {
            new.push(plain_part("…"));
        }
        let mut ids = Vec::with_capacity(new.len());
        for (i, part) in new.iter().enumerate() {
            match old.get(i) {
                Some(id) => {
                    self.edit_part(chat_id, *id, part).await?;
                    ids.push(*id);
                }
                None => match self.send_part(chat_id, part, None).await {
                    Ok(id) => ids.extend(id),
                    Err(e) => return Err(e.to_string()),
                },
            }
        }
        for id in old.iter().skip(new.len()) {
            self.delete_one(chat_id, *id).await?;
        }
        let mut groups = self.parts.lock().unwrap_or_else(|p| p.into_inner());
        if ids.len() > 1 || ids.first() != Some(&key) {
            groups.remember(chat_id, key, ids);
        } else {
            groups.forget(chat_id, key);
        }
        Ok(())
    }

    /// Deletes the message given out as `key`, every part of it.
    pub(super) async fn delete_message(&self, chat_id: i64, key: i32) -> Result<(), String> {
        let ids = self.parts.lock().unwrap_or_else(|p| p.into_inner()).of(chat_id, key);
        for id in &ids {
            self.delete_one(chat_id, *id).await?;
        }
        self.parts.lock().unwrap_or_else(|p| p.into_inner()).forget(chat_id, key);
        Ok(())
    }

    async fn delete_one(&self, chat_id: i64, id: i32) -> Result<(), String> {
        self.bot
            .delete_message(ChatId(chat_id), TgMessageId(id))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| said(&e))
    }

    /// Replaces one message's text with `part`. "Not modified" is success.
    async fn edit_part(&self, chat_id: i64, message_id: i32, part: &Part) -> Result<(), String> {
        let mut plain = part.html.is_empty();
        for _ in 0..3 {
            let request = if plain {
                self.bot.edit_message_text(
                    ChatId(chat_id),
                    TgMessageId(message_id),
                    part.plain.clone(),
                )
            } else {
                self.bot
                    .edit_message_text(ChatId(chat_id), TgMessageId(message_id), part.html.clone())
                    .parse_mode(ParseMode::Html)
            };
            match request.link_preview_options(no_preview()).send().await {
                Ok(_) | Err(RequestError::Api(ApiError::MessageNotModified)) => return Ok(()),
                Err(RequestError::Api(ApiError::CantParseEntities(_))) if !plain => plain = true,
                // Editing is cosmetic: a short 429 is waited for, a long one skips this edit.
                Err(RequestError::RetryAfter(wait)) if wait.seconds() <= 5 => {
                    self.health.count_rate_limited();
                    tokio::time::sleep(wait.duration()).await;
                }
                Err(e) => return Err(said(&e)),
            }
        }
        Err("gave up after three tries".into())
    }
}

/// The inline keyboard for `buttons`: each button's callback data is its command (cut to
/// Telegram's 64 bytes would change its meaning, so a longer one is left out).
fn keyboard(buttons: &[Vec<Button>]) -> Option<InlineKeyboardMarkup> {
    let rows: Vec<Vec<InlineKeyboardButton>> = buttons
        .iter()
        .map(|row| {
            row.iter()
                .filter(|b| b.command.len() <= 64)
                .map(|b| InlineKeyboardButton::callback(b.label.clone(), b.command.clone()))
                .collect::<Vec<_>>()
        })
        .filter(|row| !row.is_empty())
        .collect();
    (!rows.is_empty()).then(|| InlineKeyboardMarkup::new(rows))
}

/// A Bot API error that is the server's trouble, not the request's (worth another try).
fn server_error(text: &str) -> bool {
    ["Internal Server Error", "Bad Gateway", "Service Unavailable", "Gateway Timeout"]
        .iter()
        .any(|phrase| text.contains(phrase))
}
