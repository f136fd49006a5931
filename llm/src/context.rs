//! Fitting a conversation into a model's context window, without a tokenizer.
//!
//! Sizes are estimated as bytes ÷ 3 ([`estimate_tokens`]): no tokenizer in common use packs
//! fewer than 3 bytes of English, code or JSON into a token on average, and languages in
//! other scripts take more bytes per character, so the estimate errs on the large side —
//! which is the safe side for both fitting and budgets.

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
pub fn cut_text(text: &str, max_bytes: usize, what: &str) -> String {
    if text.len() <= max_bytes {
        return text.to_owned();
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}\n[{what} cut: {} of {} bytes shown]", &text[..end], end, text.len())
}

/// What [`fit`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Fitted {
    /// Messages dropped from the oldest end.
    pub dropped: usize,
    /// Messages whose content was cut.
    pub cut: usize,
    /// The estimate after fitting.
    pub tokens: u64,
}

/// Fits `messages` into `budget` tokens (estimated). Keeps the leading system messages and the
/// last message; first cuts tool results and other long contents down to a quarter of the
/// budget each (with a note), then drops the oldest messages in between — an assistant
/// message with tool calls goes together with its tool results, so no result is orphaned. As
/// a last resort the kept messages themselves are cut.
pub fn fit(messages: &mut Vec<ChatMessage>, budget: u64) -> Fitted {
    fit_keeping(messages, budget, 0)
}

/// [`fit`] that also keeps the first `keep` messages (at least the leading system messages),
/// e.g. a task statement that must survive however long the work on it gets.
///
/// The end of the conversation is kept whole too: the last message, and when it is a tool
/// result, the results before it and the assistant message that called them — a result
/// without its call is refused by the API.
pub fn fit_keeping(messages: &mut Vec<ChatMessage>, budget: u64, keep: usize) -> Fitted {
    let mut fitted = Fitted::default();
    let total = |m: &[ChatMessage]| m.iter().map(message_tokens).sum::<u64>();
    if total(messages) <= budget || messages.is_empty() {
        fitted.tokens = total(messages);
        return fitted;
    }
    let system = messages.iter().take_while(|m| m.role == "system").count();
    let head = keep.max(system).min(messages.len() - 1);
    let per_message = (budget / 4).max(64) as usize * 3;
    let last = messages.len() - 1;
    for (i, message) in messages.iter_mut().enumerate() {
        if i < head || i == last {
            continue;
        }
        if message.content_str().len() > per_message {
            let what = if message.role == "tool" { "tool result" } else { "message" };
            message.content = Some(cut_text(message.content_str(), per_message, what));
            fitted.cut += 1;
        }
    }
    // Drop the oldest middle messages until it fits; tool results right after a dropped
    // message go with it (they belong to its calls, or would be orphans).
    while total(messages) > budget {
        let tail = tail_start(messages).max(head);
        if tail <= head {
            break;
        }
        let mut end = head + 1;
        while end < tail && messages[end].role == "tool" {
            end += 1;
        }
        fitted.dropped += end - head;
        messages.drain(head..end);
    }
    // Still too big: the kept messages share what is left.
    if total(messages) > budget {
        let share = (budget as usize * 3 / messages.len().max(1)).saturating_sub(96).max(256);
        for message in messages.iter_mut() {
            if message.content_str().len() > share {
                let what = if message.role == "tool" { "tool result" } else { "message" };
                message.content = Some(cut_text(message.content_str(), share, what));
                fitted.cut += 1;
            }
        }
    }
    fitted.tokens = total(messages);
    fitted
}

/// Where the end that must stay whole begins: the last message, or, when the conversation
/// ends in tool results, the assistant message that called them.
fn tail_start(messages: &[ChatMessage]) -> usize {
    let mut start = messages.len().saturating_sub(1);
    while start > 0 && messages[start].role == "tool" {
        start -= 1;
    }
    if messages.last().is_some_and(|m| m.role == "tool") && !messages[start].tool_calls.is_empty() {
        start
    } else {
        messages.len().saturating_sub(1)
    }
}

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
