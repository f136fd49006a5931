//! Vocabulary shared by every part of the Nexbot daemon and by its clients: which chat a
//! message, a setting, a secret, a job or a ledger row belongs to ([`ChatRef`]), and what the
//! agent can do in a chat ([`channel::Channel`]), which every channel implements, how text
//! from outside is cut for a log line ([`text::excerpt`]), and the hook contract both agent
//! loops use ([`hooks`]).
//!
//! Why a crate of its own: the channels (Telegram, console), the store, the agent, the control
//! API and `nexbot-ctl` all name chats, and none of them should pull in the others (or their
//! heavy dependencies) to agree on one spelling. This crate depends on nothing of Nexbot.

pub mod channel;
mod chat;
pub mod hooks;
pub mod text;

pub use chat::{ChannelKind, ChatRef, ChatRefError};

/// A boxed future, as object-safe traits return.
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;
