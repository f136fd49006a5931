//! The edge between chats and the agent: the outbound [`Router`] that sends everything for a
//! chat back to the channel the chat lives on, the terminal's channel ([`console`]; Telegram is
//! `nexbot-telegram`, wired by the host), files users send ([`inbox`]) and answers spoken
//! ([`voice`]).
//!
//! Why a crate of its own: all of it is what passes through a channel, none of it needs the
//! daemon (the host wires each in), and it knows no channel crate, Docker or egress.
//!
//! Why a router: answers, progress, questions and whatever a tool sends name a [`ChatRef`];
//! the router hands each to the registered channel of that chat's kind, so the agent and the
//! bus never know which channels exist. A message for a channel that is not running is an
//! error the caller sees (and the bus logs), never a silent drop.
//!
//! Asking and waiting is the router's, not each channel's: [`Channel::ask`] sends the
//! question, and the bus hands the chat's next message to the waiting question
//! ([`Router::answer_question`]) instead of starting a turn with it. So every channel that
//! can send text can ask.
//!
//! Editing and deleting are the router's to allow: it remembers the ids of the messages it
//! sent in each chat (bounded, [`SENT_PER_CHAT`] a chat) and refuses to edit or delete any
//! other id, so a tool (or a model it obeys) can change the bot's own recent messages in the
//! chat it serves and nothing else — not a user's message, not another chat's.

pub mod console;
pub mod inbox;
pub mod voice;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use nexbot_core::{ChannelKind, ChatRef};
use tokio::sync::oneshot;

use nexbot_agent::channel::{
    Button, Channel, ChannelError, MessageId, OutboundFile, OutboundMessage, OutboundVoice,
    TaskUpdate,
};
use nexbot_agent::exits::{Exit, Exits};
use nexbot_core::BoxFuture;

/// Hands channel operations to the channel of each chat's kind. Cheap to share (`Arc`).
#[derive(Debug, Default)]
pub struct Router {
    channels: RwLock<HashMap<ChannelKind, Arc<dyn Channel>>>,
    /// Questions waiting for the chat's next message.
    questions: Mutex<HashMap<ChatRef, Question>>,
    /// Every text passes the exit scan before it reaches a channel.
    exits: Option<Arc<Exits>>,
    /// The ids of the messages sent in each chat: what edit and delete may reach.
    sent: Mutex<SentIds>,
}

/// A question waiting in a chat: its answer goes to `tx`. A choice also takes a press of its
/// own buttons (`/choose <nonce> <n>`), and only of its own: a stale button of an earlier
/// question answers nothing.
#[derive(Debug)]
struct Question {
    tx: oneshot::Sender<String>,
    nonce: Option<String>,
    /// The options of a choice (`/choose <nonce> <n>` answers `options[n]`).
    options: Vec<String>,
}

/// The command word of a choice's buttons (`ask_user` with options).
const CHOOSE: &str = "/choose";

/// How many of the bot's latest message ids are remembered per chat.
pub const SENT_PER_CHAT: usize = 256;
/// How many chats' ids are remembered; the chat that sent least recently is forgotten first.
const SENT_CHATS: usize = 4096;

/// The bot's recent message ids per chat, bounded both ways.
#[derive(Debug, Default)]
struct SentIds {
    chats: HashMap<ChatRef, (u64, VecDeque<MessageId>)>,
    clock: u64,
}

impl SentIds {
    fn record(&mut self, chat: &ChatRef, id: MessageId) {
        self.clock += 1;
        if !self.chats.contains_key(chat) && self.chats.len() >= SENT_CHATS {
            let oldest = self.chats.iter().min_by_key(|(_, (used, _))| *used).map(|(c, _)| c);
            if let Some(oldest) = oldest.cloned() {
                self.chats.remove(&oldest);
            }
        }
        let (used, ids) = self.chats.entry(chat.clone()).or_default();
        *used = self.clock;
        ids.retain(|known| *known != id);
        ids.push_back(id);
        while ids.len() > SENT_PER_CHAT {
            ids.pop_front();
        }
    }

