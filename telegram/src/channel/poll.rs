//! Polling: the loop that brings updates in. `getMe` (survivable), the replay of what an
//! earlier run received but never settled, `getUpdates` with its back-off (429's
//! `retry_after`, 409, server errors), each update decided by [`policy::decide`] and recorded
//! in the ledger before it is handled, its file fetched in its chat's order, "typing…" while
//! the turn runs, and the update settled.
//!
//! Why apart from delivery: this side owns the offset and the ledger's records; the other
//! side ([`super::deliver`]) only sends, and settles what the bus answered.

use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nexbot_core::channel::{InboundFile, InboundMessage};
use nexbot_core::text::excerpt;
use nexbot_core::ChatRef;
use teloxide_core::errors::{ApiError, RequestError};
use teloxide_core::payloads::setters::*;
use teloxide_core::requests::{Request, Requester};
use teloxide_core::types::{ChatAction, ChatId, Update, UpdateKind};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::health::PollState;
use crate::ledger::{LedgerError, ReceivedUpdate, Settlement};
use crate::policy::{self, BotIdentity, Decision};

use super::disk_full::{log_record_failure, log_recorded_again};
use super::{said, short, Inflight, Inner};

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

/// A recorded update on its way to the bus, with what it still needs: its file fetched.
pub(super) struct Arrival {
    record: ReceivedUpdate,
    chat_id: i64,
    group: bool,
    text: String,
    file: Option<policy::FileRef>,
    inbound: mpsc::Sender<InboundMessage>,
}

impl Inner {
    /// `getMe`, survivable: on failure the identity stays unknown and is asked again later.
    pub(super) async fn identify(&self) {
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

    pub(super) async fn replay(
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

    pub(super) async fn poll(
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
            // A pressed button: Telegram shows a spinner on it until the press is answered.
            // A refusal at once; a press that is handled waits (briefly) for its command's
            // answer, which is then the press's notice (`press.rs`).
            match &decision {
                Decision::Handle { .. } => self.hold_press(update_id, query.id.clone()),
                Decision::Refuse { .. } => {
                    super::press::answer_query(self, query.id.clone(), Some("Not allowed.")).await
                }
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
                if !received.as_ref().is_ok_and(|new| *new) {
                    // Not handed over: nothing will answer the press.
                    self.answer_press(update_id, None).await;
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

    pub(super) async fn settle(&self, update_id: i64, settlement: Settlement) {
        if let Err(e) = self.ledger.settle(update_id, settlement).await {
            tracing::error!(update_id, error = %e, "cannot record how a Telegram update ended");
        }
    }
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
