//! A stdio server's transport whose messages are cut as they stream in, never held whole.
//!
//! Why: rmcp's stdio transport reads a whole line (one JSON-RPC message, up to 16 MiB) before
//! it parses it, and a result is cut for the model ([`crate::answer::MAX_RESULT_BYTES`]) only
//! after that: one 10 MiB answer took the daemon from 39 to ~106 MB. A server is not trusted,
//! so what it writes is bounded before anything collects it. The SDK keeps the JSON-RPC side
//! (rmcp's `AsyncRwTransport`); only the bytes it reads pass through [`CutLines`] first.
//!
//! The rule, line by line (stdio's framing is one message a line):
//! - every JSON string longer than [`MAX_STRING_BYTES`] keeps its first bytes (cut between
//!   whole characters and escapes) and ends with a note of its size; the rest is dropped as it
//!   is read. The message stays valid JSON with its `id` wherever it stands, so the call gets
//!   a cut result that says so (one text block fits the model's limit with its note);
//! - a message still over [`MAX_MESSAGE_BYTES`] after that (a huge structure of small parts)
//!   is dropped while read, up to its newline (the next message is read as ever); when it was
//!   an answer, its request gets an error saying why instead of waiting for its limit.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

/// How a string cut while reading says so (then `N bytes in all]`): the model reads it in
/// the result, and [`read_cut_bytes`] finds it again so the call's answer can say it was cut.
pub(crate) const READ_CUT_NOTE: &str = "[cut by Nexbot while reading: ";

/// The largest original size a note of [`READ_CUT_NOTE`] in `text` names (`None`: no note).
pub(crate) fn read_cut_bytes(text: &str) -> Option<usize> {
    text.match_indices(READ_CUT_NOTE)
        .filter_map(|(at, note)| {
            let rest = &text[at + note.len()..];
            rest.split_once(" bytes in all]")?.0.parse::<usize>().ok()
        })
        .max()
}

use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::RoleClient;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Bytes of one JSON string (as written, escapes included) kept; the model's limit less room
/// for the cut's note, so a single cut text reaches the model with its note.
pub const MAX_STRING_BYTES: usize = crate::answer::MAX_RESULT_BYTES - 1024;
/// Bytes of one message kept once its strings are cut; a bigger one is dropped.
pub const MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;
/// Bytes of a message's `id` kept to answer it (an id is a number or a short string).
const MAX_ID_BYTES: usize = 128;
/// Bytes read from the server at a time.
const CHUNK: usize = 16 * 1024;
/// A line buffer that grew past this is let go after its line (not kept at its peak).
const KEEP_CAPACITY: usize = 256 * 1024;

/// The transport of a session over a server's stdio: writes requests to `write`, reads its
/// answers from `read` through [`CutLines`].
pub fn transport<R, W>(read: R, write: W) -> AsyncRwTransport<RoleClient, CutLines<R>, W>
where
    R: AsyncRead + Send + Unpin,
    W: AsyncWrite + Send + Unpin + 'static,
{
    // The SDK's own cap, never reached (every line is at most MAX_MESSAGE_BYTES and a note).
    AsyncRwTransport::new_client(CutLines::new(read), write)
        .with_max_line_length(MAX_MESSAGE_BYTES + 4096)
}

/// `read` with every line cut as the module says, as it is read.
#[derive(Debug)]
pub struct CutLines<R> {
    read: R,
    cutter: Cutter,
    chunk: Box<[u8]>,
    /// Cut lines ready for the reader, from `at` on.
    out: Vec<u8>,
    at: usize,
    ended: bool,
}

impl<R> CutLines<R> {
    pub fn new(read: R) -> Self {
        Self {
            read,
            cutter: Cutter::default(),
            chunk: vec![0; CHUNK].into_boxed_slice(),
            out: Vec::new(),
            at: 0,
            ended: false,
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for CutLines<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.at < this.out.len() {
                let n = buf.remaining().min(this.out.len() - this.at);
                buf.put_slice(&this.out[this.at..this.at + n]);
                this.at += n;
                if this.at == this.out.len() {
                    this.out.clear();
                    this.at = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.ended {
                return Poll::Ready(Ok(()));
            }
            let mut read = ReadBuf::new(&mut this.chunk);
            ready!(Pin::new(&mut this.read).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                this.ended = true;
                this.cutter.finish(&mut this.out);
            } else {
                this.cutter.push(read.filled(), &mut this.out);
            }
        }
    }
}

/// Where an `id` at the top level of a message is in the scan.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum IdState {
    #[default]
    Unseen,
    /// After the key `"id"`, before its colon.
    Key,
    /// After `"id":`, its bytes being collected.
    Reading,
    Read,
    /// Too long to be an id.
    Unusable,
}

/// The scan of one line: where in the JSON it is, and what is kept of it.
#[derive(Debug, Default)]
struct Cutter {
    /// The line as kept (strings cut), at most [`MAX_MESSAGE_BYTES`].
    line: Vec<u8>,
    /// Bytes of the line read (uncut).
    read: usize,
    /// Over [`MAX_MESSAGE_BYTES`] even cut: dropped at its end.
    over: bool,
    depth: usize,
    in_string: bool,
    /// Bytes of the current string read (as written).
    string_bytes: usize,
    /// The current string is past [`MAX_STRING_BYTES`]: the rest of it is dropped.
    cutting: bool,
    /// In an escape: 1 right after `\`, 2..=5 in the hex digits of `\u`.
    escape: u8,
    hex: u32,
    /// The last escape was a high surrogate: the low one must stay with it.
    high_surrogate: bool,
    /// At the top level of an object, a string now would be a key.
    expect_key: bool,
    /// The current top-level key, when it is short (`id`, `method`).
    key: Option<Vec<u8>>,
    id: Vec<u8>,
    id_state: IdState,
    has_method: bool,
}

impl Cutter {
    /// Scans `bytes`, appending every line they complete, cut, to `out`.
    fn push(&mut self, bytes: &[u8], out: &mut Vec<u8>) {
        for &b in bytes {
            if b == b'\n' {
                self.end_line(out);
            } else {
                self.read += 1;
                self.byte(b);
            }
        }
    }