    fn contains(&self, chat: &ChatRef, id: MessageId) -> bool {
        self.chats.get(chat).is_some_and(|(_, ids)| ids.contains(&id))
    }

    fn forget(&mut self, chat: &ChatRef, id: MessageId) {
        if let Some((_, ids)) = self.chats.get_mut(chat) {
            ids.retain(|known| *known != id);
        }
    }
}

impl Router {
    pub fn new() -> Self {
        Self::default()
    }

    /// Scans every text for secret values before a channel gets it (`exits.rs`).
    pub fn with_exits(mut self, exits: Arc<Exits>) -> Self {
        self.exits = Some(exits);
        self
    }

    /// `text` as it may leave for `chat`: through the exit scan every text passes (a secret
    /// in it is blocked). What is spoken aloud is this, never the raw text.
    pub fn scanned(&self, chat: &ChatRef, text: &str) -> String {
        let mut text = text.to_owned();
        self.scan(chat, &mut text);
        text
    }

    fn scan(&self, chat: &ChatRef, text: &mut String) {
        if let Some(exits) = &self.exits {
            exits.scan_string(Exit::Chat, Some(chat), text);
        }
    }

    /// Makes `channel` the one that serves chats of `kind` (replacing an earlier one).
    pub fn register(&self, kind: ChannelKind, channel: Arc<dyn Channel>) {
        self.channels.write().unwrap_or_else(|p| p.into_inner()).insert(kind, channel);
    }

    /// Stops routing to the channel of `kind` (it is stopping).
    pub fn unregister(&self, kind: ChannelKind) {
        self.channels.write().unwrap_or_else(|p| p.into_inner()).remove(&kind);
    }

    /// The kinds with a running channel.
    pub fn kinds(&self) -> Vec<ChannelKind> {
        let mut kinds: Vec<_> =
            self.channels.read().unwrap_or_else(|p| p.into_inner()).keys().copied().collect();
        kinds.sort();
        kinds
    }

    fn channel(&self, chat: &ChatRef) -> Result<Arc<dyn Channel>, ChannelError> {
        self.channels
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&chat.kind())
            .cloned()
            .ok_or_else(|| ChannelError::NotRunning { channel: chat.kind(), chat: chat.clone() })
    }

    /// If a question waits in `chat`, hands it `text` and returns true: the message is the
    /// answer and starts no turn.
    pub fn answer_question(&self, chat: &ChatRef, text: &str) -> bool {
        let waiting = self.questions.lock().unwrap_or_else(|p| p.into_inner()).remove(chat);
        match waiting {
            // A question whose asker gave up (timeout, cancelled turn) takes nothing.
            Some(question) => question.tx.send(text.to_owned()).is_ok(),
            None => false,
        }
    }

    /// A press of a choice's button (`/choose <nonce> <n>`, which is not a command): `None`
    /// when `text` is not one; `Some(true)` when the choice waiting in `chat` took it;
    /// `Some(false)` when no choice with that nonce and option waits there (answered, timed
    /// out, or another chat's).
    pub fn answer_press(&self, chat: &ChatRef, text: &str) -> Option<bool> {
        let (word, rest) = text.trim().split_once(' ')?;
        if word != CHOOSE {
            return None;
        }
        // A choice's button carries the option's number after the nonce.
        let (nonce, n) = rest.trim().split_once(' ')?;
        let (nonce, chosen) = (nonce, n.trim().parse::<usize>().ok());
        let mut questions = self.questions.lock().unwrap_or_else(|p| p.into_inner());
        if questions.get(chat).and_then(|q| q.nonce.as_deref()) != Some(nonce.trim()) {
            return Some(false);
        }
        let option = chosen.and_then(|n| questions.get(chat)?.options.get(n).cloned());
        let Some(answer) = option else { return Some(false) };
        let question = questions.remove(chat)?;
        Some(question.tx.send(answer).is_ok())
    }

    /// Registers a question in `chat` (none may be waiting there), sends `message`, and
    /// waits up to `wait` for the answer.
    async fn question(
        &self,
        chat: &ChatRef,
        message: OutboundMessage,
        nonce: Option<String>,
        options: Vec<String>,
        wait: Duration,
    ) -> Result<String, ChannelError> {
        let rx = {
            let mut questions = self.questions.lock().unwrap_or_else(|p| p.into_inner());
            if questions.get(chat).is_some_and(|q| !q.tx.is_closed()) {
                return Err(ChannelError::AlreadyAsking(chat.clone()));
            }
            let (tx, rx) = oneshot::channel();
            questions.insert(chat.clone(), Question { tx, nonce, options });
            rx
        };
        let _pending = Pending { router: self, chat };
        self.send(message).await?;
        match tokio::time::timeout(wait, rx).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) => Err(ChannelError::Closed(chat.kind())),
            Err(_) => Err(ChannelError::NoAnswer(wait)),
        }
    }

    fn record_sent(&self, chat: &ChatRef, id: Option<MessageId>) {
        if let Some(id) = id {
            self.sent.lock().unwrap_or_else(|p| p.into_inner()).record(chat, id);
        }
    }

    /// Refuses `message` unless the bot sent it in `chat` (see the module's docs).
    fn own_message(&self, chat: &ChatRef, message: MessageId) -> Result<(), ChannelError> {
        if self.sent.lock().unwrap_or_else(|p| p.into_inner()).contains(chat, message) {
            Ok(())
        } else {
            Err(ChannelError::NotOwnMessage { chat: chat.clone(), message: message.0 })
        }
    }
}

