//! The message bus between channels (console, Telegram) and the agent.
//!
//! Why bounded queues and one worker per chat: a chat's messages must be answered in order,
//! one turn at a time, while other chats go on in parallel; and a flood of messages must turn
//! into back-pressure (senders wait on a full inbound queue) or a clear "busy" answer (a chat
//! whose own queue is full), never into unbounded memory. `/stop` bypasses the queue and
//! cancels the chat's running turn, whoever started it (a message, a scheduled job), including
//! the subagent tasks it started; `/new` starts a fresh session. The chat's turn slot, the
//! daemon's limit of parallel turns and the registry `/stop` reads belong to the agent's
//! [`Turns`](crate::agent::turns::Turns), which every producer of turns goes through.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use nexbot_core::channel::FileKind;
use nexbot_core::ChatRef;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use crate::agent::channel::InboundMessage;
use crate::agent::channel::{Channel, OutboundKind, OutboundMessage};
use crate::agent::turns::TurnOrigin;
use crate::agent::Agent;
use crate::commands::{CommandContext, CommandRegistry, CommandReply, Parsed};
use crate::config::BusConfig;
use crate::inbox::Inbox;
use crate::voice::Voice;
use nexbot_channels::Router;

/// A chat worker with nothing to do for this long goes away (it is recreated on demand).
const IDLE_WORKER: Duration = Duration::from_secs(600);

/// The channels' side of a running bus. Dropping `inbound` (after `shutdown`) lets the
/// dispatcher finish; `task` ends when every turn has answered.
#[derive(Debug)]
pub struct BusHandle {
    pub inbound: mpsc::Sender<InboundMessage>,
    pub task: tokio::task::JoinHandle<()>,
}

struct ChatWorker {
    queue: mpsc::Sender<InboundMessage>,
}

/// Starts the dispatcher: commands are answered from `commands`, everything else is a turn of
/// `agent`; answers and whatever turns send go out through `router`, spoken too when `voice`
/// says the chat wants them spoken. Turns are cancelled
/// when `shutdown` fires. `config.max_parallel_turns` is applied by the agent's admission
/// ([`Agent::with_parallel_turns`]), which the scheduler's turns share.
pub fn start(
    agent: Arc<Agent>,
    router: Arc<Router>,
    commands: CommandRegistry,
    inbox: Arc<Inbox>,
    voice: Voice,
    config: &BusConfig,
    shutdown: CancellationToken,
) -> BusHandle {
    let (inbound_tx, inbound_rx) = mpsc::channel(config.inbound_capacity);
    let dispatcher = Dispatcher {
        agent,
        inbox,
        voice,
        router,
        commands,
        per_chat_queue: config.per_chat_queue,
        shutdown,
        workers: HashMap::new(),
        tasks: JoinSet::new(),
    };
    let task = tokio::spawn(dispatcher.run(inbound_rx));
    BusHandle { inbound: inbound_tx, task }
}

