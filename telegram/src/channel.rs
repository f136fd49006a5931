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

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use nexbot_core::channel::{
    Button, Channel, ChannelError, InboundFile, InboundMessage, MessageId, OutboundFile,
    OutboundKind, OutboundMessage, TaskUpdate,
};
use nexbot_core::text::excerpt;
use nexbot_core::{BoxFuture, ChannelKind, ChatRef};
use secrecy::{ExposeSecret, SecretString};
use teloxide_core::errors::{ApiError, RequestError};
use teloxide_core::payloads::setters::*;
use teloxide_core::requests::{Request, Requester};
use teloxide_core::types::{
    BotCommand, ChatAction, ChatId, InlineKeyboardButton, InlineKeyboardMarkup, InputFile,
    MessageId as TgMessageId, ParseMode, ReplyParameters, Update, UpdateKind,
};
use teloxide_core::Bot;
use thiserror::Error;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::TelegramConfig;
use crate::format::{self, Part};
use crate::health::{Health, PollState};
use crate::ledger::{Ledger, LedgerError, ReceivedUpdate, Settlement};
use crate::policy::{self, BotIdentity, Decision};
use disk_full::{log_record_failure, log_recorded_again, DiskFullNotices};

mod disk_full;

/// Lines of a task's progress shown in its message.
const PROGRESS_LINES: usize = 6;
/// How long a turn may show "typing…" at most.
const MAX_TYPING: Duration = Duration::from_secs(30 * 60);
/// Longest wait between two polls after errors.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// The least time from one `getUpdates` to the next when the first brought nothing: a Bot API
/// server that answers an empty poll at once (no long polling, as some emulators and proxies
/// do) is asked about once a second, not in a busy loop. Telegram itself holds an empty poll
/// for `poll_timeout_secs`, so this never delays it.
const MIN_EMPTY_POLL: Duration = Duration::from_secs(1);
/// How often an unknown bot identity (failed `getMe`) is asked again.
const IDENTIFY_EVERY: Duration = Duration::from_secs(60);

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
    health: Health,
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
}

