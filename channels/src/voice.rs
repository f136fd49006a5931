//! Voice answers: a chat's answer spoken by `[llm.speech]` and sent as voice messages, the
//! text beside them (the text stays the record). A chat chooses with `/voice`: `auto` (the
//! default: an answer to a voice note is spoken), `on` (every answer) or `off`.
//!
//! Why so: what is spoken is what the text says after the exit scan (a secret in the answer is
//! blocked before it is spoken, never spoken and then blocked), markup is not read aloud, and a
//! long answer is spoken in parts up to `max_parts`, the rest left to the text (a summary would
//! be a second model call whose words nobody checked). Every failure (no price under a cost
//! cap, the provider down, Telegram refusing the upload) leaves the answer as text with a
//! one-line note; the speech costs count against the caps like any call.

use std::sync::Arc;

use nexbot_agent::channel::Channel;
use nexbot_agent::spend::Spend;
use nexbot_commands::{ChatCommand, CommandContext, CommandReply};
use nexbot_core::channel::{Button, OutboundVoice};
use nexbot_core::{BoxFuture, ChatRef, Usage};
use nexbot_llm::Speaker;
use nexbot_store::Store;

use crate::Router;

/// The per-chat setting `/voice` keeps: `auto` (the default), `on` or `off`.
pub const VOICE_SETTING: &str = "voice";

/// When a chat's answers are spoken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VoiceMode {
    /// An answer to a voice note.
    Auto,
    /// Every answer.
    On,
    /// None.
    Off,
}

impl VoiceMode {
    fn parse(word: &str) -> Option<Self> {
        match word.trim().to_ascii_lowercase().as_str() {
            "auto" => Some(Self::Auto),
            "on" => Some(Self::On),
            "off" => Some(Self::Off),
            _ => None,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::On => "on",
            Self::Off => "off",
        }
    }
}

/// The daemon's voice: the speech provider (if set), the chats' choices, the caps.
#[derive(Debug, Clone)]
pub struct Voice {
    speaker: Option<Arc<Speaker>>,
    store: Store,
    spend: Arc<Spend>,
}

impl Voice {
    pub fn new(speaker: Option<Speaker>, store: Store, spend: Arc<Spend>) -> Self {
        Self { speaker: speaker.map(Arc::new), store, spend }
    }

    /// The chat's choice (`auto` when unset or unreadable).
    pub async fn mode(&self, chat: &ChatRef) -> VoiceMode {
        match self.store.setting(chat, VOICE_SETTING).await {
            Ok(Some(word)) => VoiceMode::parse(&word).unwrap_or(VoiceMode::Auto),
            _ => VoiceMode::Auto,
        }
    }

    /// Whether the answer to a message of `chat` is spoken (`heard`: it was a voice note).
    pub async fn wanted(&self, chat: &ChatRef, heard: bool) -> bool {
        self.speaker.is_some()
            && match self.mode(chat).await {
                VoiceMode::On => true,
                VoiceMode::Off => false,
                VoiceMode::Auto => heard,
            }
    }