/// Removes a chat's question however `ask` ends (answer, timeout, the turn dropped).
struct Pending<'a> {
    router: &'a Router,
    chat: &'a ChatRef,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        self.router.questions.lock().unwrap_or_else(|p| p.into_inner()).remove(self.chat);
    }
}

impl Channel for Router {
    fn send(
        &self,
        message: OutboundMessage,
    ) -> BoxFuture<'_, Result<Option<MessageId>, ChannelError>> {
        let mut message = message;
        let chat = message.chat.clone();
        self.scan(&chat, &mut message.text);
        Box::pin(async move {
            let sent = self.channel(&message.chat)?.send(message).await?;
            self.record_sent(&chat, sent);
            Ok(sent)
        })
    }

    fn send_file(
        &self,
        file: OutboundFile,
    ) -> BoxFuture<'_, Result<Option<MessageId>, ChannelError>> {
        let mut file = file;
        if let Some(caption) = file.caption.as_mut() {
            let chat = file.chat.clone();
            self.scan(&chat, caption);
        }
        Box::pin(async move {
            let chat = file.chat.clone();
            let sent = self.channel(&chat)?.send_file(file).await?;
            self.record_sent(&chat, sent);
            Ok(sent)
        })
    }

    /// Sends a voice message; its audio was spoken from text that passed [`Router::scanned`].
    fn send_voice(
        &self,
        voice: OutboundVoice,
    ) -> BoxFuture<'_, Result<Option<MessageId>, ChannelError>> {
        Box::pin(async move {
            let chat = voice.chat.clone();
            let sent = self.channel(&chat)?.send_voice(voice).await?;
            self.record_sent(&chat, sent);
            Ok(sent)
        })
    }

    fn forget_inbound<'a>(
        &'a self,
        chat: &'a ChatRef,
        inbound: u64,
    ) -> BoxFuture<'a, Result<(), ChannelError>> {
        Box::pin(async move { self.channel(chat)?.forget_inbound(chat, inbound).await })
    }

    fn edit<'a>(
        &'a self,
        chat: &'a ChatRef,
        message: MessageId,
        text: &'a str,
    ) -> BoxFuture<'a, Result<(), ChannelError>> {
        Box::pin(async move {
            self.own_message(chat, message)?;
            let mut text = text.to_owned();
            self.scan(chat, &mut text);
            self.channel(chat)?.edit(chat, message, &text).await
        })
    }

    fn delete<'a>(
        &'a self,
        chat: &'a ChatRef,
        message: MessageId,
    ) -> BoxFuture<'a, Result<(), ChannelError>> {
        Box::pin(async move {
            self.own_message(chat, message)?;
            self.channel(chat)?.delete(chat, message).await?;
            self.sent.lock().unwrap_or_else(|p| p.into_inner()).forget(chat, message);
            Ok(())
        })
    }

    fn task_update<'a>(
        &'a self,
        chat: &'a ChatRef,
        task_id: &'a str,
        update: TaskUpdate,
    ) -> BoxFuture<'a, ()> {
        let mut update = update;
        match &mut update {
            TaskUpdate::Started { task: text } | TaskUpdate::Progress { line: text } => {
                self.scan(chat, text)
            }
            TaskUpdate::Finished(_) => {}
        }
        Box::pin(async move {
            if let Ok(channel) = self.channel(chat) {
                channel.task_update(chat, task_id, update).await;
            }
        })
    }

    fn ask<'a>(
        &'a self,
        chat: &'a ChatRef,
        question: &'a str,
        wait: Duration,
    ) -> BoxFuture<'a, Result<String, ChannelError>> {
        Box::pin(async move {
            let message = OutboundMessage::progress(chat, question.to_owned());
            self.question(chat, message, None, Vec::new(), wait).await
        })
    }

    fn ask_choice<'a>(
        &'a self,
        chat: &'a ChatRef,
        question: &'a str,
        options: &'a [String],
        wait: Duration,
    ) -> BoxFuture<'a, Result<String, ChannelError>> {
        Box::pin(async move {
            // The nonce ties the buttons to this question: a stale one answers nothing.
            let nonce = uuid::Uuid::new_v4().simple().to_string()[..12].to_owned();
            let mut message = OutboundMessage::progress(
                chat,
                format!("{question}\n\n(Press an answer, or type your own.)"),
            );
            message.buttons = options
                .iter()
                .enumerate()
                .map(|(n, option)| {
                    vec![Button::new(option.clone(), format!("{CHOOSE} {nonce} {n}"))]
                })
                .collect();
            self.question(chat, message, Some(nonce), options.to_vec(), wait).await
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use nexbot_agent::channel::OutboundKind;
    use tokio::sync::mpsc;

    /// A chat that records what is sent (every message id 1); the approvals' tests use it too.
    #[derive(Debug)]
    pub(crate) struct Recorder(pub(crate) mpsc::UnboundedSender<OutboundMessage>);

    impl Channel for Recorder {
        fn send(
            &self,
            message: OutboundMessage,
        ) -> BoxFuture<'_, Result<Option<MessageId>, ChannelError>> {
            let _ = self.0.send(message);
            Box::pin(async { Ok(Some(MessageId(1))) })
        }
    }

    #[tokio::test]
    async fn messages_go_to_the_channel_of_their_chat() {
        let router = Router::new();
        let (tg_tx, mut tg) = mpsc::unbounded_channel();
        let (co_tx, mut co) = mpsc::unbounded_channel();
        router.register(ChannelKind::Telegram, Arc::new(Recorder(tg_tx)));
        router.register(ChannelKind::Console, Arc::new(Recorder(co_tx)));
        let tg_chat = ChatRef::Telegram(5);
        let co_chat = ChatRef::default_console();
        router.send(OutboundMessage::answer(&tg_chat, 1, "to telegram".into())).await.unwrap();
        router.send(OutboundMessage::progress(&co_chat, "to console".into())).await.unwrap();
        let (a, b) = (tg.try_recv().unwrap(), co.try_recv().unwrap());
        assert_eq!(
            (a.chat, a.text.as_str(), a.kind),
            (tg_chat, "to telegram", OutboundKind::Final)
        );
        assert_eq!((b.chat, b.text.as_str()), (co_chat, "to console"));
        assert!(tg.try_recv().is_err() && co.try_recv().is_err());
    }

    #[tokio::test]
    async fn a_chat_without_a_running_channel_is_an_error_that_names_it() {
        let router = Router::new();
        let err = router.send(OutboundMessage::progress(&ChatRef::Telegram(9), "x".into())).await;
        let err = err.unwrap_err();
        assert!(matches!(err, ChannelError::NotRunning { .. }));
        assert!(err.to_string().contains("telegram:9"), "{err}");
        let (tx, _rx) = mpsc::unbounded_channel();
        router.register(ChannelKind::Telegram, Arc::new(Recorder(tx)));
        assert_eq!(router.kinds(), [ChannelKind::Telegram]);
        // What the channel does not support says so (for a message it sent).
        router.send(OutboundMessage::progress(&ChatRef::Telegram(9), "x".into())).await.unwrap();
        let err = router.edit(&ChatRef::Telegram(9), MessageId(1), "y").await.unwrap_err();
        assert_eq!(err.to_string(), "the telegram channel cannot edit messages");
        router.unregister(ChannelKind::Telegram);
        assert!(router.kinds().is_empty());
    }

    #[tokio::test]
    async fn ask_takes_the_next_message_and_gives_up_after_its_wait() {
        let router = Arc::new(Router::new());
        let (tx, mut sent) = mpsc::unbounded_channel();
        router.register(ChannelKind::Console, Arc::new(Recorder(tx)));
        let chat = ChatRef::default_console();
        assert!(!router.answer_question(&chat, "nobody asked"));
        let asking = {
            let (router, chat) = (router.clone(), chat.clone());
            tokio::spawn(
                async move { router.ask(&chat, "Which one?", Duration::from_secs(5)).await },
            )
        };
        let question = sent.recv().await.unwrap();
        assert_eq!(question.text, "Which one?");
        let second = router.ask(&chat, "And?", Duration::from_secs(1)).await.unwrap_err();
        assert!(matches!(second, ChannelError::AlreadyAsking(_)), "{second}");
        assert!(router.answer_question(&chat, "the second"));
        assert_eq!(asking.await.unwrap().unwrap(), "the second");
        // Answered once: the next message is an ordinary one again.
        assert!(!router.answer_question(&chat, "hello"));

        let err = router.ask(&chat, "Still there?", Duration::from_millis(50)).await.unwrap_err();
        assert!(matches!(err, ChannelError::NoAnswer(_)), "{err}");
        assert!(!router.answer_question(&chat, "late"), "a question that gave up takes nothing");
    }

    #[tokio::test]
    async fn a_choice_offers_its_options_as_buttons_and_a_press_answers_the_option() {
        let router = Arc::new(Router::new());
        let (tx, mut sent) = mpsc::unbounded_channel();
        router.register(ChannelKind::Telegram, Arc::new(Recorder(tx)));
        let chat = ChatRef::Telegram(5);
        let options = vec!["Red".to_owned(), "Blue".to_owned()];
        let asking = {
            let (router, chat, options) = (router.clone(), chat.clone(), options.clone());
            tokio::spawn(async move {
                router.ask_choice(&chat, "Which colour?", &options, Duration::from_secs(5)).await
            })
        };
        let question = sent.recv().await.unwrap();
        let buttons: Vec<_> = question.buttons.concat();
        assert_eq!(buttons.iter().map(|b| b.label.as_str()).collect::<Vec<_>>(), ["Red", "Blue"]);
        let blue = buttons[1].command.clone();
        let nonce = blue.split(' ').nth(1).unwrap().to_owned();
        // A stale nonce, an option that is not there, another chat: nothing is answered.
        assert_eq!(router.answer_press(&chat, "/choose 000000000000 1"), Some(false));
        assert_eq!(router.answer_press(&chat, &format!("/choose {nonce} 7")), Some(false));
        assert_eq!(router.answer_press(&ChatRef::Telegram(6), &blue), Some(false));
        assert_eq!(router.answer_press(&chat, &blue), Some(true));
        assert_eq!(asking.await.unwrap().unwrap(), "Blue");
        assert_eq!(router.answer_press(&chat, &blue), Some(false), "answered once");
    }

    /// Numbers its messages per channel (as Telegram does per chat) and records edits and
    /// deletes.
    #[derive(Debug, Default)]
    struct Numbered {
        next: Mutex<i64>,
        changed: Mutex<Vec<String>>,
    }

    impl Channel for Numbered {
        fn send(
            &self,
            _: OutboundMessage,
        ) -> BoxFuture<'_, Result<Option<MessageId>, ChannelError>> {
            let mut next = self.next.lock().unwrap();
            *next += 1;
            let id = *next;
            Box::pin(async move { Ok(Some(MessageId(id))) })
        }
        fn edit<'a>(
            &'a self,
            chat: &'a ChatRef,
            message: MessageId,
            text: &'a str,
        ) -> BoxFuture<'a, Result<(), ChannelError>> {
            self.changed.lock().unwrap().push(format!("edit {chat} {} {text}", message.0));
            Box::pin(async { Ok(()) })
        }
        fn delete<'a>(
            &'a self,
            chat: &'a ChatRef,
            message: MessageId,
        ) -> BoxFuture<'a, Result<(), ChannelError>> {
            self.changed.lock().unwrap().push(format!("delete {chat} {}", message.0));
            Box::pin(async { Ok(()) })
        }
    }

    #[tokio::test]
    async fn only_the_bots_own_recent_messages_of_the_same_chat_can_be_edited_or_deleted() {
        let router = Router::new();
        let channel = Arc::new(Numbered::default());
        router.register(ChannelKind::Telegram, channel.clone());
        let (mine, other) = (ChatRef::Telegram(1), ChatRef::Telegram(2));
        let sent = router.send(OutboundMessage::progress(&mine, "a".into())).await.unwrap();
        assert_eq!(sent, Some(MessageId(1)));
        let theirs = router.send(OutboundMessage::progress(&other, "b".into())).await.unwrap();
        assert_eq!(theirs, Some(MessageId(2)));

        router.edit(&mine, MessageId(1), "a2").await.unwrap();
        // Another chat's message, one never sent (a user's), and one of this chat's ids
        // asked for in another chat: all refused, nothing reaches the channel.
        for (chat, id) in [(&mine, 2), (&mine, 77), (&other, 1)] {
            let err = router.edit(chat, MessageId(id), "x").await.unwrap_err();
            assert!(matches!(err, ChannelError::NotOwnMessage { .. }), "{err}");
            assert!(err.to_string().contains(&format!("message {id} is not one the bot sent")));
            let err = router.delete(chat, MessageId(id)).await.unwrap_err();
            assert!(matches!(err, ChannelError::NotOwnMessage { .. }), "{err}");
        }
        router.delete(&mine, MessageId(1)).await.unwrap();
        // Deleted is gone: a second delete is refused before the channel sees it.
        assert!(router.delete(&mine, MessageId(1)).await.is_err());
        assert_eq!(
            *channel.changed.lock().unwrap(),
            ["edit telegram:1 1 a2", "delete telegram:1 1"]
        );

        // Bounded: the oldest ids of a chat are forgotten.
        for _ in 0..SENT_PER_CHAT {
            router.send(OutboundMessage::progress(&other, "c".into())).await.unwrap();
        }
        assert!(router.edit(&other, MessageId(2), "old").await.is_err());
        let newest = MessageId(2 + SENT_PER_CHAT as i64);
        router.edit(&other, newest, "new").await.unwrap();
    }
}