/// A recorded update on its way to the bus, with what it still needs: its file fetched.
struct Arrival {
    record: ReceivedUpdate,
    chat_id: i64,
    group: bool,
    text: String,
    file: Option<policy::FileRef>,
    inbound: mpsc::Sender<InboundMessage>,
}

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
struct PartGroups {
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

struct Inflight {
    chat_id: i64,
    message_id: Option<i32>,
    group: bool,
    typing: CancellationToken,
}

struct TaskView {
    chat_id: i64,
    message_id: Option<i32>,
    header: String,
    lines: VecDeque<String>,
    last_edit: Instant,
    flush_scheduled: bool,
    /// The text last shown, so an edit never repeats it ("message is not modified").
    shown: String,
}

impl TaskView {
    fn text(&self) -> String {
        let mut text = self.header.clone();
        for line in &self.lines {
            text.push_str("\n• ");
            text.push_str(line);
        }
        text
    }
}

/// Why one delivery failed for good.
#[derive(Debug, Error)]
#[error("{0}")]
struct DeliveryError(String);

/// What follows a failed send ([`Inner::after_failure`]).
enum Next {
    Wait(Duration),
    AssumeSent,
    Fail(DeliveryError),
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
                health: Health::default(),
                me: RwLock::new(BotIdentity::default()),
                inflight: Mutex::new(HashMap::new()),
                tasks: Mutex::new(HashMap::new()),
                owes_notice: Mutex::new(HashSet::new()),
                parts: Mutex::default(),
                refused: Mutex::new(HashSet::new()),
                lanes: Mutex::new(HashMap::new()),
                disk_full: DiskFullNotices::default(),
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
    pub fn health(&self) -> Health {
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
    /// `getMe`, survivable: on failure the identity stays unknown and is asked again later.
    async fn identify(&self) {
        match self.bot.get_me().send().await {
            Ok(me) => {
                let username = me.username().to_owned();
                tracing::info!(bot = %username, "Telegram bot identified");
                self.health.set_username(username.clone());
                *self.me.write().unwrap_or_else(|p| p.into_inner()) =
                    BotIdentity { id: Some(me.id.0), username: Some(username) };
            }
            Err(RequestError::Api(ApiError::InvalidToken)) => self.token_refused(),
            // A partial `getMe` (some Bot API servers leave fields out): take what is there.
            Err(RequestError::InvalidJson { raw, .. }) => {
                let value: serde_json::Value = serde_json::from_str(&raw).unwrap_or_default();
                let result = &value["result"];
                let identity = BotIdentity {
                    id: result["id"].as_u64(),
                    username: result["username"].as_str().map(str::to_owned),
                };
                tracing::warn!(
                    bot = ?identity.username,
                    "getMe answered an incomplete bot description; using what it has"
                );
                if let Some(name) = &identity.username {
                    self.health.set_username(name.clone());
                }
                *self.me.write().unwrap_or_else(|p| p.into_inner()) = identity;
            }
            Err(e) => tracing::warn!(
                error = %said(&e),
                "getMe failed; the bot's name is unknown for now (in groups it answers only \
                 commands until it is known)"
            ),
        }
    }

    fn token_refused(&self) {
        let reason = "Telegram refused the bot token (401 Unauthorized): check \
                      NEXBOT_TELEGRAM_TOKEN; the rest of the daemon serves on"
            .to_owned();
        tracing::error!("{reason}");
        self.health.set(PollState::Stopped { reason });
    }

    async fn replay(
        self: &Arc<Self>,
        inbound: &mpsc::Sender<InboundMessage>,
    ) -> Result<(), LedgerError> {
        for update in self.ledger.cut_off().await? {
            self.cut_off(update).await;
        }
        let pending = self.ledger.unsettled().await?;
        if !pending.is_empty() {
            tracing::info!(
                updates = pending.len(),
                "handling Telegram updates left unanswered by the last run"
            );
        }
        for update in pending {
            let ChatRef::Telegram(chat_id) = update.chat else { continue };
            if policy::is_secret_command(&update.text) {
                // Its value was never kept, so it cannot be handled again.
                let notice = "Your /secret message was interrupted by a restart and its value \
                              was not kept: please send it again.";
                if let Err(e) = self.deliver(chat_id, notice, None).await {
                    tracing::warn!(chat_id, error = %e, "cannot ask for an interrupted /secret again");
                }
                let settlement = Settlement::Failed {
                    error: "interrupted by a restart; the value is not kept".into(),
                };
                self.settle(update.update_id, settlement).await;
                continue;
            }
            let group = chat_id < 0;
            let file = update.file.as_deref().and_then(policy::FileRef::from_ledger);
            let text = update.text.clone();
            self.fetch_and_hand_over(&update, chat_id, group, text, file, inbound).await;
        }
        Ok(())
    }

    /// An update whose answer was being sent when the last run stopped: whether it arrived is
    /// unknown, so it is not answered again (that could answer it twice); its user is told.
    async fn cut_off(&self, update: ReceivedUpdate) {
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

    async fn poll(
        self: &Arc<Self>,
        inbound: mpsc::Sender<InboundMessage>,
        stop: CancellationToken,
    ) {
        let mut offset = match self.ledger.next_offset().await {
            Ok(offset) => offset,
            Err(e) => {
                tracing::error!(error = %e, "cannot read the Telegram offset; starting from Telegram's");
                None
            }
        };
        let mut backoff = Duration::ZERO;
        let mut last_identify = Instant::now();
        let mut conflict_logged = false;
        let mut record_errors = nexbot_core::repeat::RepeatFilter::default();
        loop {
            if !backoff.is_zero() {
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(jitter(backoff)) => {}
                }
            }
            if self.me.read().unwrap_or_else(|p| p.into_inner()).username.is_none()
                && last_identify.elapsed() >= IDENTIFY_EVERY
            {
                last_identify = Instant::now();
                self.identify().await;
            }
            let mut request = self.bot.get_updates().timeout(self.config.poll_timeout_secs);
            if let Some(offset) = offset {
                request = request.offset(offset.clamp(0, i64::from(i32::MAX)) as i32);
            }
            let asked = Instant::now();
            let result = tokio::select! {
                () = stop.cancelled() => return,
                result = request.send() => result,
            };
            let updates = match result {
                Ok(updates) => updates,
                Err(RequestError::RetryAfter(wait)) => {
                    self.health.count_rate_limited();
                    let wait =
                        wait.duration().min(Duration::from_secs(self.config.max_retry_after_secs));
                    tracing::warn!(
                        wait_secs = wait.as_secs(),
                        "Telegram rate-limits getUpdates (429); waiting as told"
                    );
                    self.health.set(PollState::BackingOff {
                        reason: format!("429, retry after {}s", wait.as_secs()),
                    });
                    tokio::select! {
                        () = stop.cancelled() => return,
                        () = tokio::time::sleep(wait) => {}
                    }
                    backoff = Duration::ZERO;
                    continue;
                }
                Err(RequestError::Api(ApiError::TerminatedByOtherGetUpdates)) => {
                    self.health.count_conflict();
                    if !conflict_logged {
                        tracing::warn!(
                            "Telegram answered 409 Conflict: another process is polling this bot \
                             token (a second nexbot with the same NEXBOT_TELEGRAM_TOKEN?); backing off"
                        );
                        conflict_logged = true;
                    } else {
                        tracing::debug!("still 409 Conflict on getUpdates");
                    }
                    backoff = next_backoff(backoff);
                    continue;
                }
                Err(RequestError::Api(ApiError::InvalidToken)) => {
                    self.token_refused();
                    return;
                }
                Err(e) => {
                    let error = said(&e);
                    tracing::warn!(%error, retry_in_secs = next_backoff(backoff).as_secs(), "getUpdates failed; backing off");
                    self.health.count_unreachable(short(&error));
                    backoff = next_backoff(backoff);
                    continue;
                }
            };
            if conflict_logged {
                tracing::info!("the getUpdates conflict is over; polling again");
                conflict_logged = false;
            }
            backoff = Duration::ZERO;
            self.health.poll_ok(updates.len());
            if updates.is_empty() {
                let rest = MIN_EMPTY_POLL.saturating_sub(asked.elapsed());
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(rest) => {}
                }
            }
            for update in updates {
                let id = i64::from(update.id.0);
                match self.handle(update, &inbound).await {
                    Ok(()) => {
                        offset = Some(offset.map_or(id + 1, |o| o.max(id + 1)));
                        log_recorded_again(&mut record_errors);
                        self.health.recorded();
                    }
                    Err(e) => {
                        // Not recorded, so the offset stays: Telegram sends it again.
                        log_record_failure(&mut record_errors, id, &e);
                        self.health.count_record_failure(short(&e.message));
                        backoff = next_backoff(backoff);
                        break;
                    }
                }
                if inbound.is_closed() {
                    return;
                }
            }
        }
    }

