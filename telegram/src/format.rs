//! Model answers → Telegram messages.
//!
//! The agent answers in Markdown-ish text written by an LLM; Telegram shows at most
//! [`MAX_MESSAGE_CHARS`] characters per message (counted in UTF-16 code units, after entity
//! parsing) and we send with `parse_mode = HTML`. [`render`] cuts an answer into [`Part`]s
//! that each fit, and renders each part twice:
//!
//! - `html`: the part with a conservative Markdown subset turned into Telegram HTML, every
//!   `&`, `<` and `>` escaped, so nothing the model wrote can break the markup;
//! - `plain`: the part's Markdown source as the model wrote it, for the resend without
//!   `parse_mode` when Telegram rejects the entities anyway. Shown verbatim, so a user sees
//!   the markers but loses no character.
//!
//! Every conversion only *drops* characters (markers, fence lines, a link's URL), so the
//! visible text of `html` is a subsequence of `plain`: checking the size on `plain` bounds
//! both.
//!
//! The Markdown subset, each construct on one line (a split never changes how a line
//! renders, and an LLM's stray marker cannot swallow the rest of an answer):
//!
//! - fenced code blocks (a line starting with ```` ``` ````, optional language) →
//!   `<pre><code class="language-x">…</code></pre>`, or `<pre>…</pre>`; an unclosed block runs
//!   to the end of the answer (a truncated answer is the usual cause);
//! - `` `code` `` → `<code>…</code>`; nothing inside code is formatted;
//! - `**bold**` → `<b>`, `*italic*` and `_italic_` → `<i>`, `~~strike~~` → `<s>`, only when
//!   the markers are clearly paired: the opener follows a space, the line start or an opening
//!   bracket/quote and precedes a non-space, the closer mirrors it, so `snake_case_name`,
//!   `2*3*4` and `x**2 + y**2` stay literal;
//! - `[text](http(s)://url)` → `<a href="url">text</a>`.
//!
//! Anything else, unbalanced markers included, stays literal text.

use std::borrow::Cow;

/// Telegram's limit on a message's visible text, in UTF-16 code units.
pub const MAX_MESSAGE_CHARS: usize = 4096;

/// A fence line longer than this (trimmed, in bytes) is prose that happens to start with
/// backticks. Bounding it bounds what closing and reopening a split code block costs.
const MAX_FENCE_LINE: usize = 64;

/// At most this many chars are kept together as one "character" (a base char with its
/// combining marks, emoji modifiers and ZWJ sequence), so a pathological run of combining
/// marks still splits.
const MAX_CLUSTER_CHARS: usize = 16;

/// One message to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// The part for `parse_mode = HTML`.
    pub html: String,
    /// The same part as its Markdown source, to resend without `parse_mode` when Telegram
    /// rejects the entities of `html`. A code block split across parts is closed at the end
    /// of one part and reopened (same fence and language) at the start of the next, so each
    /// `plain` is well-formed Markdown too.
    pub plain: String,
}

/// The length of `s` as Telegram counts it: UTF-16 code units.
pub fn utf16_len(s: &str) -> usize {
    s.chars().map(char::len_utf16).sum()
}

/// Splits `text` into parts of at most [`MAX_MESSAGE_CHARS`] visible characters each and
/// renders them; see the module documentation. Empty or whitespace-only text gives no part:
/// Telegram refuses empty messages, and what to say instead is the caller's choice.
///
/// Splits prefer paragraph boundaries (a blank line), then line breaks, then whitespace, and
/// only then cut between two characters (never inside a char, nor between an emoji and its
/// modifiers). Whitespace at a split point is dropped. A code block too long for one part is
/// split between its lines (a line longer than a part, at whitespace or between characters).
pub fn render(text: &str) -> Vec<Part> {
    render_with_limit(text, MAX_MESSAGE_CHARS)
}

/// [`render`] with a smaller limit, so tests reach the splits with short texts. `limit` must
/// leave room for a reopened code block's fences and a character: at least 256.
fn render_with_limit(text: &str, limit: usize) -> Vec<Part> {
    let limit = limit.max(256);
    let text: Cow<'_, str> =
        if text.contains('\r') { text.replace("\r\n", "\n").into() } else { text.into() };
    let mut builder = Builder { limit, chunks: Vec::new(), len: 0, parts: Vec::new() };
    for block in parse_blocks(&text) {
        match block {
            Block::Text(s) => builder.push_text(s, Level::Paragraph),
            Block::Code(code) => builder.push_code(&code),
        }
    }
    builder.flush();
    builder.parts
}

// --- Blocks -------------------------------------------------------------------------------

/// A top-level piece of the answer: prose, or a fenced code block.
#[derive(Debug)]
enum Block<'a> {
    Text(&'a str),
    Code(CodeBlock<'a>),
}

#[derive(Debug)]
struct CodeBlock<'a> {
    /// The opening fence line, trimmed.
    open: &'a str,
    /// The backticks of the opening fence: what closes a part's share of the block.
    fence: &'a str,
    lang: Option<&'a str>,
    /// The lines between the fences, without the newline before the closing fence.
    body: &'a str,
    /// The closing fence line, trimmed; `None` when the block runs to the end.
    close: Option<&'a str>,
}

