//! The message bus between channels (console, Telegram) and the agent.
//!
//! Why bounded queues and one worker per chat: a chat's messages must be answered in order,
//! one turn at a time, while other chats go on in parallel; and a flood of messages must turn
//! into back-pressure (senders wait on a full inbound queue) or a clear "busy" answer (a chat
//! whose own queue is full), never into unbounded memory. `/stop` bypasses the queue and
//! cancels the chat's running turn, including the subagent tasks it started; `/new` starts a
//! fresh session.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::agent::Agent;
use crate::config::BusConfig;

/// A chat worker with nothing to do for this long goes away (it is recreated on demand).
const IDLE_WORKER: Duration = Duration::from_secs(600);

/// A user's message from a channel.
#[derive(Debug, Clone)]
pub struct InboundMessage {
    pub chat_id: String,
    /// Channel-chosen id, echoed in the answer's `reply_to`.
    pub id: u64,
    pub text: String,
}

/// Whether a message ends the handling of an inbound message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutboundKind {
    /// Sent while a turn runs (`send_message`).
    Progress,
    /// The answer to `reply_to`: every inbound message gets exactly one.
    Final,
}

/// Something to show in a chat.
#[derive(Debug, Clone)]
pub struct OutboundMessage {
    pub chat_id: String,
    pub text: String,
    pub reply_to: Option<u64>,
    pub kind: OutboundKind,
}

impl OutboundMessage {
    pub fn progress(chat_id: &str, text: String) -> Self {
        Self { chat_id: chat_id.to_owned(), text, reply_to: None, kind: OutboundKind::Progress }
    }

    pub fn answer(message: &InboundMessage, text: String) -> Self {
        Self {
            chat_id: message.chat_id.clone(),
            text,
            reply_to: Some(message.id),
            kind: OutboundKind::Final,
        }
    }
}

/// The channels' side of a running bus. Dropping `inbound` (after `shutdown`) lets the
/// dispatcher finish; `task` ends when every turn has answered.
#[derive(Debug)]
pub struct BusHandle {
    pub inbound: mpsc::Sender<InboundMessage>,
    pub outbound: mpsc::Receiver<OutboundMessage>,
    pub task: tokio::task::JoinHandle<()>,
}

struct ChatWorker {
    queue: mpsc::Sender<InboundMessage>,
    /// The running turn's token, for `/stop`.
    current: Arc<Mutex<Option<CancellationToken>>>,
}

/// Starts the dispatcher. Turns are cancelled when `shutdown` fires.
pub fn start(agent: Arc<Agent>, config: &BusConfig, shutdown: CancellationToken) -> BusHandle {
    let (inbound_tx, inbound_rx) = mpsc::channel(config.inbound_capacity);
    let (outbound_tx, outbound_rx) = mpsc::channel(config.outbound_capacity);
    let dispatcher = Dispatcher {
        agent,
        outbound: outbound_tx,
        per_chat_queue: config.per_chat_queue,
        turns: Arc::new(Semaphore::new(config.max_parallel_turns)),
        shutdown,
        workers: HashMap::new(),
        tasks: JoinSet::new(),
    };
    let task = tokio::spawn(dispatcher.run(inbound_rx));
    BusHandle { inbound: inbound_tx, outbound: outbound_rx, task }
}

struct Dispatcher {
    agent: Arc<Agent>,
    outbound: mpsc::Sender<OutboundMessage>,
    per_chat_queue: usize,
    turns: Arc<Semaphore>,
    shutdown: CancellationToken,
    workers: HashMap<String, ChatWorker>,
    tasks: JoinSet<()>,
}

