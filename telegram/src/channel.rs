//! The Telegram channel: the polling loop that brings updates in, and the [`Channel`] that
//! takes answers, progress, edits and files out.
//!
//! Why its own loop over teloxide's typed requests (and not teloxide's `Dispatcher`): the
//! dispatcher panics when `getMe` fails and hides 409/429/back-off; here a failed `getMe` is
//! survivable, 429 honours `retry_after`, 409 (another process polls the token) is reported
//! and backed off, and an invalid token stops only this channel.
//!
//! The way of a message: `getUpdates` → [`policy::decide`] → [`Ledger::receive`] (recorded,
//! offset moved, in one step) → the bus (`InboundMessage`, id = update id) → … → the bus
//! sends the `Final` answer through the router → [`Channel::send`] → `sendMessage` (split,
//! HTML, plain-text resend, retried) → [`Ledger::settle`] with the ids of the messages sent.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use nexbot_core::channel::{
    Channel, ChannelError, InboundMessage, MessageId, OutboundFile, OutboundKind, OutboundMessage,
    OutboundVoice, TaskUpdate,
};
use nexbot_core::text::excerpt;
use nexbot_core::{BoxFuture, ChannelKind, ChatRef};
use secrecy::{ExposeSecret, SecretString};
use teloxide_core::errors::RequestError;
use teloxide_core::requests::{Request, Requester};
use teloxide_core::types::BotCommand;
use teloxide_core::Bot;
use thiserror::Error;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::TelegramConfig;
use crate::format::Part;
use crate::health::{ChannelHealth, PollState};
use crate::ledger::{Ledger, Settlement};
use crate::policy::BotIdentity;
use deliver::PartGroups;
use disk_full::DiskFullNotices;
use poll::Arrival;
use progress::TaskView;

mod cut_off;
mod deliver;
mod disk_full;
mod poll;
mod press;
mod progress;

/// Why the channel could not be built.
#[derive(Debug, Error)]
pub enum TelegramError {
    #[error("invalid [telegram] settings: {0}")]
    Config(String),
    #[error("cannot build the Telegram HTTP client: {0}")]
    Client(String),
}

/// The Telegram channel. Cheap to clone; every clone is the same channel.
#[derive(Clone)]
pub struct Telegram {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Telegram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the bot: teloxide's `Bot` prints its token.
        f.debug_struct("Telegram")
            .field("api_url", &self.inner.config.api_url)
            .field("health", &self.inner.health.summary())
            .finish()
    }
}

struct Inner {
    bot: Bot,
    config: TelegramConfig,
    /// Who may talk to the bot: the config's lists, replaced by [`Telegram::set_access`].
    access: RwLock<TelegramConfig>,
    ledger: Arc<dyn Ledger>,
    health: ChannelHealth,
    me: RwLock<BotIdentity>,
    /// Updates handed to the bus and not yet answered, by update id.
    inflight: Mutex<HashMap<i64, Inflight>>,
    /// Progress messages of running delegated tasks, by task id.
    tasks: Mutex<HashMap<String, TaskView>>,
    /// Chats where an answer could not be delivered: they get a notice once delivery works.
    owes_notice: Mutex<HashSet<i64>>,
    /// Chats that were told once that the bot is private.
    refused: Mutex<HashSet<i64>>,
    /// Every part of the recent messages sent in several parts, by the id [`Channel::send`]
    /// returned for them: an edit or a delete of that id reaches all of them.
    parts: Mutex<PartGroups>,
    /// Chats whose updates wait behind a file being fetched ([`Inner::take_in_order`]).
    lanes: Mutex<HashMap<i64, mpsc::UnboundedSender<Arrival>>>,
    /// Updates not recorded for lack of space whose chat was told so.
    disk_full: DiskFullNotices,
    /// Pressed buttons waiting for their command's answer ([`press`]).
    presses: press::Presses,
}

struct Inflight {
    chat_id: i64,
    message_id: Option<i32>,
    group: bool,
    typing: CancellationToken,
}

impl Telegram {
    /// A channel for the bot with `token`, keeping its updates in `ledger`. Nothing is sent
    /// until [`Telegram::run`] or an answer.
    pub fn new(
        token: &SecretString,
        config: TelegramConfig,
        ledger: Arc<dyn Ledger>,
    ) -> Result<Self, TelegramError> {
        let problems = config.problems();
        if !problems.is_empty() {
            let problems: Vec<String> =
                problems.into_iter().map(|(key, why)| format!("{key}: {why}")).collect();
            return Err(TelegramError::Config(problems.join("; ")));
        }
        let url = reqwest::Url::parse(&config.api_url)
            .map_err(|e| TelegramError::Config(format!("telegram.api_url: {e}")))?;
        // The client's timeout must outlast a long poll.
        let client = teloxide_core::net::default_reqwest_settings()
            .timeout(Duration::from_secs(u64::from(config.poll_timeout_secs) + 15))
            .build()
            .map_err(|e| TelegramError::Client(e.to_string()))?;
        let bot = Bot::with_client(token.expose_secret(), client).set_api_url(url);
        Ok(Self {
            inner: Arc::new(Inner {
                bot,
                access: RwLock::new(config.clone()),
                config,
                ledger,
                health: ChannelHealth::default(),
                me: RwLock::new(BotIdentity::default()),
                inflight: Mutex::new(HashMap::new()),
                tasks: Mutex::new(HashMap::new()),
                owes_notice: Mutex::new(HashSet::new()),
                parts: Mutex::default(),
                refused: Mutex::new(HashSet::new()),
                lanes: Mutex::new(HashMap::new()),
                disk_full: DiskFullNotices::default(),
                presses: press::Presses::default(),
            }),
        })
    }

