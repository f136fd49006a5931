//! What the channel does with an update before anything else sees it: who may talk to the
//! bot, when it answers in a group, what it cannot read yet, and `/secret` messages, which
//! are recognised here so their value is never recorded or logged.
//!
//! Pure functions over teloxide's types, so every rule is tested without a network.

use teloxide_core::types::{CallbackQuery, Message, MessageEntityKind, Update, UpdateKind};

use nexbot_core::channel::FileKind;

use crate::config::TelegramConfig;

/// Who the bot is, as far as `getMe` told (a failed `getMe` leaves both unknown: the bot then
/// answers in groups only to commands).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BotIdentity {
    pub id: Option<u64>,
    pub username: Option<String>,
}

/// The decision about one update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Hand `text` to the bus as a message of chat `chat_id`, with `file` fetched first.
    Handle {
        chat_id: i64,
        user_id: i64,
        message_id: i32,
        text: String,
        ledger_text: String,
        file: Option<FileRef>,
    },
    /// Do not handle it: `rule` says why; `reply` (if any) is sent to `chat_id`.
    Refuse {
        chat_id: Option<i64>,
        user_id: Option<i64>,
        message_id: Option<i32>,
        rule: String,
        reply: Option<String>,
        ledger_text: String,
    },
}

/// A file a message carries, as Telegram describes it (fetched with `getFile` by its id).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileRef {
    #[serde(with = "kind_name")]
    pub kind: FileKind,
    pub file_id: String,
    /// The sender's name for it (documents and audio files only).
    pub name: Option<String>,
    pub mime: Option<String>,
    /// Its size as Telegram says (absent for some old files).
    pub size: Option<u64>,
    pub duration_secs: Option<u32>,
}

