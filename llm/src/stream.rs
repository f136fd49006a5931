//! Server-sent events: decoded line by line and accumulated into a [`Completion`].
//!
//! A stream is complete when it sent `data: [DONE]` or a `finish_reason`; one that simply
//! stops is [`ErrorClass::Truncated`] — retried like any other failure, never taken as the
//! answer (the OpenAI SDK itself accepts it silently).

use serde::Deserialize;
use serde_json::Value;

use crate::error::{ErrorClass, LlmError};
use crate::wire::{ChatMessage, Completion, FunctionCall, ToolCall, WireUsage};

/// Splits bytes into SSE `data` payloads, one per event (multi-line data joined by `\n`).
#[derive(Debug, Default)]
pub struct SseDecoder {
    line: Vec<u8>,
    data: Option<String>,
}

/// A single SSE line longer than this is malformed (a provider sends small chunks).
const MAX_LINE: usize = 8 << 20;

impl SseDecoder {
    /// Feeds bytes; calls `on_data` for each complete event's data.
    pub fn feed(
        &mut self,
        mut bytes: &[u8],
        mut on_data: impl FnMut(&str) -> Result<(), LlmError>,
        provider: &str,
    ) -> Result<(), LlmError> {
        while let Some(newline) = memchr::memchr(b'\n', bytes) {
            self.line.extend_from_slice(&bytes[..newline]);
            bytes = &bytes[newline + 1..];
            let line = std::mem::take(&mut self.line);
            let line = line.strip_suffix(b"\r").unwrap_or(&line);
            if line.is_empty() {
                if let Some(data) = self.data.take() {
                    on_data(&data)?;
                }
                continue;
            }
            if let Some(data) = line.strip_prefix(b"data:") {
                let data = String::from_utf8_lossy(data.strip_prefix(b" ").unwrap_or(data));
                match &mut self.data {
                    Some(existing) => {
                        existing.push('\n');
                        existing.push_str(&data);
                    }
                    None => self.data = Some(data.into_owned()),
                }
            }
            // `event:`, `id:`, `retry:` and `:` comments carry nothing we use.
        }
        self.line.extend_from_slice(bytes);
        if self.line.len() > MAX_LINE {
            return Err(LlmError::new(ErrorClass::Malformed, provider, "an SSE line is too long"));
        }
        Ok(())
    }

    /// The body ended: an event without its blank line still counts; one that does not
    /// parse was cut off ([`ErrorClass::Truncated`]).
    pub fn finish(
        &mut self,
        mut on_data: impl FnMut(&str) -> Result<(), LlmError>,
    ) -> Result<(), LlmError> {
        let cut = |mut e: LlmError| {
            if e.class == ErrorClass::Malformed {
                e.class = ErrorClass::Truncated;
            }
            e
        };
        let line = std::mem::take(&mut self.line);
        if let Some(data) = line.strip_prefix(b"data:") {
            let data = String::from_utf8_lossy(data.strip_prefix(b" ").unwrap_or(data));
            let data = match self.data.take() {
                Some(existing) => format!("{existing}\n{data}"),
                None => data.into_owned(),
            };
            return on_data(&data).map_err(cut);
        }
        match self.data.take() {
            Some(data) => on_data(&data).map_err(cut),
            None => Ok(()),
        }
    }
}

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Option<Vec<ChunkChoice>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct ChunkChoice {
    #[serde(default)]
    delta: Option<Delta>,
    /// A whole message where a delta belongs (some servers stream one chunk that way).
    #[serde(default)]
    message: Option<Delta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<CallDelta>>,
}

#[derive(Deserialize)]
struct CallDelta {
    #[serde(default)]
    index: Option<usize>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionDelta>,
}

#[derive(Deserialize)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<Value>,
}

/// Builds a completion from stream events.
#[derive(Debug, Default)]
pub struct Accumulator {
    role: Option<String>,
    content: String,
    calls: Vec<ToolCall>,
    usage: Option<crate::Usage>,
    finish_reason: Option<String>,
    done: bool,
}

