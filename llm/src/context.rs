//! Fitting a conversation into a model's context window, without a tokenizer.
//!
//! Sizes are estimated as bytes ÷ 3 ([`estimate_tokens`]): no tokenizer in common use packs
//! fewer than 3 bytes of English, code or JSON into a token on average, and languages in
//! other scripts take more bytes per character, so the estimate errs on the large side —
//! which is the safe side for both fitting and budgets.

use serde::{Deserialize, Serialize};

use crate::wire::ChatMessage;

/// The token estimate of `bytes` bytes.
pub fn estimate_tokens(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(3)
}

/// Per-message framing the wire adds (role, separators), in tokens.
const MESSAGE_OVERHEAD: u64 = 4;

/// What one image counts for in a prompt's size, bytes (≈ 1,000 tokens at 3 bytes a token):
/// providers charge a photo of about a megapixel between ~765 tokens (OpenAI, high detail,
/// 1024×1024) and ~1,600 (Anthropic, 1.15 MP); the photos sent are at most
/// `telegram.photo_max_edge` on their longer side.
pub const IMAGE_BYTES: usize = 3_000;

/// The bytes a message contributes: content, tool calls' names and arguments.
pub fn message_bytes(message: &ChatMessage) -> usize {
    message.content_str().len()
        + message.images.len() * IMAGE_BYTES
        + message
            .tool_calls
            .iter()
            .map(|c| c.id.len() + c.function.name.len() + c.function.arguments.len())
            .sum::<usize>()
}

pub fn message_tokens(message: &ChatMessage) -> u64 {
    estimate_tokens(message_bytes(message)) + MESSAGE_OVERHEAD
}

/// Cuts `text` to at most `max_bytes` bytes (at a character boundary) and appends a note
/// saying how much was left out. Unchanged when it fits.
///
/// A text cut before (it ends in this function's own note for the same `what`) is cut again
/// from what was shown, and the new note keeps the first size: the model learns how big the
/// original was, not how big the last cut was.
pub fn cut_text(text: &str, max_bytes: usize, what: &str) -> String {
    if text.len() <= max_bytes {
        return text.to_owned();
    }
    let (body, original) = earlier_cut(text, what).unwrap_or((text, text.len()));
    let mut end = max_bytes.min(body.len());
    while !body.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}\n[{what} cut: {} of {} bytes shown]", &body[..end], end, original)
}

/// `text` without the note an earlier [`cut_text`] appended, and the original size it names.
fn earlier_cut<'a>(text: &'a str, what: &str) -> Option<(&'a str, usize)> {
    let marker = format!("\n[{what} cut: ");
    let start = text.rfind(&marker)?;
    let note = text[start + marker.len()..].strip_suffix(" bytes shown]")?;
    let (shown, original) = note.split_once(" of ")?;
    let (shown, original) = (shown.parse::<usize>().ok()?, original.parse().ok()?);
    (shown == start).then_some((&text[..start], original))
}

/// What a JSON content becomes when it is cut: still JSON, so a model (or a tool-output
/// parser) never meets a document that stops mid-way, and the sizes say how much is missing.
/// `head` is the start of the original text, as a string.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CutJson {
    cut: String,
    original_bytes: usize,
    shown_bytes: usize,
    head: String,
}

/// `text`, when it is JSON, as a [`CutJson`] of at most `max_bytes` bytes (unless even an
/// empty `head` is longer); `None` when it is not JSON. An earlier cut is cut again from its
/// `head`, keeping the original size.
fn cut_json(text: &str, max_bytes: usize, what: &str) -> Option<String> {
    let (source, original) = match serde_json::from_str::<CutJson>(text) {
        Ok(earlier) => (earlier.head, earlier.original_bytes),
        Err(_) => {
            serde_json::from_str::<serde::de::IgnoredAny>(text).ok()?;
            (text.to_owned(), text.len())
        }
    };
    let render = |shown: usize, head: &str| {
        let cut = CutJson {
            cut: format!(
                "{what} cut to fit the context window: the first {shown} of {original} bytes \
                 are in head, as a string"
            ),
            original_bytes: original,
            shown_bytes: shown,
            head: head.to_owned(),
        };
        serde_json::to_string(&cut).unwrap_or_default()
    };
    // The frame with the longest `shown` there can be; the head gets the rest.
    let room = max_bytes.saturating_sub(render(original, "").len());
    let end = escaped_prefix(&source, room);
    Some(render(end, &source[..end]))
}