impl CodeBlock<'_> {
    fn plain(&self) -> String {
        code_plain(self.open, self.body, self.close)
    }
}

fn code_plain(open: &str, body: &str, close: Option<&str>) -> String {
    let mut s = String::with_capacity(open.len() + body.len() + 8);
    s.push_str(open);
    s.push('\n');
    s.push_str(body);
    if let Some(close) = close {
        s.push('\n');
        s.push_str(close);
    }
    s
}

/// An opening fence: `(fence, language)`.
fn opening_fence(line: &str) -> Option<(&str, Option<&str>)> {
    let line = line.trim();
    if !line.starts_with("```") || line.len() > MAX_FENCE_LINE {
        return None;
    }
    let n = line.bytes().take_while(|&b| b == b'`').count();
    let info = line[n..].trim();
    if info.contains('`') {
        // CommonMark: that is inline code, not a fence.
        return None;
    }
    let lang = info.split_whitespace().next().filter(|lang| {
        lang.len() <= 32 && lang.chars().all(|c| c.is_ascii_alphanumeric() || "+-#._".contains(c))
    });
    Some((&line[..n], lang))
}

fn is_closing_fence(line: &str, fence: &str) -> bool {
    let line = line.trim();
    line.len() >= fence.len() && line.len() <= MAX_FENCE_LINE && line.bytes().all(|b| b == b'`')
}

/// Cuts `text` into prose and fenced code blocks. A block with a blank body stays prose: an
/// empty `<pre>` shows nothing, the fences at least show something.
fn parse_blocks(text: &str) -> Vec<Block<'_>> {
    let mut blocks = Vec::new();
    let mut text_start = 0;
    let mut pos = 0;
    while pos < text.len() {
        let line_end = text[pos..].find('\n').map_or(text.len(), |i| pos + i + 1);
        let Some((fence, lang)) = opening_fence(&text[pos..line_end]) else {
            pos = line_end;
            continue;
        };
        let body_start = line_end;
        let mut close = None;
        let mut scan = body_start;
        while scan < text.len() {
            let end = text[scan..].find('\n').map_or(text.len(), |i| scan + i + 1);
            if is_closing_fence(&text[scan..end], fence) {
                close = Some((scan, end));
                break;
            }
            scan = end;
        }
        let (body_end, block_end, close_line) = match close {
            // The newline before the closing fence belongs to neither; the one after it
            // stays with the following prose.
            Some((start, end)) => {
                let line = text[start..end].trim_end_matches('\n');
                (start.saturating_sub(1).max(body_start), start + line.len(), Some(line.trim()))
            }
            None => (text.len(), text.len(), None),
        };
        let body = text[body_start..body_end].trim_end_matches('\n');
        // Trailing whitespace of an unclosed block is the end of the answer: nothing.
        let body = if close.is_none() { body.trim_end() } else { body };
        if body.trim().is_empty() {
            pos = line_end;
            continue;
        }
        if text_start < pos {
            blocks.push(Block::Text(&text[text_start..pos]));
        }
        let open = text[pos..line_end].trim();
        blocks.push(Block::Code(CodeBlock { open, fence, lang, body, close: close_line }));
        pos = block_end;
        text_start = block_end;
    }
    if text_start < text.len() {
        blocks.push(Block::Text(&text[text_start..]));
    }
    blocks
}

// --- Splitting ------------------------------------------------------------------------------

/// How finely prose is being cut, coarsest first.
#[derive(Debug, Clone, Copy)]
enum Level {
    Paragraph,
    Line,
    Word,
    Cluster,
}

impl Level {
    fn finer(self) -> Option<Self> {
        match self {
            Self::Paragraph => Some(Self::Line),
            Self::Line => Some(Self::Word),
            Self::Word => Some(Self::Cluster),
            Self::Cluster => None,
        }
    }
}

/// Cuts `s` into pieces that concatenate back to `s`, each ending at a boundary of `level`.
fn pieces(s: &str, level: Level) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    match level {
        Level::Paragraph => {
            // A piece is its lines up to and including the blank lines after them.
            let mut prev_blank = false;
            let mut pos = 0;
            for line in s.split_inclusive('\n') {
                let blank = line.trim().is_empty();
                if prev_blank && !blank && pos > start {
                    out.push(&s[start..pos]);
                    start = pos;
                }
                prev_blank = blank;
                pos += line.len();
            }
        }
        Level::Line => return s.split_inclusive('\n').collect(),
        Level::Word => {
            let mut prev_space = false;
            for (i, c) in s.char_indices() {
                let space = c.is_whitespace();
                if prev_space && !space && i > start {
                    out.push(&s[start..i]);
                    start = i;
                }
                prev_space = space;
            }
        }
        Level::Cluster => {
            let mut count = 0;
            let mut prev_zwj = false;
            // A flag is a pair of regional indicators.
            let mut open_flag = false;
            for (i, c) in s.char_indices() {
                let regional = ('\u{1f1e6}'..='\u{1f1ff}').contains(&c);
                let joins = prev_zwj || extends_cluster(c) || (regional && open_flag);
                if i > start && (!joins || count >= MAX_CLUSTER_CHARS) {
                    out.push(&s[start..i]);
                    start = i;
                    count = 0;
                }
                count += 1;
                prev_zwj = c == '\u{200d}';
                open_flag = regional && !open_flag;
            }
        }
    }
    if start < s.len() {
        out.push(&s[start..]);
    }
    out
}

