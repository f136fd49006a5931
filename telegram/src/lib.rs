//! The Telegram channel of the Nexbot daemon: its own long-polling loop over teloxide's typed
//! requests, the update ledger that makes sure no update vanishes or is answered twice, the
//! access policy (allow-list, groups, `/secret`), and replies split and formatted for
//! Telegram.
//!
//! Why a crate of its own: teloxide and its HTTP stack stay out of every crate that does not
//! talk to Telegram. It implements `nexbot_core::channel::Channel` and knows nothing of the
//! host: the host's store implements [`Ledger`], and the composition root wires the channel
//! to the bus.
//!
//! A message's way in and out (the host's parts named as the host wires them):
//!
//! ```text
//!  Telegram ─ getUpdates (long poll, offset) ─► channel/poll.rs (poll loop)
//!    │                                   │ policy::decide: allow-list, group addressed?, /secret
//!    │                                   │   recognised (its value never recorded)
//!    │                                   ▼
//!    │                        Ledger::receive ─ one transaction: the update's row + the offset past it
//!    │                                   │ refused → settled `refused` (the rule), maybe one reply
//!    │                                   ▼
//!    │                        InboundMessage { chat: telegram:<id>, id: update_id } ─► the host's bus
//!    │                        ("typing…" until the answer)                               │ a turn
//!    │  editMessageText ◄── Channel::task_update (Started/Progress/Finished) ◄──────────────┤
//!    │  (one message, edits spaced, ends as the receipt)                                   │
//!    ◄─ sendMessage (parts, HTML, plain resend, ◄── Channel::send(Final, reply_to = update_id)
//!       retried: 429 waits, network/5xx back off)   └─► Ledger::settle: `answered` (message ids) | `failed`
//! ```
//!
//! After a crash, the next start hands every update still `pending` to the bus again before it
//! polls (a `/secret` one is not replayed: its value was never kept; the user is asked to
//! resend).

mod channel;
pub mod config;
pub mod format;
mod health;
pub mod ledger;
pub mod policy;

pub use channel::{Telegram, TelegramError, KIND};
pub use config::TelegramConfig;
pub use health::{ChannelHealth, HealthSnapshot, PollState};
pub use ledger::{Ledger, LedgerError, ReceivedUpdate, Settlement};