impl Accumulator {
    /// Takes one event's data; returns the text it added, if any.
    pub fn push(&mut self, data: &str, provider: &str) -> Result<Option<String>, LlmError> {
        let data = data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(None);
        }
        let chunk: Chunk = serde_json::from_str(data).map_err(|e| {
            LlmError::new(
                ErrorClass::Malformed,
                provider,
                format!("a stream chunk is not JSON: {e}"),
            )
        })?;
        if let Some(error) = chunk.error.filter(|e| !e.is_null()) {
            let text = error.to_string();
            let class = crate::error::classify(200, text.as_bytes());
            return Err(LlmError::new(class, provider, crate::error::excerpt(text.as_bytes())));
        }
        if let Some(usage) = chunk.usage.as_ref().and_then(WireUsage::usage) {
            self.usage = Some(usage);
        }
        let mut added = None;
        for choice in chunk.choices.unwrap_or_default() {
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason);
            }
            let Some(delta) = choice.delta.or(choice.message) else { continue };
            if let Some(role) = delta.role.filter(|r| !r.is_empty()) {
                self.role = Some(role);
            }
            if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
                self.content.push_str(&text);
                added = Some(text);
            }
            for (position, call) in delta.tool_calls.unwrap_or_default().into_iter().enumerate() {
                let index = call.index.unwrap_or(position);
                while self.calls.len() <= index {
                    self.calls.push(ToolCall {
                        id: String::new(),
                        kind: "function".into(),
                        function: FunctionCall { name: String::new(), arguments: String::new() },
                    });
                }
                let slot = &mut self.calls[index];
                if let Some(id) = call.id.filter(|id| !id.is_empty()) {
                    slot.id = id;
                }
                if let Some(function) = call.function {
                    if let Some(name) = function.name.filter(|n| !n.is_empty()) {
                        if slot.function.name.is_empty() {
                            slot.function.name = name;
                        }
                    }
                    match function.arguments {
                        Some(Value::String(part)) => slot.function.arguments.push_str(&part),
                        Some(Value::Null) | None => {}
                        Some(other) => slot.function.arguments.push_str(&other.to_string()),
                    }
                }
            }
        }
        Ok(added)
    }

    /// The text so far.
    pub fn content(&self) -> &str {
        &self.content
    }

    /// The completion, when the stream was complete.
    pub fn finish(self, provider: &str) -> Result<Completion, LlmError> {
        if !self.done && self.finish_reason.is_none() {
            return Err(LlmError::new(
                ErrorClass::Truncated,
                provider,
                "the stream ended before the answer was complete",
            ));
        }
        let message = ChatMessage {
            role: self.role.unwrap_or_else(|| "assistant".into()),
            content: (!self.content.is_empty()).then_some(self.content),
            tool_calls: self.calls,
            tool_call_id: None,
            images: Vec::new(),
        };
        Ok(Completion {
            message,
            usage: self.usage,
            finish_reason: self.finish_reason,
            provider: provider.to_owned(),
            fallback: false,
        }
        .normalized())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stream: &str, split: usize) -> Result<(Completion, Vec<String>), LlmError> {
        let mut decoder = SseDecoder::default();
        let mut acc = Accumulator::default();
        let mut deltas = Vec::new();
        let (a, b) = stream.as_bytes().split_at(split.min(stream.len()));
        for part in [a, b] {
            decoder.feed(
                part,
                |data| {
                    if let Some(t) = acc.push(data, "p")? {
                        deltas.push(t);
                    }
                    Ok(())
                },
                "p",
            )?;
        }
        decoder.finish(|data| acc.push(data, "p").map(|_| ()))?;
        Ok((acc.finish("p")?, deltas))
    }

    const STREAM: &str = concat!(
        ": keep-alive\n\n",
        "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"Hel\"}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"content\":\"lo\",\"tool_calls\":null}}],\"usage\":null}\r\n\r\n",
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c1\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\"\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\":1}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n",
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":2,\"total_tokens\":9}}\n\n",
        "data: [DONE]\n\n"
    );

    #[test]
    fn a_stream_accumulates_across_any_split() {
        for split in 0..STREAM.len() {
            let (c, deltas) = run(STREAM, split).unwrap();
            assert_eq!(c.message.content.as_deref(), Some("Hello"), "split {split}");
            assert_eq!(deltas.concat(), "Hello");
            assert_eq!(c.message.tool_calls[0].id, "c1");
            assert_eq!(c.message.tool_calls[0].function.arguments, r#"{"a":1}"#);
            assert_eq!(c.usage.unwrap().completion_tokens, 2);
            assert_eq!(c.finish_reason.as_deref(), Some("tool_calls"));
        }
    }

    #[test]
    fn a_cut_stream_is_truncated_not_an_answer() {
        let cut = &STREAM[..STREAM.find("{\"index\":0,\"function\":{\"arguments\":\":1").unwrap()];
        assert_eq!(run(cut, 10).unwrap_err().class, ErrorClass::Truncated);
        // A finish reason without [DONE] is complete; [DONE] without one is too.
        let no_done = STREAM.replace("data: [DONE]\n\n", "");
        assert!(run(&no_done, 5).is_ok());
        let done_only = "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]";
        assert_eq!(run(done_only, 3).unwrap().0.message.content.as_deref(), Some("x"));
        assert_eq!(run("data: {nope\n\n", 2).unwrap_err().class, ErrorClass::Malformed);
        let error = "data: {\"error\":{\"message\":\"overloaded\"}}\n\n";
        assert_eq!(run(error, 4).unwrap_err().class, ErrorClass::Overloaded);
    }
}