/// Whether `c` belongs with the char before it (a cheap approximation of grapheme clusters,
/// enough not to orphan an accent, a skin tone, a variation selector, a keycap or a flag tag).
fn extends_cluster(c: char) -> bool {
    matches!(c,
        '\u{0300}'..='\u{036f}'          // combining diacritics
        | '\u{1ab0}'..='\u{1aff}'
        | '\u{1dc0}'..='\u{1dff}'
        | '\u{200c}'..='\u{200d}'        // ZWNJ, ZWJ
        | '\u{20d0}'..='\u{20ff}'        // combining marks for symbols (keycap)
        | '\u{fe00}'..='\u{fe0f}'        // variation selectors
        | '\u{fe20}'..='\u{fe2f}'
        | '\u{1f3fb}'..='\u{1f3ff}'      // skin tones
        | '\u{e0020}'..='\u{e007f}'      // tag characters (subdivision flags)
        | '\u{e0100}'..='\u{e01ef}')
}

/// What a part is made of, in order.
#[derive(Debug)]
enum Chunk {
    Text(String),
    Code { open: String, lang: Option<String>, body: String, close: Option<String> },
}

/// Packs blocks into parts greedily, tracking the part's `plain` length.
#[derive(Debug)]
struct Builder {
    limit: usize,
    chunks: Vec<Chunk>,
    /// UTF-16 length of the current part's `plain`, trailing whitespace included (it is
    /// dropped when the part ends, so counting it only errs on the safe side).
    len: usize,
    parts: Vec<Part>,
}

impl Builder {
    fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    fn fits_text(&self, piece: &str) -> bool {
        if self.is_empty() {
            utf16_len(piece.trim()) <= self.limit
        } else {
            self.len + utf16_len(piece.trim_end()) <= self.limit
        }
    }

    fn append_text(&mut self, piece: &str) {
        let piece = if self.is_empty() { piece.trim_start() } else { piece };
        if piece.is_empty() {
            return;
        }
        self.len += utf16_len(piece);
        if let Some(Chunk::Text(text)) = self.chunks.last_mut() {
            text.push_str(piece);
        } else {
            self.chunks.push(Chunk::Text(piece.to_owned()));
        }
    }

    fn push_text(&mut self, s: &str, level: Level) {
        for piece in pieces(s, level) {
            if self.fits_text(piece) {
                self.append_text(piece);
            } else if !self.is_empty() && utf16_len(piece.trim()) <= self.limit {
                // It fits a part of its own: end this one at the boundary.
                self.flush();
                self.append_text(piece);
            } else if let Some(finer) = level.finer() {
                // Too long for any part: fill this one and go on with the rest.
                self.push_text(piece, finer);
            } else {
                // A cluster that does not fit what is left (one always fits an empty part).
                self.flush();
                self.append_text(piece);
            }
        }
    }

    fn push_code_chunk(&mut self, open: &str, lang: Option<&str>, body: &str, close: Option<&str>) {
        self.len += utf16_len(&code_plain(open, body, close));
        self.chunks.push(Chunk::Code {
            open: open.to_owned(),
            lang: lang.map(str::to_owned),
            body: body.to_owned(),
            close: close.map(str::to_owned),
        });
    }

    fn push_code(&mut self, code: &CodeBlock<'_>) {
        let whole = utf16_len(&code.plain());
        if self.len + whole <= self.limit {
            self.push_code_chunk(code.open, code.lang, code.body, code.close);
            return;
        }
        if !self.is_empty() && whole <= self.limit {
            self.flush();
            self.push_code_chunk(code.open, code.lang, code.body, code.close);
            return;
        }
        // Split between lines: each share is `open \n body \n fence`.
        let close_len = utf16_len(code.fence).max(code.close.map_or(0, utf16_len));
        let overhead = utf16_len(code.open) + 2 + close_len;
        let room = self.limit - overhead;
        let mut share = String::new();
        let mut share_len = 0;
        for (sep, piece) in code_items(code.body, room) {
            let piece_len = utf16_len(piece);
            let add = if share.is_empty() { piece_len } else { sep.len() + piece_len };
            if self.len + overhead + share_len + add > self.limit {
                if !share.trim().is_empty() {
                    self.push_code_chunk(code.open, code.lang, &share, Some(code.fence));
                }
                share.clear();
                share_len = 0;
                self.flush();
            }
            if !share.is_empty() {
                share.push_str(sep);
                share_len += sep.len();
            }
            share.push_str(piece);
            share_len += piece_len;
        }
        if !share.trim().is_empty() {
            self.push_code_chunk(code.open, code.lang, &share, code.close);
        }
    }