    /// Takes new allow-lists (`allowed_users`, `allowed_chats`) at once, for the next update
    /// (a config reload). The owner and everything else stay as started.
    pub fn set_access(&self, config: &TelegramConfig) {
        let mut access = self.inner.access.write().unwrap_or_else(|p| p.into_inner());
        access.allowed_users = config.allowed_users.clone();
        access.allowed_chats = config.allowed_chats.clone();
        tracing::info!(
            users = access.allowed_users.len(),
            chats = access.allowed_chats.len(),
            "Telegram allow-lists replaced"
        );
    }

    /// How the channel is doing.
    pub fn health(&self) -> ChannelHealth {
        self.inner.health.clone()
    }

    /// Polls and hands updates to `inbound` until `stop` fires or the token is refused.
    /// First handles again what an earlier run received but never settled.
    pub async fn run(self, inbound: mpsc::Sender<InboundMessage>, stop: CancellationToken) {
        let inner = self.inner;
        inner.identify().await;
        if matches!(inner.health.snapshot().poll, PollState::Stopped { .. }) {
            return;
        }
        if let Err(e) = inner.replay(&inbound).await {
            tracing::error!(error = %e, "cannot read the unsettled Telegram updates");
        }
        inner.poll(inbound, stop).await;
        // Whatever still shows "typing" stops.
        for (_, flight) in inner.inflight.lock().unwrap_or_else(|p| p.into_inner()).drain() {
            flight.typing.cancel();
        }
    }

    /// Shows `commands` (name, summary) as the bot's command menu. Best effort: a failure is
    /// logged, nothing else.
    pub async fn set_commands(&self, commands: &[(&str, &str)]) {
        let commands: Vec<BotCommand> =
            commands.iter().map(|(name, summary)| BotCommand::new(*name, *summary)).collect();
        if let Err(e) = self.inner.bot.set_my_commands(commands).send().await {
            tracing::warn!(error = %said(&e), "cannot register the bot's command menu (setMyCommands)");
        }
    }
}

impl Inner {
    /// The Telegram id of the message update `update_id` brought, while it is being answered.
    fn inbound_message(&self, update_id: u64) -> Option<i32> {
        let inflight = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
        inflight.get(&i64::try_from(update_id).ok()?).and_then(|f| f.message_id)
    }

    /// The `Final` (or `Taken`) of update `update_id`: stops its typing, says where to reply.
    fn finish_inflight(&self, update_id: i64) -> Option<Inflight> {
        let flight = self.inflight.lock().unwrap_or_else(|p| p.into_inner()).remove(&update_id);
        if let Some(flight) = &flight {
            flight.typing.cancel();
        }
        flight
    }
}

fn telegram_chat(chat: &ChatRef) -> Result<i64, ChannelError> {
    match chat {
        ChatRef::Telegram(id) => Ok(*id),
        other => Err(ChannelError::Failed(format!("{other} is not a Telegram chat"))),
    }
}