    /// Decides, records, then acts on one update.
    async fn handle(
        self: &Arc<Self>,
        update: Update,
        inbound: &mpsc::Sender<InboundMessage>,
    ) -> Result<(), LedgerError> {
        let update_id = i64::from(update.id.0);
        let me = self.me.read().unwrap_or_else(|p| p.into_inner()).clone();
        let access = self.access.read().unwrap_or_else(|p| p.into_inner()).clone();
        let decision = policy::decide(&access, &me, &update);
        if let UpdateKind::CallbackQuery(query) = &update.kind {
            // A pressed button: Telegram shows a spinner on it until the press is answered,
            // whatever is decided. The command's own answer comes as a message.
            let note = match &decision {
                Decision::Handle { .. } => None,
                Decision::Refuse { .. } => Some("Not allowed."),
            };
            let mut answer = self.bot.answer_callback_query(query.id.clone());
            if let Some(note) = note {
                answer = answer.text(note);
            }
            if let Err(e) = answer.send().await {
                tracing::debug!(update_id, error = %said(&e), "answerCallbackQuery failed");
            }
        }
        match decision {
            Decision::Handle { chat_id, user_id, message_id, text, ledger_text, file } => {
                let record = ReceivedUpdate {
                    update_id,
                    chat: ChatRef::Telegram(chat_id),
                    user_id: Some(user_id),
                    message_id: Some(message_id),
                    text: ledger_text,
                    file: file.as_ref().map(policy::FileRef::to_ledger),
                };
                let received = self.ledger.receive(record.clone(), None).await;
                if let Err(e) = &received {
                    self.tell_if_disk_full(e, update_id, chat_id, message_id);
                }
                if !received? {
                    tracing::debug!(update_id, "update seen before; not handled again");
                    return Ok(());
                }
                self.disk_full.recorded(update_id);
                let group = !update.chat().is_some_and(|c| c.is_private());
                let inbound = inbound.clone();
                self.take_in_order(Arrival { record, chat_id, group, text, file, inbound }).await;
            }
            Decision::Refuse { chat_id, user_id, message_id, rule, reply, ledger_text } => {
                let record = ReceivedUpdate {
                    update_id,
                    chat: ChatRef::Telegram(chat_id.unwrap_or(0)),
                    user_id,
                    message_id,
                    text: ledger_text,
                    file: None,
                };
                let settlement = Settlement::Refused { rule: rule.clone() };
                if !self.ledger.receive(record, Some(settlement)).await? {
                    return Ok(());
                }
                tracing::info!(update_id, chat_id = ?chat_id, user_id = ?user_id, %rule, "Telegram update refused");
                if let (Some(chat_id), Some(reply)) = (chat_id, reply) {
                    // A stranger is told once per run, not for every message.
                    let first = rule != "not-allowed"
                        || self.refused.lock().unwrap_or_else(|p| p.into_inner()).insert(chat_id);
                    if first {
                        if let Err(e) = self.deliver(chat_id, &reply, None).await {
                            tracing::warn!(chat_id, error = %e, "cannot send a refusal");
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Hands `arrival` over in its chat's order without holding up the polling loop: a file
    /// is fetched on a lane of its chat's own (a task that ends when the chat's queue is
    /// empty), and the chat's later updates wait on that lane behind it, so a 20 MB download
    /// in one chat delays no other chat and nothing in its own chat overtakes it. An update
    /// with no file in a chat with no lane goes at once (lanes are made only here, by the one
    /// polling loop, so none can appear for the chat meanwhile).
    async fn take_in_order(self: &Arc<Self>, arrival: Arrival) {
        if let Some(now) = self.queue_in_lane(arrival) {
            let Arrival { record, chat_id, group, text, inbound, .. } = now;
            self.hand_over(&record, chat_id, group, text, Vec::new(), &inbound).await;
        }
    }

    /// Puts `arrival` on its chat's lane (starting one for a file), or gives it back to be
    /// handed over now: no file, no lane.
    fn queue_in_lane(self: &Arc<Self>, arrival: Arrival) -> Option<Arrival> {
        let mut lanes = self.lanes.lock().unwrap_or_else(|p| p.into_inner());
        let arrival = match lanes.get(&arrival.chat_id) {
            Some(lane) => match lane.send(arrival) {
                Ok(()) => return None,
                // The lane just ended; this update starts the next one.
                Err(mpsc::error::SendError(arrival)) => arrival,
            },
            None => arrival,
        };
        if arrival.file.is_none() {
            return Some(arrival);
        }
        let (lane, mut queue) = mpsc::unbounded_channel();
        let chat_id = arrival.chat_id;
        let _ = lane.send(arrival);
        lanes.insert(chat_id, lane);
        drop(lanes);
        let me = self.clone();
        tokio::spawn(async move {
            loop {
                let next = match queue.try_recv() {
                    Ok(next) => next,
                    Err(_) => {
                        // Nothing queued: the lane ends, under the lock, so no update is
                        // sent to it after it stopped reading.
                        let mut lanes = me.lanes.lock().unwrap_or_else(|p| p.into_inner());
                        match queue.try_recv() {
                            Ok(next) => next,
                            Err(_) => {
                                lanes.remove(&chat_id);
                                return;
                            }
                        }
                    }
                };
                let Arrival { record, chat_id, group, text, file, inbound } = next;
                me.fetch_and_hand_over(&record, chat_id, group, text, file, &inbound).await;
            }
        });
        None
    }

    /// Fetches the update's file (after it is recorded: a restart mid-way fetches it again),
    /// then hands it over; a file that cannot be fetched is said to the user and the update
    /// settled as failed.
    async fn fetch_and_hand_over(
        self: &Arc<Self>,
        record: &ReceivedUpdate,
        chat_id: i64,
        group: bool,
        text: String,
        file: Option<policy::FileRef>,
        inbound: &mpsc::Sender<InboundMessage>,
    ) {
        let files = match file {
            None => Vec::new(),
            Some(file) => match self.fetch(&file).await {
                Ok(fetched) => vec![fetched],
                Err(why) => {
                    let update_id = record.update_id;
                    tracing::warn!(update_id, chat_id, error = %why, "cannot fetch a user's file");
                    let reply = format!(
                        "I could not fetch {} you sent from Telegram ({why}); please send it \
                         again.",
                        file.kind.described()
                    );
                    if let Err(e) = self.deliver(chat_id, &reply, record.message_id).await {
                        tracing::warn!(chat_id, error = %e, "cannot say a file was not fetched");
                    }
                    let error = format!("fetching the file: {why}");
                    self.settle(update_id, Settlement::Failed { error }).await;
                    return;
                }
            },
        };
        self.hand_over(record, chat_id, group, text, files, inbound).await;
    }

    /// A user's file: `getFile`, then its bytes, at most `max_file_bytes` of them (Telegram's
    /// size may be absent or wrong), within the delivery deadline. The error never holds the
    /// download URL (it carries the token).
    async fn fetch(&self, file: &policy::FileRef) -> Result<InboundFile, String> {
        use futures_util::StreamExt;
        let limit = self.config.max_file_bytes;
        let deadline = Duration::from_secs(self.config.delivery_deadline_secs);
        let fetch = async {
            let id = teloxide_core::types::FileId(file.file_id.clone());
            let found = self.bot.get_file(id).send().await.map_err(|e| said(&e))?;
            if let Some(size) = policy::known_size(&found.meta).filter(|s| *s > limit) {
                return Err(format!("it is {}", nexbot_core::text::human_size(size)));
            }
            // `<api>/file/bot<token>/<path>`, the path's own `/` kept (teloxide's download
            // writes them `%2F`, one segment).
            let mut url = self.bot.api_url();
            url.path_segments_mut()
                .map_err(|()| "the Bot API URL cannot take a path".to_owned())?
                .pop_if_empty()
                .push("file")
                .push(&format!("bot{}", self.bot.token()))
                .extend(found.path.split('/'));
            let response = self
                .bot
                .client()
                .get(url)
                .send()
                .await
                .and_then(reqwest::Response::error_for_status)
                .map_err(|e| excerpt(&e.without_url().to_string()))?;
            let mut stream = response.bytes_stream();
            let mut bytes = Vec::new();
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| excerpt(&e.without_url().to_string()))?;
                if (bytes.len() + chunk.len()) as u64 > limit {
                    return Err(format!("it is over {}", nexbot_core::text::human_size(limit)));
                }
                bytes.extend_from_slice(&chunk);
            }
            Ok(bytes)
        };
        let bytes = tokio::time::timeout(deadline, fetch)
            .await
            .map_err(|_| format!("it did not arrive within {} s", deadline.as_secs()))??;
        Ok(InboundFile {
            kind: file.kind,
            name: file.name.clone(),
            mime: file.mime.clone(),
            bytes,
            duration_secs: file.duration_secs,
        })
    }

    /// Gives a recorded update to the bus and shows "typing…" until it is answered.
    async fn hand_over(
        self: &Arc<Self>,
        record: &ReceivedUpdate,
        chat_id: i64,
        group: bool,
        text: String,
        files: Vec<InboundFile>,
        inbound: &mpsc::Sender<InboundMessage>,
    ) {
        let typing = CancellationToken::new();
        self.inflight.lock().unwrap_or_else(|p| p.into_inner()).insert(
            record.update_id,
            Inflight { chat_id, message_id: record.message_id, group, typing: typing.clone() },
        );
        let message = InboundMessage {
            chat: ChatRef::Telegram(chat_id),
            id: record.update_id as u64,
            text,
            user: record.user_id,
            files,
        };
        if inbound.send(message).await.is_err() {
            // The bus is gone (shutting down): the update stays unsettled and is handled
            // after the restart.
            typing.cancel();
            self.inflight.lock().unwrap_or_else(|p| p.into_inner()).remove(&record.update_id);
            return;
        }
        let me = self.clone();
        tokio::spawn(async move { me.keep_typing(chat_id, typing).await });
    }

    async fn keep_typing(&self, chat_id: i64, stop: CancellationToken) {
        let every = Duration::from_secs(self.config.typing_interval_secs);
        let until = Instant::now() + MAX_TYPING;
        while Instant::now() < until {
            // Only a hint: failures are not worth a log line each.
            let action = self.bot.send_chat_action(ChatId(chat_id), ChatAction::Typing).send();
            tokio::select! {
                () = stop.cancelled() => return,
                result = action => if let Err(e) = result { tracing::debug!(error = %said(&e), "sendChatAction failed") },
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(every) => {}
            }
        }
    }

    /// Marks `update_id`'s answer as on its way (see [`Ledger::sending`]). A failure (a full
    /// disk) is logged and the answer sent anyway: answering beats the rare double.
    async fn mark_sending(&self, update_id: i64) {
        if let Err(e) = self.ledger.sending(update_id).await {
            tracing::warn!(update_id, error = %e, "cannot mark a Telegram update's answer as being sent");
        }
    }

    async fn settle(&self, update_id: i64, settlement: Settlement) {
        if let Err(e) = self.ledger.settle(update_id, settlement).await {
            tracing::error!(update_id, error = %e, "cannot record how a Telegram update ended");
        }
    }

    /// Sends `text` to `chat_id` as one or more messages; returns their ids. A chat that
    /// missed an answer earlier first gets a short notice.
    async fn deliver(
        &self,
        chat_id: i64,
        text: &str,
        reply_to: Option<i32>,
    ) -> Result<Vec<i32>, DeliveryError> {
        self.deliver_with(chat_id, text, reply_to, &[]).await
    }

    /// [`Self::deliver`] with `buttons` under the last part (inline keyboard buttons whose
    /// callback data is the command they press).
    async fn deliver_with(
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
    fn given_out(&self, chat_id: i64, ids: Vec<i32>) -> Option<MessageId> {
        let key = *ids.last()?;
        if ids.len() > 1 {
            self.parts.lock().unwrap_or_else(|p| p.into_inner()).remember(chat_id, key, ids);
        }
        Some(MessageId(i64::from(key)))
    }

    /// One message, retried until the delivery deadline: 429 waits as told, network errors
    /// back off, entities Telegram rejects are resent as plain text. `Ok(None)` when Telegram
    /// answered something unreadable (the message was most likely sent; not sent again).
    async fn send_part(
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
    async fn send_document(
        &self,
        chat_id: i64,
        path: std::path::PathBuf,
        contents: Option<std::path::PathBuf>,
        caption: Option<String>,
    ) -> Result<Option<i32>, DeliveryError> {
        let deadline = Instant::now() + Duration::from_secs(self.config.delivery_deadline_secs);
        let mut backoff = Duration::from_millis(500);
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        let read_from = contents.unwrap_or(path);
        loop {
            let mut document = InputFile::file(&read_from);
            if let Some(name) = &name {
                document = document.file_name(name.clone());
            }
            let mut request = self.bot.send_document(ChatId(chat_id), document);
            if let Some(caption) = &caption {
                request = request.caption(caption.clone());
            }
            let wait = match request.send().await {
                Ok(message) => return Ok(Some(message.id.0)),
                Err(e) => match self.after_failure(chat_id, "file", e, &mut backoff) {
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
    async fn edit_text(&self, chat_id: i64, message_id: i32, text: &str) -> Result<(), String> {
        let part = format::render(text).into_iter().next().unwrap_or_else(|| plain_part("…"));
        self.edit_part(chat_id, message_id, &part).await
    }

    /// The message given out as `key` (every part of it) now says `text`: its parts are
    /// edited in order, parts the new text no longer needs are deleted, and parts it needs
    /// beyond them are sent after (at the chat's end).
    async fn edit_message(&self, chat_id: i64, key: i32, text: &str) -> Result<(), String> {
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
    async fn delete_message(&self, chat_id: i64, key: i32) -> Result<(), String> {
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

    /// The `Final` (or `Taken`) of update `update_id`: stops its typing, says where to reply.
    fn finish_inflight(&self, update_id: i64) -> Option<Inflight> {
        let flight = self.inflight.lock().unwrap_or_else(|p| p.into_inner()).remove(&update_id);
        if let Some(flight) = &flight {
            flight.typing.cancel();
        }
        flight
    }

    async fn task_update(self: &Arc<Self>, chat_id: i64, task_id: &str, update: TaskUpdate) {
        match update {
            TaskUpdate::Started { task } => {
                let header = format!("⏳ Working on: {}", one_line(&task, 200));
                let message_id = match self.send_part(chat_id, &plain_part(&header), None).await {
                    Ok(id) => id,
                    Err(e) => {
                        tracing::debug!(chat_id, error = %e, "cannot show a task's progress");
                        None
                    }
                };
                if let Some(id) = message_id {
                    // Kept, so a run after a crash can edit it to say the task was interrupted.
                    if let Err(e) = self.ledger.task_message(task_id, id).await {
                        tracing::warn!(task_id, error = %e, "cannot record a task's progress message");
                    }
                }
                let view = TaskView {
                    chat_id,
                    message_id,
                    shown: header.clone(),
                    header,
                    lines: VecDeque::new(),
                    last_edit: Instant::now(),
                    flush_scheduled: false,
                };
                self.tasks
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(task_id.to_owned(), view);
            }
            TaskUpdate::Progress { line } => {
                let interval = Duration::from_millis(self.config.progress_edit_interval_ms);
                let schedule = {
                    let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
                    let Some(view) = tasks.get_mut(task_id) else { return };
                    view.lines.push_back(one_line(&line, 120));
                    while view.lines.len() > PROGRESS_LINES {
                        view.lines.pop_front();
                    }
                    if view.message_id.is_none() || view.flush_scheduled {
                        None
                    } else {
                        view.flush_scheduled = true;
                        Some(interval.saturating_sub(view.last_edit.elapsed()))
                    }
                };
                // Edits are spaced: the newest state is shown once the interval has passed.
                if let Some(wait) = schedule {
                    let (me, task_id) = (self.clone(), task_id.to_owned());
                    tokio::spawn(async move {
                        tokio::time::sleep(wait).await;
                        me.flush_progress(&task_id).await;
                    });
                }
            }
            TaskUpdate::Finished(receipt) => {
                let view = self.tasks.lock().unwrap_or_else(|p| p.into_inner()).remove(task_id);
                let mark = if receipt.status == "success" { "✅" } else { "⚠️" };
                let text = format!("{mark} {}", receipt.render());
                match view.and_then(|v| v.message_id.map(|id| (id, v.last_edit))) {
                    Some((message_id, last_edit)) => {
                        // Spaced like the other edits, without holding up the turn.
                        let wait = Duration::from_millis(self.config.progress_edit_interval_ms)
                            .saturating_sub(last_edit.elapsed());
                        let me = self.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep(wait).await;
                            if let Err(e) = me.edit_text(chat_id, message_id, &text).await {
                                tracing::debug!(chat_id, error = %e, "cannot show a task's receipt by editing; sending it");
                                let _ = me.send_part(chat_id, &plain_part(&text), None).await;
                            }
                        });
                    }
                    None => {
                        let _ = self.send_part(chat_id, &plain_part(&text), None).await;
                    }
                }
            }
        }
    }

    async fn flush_progress(&self, task_id: &str) {
        let edit = {
            let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
            let Some(view) = tasks.get_mut(task_id) else { return };
            view.flush_scheduled = false;
            let text = view.text();
            if text == view.shown {
                return;
            }
            view.shown = text.clone();
            view.last_edit = Instant::now();
            view.message_id.map(|id| (view.chat_id, id, text))
        };
        if let Some((chat_id, message_id, text)) = edit {
            if let Err(e) = self.edit_text(chat_id, message_id, &text).await {
                tracing::debug!(chat_id, error = %e, "cannot edit a task's progress message");
            }
        }
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
                        inner
                            .settle(update_id, Settlement::Answered { message_ids: Vec::new() })
                            .await;
                    }
                    Ok(None)
                }
                OutboundKind::Final => {
                    let flight = update_id.and_then(|id| inner.finish_inflight(id));
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

/// A Bot API error that is the server's trouble, not the request's (worth another try).
fn server_error(text: &str) -> bool {
    ["Internal Server Error", "Bad Gateway", "Service Unavailable", "Gateway Timeout"]
        .iter()
        .any(|phrase| text.contains(phrase))
}

fn next_backoff(current: Duration) -> Duration {
    if current.is_zero() {
        Duration::from_secs(1)
    } else {
        (current * 2).min(MAX_BACKOFF)
    }
}

/// `d` ± 25 %, so many bots (or retries) do not hit the server in step.
fn jitter(d: Duration) -> Duration {
    let random = std::collections::hash_map::RandomState::new().build_hasher().finish();
    let factor = 0.75 + (random % 1000) as f64 / 2000.0;
    d.mul_f64(factor)
}

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