    /// Ends the current part, if any.
    fn flush(&mut self) {
        while let Some(Chunk::Text(text)) = self.chunks.last_mut() {
            let kept = text.trim_end().len();
            text.truncate(kept);
            if !text.is_empty() {
                break;
            }
            self.chunks.pop();
        }
        if self.chunks.is_empty() {
            self.len = 0;
            return;
        }
        let mut html = String::new();
        let mut plain = String::new();
        for chunk in self.chunks.drain(..) {
            match chunk {
                Chunk::Text(text) => {
                    render_text(&text, &mut html);
                    plain.push_str(&text);
                }
                Chunk::Code { open, lang, body, close } => {
                    render_code(lang.as_deref(), &body, &mut html);
                    plain.push_str(&code_plain(&open, &body, close.as_deref()));
                }
            }
        }
        self.parts.push(Part { html, plain });
        self.len = 0;
    }
}

/// A code block's body as `(separator, piece)`: its lines (separator `"\n"`), and a line
/// longer than `room` cut at whitespace, then between characters (separator `""`).
fn code_items(body: &str, room: usize) -> Vec<(&str, &str)> {
    let mut items = Vec::new();
    for line in body.split('\n') {
        let mut sep = "\n";
        if utf16_len(line) <= room {
            items.push((sep, line));
            continue;
        }
        for word in pieces(line, Level::Word) {
            if utf16_len(word) <= room {
                items.push((sep, word));
            } else {
                for cluster in pieces(word, Level::Cluster) {
                    items.push((sep, cluster));
                    sep = "";
                }
            }
            sep = "";
        }
    }
    items
}

// --- HTML -----------------------------------------------------------------------------------

fn escape_into(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            _ => out.push(c),
        }
    }
}

fn escape_attr_into(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '"' => out.push_str("&quot;"),
            _ => escape_into(c.encode_utf8(&mut [0; 4]), out),
        }
    }
}

fn render_code(lang: Option<&str>, body: &str, out: &mut String) {
    match lang {
        Some(lang) => {
            out.push_str("<pre><code class=\"language-");
            escape_attr_into(lang, out);
            out.push_str("\">");
            escape_into(body, out);
            out.push_str("</code></pre>");
        }
        None => {
            out.push_str("<pre>");
            escape_into(body, out);
            out.push_str("</pre>");
        }
    }
}

fn render_text(text: &str, out: &mut String) {
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        render_inline(line, Open::default(), out);
    }
}

/// The entities around the text being rendered: Telegram refuses a link in a link and code
/// in a link, and nesting a tag in itself helps nobody.
#[derive(Debug, Default, Clone, Copy)]
struct Open {
    link: bool,
    bold: bool,
    italic: bool,
    strike: bool,
}

fn render_inline(s: &str, open: Open, out: &mut String) {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'`' => {
                let n = run_len(b, i);
                if let Some((content, end)) = code_span(s, i, n) {
                    if open.link {
                        escape_into(content, out);
                    } else {
                        out.push_str("<code>");
                        escape_into(content, out);
                        out.push_str("</code>");
                    }
                    i = end;
                } else {
                    out.push_str(&s[i..i + n]);
                    i += n;
                }
            }
            b'[' if !open.link => {
                if let Some((text, url, end)) = link(s, i) {
                    out.push_str("<a href=\"");
                    escape_attr_into(url, out);
                    out.push_str("\">");
                    render_inline(text, Open { link: true, ..open }, out);
                    out.push_str("</a>");
                    i = end;
                } else {
                    out.push('[');
                    i += 1;
                }
            }
            c @ (b'*' | b'_' | b'~') => {
                let n = run_len(b, i);
                if let Some((tag, inner, end)) = emphasis(s, i, c, n, open) {
                    out.push('<');
                    out.push_str(tag);
                    out.push('>');
                    let inner_open = match tag {
                        "b" => Open { bold: true, ..open },
                        "i" => Open { italic: true, ..open },
                        _ => Open { strike: true, ..open },
                    };
                    render_inline(inner, inner_open, out);
                    out.push_str("</");
                    out.push_str(tag);
                    out.push('>');
                    i = end;
                } else {
                    out.push_str(&s[i..i + n]);
                    i += n;
                }
            }
            _ => {
                // Up to the next byte that may start something (all ASCII, so a char boundary).
                let end = b[i + 1..]
                    .iter()
                    .position(|c| b"`[*_~".contains(c))
                    .map_or(b.len(), |p| i + 1 + p);
                escape_into(&s[i..end], out);
                i = end;
            }
        }
    }
}

/// The length of the run of `b[i]` starting at `i`.
fn run_len(b: &[u8], i: usize) -> usize {
    b[i..].iter().take_while(|&&c| c == b[i]).count()
}