    /// The stream ended: what is left of a line without its newline, as it is.
    fn finish(&mut self, out: &mut Vec<u8>) {
        if !self.over {
            out.append(&mut self.line);
        }
        *self = Self::default();
    }

    fn end_line(&mut self, out: &mut Vec<u8>) {
        if !self.over {
            out.append(&mut self.line);
            out.push(b'\n');
        } else if let Some(answer) = self.refusal() {
            out.extend_from_slice(answer.as_bytes());
            out.push(b'\n');
        } else {
            tracing::warn!(bytes = self.read, "an MCP server's message over the limit was dropped");
        }
        let mut line = std::mem::take(&mut self.line);
        line.clear();
        if line.capacity() > KEEP_CAPACITY {
            line = Vec::new();
        }
        *self = Self { line, ..Self::default() };
    }

    /// The error answering a dropped message, when it was an answer with a usable `id` (a
    /// request or notification of the server's is only dropped: an error in its name could
    /// end a request of ours with the same id).
    fn refusal(&self) -> Option<String> {
        tracing::warn!(bytes = self.read, "an MCP server's answer over the limit was dropped");
        if self.has_method || self.id_state != IdState::Read {
            return None;
        }
        let id: serde_json::Value = serde_json::from_slice(&self.id).ok()?;
        if !(id.is_number() || id.is_string()) {
            return None;
        }
        let message = format!(
            "the server's answer was {} bytes or more, over the limit of {MAX_MESSAGE_BYTES} \
             bytes a message (each text cut to {MAX_STRING_BYTES} bytes); it was dropped",
            self.read
        );
        let answer = serde_json::json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {"code": -32603, "message": message},
        });
        Some(answer.to_string())
    }

    fn keep(&mut self, b: u8) {
        if self.over {
            return;
        }
        if self.line.len() == MAX_MESSAGE_BYTES {
            self.over = true;
            self.line = Vec::new();
            return;
        }
        self.line.push(b);
    }

    fn keep_all(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.keep(b);
        }
    }

    fn byte(&mut self, b: u8) {
        if self.id_state == IdState::Key && b == b':' {
            self.id_state = IdState::Reading;
        } else if self.id_state == IdState::Reading && !self.ends_id(b) {
            if self.id.len() == MAX_ID_BYTES {
                self.id_state = IdState::Unusable;
            } else if !b.is_ascii_whitespace() || self.in_string {
                self.id.push(b);
            }
        }
        if self.in_string {
            return self.string_byte(b);
        }
        self.keep(b);
        match b {
            b'"' => {
                self.in_string = true;
                self.string_bytes = 0;
                self.key = (self.depth == 1 && self.expect_key).then(Vec::new);
                self.expect_key = false;
            }
            b'{' | b'[' => {
                self.depth += 1;
                self.expect_key = self.depth == 1 && b == b'{';
            }
            b'}' | b']' => self.depth = self.depth.saturating_sub(1),
            b',' if self.depth == 1 => self.expect_key = true,
            _ => {}
        }
    }

    /// Whether `b` ends a top-level `id` being read (then it is read).
    fn ends_id(&mut self, b: u8) -> bool {
        let ends = !self.in_string && self.depth == 1 && (b == b',' || b == b'}');
        if ends {
            self.id_state = IdState::Read;
        }
        ends
    }

    fn string_byte(&mut self, b: u8) {
        if self.escape == 0 && b == b'"' {
            self.in_string = false;
            if self.cutting {
                let note = format!("\\n{READ_CUT_NOTE}{} bytes in all]", self.string_bytes);
                self.keep_all(note.as_bytes());
                self.cutting = false;
            }
            self.keep(b);
            self.after_string();
            return;
        }
        let starts_unit = self.escape == 0 && (b & 0xC0) != 0x80;
        if starts_unit {
            if self.string_bytes >= MAX_STRING_BYTES && !self.high_surrogate {
                self.cutting = true;
            }
            if b != b'\\' {
                self.high_surrogate = false;
            }
        }
        self.string_bytes += 1;
        self.escape_byte(b);
        if let Some(key) = self.key.as_mut().filter(|k| k.len() < 8) {
            key.push(b);
        }
        if !self.cutting {
            self.keep(b);
        }
    }

    /// Follows `\` escapes, to know where one ends and whether it was a high surrogate.
    fn escape_byte(&mut self, b: u8) {
        match (self.escape, b) {
            (0, b'\\') => self.escape = 1,
            (0, _) => {}
            (1, b'u') => {
                self.escape = 2;
                self.hex = 0;
            }
            (1, _) => {
                self.escape = 0;
                self.high_surrogate = false;
            }
            (2..=5, _) => {
                self.hex = self.hex * 16 + (b as char).to_digit(16).unwrap_or(0);
                self.escape = if self.escape == 5 { 0 } else { self.escape + 1 };
                if self.escape == 0 {
                    self.high_surrogate = (0xD800..=0xDBFF).contains(&self.hex);
                }
            }
            _ => self.escape = 0,
        }
    }

    /// A string ended: a top-level key says whether an `id` follows, or a `method` was seen.
    fn after_string(&mut self) {
        match self.key.take().as_deref() {
            Some(b"id") if self.id_state == IdState::Unseen => self.id_state = IdState::Key,
            Some(b"method") => self.has_method = true,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// `input` through a [`Cutter`] in chunks of `size` bytes.
    fn cut(input: &[u8], size: usize) -> Vec<u8> {
        let mut cutter = Cutter::default();
        let mut out = Vec::new();
        for chunk in input.chunks(size) {
            cutter.push(chunk, &mut out);
        }
        cutter.finish(&mut out);
        out
    }

    fn lines(out: &[u8]) -> Vec<Value> {
        out.split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).expect("every line stays JSON"))
            .collect()
    }

    #[test]
    fn small_messages_pass_as_they_are_however_they_are_split() {
        let input = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"a\":\"\\u00e9\\\"x\"}}\r\n\nnot json\n{\"id\":\"s\"}";
        for size in [1, 3, 1000] {
            assert_eq!(cut(input, size), input.to_vec(), "chunks of {size}");
        }
    }

    #[test]
    fn a_huge_string_is_cut_with_its_size_and_the_message_keeps_its_id_after_it() {
        let text = "é".repeat(1 << 20) + "end";
        let message =
            json!({"jsonrpc": "2.0", "result": {"content": [{"type": "text", "text": text}]}});
        let mut input = message.to_string().strip_suffix('}').unwrap().to_owned();
        input.push_str(",\"id\":7}\n{\"jsonrpc\":\"2.0\",\"id\":8,\"result\":{}}\n");
        let out = cut(input.as_bytes(), 4096);
        let answers = lines(&out);
        assert_eq!(answers.len(), 2);
        assert_eq!(answers[0]["id"], 7);
        assert_eq!(answers[1], json!({"jsonrpc": "2.0", "id": 8, "result": {}}));
        let kept = answers[0]["result"]["content"][0]["text"].as_str().unwrap();
        assert!(kept.len() < crate::answer::MAX_RESULT_BYTES, "{}", kept.len());
        assert!(kept.starts_with("éé"));
        let note = format!("\n[cut by Nexbot while reading: {} bytes in all]", text.len());
        assert!(kept.ends_with(&note), "{}", &kept[kept.len() - 100..]);
    }

    #[test]
    fn a_cut_never_splits_an_escape_or_a_surrogate_pair() {
        for unit in ["\\ud83d\\ude00", "\\n", "\\u00e9", "\\\"", "😀", "ab"] {
            for offset in 0..12 {
                let text = format!("{}{}", "x".repeat(offset), unit.repeat(MAX_STRING_BYTES));
                let input = format!("{{\"id\":1,\"result\":\"{text}\"}}\n");
                let out = cut(input.as_bytes(), 777);
                let answer = &lines(&out)[0];
                assert!(answer["result"].as_str().unwrap().contains("[cut by Nexbot"), "{unit}");
            }
        }
    }

    #[test]
    fn a_message_too_big_even_cut_fails_its_request_and_the_next_one_is_read() {
        let many: Vec<String> = (0..MAX_MESSAGE_BYTES / 4).map(|i| i.to_string()).collect();
        let answer = json!({"jsonrpc": "2.0", "id": "call-3", "result": {"parts": many}});
        let request = json!({"jsonrpc": "2.0", "id": 3, "method": "x", "params": {"p": many}});
        let next = json!({"jsonrpc": "2.0", "id": 4, "result": {}});
        let input = format!("{answer}\n{request}\n{next}\n");
        let answers = lines(&cut(input.as_bytes(), CHUNK));
        assert_eq!(answers.len(), 2, "the server's own request is only dropped");
        assert_eq!(answers[0]["id"], "call-3");
        let why = answers[0]["error"]["message"].as_str().unwrap();
        assert!(why.contains("over the limit"), "{why}");
        assert_eq!(answers[1], next);
    }
}
