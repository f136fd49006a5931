//! `[telegram]` in `config.toml`: where the Bot API is, who may talk to the bot, and how
//! patient the channel is. The token is not here: it comes from `NEXBOT_TELEGRAM_TOKEN` only,
//! so a config file can be shared or backed up without it.

use serde::{Deserialize, Serialize};

/// Telegram's own Bot API server.
pub const DEFAULT_API_URL: &str = "https://api.telegram.org";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelegramConfig {
    /// Run the channel when a token is set. `false` keeps the bot off even with a token.
    pub enabled: bool,
    /// The Bot API server: Telegram's, a self-hosted `telegram-bot-api`, or an emulator.
    pub api_url: String,
    /// The owner's Telegram user id. Their private chat is the owner's chat: the only one
    /// whose prompt holds `USER.md` and `MEMORY.md`. The owner is always allowed.
    pub owner: Option<i64>,
    /// User ids allowed to talk to the bot (in private chats and in allowed groups).
    pub allowed_users: Vec<i64>,
    /// Chat ids (groups) whose every member may talk to the bot.
    pub allowed_chats: Vec<i64>,
    /// Long-polling wait of one `getUpdates`, seconds (Telegram allows up to 50).
    pub poll_timeout_secs: u32,
    /// How often the "typing…" indicator is renewed while a turn runs (Telegram shows it for
    /// about 5 s).
    pub typing_interval_secs: u64,
    /// Least time between two edits of a task's progress message, milliseconds. Telegram
    /// limits edits (about one a second in a chat, 20 a minute in a group).
    pub progress_edit_interval_ms: u64,
    /// How long one answer's delivery is retried (network errors, 429, Bot API down) before
    /// it is recorded as failed, seconds.
    pub delivery_deadline_secs: u64,
    /// Longest wait a 429's `retry_after` may impose before the next try, seconds.
    pub max_retry_after_secs: u64,
    /// Largest file a user may send (a document, photo or voice note), bytes. Telegram's Bot
    /// API hands bots files of up to 20 MB (a self-hosted `telegram-bot-api` more); a larger
    /// one is answered with this limit and not fetched.
    pub max_file_bytes: u64,
    /// Telegram keeps several sizes of a photo: the largest whose longer side is at most
    /// this many pixels is fetched (what a vision model is shown; no image is decoded here).
    pub photo_max_edge: u32,
}

/// The Bot API's own limit on files a bot may fetch (`getFile`).
pub const BOT_API_FILE_LIMIT: u64 = 20 * 1024 * 1024;

impl Default for TelegramConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            api_url: DEFAULT_API_URL.to_owned(),
            owner: None,
            allowed_users: Vec::new(),
            allowed_chats: Vec::new(),
            poll_timeout_secs: 25,
            typing_interval_secs: 4,
            progress_edit_interval_ms: 3000,
            delivery_deadline_secs: 120,
            max_retry_after_secs: 300,
            max_file_bytes: BOT_API_FILE_LIMIT,
            photo_max_edge: 1280,
        }
    }
}

impl TelegramConfig {
    /// What is wrong with the settings: (key, reason) for each problem.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        let url = reqwest::Url::parse(&self.api_url);
        if url.map_or(true, |u| !matches!(u.scheme(), "http" | "https")) {
            problems
                .push(("telegram.api_url", format!("{:?} is not an http(s) URL", self.api_url)));
        }
        if !(1..=50).contains(&self.poll_timeout_secs) {
            let reason = format!("{} is out of range (allowed 1..=50)", self.poll_timeout_secs);
            problems.push(("telegram.poll_timeout_secs", reason));
        }
        if self.typing_interval_secs == 0 {
            problems.push(("telegram.typing_interval_secs", "must be at least 1".to_owned()));
        }
        if self.delivery_deadline_secs == 0 {
            problems.push(("telegram.delivery_deadline_secs", "must be at least 1".to_owned()));
        }
        if !(64..=10_000).contains(&self.photo_max_edge) {
            let reason = format!("{} is out of range (allowed 64..=10000)", self.photo_max_edge);
            problems.push(("telegram.photo_max_edge", reason));
        }
        if self.max_file_bytes == 0 || self.max_file_bytes > 2 * 1024 * 1024 * 1024 {
            let reason = format!("{} is out of range (allowed 1..=2 GiB)", self.max_file_bytes);
            problems.push(("telegram.max_file_bytes", reason));
        }
        problems
    }

    /// Whether `user` may talk to the bot in `chat`.
    pub fn allows(&self, user: i64, chat: i64) -> bool {
        self.owner == Some(user)
            || self.allowed_users.contains(&user)
            || self.allowed_chats.contains(&chat)
    }
}