/// A code span opened by the `n` backticks at `i`: `(content, end)`. It closes at the next run
/// of exactly `n` backticks; its content has a non-space (one space each side is padding).
fn code_span(s: &str, i: usize, n: usize) -> Option<(&str, usize)> {
    let b = s.as_bytes();
    let mut j = i + n;
    while j < b.len() {
        if b[j] == b'`' {
            let m = run_len(b, j);
            if m == n {
                let mut content = &s[i + n..j];
                if content.trim().is_empty() {
                    return None;
                }
                if content.len() >= 2 && content.starts_with(' ') && content.ends_with(' ') {
                    content = &content[1..content.len() - 1];
                }
                return Some((content, j + m));
            }
            j += m;
        } else {
            j += 1;
        }
    }
    None
}

/// A link `[text](http(s)://url)` at `i`: `(text, url, end)`. The text has no brackets and
/// a non-space; the URL no space, quote or angle bracket, and balanced parentheses
/// (`…/Rust_(programming_language)`).
fn link(s: &str, i: usize) -> Option<(&str, &str, usize)> {
    let close = i + 1 + s[i + 1..].find([']', '['])?;
    if s.as_bytes()[close] != b']' || !s[close + 1..].starts_with('(') {
        return None;
    }
    let text = &s[i + 1..close];
    if text.trim().is_empty() {
        return None;
    }
    let url_start = close + 2;
    let rest = &s[url_start..];
    if !(rest.starts_with("https://") || rest.starts_with("http://")) {
        return None;
    }
    let mut depth = 0usize;
    for (k, c) in rest.char_indices() {
        match c {
            '(' => depth += 1,
            ')' if depth == 0 => {
                let url = &rest[..k];
                let scheme_end = url.find("://")? + 3;
                return (url.len() > scheme_end).then_some((text, url, url_start + k + 1));
            }
            ')' => depth -= 1,
            c if c.is_whitespace() || c.is_control() || "\"<>`".contains(c) => return None,
            _ => {}
        }
    }
    None
}

/// Emphasis opened by the run of `n` × `c` at `i`: `(tag, inner, end)`.
fn emphasis(s: &str, i: usize, c: u8, n: usize, open: Open) -> Option<(&'static str, &str, usize)> {
    let tag = match (c, n) {
        (b'*' | b'_', 1) if !open.italic => "i",
        (b'*', 2) if !open.bold => "b",
        (b'~', 2) if !open.strike => "s",
        _ => return None,
    };
    let before = s[..i].chars().next_back();
    let after = s[i + n..].chars().next();
    if !before.is_none_or(opens_after) || after.is_none_or(char::is_whitespace) {
        return None;
    }
    let b = s.as_bytes();
    let mut j = i + n;
    while j < b.len() {
        match b[j] {
            b'`' => {
                let m = run_len(b, j);
                j = code_span(s, j, m).map_or(j + m, |(_, end)| end);
            }
            b'[' if !open.link => j = link(s, j).map_or(j + 1, |(_, _, end)| end),
            d if d == c => {
                let m = run_len(b, j);
                let before = s[..j].chars().next_back();
                let after = s[j + m..].chars().next();
                if m == n
                    && before.is_some_and(|p| !p.is_whitespace())
                    && after.is_none_or(closes_before)
                {
                    return Some((tag, &s[i + n..j], j + m));
                }
                j += m;
            }
            _ => j += 1,
        }
    }
    None
}

/// Whether an emphasis opener may follow `c`: not in a word, a number or a URL.
fn opens_after(c: char) -> bool {
    c.is_whitespace() || "([{\"'".contains(c)
}