    /// Speaks `scanned` (the answer as [`Router::scanned`] let it out) into `chat` as voice
    /// messages replying to `reply_to`; the note to add to the text when not all of it was
    /// spoken (`None`: all of it was).
    pub async fn speak(
        &self,
        router: &Router,
        chat: &ChatRef,
        reply_to: u64,
        scanned: &str,
    ) -> Option<String> {
        let speaker = self.speaker.as_ref()?;
        let spec = speaker.spec();
        let (parts, cut) = spoken_parts(scanned, spec.max_chars_per_part);
        if parts.is_empty() {
            return None;
        }
        let total = parts.len();
        for (i, part) in parts.iter().take(spec.max_parts).enumerate() {
            let chars = part.chars().count();
            let cost = spec.cost_micros(chars);
            let reservation = match self.spend.reserve(chat, 0, cost).await {
                Ok(reservation) => reservation,
                Err(why) => return Some(not_spoken(i, &why)),
            };
            let audio = match speaker.speak(part).await {
                Ok(audio) => audio,
                Err(e) => {
                    reservation.release();
                    tracing::warn!(%chat, error = %e, "speech failed");
                    return Some(not_spoken(i, &format!("the speech service failed: {e}")));
                }
            };
            self.spend.settle(reservation, speaker.name(), Usage::default(), cost).await;
            let voice = OutboundVoice { chat: chat.clone(), audio, reply_to: Some(reply_to) };
            if let Err(e) = router.send_voice(voice).await {
                tracing::warn!(%chat, error = %e, "a voice message could not be sent");
                return Some(not_spoken(i, &format!("the voice message was not sent: {e}")));
            }
        }
        (total > spec.max_parts || cut).then(|| {
            format!("🔊 Spoken: the first {} part(s); the rest is in the text.", spec.max_parts)
        })
    }
}

/// The note for an answer whose speaking stopped before part `i`.
fn not_spoken(i: usize, why: &str) -> String {
    let what = if i == 0 { "this answer" } else { "the rest of this answer" };
    format!("🔇 I could not speak {what}: {why}")
}

/// `text` as it is read aloud, in parts of at most `max_chars` characters (cut at a paragraph,
/// a sentence or a word where one falls in the part's last half), and whether anything was
/// left out (code blocks are not read: the text has them).
pub fn spoken_parts(text: &str, max_chars: usize) -> (Vec<String>, bool) {
    let (plain, cut) = without_markup(text);
    let mut parts = Vec::new();
    let mut rest = plain.trim();
    while !rest.is_empty() {
        let end = part_end(rest, max_chars.max(1));
        let (part, after) = rest.split_at(end);
        if !part.trim().is_empty() {
            parts.push(part.trim().to_owned());
        }
        rest = after.trim_start();
    }
    (parts, cut)
}

/// Where the next part of `text` ends: all of it if it fits, else the last paragraph,
/// sentence or word break in the second half of `max_chars`, else `max_chars` characters.
fn part_end(text: &str, max_chars: usize) -> usize {
    let Some((limit, _)) = text.char_indices().nth(max_chars) else { return text.len() };
    let window = &text[..limit];
    let half = window.char_indices().nth(max_chars / 2).map_or(0, |(i, _)| i);
    for breaks in [&["\n\n"][..], &[". ", "! ", "? ", ".\n", "\n"][..], &[" "][..]] {
        let at = breaks.iter().filter_map(|b| window.rfind(b).map(|i| i + b.len())).max();
        if let Some(at) = at.filter(|at| *at > half) {
            return at;
        }
    }
    limit
}

/// `text` without what should not be read aloud: fenced code blocks (replaced by a short
/// mention), emphasis and heading marks, backticks, and links' addresses (their words kept).
fn without_markup(text: &str) -> (String, bool) {
    let mut out = String::new();
    let mut in_code = false;
    let mut cut = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            if !in_code {
                out.push_str("(code: see the text)\n");
                cut = true;
            }
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let line = line.trim_start_matches(['#', '>']).trim_start();
        let line = line.strip_prefix("- ").or_else(|| line.strip_prefix("* ")).unwrap_or(line);
        out.push_str(&link_words(line).replace(['*', '_', '`'], ""));
        out.push('\n');
    }
    (out, cut)
}

/// `[words](address)` → `words`.
fn link_words(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(open) = rest.find('[') {
        let after = &rest[open + 1..];
        let Some(close) = after.find("](") else { break };
        let Some(end) = after[close + 2..].find(')') else { break };
        out.push_str(&rest[..open]);
        out.push_str(&after[..close]);
        rest = &after[close + 2 + end + 1..];
    }
    out.push_str(rest);
    out
}

/// `/voice [auto|on|off]`: when this chat's answers are spoken.
#[derive(Debug)]
pub struct VoiceCommand(pub Voice);

