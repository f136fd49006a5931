//! The channels users talk through: the outbound router and the console are
//! `nexbot-channels`'; Telegram (`nexbot-telegram`) is wired here, in [`telegram`].

pub mod telegram;

pub use nexbot_channels::{console, Router, SENT_PER_CHAT};
