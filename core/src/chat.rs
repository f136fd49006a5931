//! [`ChatRef`]: the one identity of a chat, with one text form, `<channel>:<id>`.
//!
//! Why typed: a bare string id cannot say which channel an answer must go back to, and two
//! channels may use the same numbers. The text form is what the database, logs, the control
//! API and `nexbot-ctl --chat` use; [`ChatRef::from_str`] is its only parser.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use thiserror::Error;

/// The channels a chat can live on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ChannelKind {
    /// The Telegram Bot API.
    Telegram,
    /// The terminal (`nexbot chat`).
    Console,
}

impl ChannelKind {
    /// The prefix of the text form.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Telegram => "telegram",
            Self::Console => "console",
        }
    }
}

impl fmt::Display for ChannelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which chat something belongs to: `telegram:<chat id>` (an integer, negative for groups)
/// or `console:<name>` (letters, digits, `_`, `-`, `.`; at most 64).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ChatRef {
    Telegram(i64),
    Console(String),
}

/// Why a text is not a chat reference; the message names the text and the expected form.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ChatRefError {
    #[error(
        "{text:?} is not a chat: expected <channel>:<id>, e.g. telegram:123456 or console:default"
    )]
    NoChannel { text: String },
    #[error("{text:?} names an unknown channel {channel:?}: known are telegram, console")]
    UnknownChannel { text: String, channel: String },
    #[error(
        "{text:?}: a Telegram chat id is an integer, e.g. telegram:123456 or telegram:-100123"
    )]
    BadTelegramId { text: String },
    #[error(
        "{text:?}: a console chat name is 1 to 64 letters, digits, '_', '-' or '.', e.g. console:default"
    )]
    BadConsoleName { text: String },
}

impl ChatRef {
    /// The console chat of `nexbot chat`.
    pub const DEFAULT_CONSOLE: &'static str = "default";

    /// `console:<name>`, checked.
    pub fn console(name: &str) -> Result<Self, ChatRefError> {
        format!("console:{name}").parse()
    }

    /// The console chat of `nexbot chat`: `console:default`.
    pub fn default_console() -> Self {
        Self::Console(Self::DEFAULT_CONSOLE.to_owned())
    }

    /// The channel this chat lives on (where its answers go).
    pub fn kind(&self) -> ChannelKind {
        match self {
            Self::Telegram(_) => ChannelKind::Telegram,
            Self::Console(_) => ChannelKind::Console,
        }
    }
}

impl fmt::Display for ChatRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Telegram(id) => write!(f, "telegram:{id}"),
            Self::Console(name) => write!(f, "console:{name}"),
        }
    }
}

fn valid_console_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

impl FromStr for ChatRef {
    type Err = ChatRefError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let Some((channel, id)) = text.split_once(':') else {
            return Err(ChatRefError::NoChannel { text: text.to_owned() });
        };
        match channel {
            "telegram" => {
                // `i64::from_str` accepts a leading `+`; one spelling per chat refuses it.
                let canonical = id
                    .bytes()
                    .enumerate()
                    .all(|(i, b)| b.is_ascii_digit() || (i == 0 && b == b'-' && id.len() > 1));
                match id.parse() {
                    Ok(n) if canonical && (id == "0" || !id.starts_with('0')) && id != "-0" => {
                        Ok(Self::Telegram(n))
                    }
                    _ => Err(ChatRefError::BadTelegramId { text: text.to_owned() }),
                }
            }
            "console" if valid_console_name(id) => Ok(Self::Console(id.to_owned())),
            "console" => Err(ChatRefError::BadConsoleName { text: text.to_owned() }),
            other => Err(ChatRefError::UnknownChannel {
                text: text.to_owned(),
                channel: other.to_owned(),
            }),
        }
    }
}

impl Serialize for ChatRef {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ChatRef {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_form_round_trips() {
        for text in [
            "telegram:123456",
            "telegram:-1001234567890",
            "telegram:0",
            "console:default",
            "console:ops-1.a_b",
        ] {
            let chat: ChatRef = text.parse().unwrap();
            assert_eq!(chat.to_string(), text);
        }
        assert_eq!("telegram:42".parse::<ChatRef>().unwrap().kind(), ChannelKind::Telegram);
        assert_eq!(ChatRef::default_console().to_string(), "console:default");
    }

    #[test]
    fn one_spelling_per_chat() {
        for text in [
            "telegram:+42",
            "telegram:042",
            "telegram:-0",
            "telegram:",
            "telegram:-",
            "telegram: 1",
            "telegram:1e3",
        ] {
            let err = text.parse::<ChatRef>().unwrap_err();
            assert!(matches!(err, ChatRefError::BadTelegramId { .. }), "{text}: {err}");
        }
    }

    #[test]
    fn errors_name_the_text_and_the_form() {
        let err = "console".parse::<ChatRef>().unwrap_err();
        assert!(
            err.to_string().contains("\"console\"") && err.to_string().contains("<channel>:<id>"),
            "{err}"
        );
        let err = "slack:1".parse::<ChatRef>().unwrap_err();
        assert!(err.to_string().contains("unknown channel \"slack\""), "{err}");
        for bad in
            ["console:", "console:a b", "console:a/b", &format!("console:{}", "x".repeat(65))]
        {
            assert!(
                matches!(bad.parse::<ChatRef>(), Err(ChatRefError::BadConsoleName { .. })),
                "{bad}"
            );
        }
        assert!(ChatRef::console("ops").is_ok());
        assert!(ChatRef::console("../x").is_err());
    }

    #[test]
    fn serde_uses_the_text_form() {
        let chat = ChatRef::Telegram(-5);
        assert_eq!(serde_json::to_string(&chat).unwrap(), "\"telegram:-5\"");
        assert_eq!(
            serde_json::from_str::<ChatRef>("\"console:x\"").unwrap(),
            ChatRef::Console("x".into())
        );
        let err = serde_json::from_str::<ChatRef>("\"nope\"").unwrap_err();
        assert!(err.to_string().contains("not a chat"), "{err}");
    }
}