/// How many bytes of `text` (at a character boundary) fit in `room` bytes once escaped into a
/// JSON string, as serde_json escapes them.
fn escaped_prefix(text: &str, room: usize) -> usize {
    let mut used = 0;
    for (i, c) in text.char_indices() {
        let escaped = match c {
            '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
            c if u32::from(c) < 0x20 => 6,
            c => c.len_utf8(),
        };
        if used + escaped > room {
            return i;
        }
        used += escaped;
    }
    text.len()
}

/// Room for [`cut_text`]'s note: the fixed words, `what`, and two numbers of up to 20 digits.
const NOTE_ROOM: usize = 25 + 40;

/// `text` cut to at most `max_bytes` bytes, note included: JSON stays JSON ([`cut_json`]),
/// anything else is cut at a character boundary with a note ([`cut_text`]).
fn cut_to(text: &str, max_bytes: usize, what: &str) -> String {
    if text.len() <= max_bytes {
        return text.to_owned();
    }
    cut_json(text, max_bytes, what)
        .unwrap_or_else(|| cut_text(text, max_bytes.saturating_sub(NOTE_ROOM + what.len()), what))
}

/// What [`fit`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Fitted {
    /// Messages dropped from the oldest end.
    pub dropped: usize,
    /// Cuts made to messages' contents (a message cut in two steps counts twice).
    pub cut: usize,
    /// The estimate after fitting.
    pub tokens: u64,
}

/// The least a content is cut to in the last resort, bytes: a note and a little of the text.
const MIN_CUT: usize = 256;

/// How many times [`level_down`] cuts again when the notes it added took back some room.
const LEVEL_PASSES: usize = 4;

/// Fits `messages` into `budget` tokens (estimated), in this order:
///
/// 1. The largest tool results are cut, largest first and only as far as needed (all those
///    above one common size are cut to it), but none below a quarter of the budget: a big
///    result is usually what the turn is about, yet it must not push the question out. A
///    JSON result stays valid JSON that says what was cut; text gets a note.
/// 2. The oldest messages in between are dropped — an assistant message with tool calls
///    together with its results, so no result is orphaned.
/// 3. As a last resort the kept messages are cut, the largest first, down to [`MIN_CUT`]
///    bytes each; the question is cut only after all of them, when it alone is too big.
///
/// Never dropped: the leading system messages, the current question (the last `user`
/// message), the latest assistant message with tool calls and its results, and the last
/// message. Why: without the question the model answers a tool result nobody asked about,
/// and a result without its call is refused by the API.
pub fn fit(messages: &mut Vec<ChatMessage>, budget: u64) -> Fitted {
    fit_keeping(messages, budget, 0)
}

/// [`fit`] that also keeps the first `keep` messages (at least the leading system messages),
/// e.g. a task statement that must survive however long the work on it gets.
pub fn fit_keeping(messages: &mut Vec<ChatMessage>, budget: u64, keep: usize) -> Fitted {
    let mut fitted = Fitted::default();
    if total(messages) <= budget || messages.is_empty() {
        fitted.tokens = total(messages);
        return fitted;
    }
    let system = messages.iter().take_while(|m| m.role == "system").count();
    let head = keep.max(system).min(messages.len() - 1);
    // 1. The largest tool results, down to what is needed.
    let results: Vec<usize> = (0..messages.len()).filter(|&i| messages[i].role == "tool").collect();
    let floor = (budget / 4).max(64) as usize * 3;
    fitted.cut += level_down(messages, &results, budget, floor);
    // 2. The oldest messages in between; tool results right after a dropped message go with
    // it (they belong to its calls, or would be orphans).
    while total(messages) > budget {
        let kept = kept_messages(messages, head);
        let Some(start) = (head..messages.len()).find(|&i| !kept[i]) else { break };
        let mut end = start + 1;
        while end < messages.len() && messages[end].role == "tool" && !kept[end] {
            end += 1;
        }
        fitted.dropped += end - start;
        messages.drain(start..end);
    }
    // 3. Still too big: everything left is kept; the question is cut last.
    if total(messages) > budget {
        let question = question(messages);
        let others: Vec<usize> = (0..messages.len()).filter(|&i| Some(i) != question).collect();
        fitted.cut += level_down(messages, &others, budget, MIN_CUT);
        if let Some(question) = question {
            fitted.cut += level_down(messages, &[question], budget, MIN_CUT);
        }
    }
    fitted.tokens = total(messages);
    fitted
}

