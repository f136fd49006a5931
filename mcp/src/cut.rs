//! The cut of one JSON-RPC message as it streams in, whatever frames it: a stdio line
//! ([`crate::stdio`]), an HTTP body or an SSE event's data ([`crate::door`]).
//!
//! Why one cutter: a server is not trusted, so what it sends is bounded before anything
//! collects it, the same way over every transport (one rule to test, one note the model and
//! [`crate::answer`] read). The rule, message by message:
//! - every JSON string longer than [`MAX_STRING_BYTES`] keeps its first bytes (cut between
//!   whole characters and escapes) and ends with a note of its size; the rest is dropped as it
//!   is read. The message stays valid JSON with its `id` wherever it stands, so the call gets
//!   a cut result that says so (one text block fits the model's limit with its note);
//! - a message still over [`MAX_MESSAGE_BYTES`] after that (a huge structure of small parts)
//!   is dropped while read; when it was an answer, the error answering its request in its
//!   place says why ([`Cutter::end`]), so the call does not wait for its limit.

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

/// Bytes of one JSON string (as written, escapes included) kept; the model's limit less room
/// for the cut's note, so a single cut text reaches the model with its note.
pub const MAX_STRING_BYTES: usize = crate::answer::MAX_RESULT_BYTES - 1024;
/// Bytes of one message kept once its strings are cut; a bigger one is dropped.
pub const MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;
/// Bytes of a message's `id` kept to answer it (an id is a number or a short string).
const MAX_ID_BYTES: usize = 128;
/// A message buffer that grew past this is let go after its message (not kept at its peak).
const KEEP_CAPACITY: usize = 256 * 1024;

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

/// The scan of one message: where in the JSON it is, and what is kept of it.
#[derive(Debug, Default)]
pub(crate) struct Cutter {
    /// The message as kept (strings cut), at most [`MAX_MESSAGE_BYTES`].
    line: Vec<u8>,
    /// Bytes of the message read (uncut).
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
    /// Scans `bytes` of the current message (its framing, a newline or an SSE event's end,
    /// is the caller's), keeping what the rule keeps.
    pub(crate) fn scan(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.read += 1;
            self.byte(b);
        }
    }

    /// The stream ended inside a message: what is left of it, as it is (a reader that parses
    /// it gets the same error as without the cut).
    pub(crate) fn finish(&mut self, out: &mut Vec<u8>) {
        if !self.over {
            out.append(&mut self.line);
        }
        *self = Self::default();
    }

    /// The current message ended: appends it as kept to `out`, or, when it was over
    /// [`MAX_MESSAGE_BYTES`], the error answering it ([`Self::refusal`]); false when nothing
    /// was appended (a dropped message that answered nothing). The cutter is then ready for
    /// the next message.
    pub(crate) fn end(&mut self, out: &mut Vec<u8>) -> bool {
        let appended = if !self.over {
            out.append(&mut self.line);
            true
        } else if let Some(answer) = self.refusal() {
            out.extend_from_slice(answer.as_bytes());
            true
        } else {
            tracing::warn!(bytes = self.read, "an MCP server's message over the limit was dropped");
            false
        };
        let mut line = std::mem::take(&mut self.line);
        line.clear();
        if line.capacity() > KEEP_CAPACITY {
            line = Vec::new();
        }
        *self = Self { line, ..Self::default() };
        appended
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
