//! What the agent can do in a chat, whatever channel the chat lives on: the [`Channel`] trait.
//!
//! Why it exists: the agent and its tools must reach the user (answers, progress, a file,
//! editing or deleting their own message, a question they wait on) without knowing whether
//! the chat is on Telegram or in a terminal. The trait is the agent's (host's `agent::channel`
//! re-exports it, and it holds exactly what the agent needs); it lives in this crate so a
//! channel crate (Telegram, with its heavy dependencies) implements it without depending on
//! the host. Channels implement it; the host's outbound router implements it too, by handing
//! each call to the channel named by the [`ChatRef`].

use std::path::PathBuf;
use std::time::Duration;

use thiserror::Error;

use crate::{BoxFuture, ChannelKind, ChatRef};

/// Whether a message ends the handling of an inbound message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutboundKind {
    /// Sent while a turn runs (`send_message`, a question, a command's notice).
    Progress,
    /// The answer to `reply_to`: every inbound message gets exactly one `Final` or `Taken`.
    Final,
    /// Nothing to show: the inbound message `reply_to` was taken as the answer to a question
    /// ([`Channel::ask`]) and starts no turn. Channels show nothing but may record it.
    Taken,
}

/// Something to show in a chat.
#[derive(Debug, Clone)]
pub struct OutboundMessage {
    pub chat: ChatRef,
    pub text: String,
    /// The channel's id of the inbound message this answers, echoed back.
    pub reply_to: Option<u64>,
    pub kind: OutboundKind,
    /// Buttons under the message, in rows (a command's menu, `/agent`). A channel that cannot
    /// show them shows the text alone, which names the text form of every choice.
    pub buttons: Vec<Vec<Button>>,
}

/// A button under a message. Pressing it is the same as the user sending `command` in the
/// chat: the channel hands it to the bus as the chat's message, so a button can do nothing
/// the user could not type (and is checked like typing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Button {
    pub label: String,
    /// A command (`/agent off`); at most 64 bytes (Telegram's limit for callback data).
    pub command: String,
    /// The letter that presses it where there is nothing to press (the console: typing `o`
    /// answers "Allow once"). `None`: such a channel numbers the buttons instead.
    pub key: Option<char>,
}

impl Button {
    pub fn new(label: impl Into<String>, command: impl Into<String>) -> Self {
        Self { label: label.into(), command: command.into(), key: None }
    }

    /// The button, pressed by typing `key` where nothing can be pressed ([`Button::key`]).
    pub fn with_key(mut self, key: char) -> Self {
        self.key = Some(key.to_ascii_lowercase());
        self
    }
}

impl OutboundMessage {
    /// A message sent while a turn runs.
    pub fn progress(chat: &ChatRef, text: String) -> Self {
        Self {
            chat: chat.clone(),
            text,
            reply_to: None,
            kind: OutboundKind::Progress,
            buttons: Vec::new(),
        }
    }

    /// The one final answer to the inbound message `reply_to` of `chat`.
    pub fn answer(chat: &ChatRef, reply_to: u64, text: String) -> Self {
        Self {
            chat: chat.clone(),
            text,
            reply_to: Some(reply_to),
            kind: OutboundKind::Final,
            buttons: Vec::new(),
        }
    }
}

/// A user's message from a channel, for the bus.
#[derive(Debug, Clone)]
pub struct InboundMessage {
    pub chat: ChatRef,
    /// Channel-chosen id, echoed in the answer's `reply_to`.
    pub id: u64,
    pub text: String,
    /// Who sent it, where the channel knows users apart (Telegram's user id; a button's
    /// presser); `None` for the console. A group's question may be answered by the owner only.
    pub user: Option<i64>,
    /// Files that came with it (a document, a photo, a voice note), fetched by the channel;
    /// `text` is then their caption. Empty for a plain message.
    pub files: Vec<InboundFile>,
}

