//! The Telegram channel of the Nexbot daemon: its own long-polling loop over teloxide's typed
//! requests, the update ledger that makes sure no update vanishes or is answered twice, the
//! access policy (allow-list, groups, `/secret`), and replies split and formatted for
//! Telegram.
//!
//! Why a crate of its own: teloxide and its HTTP stack stay out of every crate that does not
//! talk to Telegram. It implements `nexbot_core::channel::Channel` and knows nothing of the
//! host: the host's store implements [`Ledger`], and the composition root wires the channel
//! to the bus.

mod channel;
pub mod config;
pub mod format;
mod health;
pub mod ledger;
pub mod policy;

pub use channel::{Telegram, TelegramError, KIND};
pub use config::TelegramConfig;
pub use health::{Health, HealthSnapshot, PollState};
pub use ledger::{Ledger, LedgerError, ReceivedUpdate, Settlement};