fn total(messages: &[ChatMessage]) -> u64 {
    messages.iter().map(message_tokens).sum()
}

/// The last `user` message that is the user's (not tool answers' pictures): the question.
fn question(messages: &[ChatMessage]) -> Option<usize> {
    messages.iter().rposition(|m| m.role == "user" && !m.is_tool_pictures())
}

/// Which messages [`fit_keeping`] never drops: the first `head`, the last `user` message (the
/// question being answered), the latest assistant message with tool calls and the results
/// right after it, and the last message.
fn kept_messages(messages: &[ChatMessage], head: usize) -> Vec<bool> {
    let mut kept = vec![false; messages.len()];
    kept[..head.min(messages.len())].fill(true);
    if let Some(last) = kept.last_mut() {
        *last = true;
    }
    if let Some(question) = question(messages) {
        kept[question] = true;
    }
    if let Some(call) = messages.iter().rposition(|m| !m.tool_calls.is_empty()) {
        kept[call] = true;
        for i in call + 1..messages.len() {
            if messages[i].role != "tool" {
                break;
            }
            kept[i] = true;
        }
    }
    kept
}

/// Cuts the contents of `candidates` (indices into `messages`), the largest first, all those
/// above one common size down to it — the highest size that makes the conversation fit
/// `budget`, but not below `floor` bytes. Returns how many were cut.
fn level_down(
    messages: &mut [ChatMessage],
    candidates: &[usize],
    budget: u64,
    floor: usize,
) -> usize {
    let mut cut = vec![false; candidates.len()];
    for _ in 0..LEVEL_PASSES {
        let over = total(messages).saturating_sub(budget);
        if over == 0 {
            break;
        }
        let sizes: Vec<usize> =
            candidates.iter().map(|&i| messages[i].content_str().len()).collect();
        // A token is 3 bytes; rounding up may keep one more token per message.
        let need = (over as usize + candidates.len()) * 3;
        let level = water_level(&sizes, need, floor);
        let mut changed = false;
        for (k, &i) in candidates.iter().enumerate() {
            if sizes[k] <= level {
                continue;
            }
            let what = if messages[i].role == "tool" { "tool result" } else { "message" };
            let shorter = cut_to(messages[i].content_str(), level, what);
            if shorter.len() < sizes[k] {
                messages[i].content = Some(shorter);
                cut[k] = true;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    cut.iter().filter(|c| **c).count()
}

/// The highest size, not below `floor`, such that cutting every one of `sizes` above it down
/// to it takes at least `need` bytes; `floor` when even that takes less.
fn water_level(sizes: &[usize], need: usize, floor: usize) -> usize {
    let taken = |level: usize| sizes.iter().map(|s| s.saturating_sub(level)).sum::<usize>();
    let (mut low, mut high) = (floor, sizes.iter().copied().max().unwrap_or(0).max(floor));
    if taken(low) < need {
        return low;
    }
    // taken(low) >= need throughout: the highest such level.
    while low < high {
        let mid = low + (high - low).div_ceil(2);
        if taken(mid) >= need {
            low = mid;
        } else {
            high = mid - 1;
        }
    }
    low
}

#[cfg(test)]
mod fit_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{FunctionCall, ToolCall};

    fn call(id: &str) -> ChatMessage {
        ChatMessage {
            role: "assistant".into(),
            content: None,
            tool_calls: vec![ToolCall {
                id: id.into(),
                kind: "function".into(),
                function: FunctionCall { name: "f".into(), arguments: "{}".into() },
            }],
            tool_call_id: None,
            images: Vec::new(),
        }
    }

    #[test]
    fn small_conversations_are_untouched() {
        let mut m = vec![ChatMessage::system("s"), ChatMessage::user("u")];
        let before = m.clone();
        assert_eq!(fit(&mut m, 1000).dropped, 0);
        assert_eq!(m, before);
    }

    #[test]
    fn oldest_turns_go_first_and_tool_results_go_with_their_call() {
        let mut m = vec![ChatMessage::system("sys")];
        for i in 0..20 {
            m.push(ChatMessage::user(format!("question {i} {}", "x".repeat(300))));
            m.push(call(&format!("c{i}")));
            m.push(ChatMessage::tool(&format!("c{i}"), "y".repeat(300)));
            m.push(ChatMessage::assistant(format!("answer {i}")));
        }
        m.push(ChatMessage::user("last"));
        let f = fit(&mut m, 1_000);
        assert!(f.tokens <= 1_000 && f.dropped > 0, "{f:?}");
        assert_eq!(m[0].content_str(), "sys");
        assert_eq!(m.last().unwrap().content_str(), "last");
        assert_ne!(m[1].role, "tool");
        for (i, msg) in m.iter().enumerate() {
            if msg.role == "tool" {
                assert!(!m[i - 1].tool_calls.is_empty() || m[i - 1].role == "tool");
            }
        }
    }

    #[test]
    fn a_huge_result_is_cut_with_a_note() {
        let mut m = vec![
            ChatMessage::system("sys"),
            ChatMessage::user("q"),
            call("c"),
            ChatMessage::tool("c", "z".repeat(1 << 20)),
            ChatMessage::user("next"),
        ];
        let f = fit(&mut m, 8_000);
        assert!(f.tokens <= 8_000, "{f:?}");
        assert!(m.iter().any(|x| x.content_str().contains("[tool result cut:")), "{m:?}");
        // Even a huge last message and system prompt end up within the window.
        let mut m =
            vec![ChatMessage::system("s".repeat(100_000)), ChatMessage::user("u".repeat(100_000))];
        assert!(fit(&mut m, 4_000).tokens <= 4_000);
        assert_eq!(cut_text("héllo", 2, "x"), "h\n[x cut: 1 of 6 bytes shown]");
    }

    #[test]
    fn the_kept_head_and_the_last_calls_results_survive() {
        // A task statement, then many rounds of tool work, ending in two results of one call.
        let mut m = vec![ChatMessage::system("sys"), ChatMessage::user("the task")];
        for i in 0..30 {
            m.push(call(&format!("c{i}")));
            m.push(ChatMessage::tool(&format!("c{i}"), "r".repeat(2_000)));
        }
        let mut both = call("x1");
        both.tool_calls.extend(call("x2").tool_calls);
        m.push(both);
        m.push(ChatMessage::tool("x1", "first result"));
        m.push(ChatMessage::tool("x2", "second result"));
        let f = fit_keeping(&mut m, 2_000, 2);
        assert!(f.tokens <= 2_000 && f.dropped > 0, "{f:?}");
        assert_eq!(m[1].content_str(), "the task");
        let n = m.len();
        assert_eq!(m[n - 3].tool_calls.len(), 2, "the call of the last results is kept: {m:?}");
        assert_eq!(m[n - 2].content_str(), "first result");
        assert_eq!(m[n - 1].content_str(), "second result");
        // Every tool result follows its call or another result.
        for i in 1..n {
            if m[i].role == "tool" {
                assert!(!m[i - 1].tool_calls.is_empty() || m[i - 1].role == "tool", "{m:?}");
            }
        }
        // Plain `fit` drops the task statement first; `fit_keeping` keeps it.
        let mut plain = vec![ChatMessage::system("sys"), ChatMessage::user("the task")];
        plain.extend((0..20).map(|_| ChatMessage::assistant("a".repeat(500))));
        plain.push(ChatMessage::user("last"));
        let mut kept = plain.clone();
        assert!(fit(&mut plain, 1_000).dropped > 0);
        assert!(plain.iter().all(|x| x.content_str() != "the task"), "{plain:?}");
        assert!(fit_keeping(&mut kept, 1_000, 2).dropped > 0);
        assert_eq!(kept[1].content_str(), "the task");
    }
}