impl FileRef {
    /// What the ledger keeps of it (JSON), to fetch it again after a restart.
    pub fn to_ledger(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Read back from the ledger; `None` for text this version cannot read.
    pub fn from_ledger(text: &str) -> Option<Self> {
        serde_json::from_str(text).ok()
    }
}

/// [`FileKind`] in the ledger: `document`, `photo`, `voice`, `audio`.
mod kind_name {
    use nexbot_core::channel::FileKind;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(kind: &FileKind, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(kind.as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<FileKind, D::Error> {
        Ok(FileKind::from_name(&String::deserialize(d)?))
    }
}

/// A file's size as Telegram said it; `None` when it did not (teloxide reads an absent size
/// as `u32::MAX`).
pub fn known_size(meta: &teloxide_core::types::FileMeta) -> Option<u64> {
    Some(u64::from(meta.size)).filter(|s| *s > 0 && *s < u64::from(u32::MAX))
}

/// The file `message` carries that the bot can take, if any: a document, the largest size of
/// a photo within `limit` (Telegram keeps several), a voice note or an audio file.
fn file_of(message: &Message, limit: u64, max_edge: u32) -> Option<FileRef> {
    let file = |kind, meta: &teloxide_core::types::FileMeta, name, mime, duration| FileRef {
        kind,
        file_id: meta.id.0.clone(),
        name,
        mime,
        size: known_size(meta),
        duration_secs: duration,
    };
    if let Some(d) = message.document() {
        let mime = d.mime_type.as_ref().map(|m| m.essence_str().to_owned());
        return Some(file(FileKind::Document, &d.file, d.file_name.clone(), mime, None));
    }
    if let Some(sizes) = message.photo() {
        // The largest within the size limit and the edge; else the smallest, which is then
        // refused for its size when it is too large.
        let fits = sizes.iter().filter(|p| {
            known_size(&p.file).is_none_or(|s| s <= limit) && p.width.max(p.height) <= max_edge
        });
        let photo = fits
            .max_by_key(|p| u64::from(p.width) * u64::from(p.height))
            .or_else(|| sizes.iter().min_by_key(|p| p.file.size))?;
        return Some(file(FileKind::Photo, &photo.file, None, Some("image/jpeg".into()), None));
    }
    if let Some(v) = message.voice() {
        let mime = v.mime_type.as_ref().map(|m| m.essence_str().to_owned());
        let duration = Some(v.duration.seconds());
        return Some(file(FileKind::Voice, &v.file, None, mime, duration));
    }
    if let Some(a) = message.audio() {
        let mime = a.mime_type.as_ref().map(|m| m.essence_str().to_owned());
        let duration = Some(a.duration.seconds());
        return Some(file(FileKind::Audio, &a.file, a.file_name.clone(), mime, duration));
    }
    None
}

/// The text the ledger keeps of a message: a `/secret` command keeps its sub-command, never
/// a name or value.
pub fn ledger_text(text: &str) -> String {
    if !is_secret_command(text) {
        return text.to_owned();
    }
    let mut words = text.split_whitespace();
    let command = words.next().unwrap_or("/secret");
    let mut out = command.to_owned();
    // Only a known sub-command is kept: a value typed where a name or the sub-command was
    // expected (`/secret GH ghp_…`, `/secret set ghp_… GH`) keeps nothing of it.
    let sub = words.next().map(str::to_ascii_lowercase);
    if let Some(sub) = sub.filter(|s| matches!(s.as_str(), "set" | "list" | "ls" | "delete" | "rm"))
    {
        out.push(' ');
        out.push_str(&sub);
    }
    out.push_str(" [value redacted]");
    out
}

/// Whether `text` is the `/secret` command (also `/secret@bot`).
pub fn is_secret_command(text: &str) -> bool {
    let first = text.split_whitespace().next().unwrap_or("");
    let name = first.split('@').next().unwrap_or("");
    name.eq_ignore_ascii_case("/secret")
}

pub const REFUSAL: &str = "Sorry, this is a private bot and you are not on its allow-list.";
/// What a stranger who addresses the bot in a group is told (once per group and run): short,
/// and without their user id, which the whole group would read.
pub const GROUP_REFUSAL: &str = "Sorry, this is a private bot.";

/// Decides what to do with `update`.
pub fn decide(config: &TelegramConfig, me: &BotIdentity, update: &Update) -> Decision {
    let message = match &update.kind {
        UpdateKind::Message(message) => message,
        UpdateKind::CallbackQuery(query) => return decide_press(config, query),
        other => {
            return Decision::Refuse {
                chat_id: update.chat().map(|c| c.id.0),
                user_id: update.from().map(|u| u.id.0 as i64),
                message_id: None,
                rule: format!("unsupported-update:{}", update_kind_name(other)),
                reply: None,
                ledger_text: String::new(),
            }
        }
    };
    let chat_id = message.chat.id.0;
    let private = message.chat.is_private();
    let refuse = |rule: &str, reply: Option<String>, ledger_text: String| Decision::Refuse {
        chat_id: Some(chat_id),
        user_id: message.from.as_ref().map(|u| u.id.0 as i64),
        message_id: Some(message.id.0),
        rule: rule.to_owned(),
        reply,
        ledger_text,
    };
    let text = message.text().or(message.caption()).unwrap_or("");
    let ledger = ledger_text(text);
    // What the bot does not answer is recorded as written and when, not what it said: a
    // stranger's words, a group's talk that was not for the bot, another bot's.
    let unread = String::new;
    let Some(from) = &message.from else {
        return refuse("no-sender", None, unread());
    };
    let user_id = from.id.0 as i64;
    if from.is_bot {
        return refuse("from-a-bot", None, unread());
    }
    // In a group, what does not address the bot is none of its business, whoever wrote it:
    // silence, before the allow-list is even looked at.
    let addressed = private || addressed_in_group(message, me);
    if !addressed {
        return refuse("group-not-addressed", None, unread());
    }
    if !config.allows(user_id, chat_id) {
        // In private the stranger is told their id (to ask the operator for access); in a
        // group everyone would read it.
        let reply = if private {
            format!("{REFUSAL} (Your user id is {user_id}.)")
        } else {
            GROUP_REFUSAL.to_owned()
        };
        return refuse("not-allowed", Some(reply), unread());
    }
    let file = file_of(message, config.max_file_bytes, config.photo_max_edge);
    if let Some(size) = file.as_ref().and_then(|f| f.size).filter(|s| *s > config.max_file_bytes) {
        let reply = format!(
            "That file is {}; I can take files up to {}. Please send a smaller one (or a link).",
            nexbot_core::text::human_size(size),
            nexbot_core::text::human_size(config.max_file_bytes)
        );
        return refuse("file-too-large", Some(reply), ledger);
    }
    if file.is_none() {
        if let Some(kind) = unsupported_content(message) {
            let reply = Some(format!(
                "I cannot read {kind} yet; please send me text, a document, a photo or a voice \
                 note instead."
            ));
            return refuse(&format!("unsupported-content:{kind}"), reply, ledger);
        }
    }
    let text = match (message.text(), &file) {
        (Some(text), _) => text,
        (None, Some(_)) => message.caption().unwrap_or(""),
        (None, None) => {
            return refuse("no-text", Some("I can only read text messages.".to_owned()), ledger)
        }
    };
    if is_secret_command(text) && !private {
        let reply = Some(
            "/secret works only in a private chat with me. Delete your message from this group \
             if it held a value, and consider that value exposed."
                .to_owned(),
        );
        return refuse("secret-in-group", reply, ledger);
    }
    let text = if private { text.to_owned() } else { strip_mention(text, me) };
    Decision::Handle { chat_id, user_id, message_id: message.id.0, text, ledger_text: ledger, file }
}

/// A pressed inline button (a command's menu, `/agent`): its callback data is the command it
/// presses, handled as if the user had typed it in the button's chat — so only an allowed
/// user in an allowed chat, and only command text (never a message for the agent, never
/// `/secret`). A refused press is not answered in the chat (the press itself is told).
fn decide_press(config: &TelegramConfig, query: &CallbackQuery) -> Decision {
    let user_id = query.from.id.0 as i64;
    let chat_id = query.message.as_ref().map(|m| m.chat().id.0);
    let message_id = query.message.as_ref().map(|m| m.id().0);
    let data = query.data.clone().unwrap_or_default();
    let refuse = |rule: &str| Decision::Refuse {
        chat_id,
        user_id: Some(user_id),
        message_id,
        rule: rule.to_owned(),
        reply: None,
        ledger_text: ledger_text(&data),
    };
    let (Some(chat_id), Some(message_id)) = (chat_id, message_id) else {
        return refuse("press-without-message");
    };
    if query.from.is_bot {
        return refuse("from-a-bot");
    }
    if !config.allows(user_id, chat_id) {
        return refuse("not-allowed");
    }
    let command = data.starts_with('/') && data.len() <= 64 && !data.contains('\n');
    if !command || is_secret_command(&data) {
        return refuse("press-not-a-command");
    }
    Decision::Handle {
        chat_id,
        user_id,
        message_id,
        text: data.clone(),
        ledger_text: data,
        file: None,
    }
}

/// In a group the bot answers a command, a mention of its name, or a reply to its message.
fn addressed_in_group(message: &Message, me: &BotIdentity) -> bool {
    let text = message.text().unwrap_or("");
    let entities = message.entities().unwrap_or(&[]);
    let username = me.username.as_deref();
    for entity in entities {
        let word = utf16_slice(text, entity.offset, entity.length);
        match entity.kind {
            MessageEntityKind::BotCommand if entity.offset == 0 => {
                // `/cmd@otherbot` is for another bot.
                match (word.split_once('@'), username) {
                    (Some((_, target)), Some(me)) => return target.eq_ignore_ascii_case(me),
                    (Some(_), None) => return false,
                    (None, _) => return true,
                }
            }
            MessageEntityKind::Mention => {
                if let Some(me) = username {
                    if word.trim_start_matches('@').eq_ignore_ascii_case(me) {
                        return true;
                    }
                }
            }
            _ => {}
        }
    }
    if let (Some(reply), Some(id)) = (message.reply_to_message(), me.id) {
        if reply.from.as_ref().is_some_and(|u| u.id.0 == id) {
            return true;
        }
    }
    // No entities (some clients, the emulator): a leading command or a written mention.
    if entities.is_empty() {
        if text.starts_with('/') {
            return true;
        }
        if let Some(me) = username {
            return text.to_lowercase().contains(&format!("@{}", me.to_lowercase()));
        }
    }
    false
}

/// The text without the bot's `@name` (a mention is how it was called, not what was said).
fn strip_mention(text: &str, me: &BotIdentity) -> String {
    let Some(name) = &me.username else { return text.to_owned() };
    let mention = format!("@{name}");
    let lower = text.to_lowercase();
    match lower.find(&mention.to_lowercase()) {
        // A command's `/cmd@bot` is left for the command parser, which understands it.
        Some(at) if !text[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_') => {
            let mut out = String::with_capacity(text.len());
            out.push_str(&text[..at]);
            out.push_str(&text[at + mention.len()..]);
            out.split_whitespace().collect::<Vec<_>>().join(" ")
        }
        _ => text.to_owned(),
    }
}

/// Telegram counts entity offsets in UTF-16 code units.
fn utf16_slice(text: &str, offset: usize, length: usize) -> String {
    let units: Vec<u16> = text.encode_utf16().skip(offset).take(length).collect();
    String::from_utf16_lossy(&units)
}

fn unsupported_content(message: &Message) -> Option<&'static str> {
    if message.video().is_some() {
        Some("videos")
    } else if message.sticker().is_some() {
        Some("stickers")
    } else {
        None
    }
}

fn update_kind_name(kind: &UpdateKind) -> &'static str {
    match kind {
        UpdateKind::Message(_) => "message",
        UpdateKind::EditedMessage(_) => "edited_message",
        UpdateKind::ChannelPost(_) => "channel_post",
        UpdateKind::EditedChannelPost(_) => "edited_channel_post",
        UpdateKind::CallbackQuery(_) => "callback_query",
        UpdateKind::InlineQuery(_) => "inline_query",
        UpdateKind::MyChatMember(_) => "my_chat_member",
        UpdateKind::ChatMember(_) => "chat_member",
        UpdateKind::Error(_) => "unparsed",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn update(message: serde_json::Value) -> Update {
        // From text, as updates arrive (teloxide's `Update` does not read a `Value`).
        serde_json::from_str(&json!({"update_id": 7, "message": message}).to_string()).unwrap()
    }

    fn message(chat: serde_json::Value, from: i64, text: &str) -> serde_json::Value {
        let mut m = json!({
            "message_id": 3, "date": 1_700_000_000, "chat": chat,
            "from": {"id": from, "is_bot": false, "first_name": "U"}, "text": text
        });
        if text.starts_with('/') {
            let len = text.split_whitespace().next().unwrap().encode_utf16().count();
            m["entities"] = json!([{"type": "bot_command", "offset": 0, "length": len}]);
        }
        m
    }

    fn private(id: i64) -> serde_json::Value {
        json!({"id": id, "type": "private", "first_name": "U"})
    }

    fn group(id: i64) -> serde_json::Value {
        json!({"id": id, "type": "group", "title": "G"})
    }

    fn config() -> TelegramConfig {
        TelegramConfig {
            owner: Some(1),
            allowed_users: vec![2],
            allowed_chats: vec![-100],
            ..TelegramConfig::default()
        }
    }

    fn me() -> BotIdentity {
        BotIdentity { id: Some(999), username: Some("nexbot_bot".into()) }
    }

    fn rule(d: &Decision) -> &str {
        match d {
            Decision::Refuse { rule, .. } => rule,
            Decision::Handle { .. } => "handle",
        }
    }

    #[test]
    fn only_allowed_users_and_chats_reach_the_agent() {
        let c = config();
        assert_eq!(rule(&decide(&c, &me(), &update(message(private(1), 1, "hi")))), "handle");
        assert_eq!(rule(&decide(&c, &me(), &update(message(private(2), 2, "hi")))), "handle");
        let stranger = decide(&c, &me(), &update(message(private(3), 3, "hi")));
        assert_eq!(rule(&stranger), "not-allowed");
        let Decision::Refuse { reply: Some(reply), .. } = stranger else { panic!() };
        assert!(reply.contains("3"), "{reply}");
        // In an allowed group anyone may address the bot.
        let g = decide(&c, &me(), &update(message(group(-100), 3, "@nexbot_bot what time?")));
        let Decision::Handle { text, .. } = g else { panic!("{g:?}") };
        assert_eq!(text, "what time?");
        assert_eq!(
            rule(&decide(&c, &me(), &update(message(group(-200), 3, "/help")))),
            "not-allowed"
        );
    }

    #[test]
    fn in_a_group_strangers_are_silent_unless_they_address_the_bot_and_never_see_their_id() {
        let c = config();
        // A group that is not allowed, a user who is not: talk that does not address the bot
        // is ignored without a word, as from anyone.
        for (chat, user) in [(-200, 3), (-200, 2), (-100, 3)] {
            let d = decide(&c, &me(), &update(message(group(chat), user, "lunch at noon?")));
            let Decision::Refuse { rule, reply, .. } = d else { panic!("{d:?}") };
            assert_eq!((rule.as_str(), reply), ("group-not-addressed", None), "{chat} {user}");
        }
        // Addressed by a stranger: a short refusal, without the user id.
        for text in ["@nexbot_bot hello", "/help"] {
            let d = decide(&c, &me(), &update(message(group(-200), 3456, text)));
            let Decision::Refuse { rule, reply: Some(reply), .. } = d else { panic!("{d:?}") };
            assert_eq!(rule, "not-allowed");
            assert_eq!(reply, GROUP_REFUSAL);
            assert!(!reply.contains("3456"), "{reply}");
        }
    }

    #[test]
    fn in_groups_the_bot_answers_only_when_addressed() {
        let c = config();
        let said = |text: &str| {
            rule(&decide(&c, &me(), &update(message(group(-100), 2, text)))).to_owned()
        };
        assert_eq!(said("talking among ourselves"), "group-not-addressed");
        assert_eq!(said("/status"), "handle");
        assert_eq!(said("/status@nexbot_bot"), "handle");
        assert_eq!(said("/status@other_bot"), "group-not-addressed");
        assert_eq!(said("hey @nexbot_bot look"), "handle");
        let mut reply = message(group(-100), 2, "and this?");
        reply["reply_to_message"] = json!({"message_id": 1, "date": 1, "chat": group(-100),
            "from": {"id": 999, "is_bot": true, "first_name": "Bot"}, "text": "earlier"});
        assert_eq!(rule(&decide(&c, &me(), &update(reply))), "handle");
    }

    #[test]
    fn secrets_are_redacted_for_the_ledger_and_refused_in_groups() {
        let text = "/secret set GITHUB_TOKEN ghp_abcdefghijklmnop --host api.github.com";
        assert_eq!(ledger_text(text), "/secret set [value redacted]");
        // No sub-command, or the value before the name: nothing of it is kept.
        assert_eq!(ledger_text("/secret GH ghp_abcdefghijklmnop"), "/secret [value redacted]");
        assert_eq!(
            ledger_text("/secret set ghp_abcdefghijklmnop GH"),
            "/secret set [value redacted]"
        );
        assert!(!ledger_text(text).contains("ghp_"));
        assert_eq!(
            ledger_text("/secret@nexbot_bot set A b"),
            "/secret@nexbot_bot set [value redacted]"
        );
        let c = config();
        // A stranger's words are not kept (that they wrote, and when, is).
        let d = decide(&c, &me(), &update(message(private(777), 777, "my card is 4111 1111")));
        assert_eq!(rule(&d), "not-allowed");
        let Decision::Refuse { ledger_text: kept, .. } = &d else { panic!() };
        assert_eq!(kept, "", "a stranger's text stays out of the ledger");
        let d = decide(&c, &me(), &update(message(group(-100), 2, "chatter not for the bot")));
        assert_eq!(rule(&d), "group-not-addressed");
        let Decision::Refuse { ledger_text: kept, .. } = &d else { panic!() };
        assert_eq!(kept, "", "a group's talk that was not for the bot stays out of the ledger");
        let d = decide(&c, &me(), &update(message(group(-100), 2, text)));
        assert_eq!(rule(&d), "secret-in-group");
        let Decision::Refuse { ledger_text, .. } = d else { panic!() };
        assert!(!ledger_text.contains("ghp_"));
        let d = decide(&c, &me(), &update(message(private(1), 1, text)));
        let Decision::Handle { ledger_text, text: handled, .. } = d else { panic!() };
        assert!(!ledger_text.contains("ghp_") && handled.contains("ghp_"));
    }

    #[test]
    fn files_are_taken_within_the_limit_and_the_rest_get_a_clear_answer() {
        let c = TelegramConfig { max_file_bytes: 1000, ..config() };
        let file_message = |field: &str, value: serde_json::Value| {
            let mut m = message(private(1), 1, "");
            m.as_object_mut().unwrap().remove("text");
            m[field] = value;
            m["caption"] = json!("what is this?");
            m
        };
        // A photo: the largest size within the limit; the caption is the text.
        let sizes = json!([
            {"file_id": "small", "file_unique_id": "s", "width": 90, "height": 60, "file_size": 300},
            {"file_id": "mid", "file_unique_id": "m", "width": 320, "height": 240, "file_size": 900},
            {"file_id": "big", "file_unique_id": "b", "width": 1280, "height": 960, "file_size": 5000}
        ]);
        let d = decide(&c, &me(), &update(file_message("photo", sizes.clone())));
        let Decision::Handle { text, file: Some(file), .. } = d else { panic!("{d:?}") };
        assert_eq!((text.as_str(), file.file_id.as_str()), ("what is this?", "mid"));
        // ... and within the longer edge the operator set.
        let small = TelegramConfig { photo_max_edge: 100, ..c.clone() };
        let d = decide(&small, &me(), &update(file_message("photo", sizes)));
        let Decision::Handle { file: Some(file), .. } = d else { panic!("{d:?}") };
        assert_eq!(file.file_id, "small");
        assert_eq!(file.kind, FileKind::Photo);
        // A document over the limit: refused with both sizes, not fetched.
        let doc = json!({"file_id": "d", "file_unique_id": "u", "file_name": "a.pdf", "mime_type": "application/pdf", "file_size": 3000});
        let d = decide(&c, &me(), &update(file_message("document", doc)));
        assert_eq!(rule(&d), "file-too-large");
        let Decision::Refuse { reply: Some(reply), .. } = d else { panic!() };
        assert!(reply.contains("2.9 KB") && reply.contains("1000 B"), "{reply}");
        // A voice note without a size: taken (the fetch itself stops at the limit).
        let voice =
            json!({"file_id": "v", "file_unique_id": "u", "duration": 3, "mime_type": "audio/ogg"});
        let d = decide(&c, &me(), &update(file_message("voice", voice)));
        let Decision::Handle { file: Some(file), .. } = d else { panic!("{d:?}") };
        assert_eq!((file.kind, file.size, file.duration_secs), (FileKind::Voice, None, Some(3)));
        // The ledger's copy reads back the same.
        assert_eq!(FileRef::from_ledger(&file.to_ledger()), Some(file));
        // A sticker is still not something to read.
        let sticker = json!({"file_id": "s", "file_unique_id": "u", "width": 1, "height": 1, "is_animated": false, "is_video": false, "type": "regular"});
        let d = decide(&c, &me(), &update(file_message("sticker", sticker)));
        assert_eq!(rule(&d), "unsupported-content:stickers");
    }
}