/// What kind of file a user sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// A file sent as a file (any type, with the name the sender's app gave it).
    Document,
    /// A picture sent as a photo (the channel's own compressed JPEG).
    Photo,
    /// A voice note recorded in the app.
    Voice,
    /// A music or audio file.
    Audio,
}

impl FileKind {
    /// Its one-word name (`document`, `photo`, `voice`, `audio`): what a stored reference and
    /// a nameless file's default name say.
    pub fn as_str(self) -> &'static str {
        match self {
            FileKind::Document => "document",
            FileKind::Photo => "photo",
            FileKind::Voice => "voice",
            FileKind::Audio => "audio",
        }
    }

    /// The kind [`FileKind::as_str`] names; anything else is a document.
    pub fn from_name(name: &str) -> Self {
        match name {
            "photo" => FileKind::Photo,
            "voice" => FileKind::Voice,
            "audio" => FileKind::Audio,
            _ => FileKind::Document,
        }
    }

    /// Its name in a sentence: `a document`, `a photo`, `a voice note`, `an audio file`.
    pub fn described(self) -> &'static str {
        match self {
            FileKind::Document => "a document",
            FileKind::Photo => "a photo",
            FileKind::Voice => "a voice note",
            FileKind::Audio => "an audio file",
        }
    }
}

/// A file that came with a user's message, fetched by the channel within its size limit.
/// Everything but the bytes' length is the sender's app's word: the name is never a path,
/// the type never proof of what the bytes are.
#[derive(Clone)]
pub struct InboundFile {
    pub kind: FileKind,
    /// The name the sender's app gave it, if any (untrusted).
    pub name: Option<String>,
    /// The media type the sender's app claimed, if any (untrusted).
    pub mime: Option<String>,
    pub bytes: Vec<u8>,
    /// A voice note's or audio file's length, as the channel says.
    pub duration_secs: Option<u32>,
}

impl std::fmt::Debug for InboundFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InboundFile")
            .field("kind", &self.kind)
            .field("name", &self.name)
            .field("mime", &self.mime)
            .field("bytes", &self.bytes.len())
            .field("duration_secs", &self.duration_secs)
            .finish()
    }
}

/// A file to send into a chat: a file of the chat's workspace, by path on the host.
#[derive(Debug, Clone)]
pub struct OutboundFile {
    pub chat: ChatRef,
    /// Where the file is (what the console shows; its name is the name the chat sees).
    pub path: PathBuf,
    pub caption: Option<String>,
    /// Where its bytes are read from when not `path`: the sender's checked open handle
    /// (`/proc/self/fd/<n>`, open while the send runs), so a folder swapped after the check
    /// cannot make the channel read another file.
    pub contents: Option<PathBuf>,
}

/// A spoken answer to send into a chat as a voice message: Ogg/Opus audio, made by the
/// daemon's speech provider from text that passed the exit scan. The text goes out beside it
/// as the answer (the text stays the record).
#[derive(Clone)]
pub struct OutboundVoice {
    pub chat: ChatRef,
    pub audio: Vec<u8>,
    /// The channel's id of the inbound message this answers.
    pub reply_to: Option<u64>,
}

impl std::fmt::Debug for OutboundVoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutboundVoice")
            .field("chat", &self.chat)
            .field("audio", &self.audio.len())
            .field("reply_to", &self.reply_to)
            .finish()
    }
}

/// A message the bot sent, as its channel numbers it (Telegram message ids); what edit and
/// delete take. Channels without ids (the console) return none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MessageId(pub i64);

/// What a delegated task is doing, for the chat to follow. A channel shows it as it can
/// (Telegram: one message edited as the task goes, ending as the receipt); the default shows
/// nothing, so a terminal is not flooded.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskUpdate {
    /// The task was handed to a subagent; `task` is its first line, shortened.
    Started { task: String },
    /// The subagent reported a step (an iteration, a tool call, a tool result).
    Progress { line: String },
    /// The task ended.
    Finished(TaskReceipt),
}

