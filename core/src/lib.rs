//! Vocabulary shared by every part of the Nexbot daemon and by its clients: which chat a
//! message, a setting, a secret, a job or a ledger row belongs to ([`ChatRef`]), and what the
//! agent can do in a chat ([`channel::Channel`]), which every channel implements, how text
//! from outside is cut for a log line ([`text::excerpt`]) and shown without its control
//! characters ([`text::visible_controls`]), how many tokens a call used
//! ([`Usage`]) and what the calls cost against the caps ([`SpendSummary`]), the hook contract both agent loops use ([`hooks`]), a chat's remembered entries and where each came from ([`memory`]), how a retry loop logs
//! an error that repeats once with a count ([`repeat`]), and the board of running parts that
//! `/status` and the control API's health read ([`status::StatusBoard`]).
//!
//! Why a crate of its own: the channels (Telegram, console), the store, the agent, the control
//! API and `nexbot-ctl` all name chats, and none of them should pull in the others (or their
//! heavy dependencies) to agree on one spelling. This crate depends on nothing of Nexbot.

pub mod audit;
pub mod channel;
mod chat;
pub mod hooks;
pub mod memory;
pub mod repeat;
mod spend;
pub mod status;
pub mod text;
mod usage;

pub use chat::{ChannelKind, ChatRef, ChatRefError};
pub use spend::SpendSummary;
pub use usage::Usage;

/// A boxed future, as object-safe traits return.
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// The current unix time in whole seconds (0 on a clock before 1970): what deadlines on the
/// wire, the store's rows and the schedules count in.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}