impl VoiceCommand {
    fn menu(current: VoiceMode) -> Vec<Vec<Button>> {
        let modes = [VoiceMode::Auto, VoiceMode::On, VoiceMode::Off];
        let row = modes.iter().map(|mode| {
            let label = match mode {
                VoiceMode::Auto => "Answer voice with voice",
                VoiceMode::On => "Always speak",
                VoiceMode::Off => "Never speak",
            };
            let label = if *mode == current { format!("✅ {label}") } else { label.to_owned() };
            Button::new(label, format!("/voice {}", mode.as_str()))
        });
        row.map(|b| vec![b]).collect()
    }
}

impl ChatCommand for VoiceCommand {
    fn name(&self) -> &'static str {
        "voice"
    }
    fn summary(&self) -> &'static str {
        "speak my answers: auto (to voice notes), on or off"
    }
    fn run<'a>(&'a self, ctx: CommandContext<'a>) -> BoxFuture<'a, String> {
        Box::pin(async move { self.reply(ctx).await.text })
    }
    fn reply<'a>(&'a self, ctx: CommandContext<'a>) -> BoxFuture<'a, CommandReply> {
        Box::pin(async move {
            let voice = &self.0;
            if voice.speaker.is_none() {
                return CommandReply::text(
                    "I cannot speak: the operator has not set a speech provider ([llm.speech] \
                     in config.toml)."
                        .to_owned(),
                );
            }
            if ctx.args.is_empty() {
                let mode = voice.mode(ctx.chat).await;
                let text = format!(
                    "Voice answers here: {} (auto: I answer a voice note with voice). \
                     /voice auto|on|off changes it.",
                    mode.as_str()
                );
                return CommandReply { text, buttons: Self::menu(mode) };
            }
            let Some(mode) = VoiceMode::parse(ctx.args) else {
                return CommandReply::text(format!(
                    "Unknown choice {:?}: use /voice auto, /voice on or /voice off.",
                    ctx.args
                ));
            };
            match voice.store.set_setting(ctx.chat, VOICE_SETTING, mode.as_str()).await {
                Ok(()) => CommandReply::text(format!("Voice answers here: {}.", mode.as_str())),
                Err(e) => CommandReply::text(format!("Could not change it: {e}")),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_is_not_read_aloud_and_code_is_left_to_the_text() {
        let text = "## Plan\n**Buy** oat milk, see [the shop](https://shop.example/a).\n\
                    ```sh\necho secret-ish\n```\n- `two` items";
        let (parts, cut) = spoken_parts(text, 4096);
        assert!(cut);
        assert_eq!(parts, ["Plan\nBuy oat milk, see the shop.\n(code: see the text)\ntwo items"]);
    }

    #[test]
    fn a_long_answer_is_cut_at_sentences_into_parts_that_fit() {
        let sentence = "This sentence has exactly forty chars. ";
        let text = sentence.repeat(10);
        let (parts, cut) = spoken_parts(&text, 100);
        assert!(!cut);
        assert_eq!(parts.len(), 5, "{parts:?}");
        assert!(parts.iter().all(|p| p.chars().count() <= 100 && p.ends_with('.')), "{parts:?}");
        assert_eq!(parts.join(" "), text.trim());
        // No break at all: cut at the limit, by characters (not bytes).
        let (parts, _) = spoken_parts(&"ё".repeat(250), 100);
        assert_eq!(parts.iter().map(|p| p.chars().count()).collect::<Vec<_>>(), [100, 100, 50]);
    }

    #[test]
    fn the_choice_words_are_read_in_any_case_and_nothing_else_is() {
        assert_eq!(VoiceMode::parse(" ON "), Some(VoiceMode::On));
        assert_eq!(VoiceMode::parse("auto"), Some(VoiceMode::Auto));
        assert_eq!(VoiceMode::parse("loud"), None);
    }
}