/// What a delegated task did, shown to the user when it ends: never a secret's value, only
/// the names of the secrets it was given.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskReceipt {
    /// `success`, `error`, `timeout`, `cancelled` or `killed by the operator`.
    pub status: String,
    pub duration: Duration,
    /// LLM tokens the task used (prompt + completion), as far as known.
    pub tokens: u64,
    /// The subagent tools it called, each once, in first-use order.
    pub tools: Vec<String>,
    /// Destinations (`host:port`) the egress let it reach, and those it refused.
    pub contacted: Vec<String>,
    pub denied: Vec<String>,
    /// Names of the secrets handed to the task.
    pub secrets: Vec<String>,
    /// Search and fetch calls the task made, and its search budget, when the subagent says
    /// (an older one does not, and a task that ran a tool directly has no budget).
    pub searches: Option<(u32, u32)>,
    /// The egress questions the task raised (`egress.mode = "ask"`): destination, answer
    /// and who gave it (`api.example.com:443 → task by telegram:42`).
    pub asked: Vec<String>,
    /// The skills whose declared destinations the task was allowed without a question
    /// (`probe (api.example.com:443)`), issue 26 §4.
    pub skills: Vec<String>,
}

impl TaskReceipt {
    /// A few short lines for the chat.
    pub fn render(&self) -> String {
        let mut out = format!(
            "Task {} in {:.1}s, {} tokens",
            self.status,
            self.duration.as_secs_f64(),
            self.tokens
        );
        let list =
            |items: &[String]| if items.is_empty() { "none".to_owned() } else { items.join(", ") };
        if !self.tools.is_empty() {
            out.push_str(&format!("\nTools: {}", list(&self.tools)));
        }
        out.push_str(&format!("\nContacted: {}", list(&self.contacted)));
        if !self.denied.is_empty() {
            out.push_str(&format!("\nDenied: {}", list(&self.denied)));
        }
        if !self.secrets.is_empty() {
            out.push_str(&format!("\nSecrets used: {}", list(&self.secrets)));
        }
        if !self.skills.is_empty() {
            out.push_str(&format!("\nAllowed by skills: {}", list(&self.skills)));
        }
        if !self.asked.is_empty() {
            out.push_str(&format!("\nAsked: {}", list(&self.asked)));
        }
        if let Some((used, budget)) = self.searches.filter(|(used, _)| *used > 0) {
            out.push_str(&format!("\nSearches and fetches: {used} of {budget}"));
        }
        out
    }
}

/// Why a channel operation did not happen, worded for the model and the log.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ChannelError {
    #[error("the {channel} channel cannot {operation}")]
    Unsupported { channel: ChannelKind, operation: &'static str },
    #[error("no {channel} channel is running, so {chat} cannot be reached")]
    NotRunning { channel: ChannelKind, chat: ChatRef },
    #[error("the {0} channel is shutting down")]
    Closed(ChannelKind),
    #[error("no answer from the user within {}s", .0.as_secs())]
    NoAnswer(Duration),
    #[error("a question is already waiting for an answer in {0}")]
    AlreadyAsking(ChatRef),
    /// Edit and delete reach only messages the bot itself sent in the same chat (and recently
    /// enough to be remembered): never a user's message, never another chat's.
    #[error(
        "message {message} is not one the bot sent in {chat} (or it is too old to be \
         remembered): only the bot's own recent messages in this chat can be edited or deleted"
    )]
    NotOwnMessage { chat: ChatRef, message: i64 },
    #[error("{0}")]
    Failed(String),
}

/// The operations the agent needs in a chat. Every method but `send` has a default that says
/// the channel cannot do it, so a channel implements what it supports and nothing lies.
pub trait Channel: Send + Sync + std::fmt::Debug {
    /// Shows `message`; returns the sent message's id when the channel has ids.
    fn send(
        &self,
        message: OutboundMessage,
    ) -> BoxFuture<'_, Result<Option<MessageId>, ChannelError>>;