/// Whether an emphasis closer may precede `c`.
fn closes_before(c: char) -> bool {
    c.is_whitespace() || ".,;:!?)]}\"'".contains(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The text Telegram shows for `html`: tags dropped, entities decoded.
    fn visible(html: &str) -> String {
        let mut out = String::new();
        let mut rest = html;
        while let Some(c) = rest.chars().next() {
            if c == '<' {
                rest = &rest[rest.find('>').expect("unclosed tag") + 1..];
            } else if c == '&' {
                let end = rest.find(';').expect("unterminated entity");
                out.push(match &rest[..=end] {
                    "&lt;" => '<',
                    "&gt;" => '>',
                    "&amp;" => '&',
                    "&quot;" => '"',
                    other => panic!("unknown entity {other}"),
                });
                rest = &rest[end + 1..];
            } else {
                out.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
        out
    }

    /// Checks `html` is what Telegram parses: only b, i, s, code, pre, a; closed in order;
    /// entities escaped; no entity inside code or pre (but pre's code), no link in a link,
    /// no tag in itself.
    fn check_well_formed(html: &str) -> Result<(), String> {
        fn check_escaped(s: &str) -> Result<(), String> {
            if s.contains(['<', '>']) {
                return Err(format!("raw angle bracket in {s:?}"));
            }
            let mut rest = s;
            while let Some(k) = rest.find('&') {
                rest = &rest[k..];
                let entity = ["&lt;", "&gt;", "&amp;", "&quot;"]
                    .into_iter()
                    .find(|e| rest.starts_with(e))
                    .ok_or_else(|| format!("bare & in {s:?}"))?;
                rest = &rest[entity.len()..];
            }
            Ok(())
        }
        let mut stack: Vec<&str> = Vec::new();
        let mut rest = html;
        while !rest.is_empty() {
            let next = rest.find('<').unwrap_or(rest.len());
            check_escaped(&rest[..next])?;
            rest = &rest[next..];
            if rest.is_empty() {
                break;
            }
            let end = rest.find('>').ok_or("unclosed tag")?;
            let tag = &rest[1..end];
            rest = &rest[end + 1..];
            if let Some(name) = tag.strip_prefix('/') {
                if stack.pop() != Some(name) {
                    return Err(format!("</{name}> closes the wrong tag in {html:?}"));
                }
                continue;
            }
            let (name, attr) = tag.split_once(' ').unwrap_or((tag, ""));
            let name = ["b", "i", "s", "code", "pre", "a"]
                .into_iter()
                .find(|n| *n == name)
                .ok_or_else(|| format!("tag <{tag}> in {html:?}"))?;
            match (name, attr) {
                ("a", attr) => {
                    let url = attr
                        .strip_prefix("href=\"")
                        .and_then(|a| a.strip_suffix('"'))
                        .ok_or_else(|| format!("bad link <{tag}>"))?;
                    if url.contains('"') {
                        return Err(format!("quote in href {url:?}"));
                    }
                    check_escaped(url)?;
                }
                ("code", attr) if !attr.is_empty() => {
                    let lang = attr
                        .strip_prefix("class=\"language-")
                        .and_then(|a| a.strip_suffix('"'))
                        .ok_or_else(|| format!("bad code <{tag}>"))?;
                    if stack.last() != Some(&"pre") || lang.contains('"') {
                        return Err(format!("bad <{tag}> in {html:?}"));
                    }
                }
                (_, "") => {}
                _ => return Err(format!("attribute in <{tag}>")),
            }
            if stack.contains(&name) {
                return Err(format!("<{name}> nested in itself in {html:?}"));
            }
            match stack.last() {
                Some(&"code") => return Err(format!("<{name}> inside code in {html:?}")),
                Some(&"pre") if name != "code" => return Err(format!("<{name}> inside pre")),
                Some(&"a") if name == "code" || name == "pre" => {
                    return Err(format!("<{name}> inside a link in {html:?}"))
                }
                _ => {}
            }
            if name == "pre" && !stack.is_empty() {
                return Err(format!("pre nested in {stack:?}"));
            }
            stack.push(name);
        }
        if stack.is_empty() {
            Ok(())
        } else {
            Err(format!("unclosed {stack:?} in {html:?}"))
        }
    }

    fn html(text: &str) -> String {
        let parts = render(text);
        assert_eq!(parts.len(), 1, "{parts:?}");
        parts.into_iter().next().unwrap().html
    }

    fn is_subsequence(small: &str, big: &str) -> bool {
        let mut big = big.chars();
        small.chars().all(|c| big.any(|d| d == c))
    }

    fn without_whitespace(s: &str) -> String {
        s.chars().filter(|c| !c.is_whitespace()).collect()
    }

    /// `s` without fence lines and whitespace: what must survive the split.
    fn content(s: &str) -> String {
        let lines: Vec<&str> =
            s.lines().filter(|line| !line.trim_start().starts_with("```")).collect();
        without_whitespace(&lines.join("\n"))
    }

    fn check_parts(text: &str, parts: &[Part], limit: usize) {
        for part in parts {
            check_well_formed(&part.html).unwrap();
            let shown = visible(&part.html);
            assert!(utf16_len(&part.plain) <= limit, "plain too long: {part:?}");
            assert!(utf16_len(&shown) <= limit, "html too long: {part:?}");
            assert!(is_subsequence(&shown, &part.plain), "{shown:?} not in {:?}", part.plain);
            assert!(!shown.trim().is_empty(), "nothing to see in {part:?}");
            assert_eq!(part.plain.trim(), part.plain, "untrimmed part");
        }
        if text.trim().is_empty() {
            assert!(parts.is_empty());
        }
    }

    #[test]
    fn empty_and_blank_text_give_no_part() {
        assert!(render("").is_empty());
        assert!(render(" \n\t\n  ").is_empty());
    }

    #[test]
    fn short_text_is_one_part_with_its_source_as_plain() {
        let parts = render("  Hello **world**!\n");
        assert_eq!(
            parts,
            vec![Part { html: "Hello <b>world</b>!".into(), plain: "Hello **world**!".into() }]
        );
    }

    #[test]
    fn utf16_len_counts_surrogate_pairs_twice() {
        assert_eq!(utf16_len("aé😀"), 4);
        assert_eq!(utf16_len(""), 0);
    }

    #[test]
    fn html_special_characters_are_escaped() {
        assert_eq!(html("a < b && c > d"), "a &lt; b &amp;&amp; c &gt; d");
        assert_eq!(html("<b>not bold</b>"), "&lt;b&gt;not bold&lt;/b&gt;");
        assert_eq!(html("`x<y && \"z\"`"), "<code>x&lt;y &amp;&amp; \"z\"</code>");
    }

    #[test]
    fn unbalanced_and_in_word_markers_stay_literal() {
        for text in [
            "2*3*4 = 24",
            "snake_case_name and __init__",
            "[not a link",
            "[text](not-a-url)",
            "[text](javascript:alert(1))",
            "**unclosed",
            "x**2 + y**2",
            "* a list item",
            "a ~~ b ~~ c",
            "`unclosed code",
            "***",
        ] {
            assert_eq!(html(text), text, "{text}");
        }
    }

    #[test]
    fn markdown_subset_is_converted() {
        assert_eq!(html("**bold** and *it* and _it_"), "<b>bold</b> and <i>it</i> and <i>it</i>");
        assert_eq!(html("~~gone~~, really"), "<s>gone</s>, really");
        assert_eq!(html("(*aside*)"), "(<i>aside</i>)");
        assert_eq!(html("**bold with `co*de*`**"), "<b>bold with <code>co*de*</code></b>");
        assert_eq!(html("*a **b** c*"), "<i>a <b>b</b> c</i>");
        assert_eq!(html("_foo_bar_"), "<i>foo_bar</i>");
        assert_eq!(
            html("see [the **docs**](https://x.org/a_(b)?q=1&r=2)."),
            "see <a href=\"https://x.org/a_(b)?q=1&amp;r=2\">the <b>docs</b></a>."
        );
        assert_eq!(html("[x](https://a.org/\"q)"), "[x](https://a.org/\"q)");
        assert_eq!(
            html("[`Vec`](https://doc.rust-lang.org/std/vec/)"),
            "<a href=\"https://doc.rust-lang.org/std/vec/\">Vec</a>"
        );
    }

    #[test]
    fn nothing_inside_code_is_formatted() {
        assert_eq!(
            html("```python\ndef f(*args, **kw):\n    return a < b  # **not bold**\n```"),
            "<pre><code class=\"language-python\">def f(*args, **kw):\n    return a &lt; b  \
             # **not bold**</code></pre>"
        );
        assert_eq!(html("`[a](https://x.org)`"), "<code>[a](https://x.org)</code>");
    }

    #[test]
    fn fences_inside_inline_code_are_inline_code() {
        assert_eq!(
            html("Type `` ``` `` to open a block."),
            "Type <code>```</code> to open a block."
        );
        assert_eq!(html("x ```not a fence``` y"), "x <code>not a fence</code> y");
    }

    #[test]
    fn code_blocks_render_as_pre() {
        assert_eq!(html("Run:\n```\nls -l\n```\nDone."), "Run:\n<pre>ls -l</pre>\nDone.");
        assert_eq!(
            html("```bad\"lang\nx\n```"),
            "<pre>x</pre>",
            "a language that is not a plain word is dropped"
        );
        // An unclosed block runs to the end; an empty one stays literal.
        assert_eq!(
            html("```rust\nfn main() {}"),
            "<pre><code class=\"language-rust\">fn main() {}</code></pre>"
        );
        assert_eq!(html("```\n```"), "```\n```");
        assert_eq!(html("text\n```"), "text\n```");
    }

    #[test]
    fn paragraphs_split_at_blank_lines() {
        let paragraph = "word ".repeat(199) + "end.";
        let text = [paragraph.as_str(); 10].join("\n\n");
        assert!(text.chars().count() > 10_000);
        let parts = render(&text);
        assert_eq!(parts.len(), 3);
        check_parts(&text, &parts, MAX_MESSAGE_CHARS);
        for part in &parts {
            assert!(part.plain.ends_with("end."), "split inside a paragraph");
            assert_eq!(part.html, part.plain);
        }
        let joined: Vec<&str> = parts.iter().map(|p| p.plain.as_str()).collect();
        assert_eq!(joined.join("\n\n"), text);
    }

    #[test]
    fn a_long_word_splits_between_characters() {
        let word = "éa😀b".repeat(2_500);
        assert_eq!(word.chars().count(), 10_000);
        let parts = render(&word);
        assert_eq!(parts.len(), 4, "12,500 UTF-16 units");
        check_parts(&word, &parts, MAX_MESSAGE_CHARS);
        assert_eq!(parts.iter().map(|p| p.plain.as_str()).collect::<String>(), word);
        assert!(parts[..3].iter().all(|p| utf16_len(&p.plain) >= 4_095), "parts are filled");
    }

    #[test]
    fn emoji_sequences_stay_whole() {
        let family = "👨\u{200d}👩\u{200d}👧\u{200d}👦";
        let thumbs = "👍🏽";
        let text = format!("{family}{thumbs}").repeat(300);
        let parts = render_with_limit(&text, 256);
        assert!(parts.len() > 1);
        check_parts(&text, &parts, 256);
        for part in &parts {
            assert!(!part.plain.starts_with('\u{200d}') && !part.plain.starts_with('🏽'));
            assert!(!part.plain.ends_with('\u{200d}'));
        }
        assert_eq!(parts.iter().map(|p| p.plain.as_str()).collect::<String>(), text);
    }

    #[test]
    fn a_long_code_block_is_closed_and_reopened() {
        let lines: Vec<String> = (0..300).map(|i| format!("let x{i:03} = a < b; // 20")).collect();
        let text = format!("Here:\n\n```rust\n{}\n```\n\nThat's it.", lines.join("\n"));
        assert!(text.len() > 6_000);
        let parts = render(&text);
        assert_eq!(parts.len(), 2, "{parts:#?}");
        check_parts(&text, &parts, MAX_MESSAGE_CHARS);
        assert!(parts[0].plain.starts_with("Here:\n\n```rust\nlet x000"));
        assert!(parts[0].plain.ends_with("// 20\n```"));
        assert!(parts[0].html.ends_with("// 20</code></pre>"));
        assert!(parts[1].plain.starts_with("```rust\nlet x"));
        assert!(parts[1].plain.ends_with("// 20\n```\n\nThat's it."));
        assert!(parts[1].html.starts_with("<pre><code class=\"language-rust\">let x"));
        for part in &parts {
            assert_eq!(part.plain.matches("```").count(), 2);
            assert_eq!(part.html.matches("<pre>").count(), 1);
        }
        // No line was cut.
        let shown: String = parts.iter().map(|p| visible(&p.html) + "\n").collect();
        for line in &lines {
            assert!(shown.contains(&format!("{line}\n")), "{line} was cut");
        }
    }

    #[test]
    fn a_code_line_longer_than_a_part_is_cut() {
        let line = "x".repeat(600);
        let text = format!("```\n{line}\n```");
        let parts = render_with_limit(&text, 256);
        check_parts(&text, &parts, 256);
        assert!(parts.len() >= 3);
        let body: String = parts.iter().map(|p| visible(&p.html)).collect();
        assert_eq!(body, line);
    }

    #[test]
    fn crlf_is_normalized() {
        assert_eq!(
            html("a\r\n```sh\r\nls\r\n```\r\n"),
            "a\n<pre><code class=\"language-sh\">ls</code></pre>"
        );
    }

    // --- Properties ---------------------------------------------------------------------

    /// Markdown-ish answers: words (some formatted), lines, paragraphs, code blocks (some
    /// unclosed). Backticks appear only in fences and `word` spans, so the only lines starting
    /// with ``` are fences.
    fn answer() -> impl Strategy<Value = String> {
        let word = prop_oneof![
            6 => "[a-zA-Z0-9éß<>&\"'.,:;!?()/-]{1,12}",
            1 => "[😀👍🏽]{1,3}",
            1 => "\\*\\*[a-z ]{1,8}\\*\\*",
            1 => "[*_~][a-z_ ]{1,8}[*_~]{0,2}",
            1 => "`[a-z*_<]{1,6}`",
            1 => "\\[[a-z ]{1,6}\\]\\(https://x\\.org/[a-z_()]{0,6}\\)",
            1 => "[a-zé😀]{100,700}",
        ];
        let line = prop::collection::vec(word, 0..12).prop_map(|w| w.join(" "));
        let code_line = "[ a-z0-9(){}<>&*_;=]{0,40}";
        let block = prop_oneof![
            4 => prop::collection::vec(line, 1..8).prop_map(|l| l.join("\n")),
            1 => ("(```[a-z]{0,5})", prop::collection::vec(code_line, 1..40), any::<bool>())
                .prop_map(|(open, body, closed)| {
                    let close = if closed { "\n```" } else { "" };
                    format!("{open}\n{}{close}", body.join("\n"))
                }),
        ];
        prop::collection::vec(block, 0..12).prop_map(|b| b.join("\n\n"))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn parts_fit_are_well_formed_and_lose_nothing(text in answer(), limit in 256usize..1200) {
            let parts = render_with_limit(&text, limit);
            check_parts(&text, &parts, limit);
            let joined: Vec<&str> = parts.iter().map(|p| p.plain.as_str()).collect();
            prop_assert_eq!(content(&joined.join("\n")), content(&text));
        }

        #[test]
        fn any_text_renders_safely(
            text in "([a-z \n`*_~\\[\\]()<>&]|\\PC|https://){0,1500}",
            limit in 256usize..600,
        ) {
            let parts = render_with_limit(&text, limit);
            check_parts(&text, &parts, limit);
        }

        #[test]
        fn text_without_markers_is_shown_exactly(text in "[^`*_~\\[]{0,1000}") {
            for part in render_with_limit(&text, 300) {
                prop_assert_eq!(visible(&part.html), part.plain);
            }
        }

        #[test]
        fn only_emphasis_markers_are_dropped(text in "([^`\\[]|[*_~ ]){0,1000}") {
            let strip = |s: &str| s.replace(['*', '_', '~'], "");
            for part in render_with_limit(&text, 300) {
                prop_assert_eq!(strip(&visible(&part.html)), strip(&part.plain));
            }
        }
    }
}