impl Dispatcher {
    async fn run(mut self, mut inbound: mpsc::Receiver<InboundMessage>) {
        loop {
            let message = tokio::select! {
                () = self.shutdown.cancelled() => break,
                message = inbound.recv() => match message {
                    Some(message) => message,
                    None => break,
                },
                Some(_) = self.tasks.join_next(), if !self.tasks.is_empty() => continue,
            };
            self.route(message).await;
        }
        // Channels are gone or we are shutting down: let queued turns finish (or be
        // cancelled by `shutdown`) and their answers go out.
        self.workers.clear();
        while self.tasks.join_next().await.is_some() {}
    }

    async fn route(&mut self, message: InboundMessage) {
        match message.text.trim() {
            "/stop" => {
                let stopped = self
                    .workers
                    .get(&message.chat_id)
                    .and_then(|w| w.current.lock().unwrap_or_else(|p| p.into_inner()).clone())
                    .map(|token| token.cancel())
                    .is_some();
                let text = if stopped { "Stopping the current task." } else { "Nothing to stop." };
                self.reply(&message, text.into()).await;
                return;
            }
            "/new" => {
                let text = match self.agent.store().new_session(&message.chat_id).await {
                    Ok(_) => "Started a new conversation.".to_owned(),
                    Err(e) => format!("Could not start a new conversation: {e}"),
                };
                self.reply(&message, text).await;
                return;
            }
            _ => {}
        }
        let mut message = message;
        for _ in 0..2 {
            if self.workers.get(&message.chat_id).is_none_or(|w| w.queue.is_closed()) {
                if self.workers.len() >= 1024 {
                    self.workers.retain(|_, w| !w.queue.is_closed());
                }
                let worker = self.spawn_worker(&message.chat_id);
                self.workers.insert(message.chat_id.clone(), worker);
            }
            let Some(worker) = self.workers.get(&message.chat_id) else { return };
            match worker.queue.try_send(message) {
                Ok(()) => return,
                Err(mpsc::error::TrySendError::Full(refused)) => {
                    tracing::warn!(chat = %refused.chat_id, "chat queue full, message refused");
                    let text = "I am still busy with your earlier messages; please send this \
                                one again when I have answered them."
                        .to_owned();
                    self.reply(&refused, text).await;
                    return;
                }
                // The worker went idle and closed its queue just now: start a new one.
                Err(mpsc::error::TrySendError::Closed(refused)) => message = refused,
            }
        }
        self.reply(&message, "Sorry, I cannot take messages right now.".into()).await;
    }

    async fn reply(&self, message: &InboundMessage, text: String) {
        let _ = self.outbound.send(OutboundMessage::answer(message, text)).await;
    }

    fn spawn_worker(&mut self, chat_id: &str) -> ChatWorker {
        let (tx, mut rx) = mpsc::channel::<InboundMessage>(self.per_chat_queue);
        let current = Arc::new(Mutex::new(None));
        let worker_current = current.clone();
        let agent = self.agent.clone();
        let outbound = self.outbound.clone();
        let turns = self.turns.clone();
        let shutdown = self.shutdown.clone();
        tracing::debug!(chat = chat_id, "chat worker started");
        self.tasks.spawn(async move {
            loop {
                let message = match tokio::time::timeout(IDLE_WORKER, rx.recv()).await {
                    Ok(Some(message)) => message,
                    Ok(None) => break,
                    // Idle: refuse new messages, but still answer any already queued.
                    Err(_) => {
                        rx.close();
                        continue;
                    }
                };
                let answer = if shutdown.is_cancelled() {
                    "Sorry, I am shutting down.".to_owned()
                } else {
                    let _permit = turns.acquire().await;
                    let token = shutdown.child_token();
                    *worker_current.lock().unwrap_or_else(|p| p.into_inner()) = Some(token.clone());
                    let outcome = agent
                        .run_turn(&message.chat_id, &message.text, token, outbound.clone())
                        .await;
                    *worker_current.lock().unwrap_or_else(|p| p.into_inner()) = None;
                    outcome.answer
                };
                if outbound.send(OutboundMessage::answer(&message, answer)).await.is_err() {
                    break;
                }
            }
        });
        ChatWorker { queue: tx, current }
    }
}