    /// Sends a file.
    fn send_file(
        &self,
        file: OutboundFile,
    ) -> BoxFuture<'_, Result<Option<MessageId>, ChannelError>> {
        unsupported(file.chat.kind(), "send files")
    }

    /// Sends a voice message.
    fn send_voice(
        &self,
        voice: OutboundVoice,
    ) -> BoxFuture<'_, Result<Option<MessageId>, ChannelError>> {
        unsupported(voice.chat.kind(), "send voice messages")
    }

    /// Replaces the text of a message the bot sent.
    fn edit<'a>(
        &'a self,
        chat: &'a ChatRef,
        message: MessageId,
        text: &'a str,
    ) -> BoxFuture<'a, Result<(), ChannelError>> {
        let _ = (message, text);
        unsupported(chat.kind(), "edit messages")
    }

    /// Deletes a message the bot sent.
    fn delete<'a>(
        &'a self,
        chat: &'a ChatRef,
        message: MessageId,
    ) -> BoxFuture<'a, Result<(), ChannelError>> {
        let _ = message;
        unsupported(chat.kind(), "delete messages")
    }

    /// Deletes the user's message `inbound` (an [`InboundMessage::id`]) from the chat while
    /// it is being handled: a `/secret set` message, whose value must not stay in the chat.
    fn forget_inbound<'a>(
        &'a self,
        chat: &'a ChatRef,
        inbound: u64,
    ) -> BoxFuture<'a, Result<(), ChannelError>> {
        let _ = inbound;
        unsupported(chat.kind(), "delete the user's messages")
    }

    /// Asks the user `question` and waits up to `wait` for the next message of the chat,
    /// which is the answer (it starts no turn of its own).
    fn ask<'a>(
        &'a self,
        chat: &'a ChatRef,
        question: &'a str,
        wait: Duration,
    ) -> BoxFuture<'a, Result<String, ChannelError>> {
        let _ = (question, wait);
        unsupported(chat.kind(), "ask questions")
    }

    /// Asks the user `question` offering `options` (buttons where the channel has them; the
    /// user may also type an answer) and waits up to `wait`; returns the option pressed or
    /// the text typed. The default asks with the options listed in the text.
    fn ask_choice<'a>(
        &'a self,
        chat: &'a ChatRef,
        question: &'a str,
        options: &'a [String],
        wait: Duration,
    ) -> BoxFuture<'a, Result<String, ChannelError>> {
        Box::pin(async move {
            let listed: Vec<String> = options.iter().map(|o| format!("• {o}")).collect();
            let text = format!("{question}\n{}", listed.join("\n"));
            self.ask(chat, &text, wait).await
        })
    }

    /// Shows how the delegated task `task_id` of a turn in `chat` goes. Best effort: a channel
    /// that cannot show it (or fails to) says nothing, and the task goes on.
    fn task_update<'a>(
        &'a self,
        chat: &'a ChatRef,
        task_id: &'a str,
        update: TaskUpdate,
    ) -> BoxFuture<'a, ()> {
        let _ = (chat, task_id, update);
        Box::pin(async {})
    }

    /// The answer of a turn in `chat` as the model streams it, before the final message.
    /// Best effort; the default shows nothing (Telegram shows typing, then the answer), the
    /// console prints it as it grows.
    fn draft<'a>(&'a self, chat: &'a ChatRef, draft: Draft) -> BoxFuture<'a, ()> {
        let _ = (chat, draft);
        Box::pin(async {})
    }
}

/// A piece of a streamed answer ([`Channel::draft`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Draft {
    /// More text.
    Text(String),
    /// The text so far is void: the model is asked again (a cut stream, a fallback).
    Restart,
}

/// The answer of an operation a channel does not support.
fn unsupported<T: Send + 'static>(
    channel: ChannelKind,
    operation: &'static str,
) -> BoxFuture<'static, Result<T, ChannelError>> {
    Box::pin(async move { Err(ChannelError::Unsupported { channel, operation }) })
}