impl Channel for Telegram {
    fn send(
        &self,
        message: OutboundMessage,
    ) -> BoxFuture<'_, Result<Option<MessageId>, ChannelError>> {
        Box::pin(async move {
            let inner = &self.inner;
            let chat_id = telegram_chat(&message.chat)?;
            let update_id = message.reply_to.map(|id| id as i64);
            match message.kind {
                OutboundKind::Progress => {
                    let ids = inner
                        .deliver_with(chat_id, &message.text, None, &message.buttons)
                        .await
                        .map_err(|e| ChannelError::Failed(e.to_string()))?;
                    Ok(inner.given_out(chat_id, ids))
                }
                OutboundKind::Taken => {
                    if let Some(update_id) = update_id {
                        inner.finish_inflight(update_id);
                        inner.answer_press(update_id, None).await;
                        inner
                            .settle(update_id, Settlement::Answered { message_ids: Vec::new() })
                            .await;
                    }
                    Ok(None)
                }
                OutboundKind::Final => {
                    let flight = update_id.and_then(|id| inner.finish_inflight(id));
                    // A pressed button's short answer is the press's notice, not a message.
                    if let Some(update_id) = update_id {
                        let notice =
                            press::fits_a_notice(&message.text, !message.buttons.is_empty())
                                .then_some(message.text.as_str());
                        if inner.answer_press(update_id, notice).await && notice.is_some() {
                            let answered = Settlement::Answered { message_ids: Vec::new() };
                            inner.settle(update_id, answered).await;
                            return Ok(None);
                        }
                    }
                    // In a group the answer quotes the message it answers.
                    let reply_to = flight
                        .filter(|f| f.group && f.chat_id == chat_id)
                        .and_then(|f| f.message_id);
                    if let Some(update_id) = update_id {
                        inner.mark_sending(update_id).await;
                    }
                    let result = inner
                        .deliver_with(chat_id, &message.text, reply_to, &message.buttons)
                        .await;
                    if let Some(update_id) = update_id {
                        let settlement = match &result {
                            Ok(ids) => Settlement::Answered { message_ids: ids.clone() },
                            Err(e) => Settlement::Failed { error: e.to_string() },
                        };
                        inner.settle(update_id, settlement).await;
                    }
                    let ids = result.map_err(|e| ChannelError::Failed(e.to_string()))?;
                    Ok(inner.given_out(chat_id, ids))
                }
            }
        })
    }

    fn send_file(
        &self,
        file: OutboundFile,
    ) -> BoxFuture<'_, Result<Option<MessageId>, ChannelError>> {
        Box::pin(async move {
            let chat_id = telegram_chat(&file.chat)?;
            let id = self
                .inner
                .send_document(chat_id, file.path, file.contents, file.caption)
                .await
                .map_err(|e| ChannelError::Failed(e.to_string()))?;
            Ok(id.map(|id| MessageId(i64::from(id))))
        })
    }

    fn send_voice(
        &self,
        voice: OutboundVoice,
    ) -> BoxFuture<'_, Result<Option<MessageId>, ChannelError>> {
        Box::pin(async move {
            let chat_id = telegram_chat(&voice.chat)?;
            // The inbound message's Telegram id, as the answer's reply uses it.
            let reply_to = voice.reply_to.and_then(|update| self.inner.inbound_message(update));
            let id = self
                .inner
                .send_voice(chat_id, voice.audio, reply_to)
                .await
                .map_err(|e| ChannelError::Failed(e.to_string()))?;
            Ok(id.map(|id| MessageId(i64::from(id))))
        })
    }

    fn edit<'a>(
        &'a self,
        chat: &'a ChatRef,
        message: MessageId,
        text: &'a str,
    ) -> BoxFuture<'a, Result<(), ChannelError>> {
        Box::pin(async move {
            let chat_id = telegram_chat(chat)?;
            let id = i32::try_from(message.0)
                .map_err(|_| ChannelError::Failed(format!("no such message {}", message.0)))?;
            self.inner.edit_message(chat_id, id, text).await.map_err(ChannelError::Failed)
        })
    }

    fn delete<'a>(
        &'a self,
        chat: &'a ChatRef,
        message: MessageId,
    ) -> BoxFuture<'a, Result<(), ChannelError>> {
        Box::pin(async move {
            let chat_id = telegram_chat(chat)?;
            let id = i32::try_from(message.0)
                .map_err(|_| ChannelError::Failed(format!("no such message {}", message.0)))?;
            self.inner.delete_message(chat_id, id).await.map_err(ChannelError::Failed)
        })
    }

    fn forget_inbound<'a>(
        &'a self,
        chat: &'a ChatRef,
        inbound: u64,
    ) -> BoxFuture<'a, Result<(), ChannelError>> {
        Box::pin(async move {
            let chat_id = telegram_chat(chat)?;
            let message_id = {
                let inflight = self.inner.inflight.lock().unwrap_or_else(|p| p.into_inner());
                inflight
                    .get(&(inbound as i64))
                    .filter(|flight| flight.chat_id == chat_id)
                    .and_then(|flight| flight.message_id)
            };
            let Some(message_id) = message_id else {
                return Err(ChannelError::Failed(format!(
                    "the message of update {inbound} is not being handled in this chat"
                )));
            };
            self.delete(chat, MessageId(i64::from(message_id))).await
        })
    }

    fn task_update<'a>(
        &'a self,
        chat: &'a ChatRef,
        task_id: &'a str,
        update: TaskUpdate,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if let ChatRef::Telegram(chat_id) = chat {
                self.inner.task_update(*chat_id, task_id, update).await;
            }
        })
    }
}

/// The channel kind this crate serves.
pub const KIND: ChannelKind = ChannelKind::Telegram;

fn one_line(text: &str, max_chars: usize) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= max_chars {
        line
    } else {
        let cut: String = line.chars().take(max_chars.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}

fn short(text: &str) -> String {
    one_line(text, 160)
}

/// A Bot API error as a log line or a status can carry it: never the whole body of an answer
/// that is not the Bot API's JSON (teloxide's `InvalidJson` holds all of it, megabytes maybe).
fn said(e: &RequestError) -> String {
    match e {
        RequestError::InvalidJson { source, raw } => {
            format!("the Bot API's answer is not its JSON ({source}): {}", excerpt(raw))
        }
        other => excerpt(&other.to_string()),
    }
}

/// A part sent without formatting (an empty `html` means plain text).
fn plain_part(text: &str) -> Part {
    Part { html: String::new(), plain: text.to_owned() }
}
