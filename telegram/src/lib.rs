//! The Telegram channel.