struct Dispatcher {
    agent: Arc<Agent>,
    /// Where a message's files go before its turn (the chat's room).
    inbox: Arc<Inbox>,
    voice: Voice,
    router: Arc<Router>,
    commands: CommandRegistry,
    per_chat_queue: usize,
    shutdown: CancellationToken,
    workers: HashMap<ChatRef, ChatWorker>,
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
        // A choice's button before the commands: it answers the question waiting in the
        // chat (or, stale, is told so); it is not a command of its own.
        if let Some(taken) = self.router.answer_press(&message.chat, &message.text) {
            let answer = if taken {
                OutboundMessage {
                    kind: OutboundKind::Taken,
                    ..OutboundMessage::answer(&message.chat, message.id, String::new())
                }
            } else {
                let text = "That question is no longer waiting (it was answered, or its time \
                            ran out); nothing was changed."
                    .to_owned();
                OutboundMessage::answer(&message.chat, message.id, text)
            };
            deliver(&self.router, answer).await;
            return;
        }
        // Commands first: `/stop` must reach a turn that is waiting on a question.
        if let Some(parsed) = self.commands.parse(&message.text) {
            let text = match parsed {
                Parsed::Known { command, args } => {
                    let ctx = CommandContext {
                        chat: &message.chat,
                        args,
                        message: message.id,
                        channel: &*self.router,
                        turns: self.agent.turns(),
                        commands: &self.commands,
                        user: message.user,
                    };
                    command.reply(ctx).await
                }
                Parsed::Unknown { name } => CommandReply::text(self.commands.unknown(name)),
            };
            let mut answer = OutboundMessage::answer(&message.chat, message.id, text.text);
            answer.buttons = text.buttons;
            deliver(&self.router, answer).await;
            return;
        }
        if self.router.answer_question(&message.chat, &message.text) {
            let taken = OutboundMessage {
                kind: OutboundKind::Taken,
                ..OutboundMessage::answer(&message.chat, message.id, String::new())
            };
            deliver(&self.router, taken).await;
            return;
        }
        let mut message = message;
        for _ in 0..2 {
            if self.workers.get(&message.chat).is_none_or(|w| w.queue.is_closed()) {
                if self.workers.len() >= 1024 {
                    self.workers.retain(|_, w| !w.queue.is_closed());
                }
                let worker = self.spawn_worker(&message.chat);
                self.workers.insert(message.chat.clone(), worker);
            }
            let Some(worker) = self.workers.get(&message.chat) else { return };
            match worker.queue.try_send(message) {
                Ok(()) => return,
                Err(mpsc::error::TrySendError::Full(refused)) => {
                    tracing::warn!(chat = %refused.chat, "chat queue full, message refused");
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
        deliver(&self.router, OutboundMessage::answer(&message.chat, message.id, text)).await;
    }

    fn spawn_worker(&mut self, chat: &ChatRef) -> ChatWorker {
        let (tx, mut rx) = mpsc::channel::<InboundMessage>(self.per_chat_queue);
        let agent = self.agent.clone();
        let inbox = self.inbox.clone();
        let voice = self.voice.clone();
        let router = self.router.clone();
        let shutdown = self.shutdown.clone();
        tracing::debug!(%chat, "chat worker started");
        self.tasks.spawn(async move {
            loop {
                let mut message = match tokio::time::timeout(IDLE_WORKER, rx.recv()).await {
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
                    let chat = message.chat.clone();
                    let mut text = std::mem::take(&mut message.text);
                    let files = std::mem::take(&mut message.files);
                    let heard = files.iter().any(|f| f.kind == FileKind::Voice);
                    let mut turn = true;
                    let mut images = Vec::new();
                    if !files.is_empty() {
                        let arrived = inbox.receive(&chat, files, &text).await;
                        text = arrived.text;
                        turn = arrived.turn;
                        images = arrived.images;
                        match arrived.notice {
                            Some(notice) if turn => {
                                deliver(&router, OutboundMessage::progress(&chat, notice)).await;
                            }
                            // Nothing for the model: the notice is the answer.
                            Some(notice) => text = notice,
                            None => {}
                        }
                    }
                    if turn {
                        let channel: Arc<dyn Channel> = router.clone();
                        let origin =
                            TurnOrigin::Message { user: message.user, message: message.id };
                        let cancel = shutdown.clone();
                        let outcome = agent
                            .run_turn_with_images(&chat, &text, images, origin, cancel, channel);
                        let mut answer = outcome.await.answer;
                        if voice.wanted(&chat, heard).await {
                            // Scanned once here: the answer's send finds nothing more in it,
                            // so a secret's hit is logged and counted once.
                            answer = router.scanned(&chat, &answer);
                            let spoken = voice.speak(&router, &chat, message.id, &answer).await;
                            if let Some(note) = spoken {
                                answer = format!("{answer}\n\n{note}");
                            }
                        }
                        answer
                    } else {
                        text
                    }
                };
                deliver(&router, OutboundMessage::answer(&message.chat, message.id, answer)).await;
            }
        });
        ChatWorker { queue: tx }
    }
}

/// Sends through the router; a chat whose channel is gone is logged (the channel's own
/// delivery guarantees, e.g. Telegram's ledger, live in the channel).
async fn deliver(router: &Router, message: OutboundMessage) {
    let chat = message.chat.clone();
    if let Err(e) = router.send(message).await {
        tracing::warn!(%chat, error = %e, "an answer could not be delivered");
    }
}
