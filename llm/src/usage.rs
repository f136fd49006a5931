//! Reading the LLM token usage out of a provider's response while it streams past.
//!
//! The egress relay charges each task for what its calls cost. OpenAI-compatible providers report
//! `usage` in a JSON response, or in an SSE chunk of a streamed one (the last chunk when
//! `stream_options.include_usage` is set). [`UsageTap`] watches the bytes without holding the
//! stream back: SSE is scanned line by line, a JSON body is kept (bounded) until it ends.

use serde_json::Value;

/// Longest SSE line or JSON body kept for scanning; larger ones are not parsed (the call is
/// then charged by estimate).
const MAX_SCAN: usize = 16 << 20;

#[derive(Debug)]
pub struct UsageTap {
    sse: bool,
    pending: Vec<u8>,
    overflow: bool,
    usage: Option<u64>,
    /// The last reported prompt and completion tokens, when the provider gave both.
    split: Option<(u64, u64)>,
    bytes: u64,
}

impl UsageTap {
    /// `sse`: the response is `text/event-stream`.
    pub fn new(sse: bool) -> Self {
        Self { sse, pending: Vec::new(), overflow: false, usage: None, split: None, bytes: 0 }
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn feed(&mut self, chunk: &[u8]) {
        self.bytes += chunk.len() as u64;
        if !self.sse {
            if self.pending.len() + chunk.len() > MAX_SCAN {
                self.overflow = true;
                self.pending = Vec::new();
            } else if !self.overflow {
                self.pending.extend_from_slice(chunk);
            }
            return;
        }
        let mut rest = chunk;
        while let Some(newline) = memchr::memchr(b'\n', rest) {
            let (line, tail) = rest.split_at(newline);
            rest = &tail[1..];
            if !self.overflow {
                self.pending.extend_from_slice(line);
                let line = std::mem::take(&mut self.pending);
                self.sse_line(&line);
            }
            self.pending.clear();
            self.overflow = false;
        }
        if self.pending.len() + rest.len() > MAX_SCAN {
            self.overflow = true;
            self.pending = Vec::new();
        } else if !self.overflow {
            self.pending.extend_from_slice(rest);
        }
    }

    fn sse_line(&mut self, line: &[u8]) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(data) = line.strip_prefix(b"data:") else { return };
        if !carries_usage(data) {
            return;
        }
        let body = serde_json::from_slice::<Value>(data).ok();
        if let Some(tokens) = body.as_ref().and_then(tokens_of) {
            // Providers that repeat usage send a running total: the last one counts.
            self.usage = Some(tokens);
            self.split = body.as_ref().and_then(split_of);
        }
    }

    /// The prompt and completion tokens of the usage [`Self::finish`] read, when the provider
    /// reported both (what a price applies to).
    pub fn split(&self) -> Option<(u64, u64)> {
        self.split
    }

    /// The tokens the provider reported, once the body has ended.
    pub fn finish(&mut self) -> Option<u64> {
        if self.sse {
            let line = std::mem::take(&mut self.pending);
            if !self.overflow {
                self.sse_line(&line);
            }
            return self.usage;
        }
        if self.overflow {
            return None;
        }
        let body = serde_json::from_slice::<Value>(&self.pending).ok();
        self.split = body.as_ref().and_then(split_of);
        body.as_ref().and_then(tokens_of)
    }
}

/// Whether an event may carry usage: a `"usage"` key whose value is an object. OpenAI-style
/// streams send `"usage":null` in every event; those are not worth parsing.
fn carries_usage(data: &[u8]) -> bool {
    memchr::memmem::find_iter(data, b"\"usage\"").any(|at| {
        let rest = &data[at + 7..];
        let rest = rest.trim_ascii_start();
        rest.strip_prefix(b":").is_some_and(|value| value.trim_ascii_start().starts_with(b"{"))
    })
}

/// `usage.prompt_tokens` and `usage.completion_tokens`, when both are there.
fn split_of(body: &Value) -> Option<(u64, u64)> {
    let usage = body.get("usage")?.as_object()?;
    let prompt = usage.get("prompt_tokens").and_then(Value::as_u64)?;
    Some((prompt, usage.get("completion_tokens").and_then(Value::as_u64)?))
}

/// `usage.total_tokens`, or prompt + completion when the total is missing.
fn tokens_of(body: &Value) -> Option<u64> {
    let usage = body.get("usage")?.as_object()?;
    if let Some(total) = usage.get("total_tokens").and_then(Value::as_u64) {
        return Some(total);
    }
    let prompt = usage.get("prompt_tokens").and_then(Value::as_u64);
    let completion = usage.get("completion_tokens").and_then(Value::as_u64);
    (prompt.is_some() || completion.is_some())
        .then(|| prompt.unwrap_or(0).saturating_add(completion.unwrap_or(0)))
}

/// A charge for a call whose usage was not reported: the same bytes ÷ 3 estimate as
/// [`crate::context::estimate_tokens`], over request and response, so a provider that omits
/// `usage` cannot lift the budget.
pub fn estimate(request_bytes: u64, response_bytes: u64) -> u64 {
    crate::context::estimate_tokens(request_bytes.saturating_add(response_bytes) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_usage_is_read_at_the_end() {
        let mut tap = UsageTap::new(false);
        let body = br#"{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}"#;
        let (a, b) = body.split_at(20);
        tap.feed(a);
        tap.feed(b);
        assert_eq!(tap.finish(), Some(15));
        assert_eq!(tap.bytes(), body.len() as u64);
        let mut tap = UsageTap::new(false);
        tap.feed(br#"{"usage":{"prompt_tokens":3,"completion_tokens":4}}"#);
        assert_eq!(tap.finish(), Some(7));
        let mut tap = UsageTap::new(false);
        tap.feed(b"{not json");
        assert_eq!(tap.finish(), None);
    }

    #[test]
    fn sse_usage_is_found_across_chunk_boundaries() {
        let stream = concat!(
            "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":2,\"total_tokens\":9}}\r\n\r\n",
            "data: [DONE]\n\n"
        );
        for split in 1..stream.len() {
            let mut tap = UsageTap::new(true);
            let (a, b) = stream.as_bytes().split_at(split);
            tap.feed(a);
            tap.feed(b);
            assert_eq!(tap.finish(), Some(9), "split at {split}");
        }
        let mut tap = UsageTap::new(true);
        tap.feed(b"data: {\"choices\":[]}\n\ndata: [DONE]\n\n");
        assert_eq!(tap.finish(), None);
        assert!(carries_usage(br#"{"usage" : {"total_tokens":1}}"#));
        assert!(!carries_usage(br#"{"usage":null,"x":"\"usage\""}"#));
        assert_eq!(estimate(10, 11), 7);
    }
}
