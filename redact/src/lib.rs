//! Secrets and their redaction: the one place that knows what a secret value looks like in
//! text, and how to take it out.
//!
//! Why a crate of its own: the wire (`nexbot-protocol`) carries per-task secrets, but the
//! egress proxy, the LLM relay, the host's exits and the subagent all redact, and none of them
//! should depend on the wire contract for that.
//!
//! A secret travels from the host to a subagent inside one `execute` request and nowhere else.
//! This module makes the unsafe things hard: values are [`SecretString`]s (zeroized on drop,
//! never in `Debug`), the spec's limits are checked in one place, and [`Redactor`] scrubs every
//! value — raw, base64, percent-encoded, hex, JSON- or HTML-escaped — out of text before anyone sees
//! it; [`StreamRedactor`] does the same for a byte stream cut into arbitrary chunks.
//!
//! This is the one redaction implementation: the subagent's task loop, its stdout writer and
//! its log layer all use it (`subagent/src/redaction.rs` only holds the live instance).
//!
//! How a value is found: base64 in both alphabets, with or without padding and inside longer
//! base64; percent-encoding in either case; hex; JSON and HTML escapes; and each of these also
//! when line breaks or invisible characters cut the value. A hit becomes `[REDACTED:NAME]`
//! (or `[REDACTED]` where the name must not be told), and the redactor never redacts its own
//! markers. Matching is one Aho-Corasick pass per decoded view of the text (`scan.rs`), linear
//! in the text whatever the number and shape of the secrets; [`StreamRedactor`] holds back at
//! most the longest form between chunks. Values shorter than [`MIN_SECRET_VALUE_BYTES`] are
//! refused where they enter, since they could not be redacted without destroying the text.

use std::fmt;
use std::sync::{Arc, OnceLock};

use base64::Engine as _;
use secrecy::{ExposeSecret, SecretString};
use zeroize::Zeroizing;

mod scan;
mod secrets;

use crate::scan::{Trie, View, ALIGN_SLACK, VIEWS};
pub use crate::secrets::{
    is_valid_secret_name, SecretMap, SecretsError, MAX_SECRETS, MAX_SECRET_NAME_LEN,
    MAX_SECRET_VALUE_BYTES, MIN_SECRET_VALUE_BYTES,
};

/// Invisible and format characters: zero-width spaces and joiners, bidi controls, the soft
/// hyphen, word joiners and invisible operators, variation selectors, tag characters, the BOM
/// and the Hangul fillers. A secret form with some of these inside it is still redacted, and
/// the subagent's sanitizer drops them before it matches anything.
pub fn is_invisible_char(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{034F}'
            | '\u{061C}'
            | '\u{115F}'
            | '\u{1160}'
            | '\u{17B4}'
            | '\u{17B5}'
            | '\u{180B}'..='\u{180F}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}'
            | '\u{3164}'
            | '\u{FE00}'..='\u{FE0F}'
            | '\u{FEFF}'
            | '\u{FFA0}'
            | '\u{FFF0}'..='\u{FFF8}'
            | '\u{1BCA0}'..='\u{1BCA3}'
            | '\u{1D173}'..='\u{1D17A}'
            | '\u{E0000}'..='\u{E0FFF}'
    )
}

/// What a marker says between its brackets: `[REDACTED]` and `[REDACTED:NAME]` are markers.
const MARKER_WORD: &[u8] = b"REDACTED";
/// The brackets of a label: the first pair that no value contains, so that a label can never
/// complete a value with the text around it. Markers in the first pair are always recognized
/// (other redactors write them).
const BRACKETS: [(&str, &str); 4] =
    [("[", "]"), ("\u{27E6}", "\u{27E7}"), ("{", "}"), ("\u{AB}", "\u{BB}")];
/// The longest marker: `⟦REDACTED:` + a 64-character name + `⟧`.
const MAX_MARKER_LEN: usize = 3 + MARKER_WORD.len() + 1 + MAX_SECRET_NAME_LEN + 3;
/// Passes of [`Redactor::redact_bytes`] before it gives up and replaces the whole text; only
/// values holding `[` or `]` ever need a second pass.
const MAX_PASSES: usize = 64;

/// One form of one secret, looked for in text.
struct Needle {
    /// As its view reads it ([`View::normalize`]).
    bytes: Zeroizing<Vec<u8>>,
    view: View,
    /// Index into the redactor's labels.
    secret: usize,
    /// From a value under [`MIN_SECRET_VALUE_BYTES`] (only LLM credentials can be): matched in
    /// its raw form only, and never inside a marker, so a marker is never redacted again.
    short: bool,
    /// A tail needle: the value without these first bytes, which an escape just before it
    /// swallowed in the view's left-to-right reading (`%E` + `a…`, a stray `\\` + `\\u0061…`);
    /// a match counts only where the text from inside that escape decodes to them.
    dropped: Option<Zeroizing<Vec<u8>>>,
}

/// The result of matching a marker at one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// A whole marker ends here (exclusive).
    Full(usize),
    /// The text ended while it still matched: more bytes could complete it.
    Partial,
    Fail,
}

/// The automata of one view: `short` needles apart, since they never match inside a marker.
///
/// Each is built the first time a text needs it, not with the redactor: a task's redactor is
/// made for that task, and most of its texts need neither a view's tails (only a text with an
/// escape of that view does) nor any forward automaton (only a stream does). Building all of
/// them was the subagent's largest cost per task (one 40-byte secret: 16 automata, ~300 µs of a
/// one-step task's ~1.4 ms of CPU, `docker/profile-warm.py`); a one-step task now builds the
/// five it uses.
struct ViewTries {
    view: View,
    short: bool,
    /// Tail needles ([`Needle::dropped`]).
    tail: bool,
    /// The needles (indexes into [`Redactor::needles`]), in priority order.
    group: Vec<u32>,
    /// Over the needles reversed: the longest needle starting at each place (`None`: the
    /// needles could not be indexed, every text is redacted whole).
    reversed: OnceLock<Option<Trie>>,
    /// Over the needles: where one may have begun at the end of a stream's text.
    forward: OnceLock<Option<Trie>>,
}

impl ViewTries {
    fn trie(&self, needles: &[Needle], reversed: bool) -> Option<&Trie> {
        let cell = if reversed { &self.reversed } else { &self.forward };
        cell.get_or_init(|| {
            let group: Vec<(&[u8], u32)> =
                self.group.iter().map(|&k| (needles[k as usize].bytes.as_slice(), k)).collect();
            Trie::build(&group, reversed, reversed && self.tail).ok()
        })
        .as_ref()
    }
}

/// What the automata found in one text.
struct Found {
    /// Per text position: the end and needle of the longest needle that starts there (end 0:
    /// none); `short` the same for short needles (empty without any).
    best: Vec<(u32, u32)>,
    short: Vec<(u32, u32)>,
    /// Per position from the stream's boundary on: a needle may have begun there.
    partial: Vec<bool>,
    /// Escapes and characters of more than one byte that end past the boundary.
    wide: Vec<(u32, u32)>,
}

const NO_NEEDLE: u32 = u32::MAX;

impl Found {
    /// The end and needle index of the longest match at `p`; a short needle inside `marker`
    /// is the marker's own text and does not count.
    fn best_at(&self, p: usize, marker: Option<(usize, usize)>) -> Option<(usize, usize)> {
        let mut best = self.best[p];
        if let Some(&(end, k)) = self.short.get(p) {
            let in_marker = marker.is_some_and(|(_, m_end)| end as usize <= m_end);
            if end > 0 && !in_marker && (end > best.0 || (end == best.0 && k < best.1)) {
                best = (end, k);
            }
        }
        (best.0 > 0).then_some((best.0 as usize, best.1 as usize))
    }

    /// A stream's cut moved back to the start of an escape or character it falls inside, so
    /// the next scan decodes what follows as one piece would; unless a span already taken
    /// ends past that start (then the cut stays).
    fn align(&self, cut: usize, taken: usize) -> usize {
        for &(start, end) in &self.wide {
            let (start, end) = (start as usize, end as usize);
            if start < cut && cut < end && start >= taken {
                return start;
            }
        }
        cut
    }
}

/// A range of text that becomes the label of `secret`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    start: usize,
    end: usize,
    secret: usize,
}

/// What a scan found: the spans to replace in `text[..cut]`; `text[cut..]` must wait for more
/// bytes (always the whole text at the end of a stream).
struct Scan {
    spans: Vec<Span>,
    cut: usize,
}

/// Replaces every secret value with `[REDACTED:NAME]`, in every form it may take in text.
///
/// Forms, for each value of at least [`MIN_SECRET_VALUE_BYTES`]:
/// - the raw value;
/// - base64, standard and URL-safe alphabets, padded and unpadded, and the part of any base64
///   text that only the value decides wherever it starts (offsets 0, 1, 2 of a longer blob, as
///   in `Authorization: Basic` of `user:password`, or `echo $SECRET | base64` with its newline);
/// - percent-encoding, any byte encoded or not, either hex case, space also as `+`;
/// - hex, lower, upper or mixed case;
/// - JSON-escaped, as the value appears inside a JSON string;
/// - HTML-escaped: `&amp;` `&lt;` `&gt;` `&quot;` `&apos;` and numeric references (`&#39;`,
///   `&#x27;`, either case) for any character, as a page or an HTML message shows it.
///
/// In every form, line breaks (`\n`, `\r`, escaped or not) and invisible characters
/// ([`is_invisible_char`]) inside a match are skipped, at most two in a row (or as many as a
/// value itself holds): a value cut
/// across two lines, or base64 wrapped at 76 columns, is still one match. Values shorter than
/// the minimum (LLM credentials are not checked for length) are redacted in their raw form
/// only; a value is looked for without its own line breaks and invisible characters. In the
/// percent-encoded form `+` and space are one (a value's `+` also matches a space).
///
/// Matching takes time linear in the text whatever the number and shape of the values: the
/// text is decoded once per form and one Aho-Corasick automaton per form finds every needle
/// (`scan.rs`).
///
/// Redaction never nests: a marker (`[REDACTED]`, `[REDACTED:NAME]`) already in the text is
/// not redacted again, whichever redactor wrote it, so redacting twice changes nothing. A
/// match that overlaps a marker swallows the whole marker. Labels never show a value: when
/// one would (a value such as `REDACTED`), every label becomes `[REDACTED]`, or `[X]`.
///
/// Matching is leftmost-longest: at each place the longest form wins, and the scan goes on
/// after it. Needles are held in [`Zeroizing`] buffers; the automata's transition tables
/// (the `aho-corasick` crate's) also hold the values' bytes and are freed, not zeroized, when
/// the redactor is dropped. [`StreamRedactor`] applies it to a byte stream cut anywhere.
#[derive(Default)]
pub struct Redactor {
    needles: Vec<Needle>,
    /// The automata, one set per view that has needles.
    tries: Vec<ViewTries>,
    /// Line breaks or invisible characters in a row a match skips: [`scan::MAX_TRANSPARENT_RUN`]
    /// or the longest run a value holds.
    max_run: usize,
    /// The most bytes a tail needle drops (see [`Redactor::add_tails`]).
    max_dropped: usize,
    labels: Vec<String>,
    /// Each secret's name (what [`Redactor::redact_found`] reports), by label index.
    names: Vec<String>,
    /// Index into [`BRACKETS`] of this redactor's labels.
    brackets: usize,
    /// The last-resort label `[X]` is in use, and counts as a marker.
    tiny_labels: bool,
    /// Every bracket pair occurs in some value, so a label can complete a match with the text
    /// around it: redact again until nothing matches.
    settle: bool,
    /// The longest match (the longest form, with the line breaks and invisible characters it
    /// may skip: [`View::expansion`]) and a marker at each end (a match takes in the markers it touches),
    /// minus 1, and the room a cut needs to move back to the start of an escape.
    holdback: usize,
}

impl Redactor {
    pub fn new(secrets: &SecretMap) -> Self {
        Self::from_pairs(secrets.iter())
    }

    /// A redactor over `(name, value)` pairs. Unlike a [`SecretMap`], names may repeat: the
    /// host's exits scan the secrets of every chat at once, and two chats may both hold a
    /// `GITHUB_TOKEN`.
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a SecretString)>) -> Self {
        let pairs: Vec<(&str, &SecretString)> = pairs.into_iter().collect();
        let mut redactor = Self::default();
        let contains = |value: &str, (open, close): (&str, &str)| {
            value.contains(open) || value.contains(close)
        };
        let used = |pair| pairs.iter().any(|(_, v)| contains(v.expose_secret(), pair));
        match BRACKETS.iter().position(|pair| !used(*pair)) {
            Some(index) => redactor.brackets = index,
            None => redactor.settle = true,
        }
        redactor.max_run = pairs
            .iter()
            .map(|(_, v)| scan::longest_run(v.expose_secret().as_bytes()))
            .fold(scan::MAX_TRANSPARENT_RUN, usize::max);
        for (index, (name, value)) in pairs.into_iter().enumerate() {
            redactor.labels.push(redactor.named_label(name));
            redactor.names.push(name.to_owned());
            let value = value.expose_secret().as_bytes();
            if value.is_empty() {
                continue;
            }
            let short = value.len() < MIN_SECRET_VALUE_BYTES;
            redactor.add(value, View::Exact, index, short);
            if short {
                continue;
            }
            for view in [View::Percent, View::Json, View::Html] {
                redactor.add(value, view, index, false);
                redactor.add_tails(value, view, index);
            }
            let hex = Zeroizing::new(hex_lower(value));
            redactor.add(&hex, View::Hex, index, false);
            for (padded, unpadded) in [
                (
                    &base64::engine::general_purpose::STANDARD,
                    &base64::engine::general_purpose::STANDARD_NO_PAD,
                ),
                (
                    &base64::engine::general_purpose::URL_SAFE,
                    &base64::engine::general_purpose::URL_SAFE_NO_PAD,
                ),
            ] {
                let full = Zeroizing::new(padded.encode(value));
                redactor.add(full.as_bytes(), View::Exact, index, false);
                let bare = Zeroizing::new(unpadded.encode(value));
                redactor.add(bare.as_bytes(), View::Exact, index, false);
                for offset in 0..3 {
                    if let Some(core) = base64_core(unpadded, value, offset) {
                        redactor.add(&core, View::Exact, index, false);
                    }
                }
            }
        }
        redactor.index();
        redactor.choose_labels();
        redactor
    }

    /// True when there is nothing to redact.
    pub fn is_empty(&self) -> bool {
        self.needles.is_empty()
    }

    /// How many bytes a [`StreamRedactor`] may hold back at a chunk boundary: the longest text
    /// one replacement can take, minus 1 — the longest form (a JSON `\u00XX` is 6 bytes a
    /// value byte), with a marker at either end that a match takes in whole.
    pub fn holdback(&self) -> usize {
        self.holdback
    }

    /// The text with every known secret form replaced by its label.
    pub fn redact(&self, text: &str) -> String {
        if self.is_empty() {
            return text.to_owned();
        }
        match String::from_utf8(self.redact_bytes(text.as_bytes())) {
            Ok(text) => text,
            // Spans start and end on character boundaries; this is only a safety net.
            Err(err) => String::from_utf8_lossy(err.as_bytes()).into_owned(),
        }
    }

    /// The text redacted and the names of the secrets found in it (each once, sorted), or
    /// `None` when no secret is in it: for exits that audit which secret they stopped.
    pub fn redact_found(&self, text: &str) -> Option<(String, Vec<String>)> {
        if self.is_empty() {
            return None;
        }
        let scan = self.scan(text.as_bytes(), true);
        if scan.spans.is_empty() {
            return None;
        }
        let mut names: Vec<String> =
            scan.spans.iter().map(|span| self.names[span.secret].clone()).collect();
        names.sort_unstable();
        names.dedup();
        let bytes = self.settle(self.render(text.as_bytes(), &scan.spans));
        let text = match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(err) => String::from_utf8_lossy(err.as_bytes()).into_owned(),
        };
        Some((text, names))
    }

    /// [`Redactor::redact`] for bytes that need not be UTF-8 (a whole line, a whole output).
    pub fn redact_bytes(&self, text: &[u8]) -> Vec<u8> {
        if self.is_empty() {
            return text.to_vec();
        }
        let scan = self.scan(text, true);
        if scan.spans.is_empty() {
            return text.to_vec();
        }
        self.settle(self.render(text, &scan.spans))
    }

    /// A streaming redactor over this one.
    pub fn stream(self: &Arc<Self>) -> StreamRedactor {
        StreamRedactor::new(self.clone())
    }

    /// Adds a needle, as `view` reads it. The same bytes twice in one view cost nothing: the
    /// automaton keeps the first.
    fn add(&mut self, bytes: &[u8], view: View, secret: usize, short: bool) {
        let bytes = view.normalize(bytes);
        if bytes.is_empty() {
            return;
        }
        self.needles.push(Needle { bytes, view, secret, short, dropped: None });
    }

    /// Adds the value without its first character as tail needles of `view`; and without its
    /// first two when both are hex digits (which `%` and one digit before it can swallow), or,
    /// for JSON, when it starts with `m` backslashes: escaped, that is `2m` of them, and a stray
    /// `\` before them shifts their pairs, leaving the last to escape what follows (`\\b` reads
    /// as `\` and a backspace): the run and that escape (`m + 1` bytes, `m + 5` for `\uXXXX`)
    /// are dropped then.
    fn add_tails(&mut self, value: &[u8], view: View, secret: usize) {
        let bytes = view.normalize(value);
        let first = std::str::from_utf8(&bytes)
            .ok()
            .and_then(|s| s.chars().next())
            .map_or(1, char::len_utf8);
        let mut cuts = vec![first];
        if bytes.len() > 2 && bytes[..2].iter().all(u8::is_ascii_hexdigit) {
            cuts.push(2);
        }
        let run = bytes.iter().take_while(|&&b| b == b'\\').count();
        if view == View::Json && run > 0 {
            cuts.push(run + 1);
            let unicode = bytes.get(run..run + 5).filter(|u| u[0] == b'u');
            if unicode.is_some_and(|u| u[1..].iter().all(u8::is_ascii_hexdigit)) {
                cuts.push(run + 5);
            }
        }
        cuts.dedup();
        for cut in cuts {
            // However short, a tail counts only after its swallowed head: the whole value.
            if bytes.len() <= cut {
                continue;
            }
            self.max_dropped = self.max_dropped.max(cut);
            self.needles.push(Needle {
                bytes: Zeroizing::new(bytes[cut..].to_vec()),
                view,
                secret,
                short: false,
                dropped: Some(Zeroizing::new(bytes[..cut].to_vec())),
            });
        }
    }

    /// How far before a tail needle of `view` its head may begin.
    fn head_window(&self, view: View) -> usize {
        scan::head_window(view, self.max_run, self.max_dropped)
    }

    /// Builds the automata and the holdback.
    fn index(&mut self) {
        if self.needles.is_empty() {
            return;
        }
        let mut longest = MAX_MARKER_LEN;
        for needle in &self.needles {
            longest = longest.max(needle.bytes.len() * needle.view.expansion(self.max_run));
        }
        // A tail's head lies up to a head window before it, inside an escape a cut may fall in.
        let tails = self.needles.iter().filter(|n| n.dropped.is_some());
        let heads = tails.map(|n| self.head_window(n.view)).max().unwrap_or(0);
        self.holdback = longest + 2 * MAX_MARKER_LEN - 1 + 2 * ALIGN_SLACK + heads;
        for view in VIEWS {
            for (short, tail) in [(false, false), (true, false), (false, true)] {
                let group: Vec<u32> = self
                    .needles
                    .iter()
                    .enumerate()
                    .filter(|(_, n)| {
                        n.view == view && n.short == short && n.dropped.is_some() == tail
                    })
                    .map(|(k, _)| k as u32)
                    .collect();
                if group.is_empty() {
                    continue;
                }
                let (reversed, forward) = (OnceLock::new(), OnceLock::new());
                self.tries.push(ViewTries { view, short, tail, group, reversed, forward });
            }
        }
    }

    /// Keeps the named labels unless one of them would show a value in some form.
    fn choose_labels(&mut self) {
        if !self.labels_show_a_value() {
            return;
        }
        let plain = self.bracketed("REDACTED");
        self.labels.iter_mut().for_each(|l| l.clone_from(&plain));
        if !self.labels_show_a_value() {
            return;
        }
        self.tiny_labels = true;
        let tiny = self.bracketed("X");
        self.labels.iter_mut().for_each(|l| l.clone_from(&tiny));
    }

    /// `[REDACTED:NAME]` in this redactor's brackets, or `[REDACTED]` for a name a marker
    /// cannot carry.
    fn named_label(&self, name: &str) -> String {
        if !name.is_empty() && name.len() <= MAX_SECRET_NAME_LEN && name.bytes().all(is_name_byte) {
            self.bracketed(&format!("REDACTED:{name}"))
        } else {
            self.bracketed("REDACTED")
        }
    }

    fn bracketed(&self, inner: &str) -> String {
        let (open, close) = BRACKETS[self.brackets];
        format!("{open}{inner}{close}")
    }

    /// The first bytes of the brackets markers are recognized in: `[` and this redactor's.
    fn marker_starts(&self) -> (u8, u8) {
        (b'[', BRACKETS[self.brackets].0.as_bytes()[0])
    }

    fn labels_show_a_value(&self) -> bool {
        !self.is_empty()
            && self.labels.iter().any(|l| !self.scan(l.as_bytes(), true).spans.is_empty())
    }

    /// Redacts the output of a pass again until nothing matches. Only a value that holds a
    /// bracket of the labels can match across a label and its neighbours, and the brackets
    /// are chosen so that none does unless values hold every pair: others stop after one pass.
    fn settle(&self, mut text: Vec<u8>) -> Vec<u8> {
        if !self.settle {
            return text;
        }
        for _ in 0..MAX_PASSES {
            let scan = self.scan(&text, true);
            if scan.spans.is_empty() {
                return text;
            }
            text = self.render(&text, &scan.spans);
        }
        // Each pass shrinks what is not a marker, so this is not reached; if it were, the
        // safe answer is a label for everything.
        self.labels.first().map(|l| l.as_bytes().to_vec()).unwrap_or_default()
    }

    /// `text[..spans.last().end]` and on, with every span replaced by its label.
    fn render(&self, text: &[u8], spans: &[Span]) -> Vec<u8> {
        let mut out = Vec::with_capacity(text.len());
        let mut at = 0;
        for span in spans {
            out.extend_from_slice(&text[at..span.start]);
            out.extend_from_slice(self.labels[span.secret].as_bytes());
            at = span.end;
        }
        out.extend_from_slice(&text[at..]);
        out
    }

    /// Finds the spans to replace. With `at_end` false (a stream), stops at the first place
    /// at or past `len - holdback` where a form or a marker may have begun but not ended, and
    /// says so in `cut`.
    fn scan(&self, text: &[u8], at_end: bool) -> Scan {
        let len = text.len();
        let boundary = if at_end { len } else { len.saturating_sub(self.holdback) };
        let Some(found) = self.find(text, at_end, boundary) else {
            let spans =
                if len == 0 { Vec::new() } else { vec![Span { start: 0, end: len, secret: 0 }] };
            return Scan { spans, cut: len };
        };
        let mut spans: Vec<Span> = Vec::new();
        // The marker that covers `p`, if any.
        let mut marker: Option<(usize, usize)> = None;
        let (open_a, open_b) = self.marker_starts();
        let mut p = 0;
        while p < len {
            if marker.is_some_and(|(_, end)| p >= end) {
                marker = None;
            }
            if marker.is_none() && (text[p] == open_a || text[p] == open_b) {
                match self.marker_at(text, p) {
                    Outcome::Full(end) => marker = Some((p, end)),
                    Outcome::Partial if p >= boundary => {
                        let cut = found.align(p, spans.last().map_or(0, |s| s.end));
                        spans.retain(|s| s.end <= cut);
                        return Scan { spans, cut };
                    }
                    _ => {}
                }
            }
            if p >= boundary && found.partial[p - boundary] {
                // Wait for more; a marker this lies in waits whole.
                let cut = match marker {
                    Some((m_start, _)) if m_start >= boundary => m_start,
                    _ => p,
                };
                let cut = found.align(cut, spans.last().map_or(0, |s| s.end));
                spans.retain(|s| s.end <= cut);
                return Scan { spans, cut };
            }
            let best = found.best_at(p, marker).map(|(end, k)| (end, self.needles[k].secret));
            let Some((mut end, secret)) = best else {
                p += 1;
                continue;
            };
            // A match swallows every marker it touches.
            let mut start = p;
            if let Some((m_start, m_end)) = marker.take() {
                start = m_start;
                end = end.max(m_end);
            }
            let mut q = p + 1;
            while let Some(offset) = memchr::memchr2(open_a, open_b, &text[q.min(end)..end]) {
                let at = q + offset;
                match self.marker_at(text, at) {
                    Outcome::Full(m_end) => end = end.max(m_end),
                    // The match ends in a marker not all here yet: it must take it whole.
                    Outcome::Partial if !at_end && start >= boundary => {
                        return Scan { spans, cut: start };
                    }
                    _ => {}
                }
                q = at + 1;
            }
            match spans.last_mut() {
                Some(last) if start < last.end => last.end = last.end.max(end),
                _ => spans.push(Span { start, end, secret }),
            }
            p = end;
        }
        Scan { spans, cut: len }
    }

    /// Runs every view's automata over `text`: the longest needle starting at each place, and
    /// (for a stream) where one may have begun from `boundary` on. Linear in the text. `None`:
    /// an automaton could not be built (too many needle bytes), so the text must go whole.
    fn find(&self, text: &[u8], at_end: bool, boundary: usize) -> Option<Found> {
        let len = text.len();
        let mut found = Found {
            best: vec![(0, NO_NEEDLE); len],
            short: Vec::new(),
            partial: vec![false; len - boundary],
            wide: Vec::new(),
        };
        if self.tries.iter().any(|t| t.short) {
            found.short = vec![(0, NO_NEEDLE); len];
        }
        // Views that read this text as the exact view does share its decoding.
        let exact = scan::decode(View::Exact, text, at_end, self.max_run);
        for view in VIEWS {
            let tries: Vec<&ViewTries> = self.tries.iter().filter(|t| t.view == view).collect();
            if tries.is_empty() {
                continue;
            }
            let own = view.differs(text).then(|| scan::decode(view, text, at_end, self.max_run));
            let d = own.as_ref().unwrap_or(&exact);
            for tries in tries {
                if tries.tail && own.is_none() {
                    // No escape of this view in the text: none swallowed a value's head.
                    continue;
                }
                let target = if tries.short { &mut found.short } else { &mut found.best };
                // A tail needle counts only where its head was swallowed: each tail that starts
                // here is tried, not only the longest.
                let trie = tries.trie(&self.needles, true)?;
                let starts = if tries.tail { Trie::every_start } else { Trie::longest_starts };
                starts(trie, d, &mut |i, k| {
                    let needle = &self.needles[k as usize];
                    let (mut start, end) =
                        (d.starts[i] as usize, d.ends[i + needle.bytes.len() - 1]);
                    if let Some(dropped) = &needle.dropped {
                        let at = (start, self.max_run);
                        match scan::swallowed_head(view, text, d, at, dropped) {
                            Some(head) => start = head,
                            None => return,
                        }
                    }
                    let slot = &mut target[start];
                    if end > slot.0 || (end == slot.0 && k < slot.1) {
                        *slot = (end, k);
                    }
                });
                if !at_end {
                    let from = d.starts.partition_point(|&s| (s as usize) < boundary);
                    tries.trie(&self.needles, false)?.partial_starts(d, from, |i| {
                        let mut at = d.starts[i] as usize;
                        if tries.tail {
                            // A tail's head begins inside an escape just before it; none, no
                            // tail.
                            match scan::escape_before(d, at, self.head_window(view)) {
                                Some(escape) => at = escape.max(boundary),
                                None => return,
                            }
                        }
                        found.partial[at - boundary] = true;
                    });
                }
            }
            if own.is_none() && view != View::Exact {
                continue;
            }
            if let Some(at) = d.incomplete.filter(|&at| at >= boundary) {
                found.partial[at - boundary] = true;
            }
            // A tail needle may begin with the next bytes, its head inside an escape at the
            // end of this text: that escape waits.
            let tails = self.tries.iter().any(|t| t.view == view && t.tail);
            if tails && !at_end {
                let end = d.incomplete.unwrap_or(len);
                if let Some(escape) = scan::escape_before(d, end, self.head_window(view)) {
                    found.partial[escape.max(boundary) - boundary] = true;
                }
            }
            if !at_end {
                found.wide.extend(d.wide.iter().filter(|(_, end)| *end as usize > boundary));
            }
        }
        Some(found)
    }

    /// A marker at `p`: `[REDACTED]`, `[REDACTED:NAME]` (name `[A-Za-z0-9_]`, 1 to 64), in
    /// square brackets or this redactor's, or `[X]` while that label is in use.
    fn marker_at(&self, text: &[u8], p: usize) -> Outcome {
        let rest = &text[p..];
        let own = BRACKETS[self.brackets];
        let mut outcome = Outcome::Fail;
        for (open, close) in [BRACKETS[0], own] {
            let (open, close) = (open.as_bytes(), close.as_bytes());
            if self.tiny_labels && (open, close) == (own.0.as_bytes(), own.1.as_bytes()) {
                outcome = better(outcome, marker_of(rest, open, b"X", close, false));
            }
            outcome = better(outcome, marker_of(rest, open, MARKER_WORD, close, true));
        }
        match outcome {
            Outcome::Full(len) => Outcome::Full(p + len),
            other => other,
        }
    }
}

/// Full beats Partial beats Fail.
fn better(a: Outcome, b: Outcome) -> Outcome {
    match (a, b) {
        (Outcome::Full(x), _) | (_, Outcome::Full(x)) => Outcome::Full(x),
        (Outcome::Partial, _) | (_, Outcome::Partial) => Outcome::Partial,
        _ => Outcome::Fail,
    }
}

/// `open word close` at the start of `rest`, or `open word:NAME close` when `named`; its
/// length as `Full`.
fn marker_of(rest: &[u8], open: &[u8], word: &[u8], close: &[u8], named: bool) -> Outcome {
    let mut i = 0;
    for part in [open, word] {
        let have = &rest[i.min(rest.len())..rest.len().min(i + part.len())];
        if have != &part[..have.len()] {
            return Outcome::Fail;
        }
        if have.len() < part.len() {
            return Outcome::Partial;
        }
        i += part.len();
    }
    if named && rest.get(i) == Some(&b':') {
        let name_start = i + 1;
        i = name_start;
        while i < rest.len() && i - name_start < MAX_SECRET_NAME_LEN && is_name_byte(rest[i]) {
            i += 1;
        }
        if i == name_start && i < rest.len() {
            return Outcome::Fail;
        }
    }
    let have = &rest[i.min(rest.len())..rest.len().min(i + close.len())];
    if have != &close[..have.len()] {
        return Outcome::Fail;
    }
    if have.len() < close.len() {
        return Outcome::Partial;
    }
    Outcome::Full(i + close.len())
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redactor")
            .field("needles", &self.needles.len())
            .field("holdback", &self.holdback)
            .finish()
    }
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

fn hex_lower(value: &[u8]) -> Vec<u8> {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    value.iter().flat_map(|b| [DIGITS[usize::from(b >> 4)], DIGITS[usize::from(b & 15)]]).collect()
}

/// The base64 characters that only `value` decides when it starts `offset` bytes (0..3) into a
/// longer base64 text: the encoding of `offset` filler bytes and the value, without the
/// characters that also hold bits of the bytes before or after it.
fn base64_core(
    engine: &base64::engine::GeneralPurpose,
    value: &[u8],
    offset: usize,
) -> Option<Zeroizing<Vec<u8>>> {
    let mut data = Zeroizing::new(vec![0u8; offset]);
    data.extend_from_slice(value);
    let encoded = Zeroizing::new(engine.encode(&*data));
    let skip = [0, 2, 3][offset];
    let drop_end = usize::from(data.len() % 3 != 0);
    let bytes = encoded.as_bytes();
    (bytes.len() > skip + drop_end)
        .then(|| Zeroizing::new(bytes[skip..bytes.len() - drop_end].to_vec()))
}

/// A [`Redactor`] for a byte stream cut into chunks anywhere (a pipe, a socket, a writer that
/// gets lines in pieces).
///
/// [`StreamRedactor::push`] returns what may be written now and holds back at most
/// [`Redactor::holdback`] bytes: only from the first place, within that many bytes of the
/// end, where a secret form (or a marker) has begun and could still be completed by the next
/// chunk; usually nothing. [`StreamRedactor::finish`] releases the rest, at the end of the
/// stream or whenever what was pushed must go out whole (the end of a line that is flushed).
/// A form cut by a chunk boundary is redacted as if it had come in one piece; one that runs
/// longer than the hold-back (many line breaks inside it) may not be.
pub struct StreamRedactor {
    redactor: Arc<Redactor>,
    pending: Zeroizing<Vec<u8>>,
}

impl StreamRedactor {
    pub fn new(redactor: Arc<Redactor>) -> Self {
        Self { redactor, pending: Zeroizing::new(Vec::new()) }
    }

    /// Feeds `chunk`; returns the redacted bytes that can be written now.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        self.pending.extend_from_slice(chunk);
        if self.redactor.is_empty() {
            return self.take(self.pending.len(), &[]);
        }
        let scan = self.redactor.scan(&self.pending, false);
        self.take(scan.cut, &scan.spans)
    }

    /// Everything held back, redacted; the stream may go on afterwards.
    pub fn finish(&mut self) -> Vec<u8> {
        if self.redactor.is_empty() {
            return self.take(self.pending.len(), &[]);
        }
        let scan = self.redactor.scan(&self.pending, true);
        self.take(scan.cut, &scan.spans)
    }

    /// How many bytes are held back now.
    pub fn held(&self) -> usize {
        self.pending.len()
    }

    fn take(&mut self, cut: usize, spans: &[Span]) -> Vec<u8> {
        let out = if spans.is_empty() {
            self.pending[..cut].to_vec()
        } else {
            self.redactor.settle(self.redactor.render(&self.pending[..cut], spans))
        };
        self.pending.drain(..cut);
        out
    }
}

impl fmt::Debug for StreamRedactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamRedactor")
            .field("redactor", &self.redactor)
            .field("held", &self.pending.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};

    fn map(pairs: &[(&str, &str)]) -> SecretMap {
        let mut m = SecretMap::new();
        for (k, v) in pairs {
            m.insert(*k, SecretString::from(v.to_string()));
        }
        m
    }

    /// A stream cut anywhere in `text` gives `whole`, what one piece gives.
    fn assert_every_cut_agrees(r: &Arc<Redactor>, text: &str, whole: &str) {
        for cut in 0..=text.len() {
            let mut stream = r.stream();
            let mut out = stream.push(&text.as_bytes()[..cut]);
            out.extend(stream.push(&text.as_bytes()[cut..]));
            out.extend(stream.finish());
            assert_eq!(String::from_utf8(out).unwrap(), whole, "cut at {cut}");
        }
    }

    fn redactor(pairs: &[(&str, &str)]) -> Redactor {
        Redactor::new(&map(pairs))
    }

    #[test]
    fn pairs_may_repeat_a_name_and_redact_found_names_what_it_stopped() {
        let a = SecretString::from("first-chat-token-1234".to_owned());
        let b = SecretString::from("second-chat-token-5678".to_owned());
        let c = SecretString::from("operator-search-key-90".to_owned());
        let r = Redactor::from_pairs([("TOKEN", &a), ("TOKEN", &b), ("SEARCH", &c)]);
        let text = format!(
            "a={} b={} c={}",
            "first-chat-token-1234",
            STANDARD.encode("second-chat-token-5678"),
            "operator-search-key-90"
        );
        let (redacted, names) = r.redact_found(&text).unwrap();
        assert_eq!(redacted, "a=[REDACTED:TOKEN] b=[REDACTED:TOKEN] c=[REDACTED:SEARCH]");
        assert_eq!(names, ["SEARCH", "TOKEN"]);
        assert!(r.redact_found("nothing secret here").is_none());
        assert!(Redactor::default().redact_found("first-chat-token-1234").is_none());
    }

    /// `application/x-www-form-urlencoded` (space as `+`), which query strings often use.
    fn form_urlencode(value: &str) -> String {
        utf8_percent_encode(value, NON_ALPHANUMERIC).to_string().replace("%20", "+")
    }

    /// The value as it sits between the quotes of a JSON string.
    fn json_inner(value: &str) -> String {
        let quoted = serde_json::to_string(value).unwrap();
        quoted[1..quoted.len() - 1].to_owned()
    }

    /// Every character as `\uXXXX` (surrogate pairs for those beyond the BMP).
    fn json_all_escaped(value: &str, upper: bool) -> String {
        value
            .encode_utf16()
            .map(|u| if upper { format!("\\u{u:04X}") } else { format!("\\u{u:04x}") })
            .collect()
    }

    #[test]
    fn names_follow_the_spec() {
        for good in ["A", "_", "API_KEY", "TOKEN2", "_X_1", &"A".repeat(64)] {
            assert!(is_valid_secret_name(good), "{good}");
        }
        for bad in ["", "a", "1ABC", "API-KEY", "API KEY", "ÄPI", &"A".repeat(65)] {
            assert!(!is_valid_secret_name(bad), "{bad}");
        }
    }

    #[test]
    fn validate_rejects_bad_name_with_the_name() {
        let err = map(&[("bad-name", "v")]).validate().unwrap_err();
        assert!(err.to_string().contains("bad-name"), "{err}");
    }

    #[test]
    fn validate_rejects_too_many() {
        let mut m = SecretMap::new();
        for i in 0..MAX_SECRETS {
            m.insert(format!("S{i}"), SecretString::from("value-long-enough".to_string()));
        }
        assert_eq!(m.validate(), Ok(()));
        m.insert("ONE_MORE", SecretString::from("value-long-enough".to_string()));
        assert_eq!(m.validate(), Err(SecretsError::TooMany { count: 51 }));
    }

    #[test]
    fn validate_rejects_oversize_value_without_echoing_it() {
        let big = "x".repeat(MAX_SECRET_VALUE_BYTES + 1);
        let err = map(&[("BIG", &big)]).validate().unwrap_err();
        let text = err.to_string();
        assert!(text.contains("BIG") && text.contains("65537"), "{text}");
        assert!(!text.contains("xxxx"));
        assert_eq!(map(&[("OK", &"x".repeat(MAX_SECRET_VALUE_BYTES))]).validate(), Ok(()));
    }

    #[test]
    fn validate_rejects_a_value_under_8_bytes_naming_the_secret_not_the_value() {
        for short in ["", "k", "1234567", "päss"] {
            let err = map(&[("PIN", short)]).validate().unwrap_err();
            assert_eq!(err, SecretsError::ValueTooShort { name: "PIN".into(), len: short.len() });
            let text = err.to_string();
            assert!(text.starts_with("secret PIN is too short: "), "{text}");
            assert!(text.contains("(at least 8)") && text.contains("cannot be redacted"), "{text}");
            if !short.is_empty() {
                assert!(!text.contains(short), "{text}");
            }
        }
        // 8 bytes, not 8 characters: "äöü" + 2 is 8 bytes.
        assert_eq!(map(&[("PIN", "12345678")]).validate(), Ok(()));
        assert_eq!(map(&[("PIN", "äöüab")]).validate(), Ok(()));
    }

    #[test]
    fn debug_shows_names_only() {
        let m = map(&[("API_KEY", "hunter2-value")]);
        let dbg = format!("{m:?}");
        assert!(dbg.contains("API_KEY"));
        assert!(!dbg.contains("hunter2"));
    }

    #[test]
    fn redactor_replaces_value_and_encoded_forms() {
        let value = "s3cr3t value/+?&";
        let r = redactor(&[("TOKEN", value)]);
        let b64 = STANDARD.encode(value);
        let b64url = URL_SAFE_NO_PAD.encode(value);
        let pct = utf8_percent_encode(value, NON_ALPHANUMERIC).to_string();
        let form = form_urlencode(value);
        let text = format!("a {value} b {b64} c {b64url} d {pct} e {form} f");
        let out = r.redact(&text);
        assert_eq!(out.matches("[REDACTED:TOKEN]").count(), 5, "{out}");
        assert!(!out.contains("s3cr3t"));
        assert!(out.starts_with("a ") && out.ends_with(" f"));
    }

    #[test]
    fn every_covered_form_is_redacted_whole() {
        let value = "p@ss \"wörd\"\\\n/+?&=~💡x";
        let r = redactor(&[("TOKEN", value)]);
        let bytes = value.as_bytes();
        let hex_lower: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let hex_mixed: String = hex_lower
            .chars()
            .enumerate()
            .map(|(i, c)| if i % 3 == 0 { c.to_ascii_uppercase() } else { c })
            .collect();
        let pct_upper = utf8_percent_encode(value, NON_ALPHANUMERIC).to_string();
        let forms = [
            ("raw", value.to_owned()),
            ("base64", STANDARD.encode(value)),
            ("base64 unpadded", STANDARD_NO_PAD.encode(value)),
            ("base64url", URL_SAFE.encode(value)),
            ("base64url unpadded", URL_SAFE_NO_PAD.encode(value)),
            ("percent upper", pct_upper.clone()),
            ("percent lower", pct_upper.replace("%2F", "%2f").replace("%C3%B6", "%c3%b6")),
            ("form", form_urlencode(value)),
            ("hex lower", hex_lower.clone()),
            ("hex upper", hex_lower.to_uppercase()),
            ("hex mixed", hex_mixed),
            ("json", json_inner(value)),
            ("json all \\u lower", json_all_escaped(value, false)),
            ("json all \\u upper", json_all_escaped(value, true)),
        ];
        for (what, form) in forms {
            let out = r.redact(&format!("<{form}>"));
            assert_eq!(out, "<[REDACTED:TOKEN]>", "{what}: {form:?}");
        }
    }

    /// HTML-escaped text (a page, a Telegram HTML message) carries a value past a scan that
    /// knows only the raw form: `&` as `&amp;`, quotes as `&quot;`/`&#39;`, or every
    /// character as a numeric reference.
    #[test]
    fn html_character_references_are_a_form() {
        let value = "tok&en<\"it's\">-42";
        let r = redactor(&[("TOKEN", value)]);
        let named = "tok&amp;en&lt;&quot;it&apos;s&quot;&gt;-42";
        let numeric = "tok&#38;en&#60;&#34;it&#39;s&#34;&#62;-42";
        let hex: String = value.chars().map(|c| format!("&#x{:X};", u32::from(c))).collect();
        let hex_lower: String = value.chars().map(|c| format!("&#x{:x};", u32::from(c))).collect();
        let mixed = "tok&amp;en&#x3C;&quot;it&#39;s&#X22;&gt;-42";
        for text in [named, numeric, &hex, &hex_lower, mixed] {
            assert_eq!(r.redact(&format!("<p>{text}</p>")), "<p>[REDACTED:TOKEN]</p>", "{text}");
        }
        // Not a reference: left as text, and a near miss is not redacted.
        assert_eq!(r.redact("tok&amp en"), "tok&amp en");
        let near = "tok&amp;en&lt;&quot;it&apos;s&quot;&gt;-43";
        assert_eq!(r.redact(near), near);
        // A stream cut inside a reference agrees with one piece.
        let text = format!("a {named} b");
        assert_every_cut_agrees(&Arc::new(r), &text, "a [REDACTED:TOKEN] b");
    }

    /// The text is decoded once, left to right, so an escape can swallow the first character
    /// of an encoded value right after it (`%E` + `a%5B…`, a stray `\\` + `\\u0062…`); the
    /// value without its first characters is looked for too, and counts where the text from
    /// inside that escape reads as them. Found by the property test once matching was linear.
    #[test]
    fn an_encoded_value_right_after_a_stray_escape_is_still_redacted() {
        let value = "ab[c\\d]e#f;gh";
        let r = Arc::new(redactor(&[("S", value)]));
        let pct = utf8_percent_encode(value, NON_ALPHANUMERIC).to_string();
        let json = json_all_escaped(value, false);
        for (before, form) in [("%E", &pct), ("%", &pct), ("\\", &json), ("x\\", &json)] {
            let text = format!("{before}{form} tail");
            let out = r.redact(&text);
            assert!(out.contains("REDACTED:S\u{27E7} tail"), "{text:?}: {out:?}");
            assert!(!out.contains(form.as_str()) && !out.contains("5B"), "{out:?}");
            assert_every_cut_agrees(&r, &text, &out);
        }
        // A tail alone, with no escape before it to have swallowed the head, is no match.
        let tail = &pct[1..];
        assert_eq!(r.redact(&format!("x {tail}")), format!("x {tail}"));
    }

    /// A percent-encoded invisible character (`%E2%80%8B`) is skipped like a raw one, and a
    /// value's own run of line breaks does not end its match.
    #[test]
    fn encoded_invisible_characters_and_a_values_own_line_breaks() {
        let r = redactor(&[("S", "a\u{200b}aaaaaaa"), ("L", "xy\n\n\n\nzwvu")]);
        assert_eq!(r.redact("a%E2%80%8Baaaaaaa"), "[REDACTED:S]");
        assert_eq!(r.redact("xy\n\n\n\nzwvu"), "[REDACTED:L]");
        assert_eq!(r.redact("xy\\n\\n\\n\\nzwvu"), "[REDACTED:L]");
    }

    /// The attack of issue 25: a periodic 64 KiB value against a 64 KiB text that repeats
    /// it almost to the end. Matching one needle at a time from every place ran each form
    /// tens of thousands of bytes from each of 65,536 places — about 80 s of one core, the
    /// daemon's exits stalled meanwhile. The matcher is now one automaton pass per view.
    /// The 20 s bound is only a hang guard (the old code does not finish in it), not a
    /// timing threshold.
    #[test]
    fn a_periodic_64_kib_value_against_a_64_kib_text_does_not_stall() {
        let value = format!("{}ac", "ab".repeat(32 * 1024 - 1));
        let text = "ab".repeat(32 * 1024);
        assert_eq!(value.len(), MAX_SECRET_VALUE_BYTES);
        let (tx, rx) = std::sync::mpsc::channel();
        let worker = {
            let (value, text) = (value.clone(), text.clone());
            std::thread::spawn(move || {
                let r = Arc::new(redactor(&[("PERIODIC", &value)]));
                let whole = r.redact(&text);
                let mut stream = r.stream();
                let mut streamed = Vec::new();
                for chunk in text.as_bytes().chunks(4096) {
                    streamed.extend(stream.push(chunk));
                }
                streamed.extend(stream.finish());
                let planted = r.redact(&format!("{}{value}", &text[..1000]));
                let _ = tx.send((whole, streamed, planted));
            })
        };
        let (whole, streamed, planted) = rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("redacting a periodic value hung (the old matcher took ~80 s)");
        worker.join().unwrap();
        assert_eq!(whole, text, "nothing of the value is in the text");
        assert_eq!(streamed, text.as_bytes());
        assert_eq!(planted, format!("{}[REDACTED:PERIODIC]", &text[..1000]));
    }

    #[test]
    fn percent_encoding_may_encode_any_byte_in_any_case() {
        let r = redactor(&[("K", "abc/def ghi")]);
        for text in ["abc%2Fdef+ghi", "abc%2fdef%20ghi", "%61bc/def ghi", "abc%2fd%65f%20g%68i"] {
            assert_eq!(r.redact(text), "[REDACTED:K]", "{text}");
        }
    }

    #[test]
    fn base64_inside_a_longer_blob_at_any_offset() {
        let value = "hunter2-secret";
        let r = redactor(&[("PASS", value)]);
        for prefix in ["", "u:", "us:", "user:"] {
            for suffix in ["", "\n", "!!", "tail"] {
                let whole = format!("{prefix}{value}{suffix}");
                for text in [STANDARD.encode(&whole), URL_SAFE_NO_PAD.encode(&whole)] {
                    let out = r.redact(&text);
                    assert!(out.contains("[REDACTED:PASS]"), "{whole:?} as {text}: {out}");
                    // What is left is at most the few characters that also encode the
                    // neighbours, never enough to decode any of the value.
                    let left = out.replace("[REDACTED:PASS]", "");
                    assert!(
                        left.len() <= 4 * (prefix.len() + suffix.len()).div_ceil(3) + 4,
                        "{out}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_value_cut_across_lines_or_by_invisible_characters_is_one_match() {
        let value = "tok-0123456789abcdef";
        let r = redactor(&[("TOKEN", value)]);
        let texts = [
            "tok-01234\n56789abcdef".to_owned(),
            "tok-01234\r\n56789abcdef".to_owned(),
            "tok-\u{200B}0123456789\u{00AD}abc\u{2060}def".to_owned(),
            "tok-01234\\n56789abcdef".to_owned(),
        ];
        for text in texts {
            assert_eq!(r.redact(&format!("a {text} b")), "a [REDACTED:TOKEN] b", "{text:?}");
        }
        // base64 wrapped at 76 columns, as `base64` prints a long value.
        let long = "k".repeat(120);
        let r = redactor(&[("LONG", &long)]);
        let encoded = STANDARD.encode(&long);
        let wrapped: Vec<&str> =
            encoded.as_bytes().chunks(76).map(|c| std::str::from_utf8(c).unwrap()).collect();
        assert_eq!(r.redact(&wrapped.join("\n")), "[REDACTED:LONG]");
        // A line break cannot start a match.
        assert_eq!(r.redact(&format!("\n{long}")), "\n[REDACTED:LONG]");
    }

    #[test]
    fn a_one_character_secret_never_nests_markers() {
        // Before: `A` became `[REDACTED:A]`, whose own `A`s were redacted again by the next
        // pass (the stdout writer redacts twice), four markers deep.
        let r = redactor(&[("A", "A")]);
        let once = r.redact("A");
        assert_eq!(once, "[REDACTED:A]");
        assert_eq!(r.redact(&once), once);
        assert_eq!(r.redact(&r.redact(&once)), once);
        let text = "A [REDACTED:API_KEY] [REDACTED] [REDACTED:llm_token] A";
        let out = r.redact(text);
        assert_eq!(
            out,
            "[REDACTED:A] [REDACTED:API_KEY] [REDACTED] [REDACTED:llm_token] [REDACTED:A]"
        );
        assert_eq!(out.matches("[REDACTED").count(), 5, "{out}");
        assert_eq!(r.redact(&out), out);
    }

    #[test]
    fn redaction_is_idempotent_and_two_redactors_do_not_nest() {
        let task = redactor(&[("API_KEY", "sk-live-0123456789"), ("llm_token", "tok-abcdefgh")]);
        let idle = redactor(&[("llm_api_key", "K")]);
        let text = "key sk-live-0123456789 token tok-abcdefgh and K";
        let once = idle.redact(&task.redact(text));
        assert_eq!(
            once,
            "key [REDACTED:API_KEY] token [REDACTED:llm_token] and [REDACTED:llm_api_key]"
        );
        assert_eq!(task.redact(&once), once);
        assert_eq!(idle.redact(&once), once);
    }

    #[test]
    fn a_marker_that_carries_the_value_is_still_redacted() {
        let r = redactor(&[("K", "TOPSECRETVALUE")]);
        let out = r.redact("[REDACTED:TOPSECRETVALUE] and [REDACTED:TOPSECRETVALUEX]");
        assert!(!out.contains("TOPSECRET"), "{out}");
        assert_eq!(out, "[REDACTED:K] and [REDACTED:K]");
    }

    #[test]
    fn labels_never_show_a_value() {
        // A value that a named label would contain makes every label plain.
        let r = redactor(&[("API_KEY_VALUE", "secret-1"), ("K", "API_KEY_VALUE")]);
        let out = r.redact("secret-1 API_KEY_VALUE");
        assert_eq!(out, "[REDACTED] [REDACTED]");
        // A value a plain label contains leaves the last resort.
        let r = redactor(&[("K", "REDACTED")]);
        assert_eq!(r.redact("a REDACTED b [REDACTED] c"), "a [X] b [X] c");
        assert_eq!(r.redact("[X]"), "[X]");
    }

    #[test]
    fn a_value_with_brackets_cannot_be_completed_by_a_label() {
        // Redacting `xy` next to `[REDACTED:K` must not leave the other value whole.
        let r = redactor(&[("K", "secret-k"), ("B", "ab[REDACTED:K]cd")]);
        for text in ["ab secret-k cd", "absecret-kcd", "ab[secret-k]cd", "ab[REDACTED:K]cd"] {
            let out = r.redact(text);
            assert!(!out.contains("ab[REDACTED:K]cd") && !out.contains("secret-k"), "{out}");
            assert_eq!(r.redact(&out), out);
        }
    }

    #[test]
    fn adjacent_matches_stay_two_markers_in_one_piece_and_in_a_stream() {
        // Found by fuzzing (redactor): a match right before a marker that carries a value was
        // merged with it in one piece but not when a stream cut between them.
        let r = Arc::new(redactor(&[("SECRET", "REDACTED")]));
        let text = "\u{18}UkVEQUNURUQ=[REDACTED:A] [REDACTED]  [X]";
        let whole = r.redact(text);
        assert_eq!(whole, "\u{18}[X][X] [X]  [X]");
        assert_every_cut_agrees(&r, text, &whole);
    }

    #[test]
    fn a_label_never_completes_a_short_value_with_brackets_across_a_stream_cut() {
        // Found by fuzzing (redactor): with the key `A[R`, `…[REDA` + `[REDACTED:SECRET]`
        // spelled the key. One piece was redacted again; a stream had already sent `…[REDA`.
        // Labels now use brackets no value contains.
        let secret = "p\u{FFFD}\u{3}\u{8}RED\u{1}\u{18}ACET";
        let r = Arc::new(redactor(&[("SECRET", secret), ("llm_api_key", "A[R")]));
        let pct = utf8_percent_encode(secret, NON_ALPHANUMERIC).to_string();
        let text = format!("ssEDACTED:A] [REDA{pct}");
        let whole = r.redact(&text);
        assert_eq!(whole, "ssEDACTED:A] [REDA\u{27E6}REDACTED:SECRET\u{27E7}");
        assert_every_cut_agrees(&r, &text, &whole);
        // Foreign square-bracket markers are still markers.
        assert_eq!(
            r.redact("[REDACTED:X] A[R"),
            "[REDACTED:X] \u{27E6}REDACTED:llm_api_key\u{27E7}"
        );
    }

    #[test]
    fn a_match_that_ends_in_a_marker_cut_by_the_stream_waits_for_all_of_it() {
        // Found by fuzzing (redactor): the key ` [` takes in the marker `[REDACTED]` it ends
        // in; a stream cut inside the marker sent its rest (`REDACTED]`) on its own.
        let r = Arc::new(redactor(&[("SECRET", "RECTAED]"), ("llm_api_key", " [")]));
        let text = "x\u{1a} [REDACTED]  [X]";
        let whole = r.redact(text);
        assert_eq!(
            whole,
            "x\u{1a}\u{27E6}REDACTED:llm_api_key\u{27E7} \u{27E6}REDACTED:llm_api_key\u{27E7}X]"
        );
        assert_every_cut_agrees(&r, text, &whole);
    }

    #[test]
    fn a_match_never_runs_longer_than_the_longest_form_so_a_stream_agrees() {
        // Found by fuzzing (redactor): a value starting with `\r\r\r`, after 13 `\r`s, was
        // matched from the first one (the other ten skipped as line breaks), longer than a
        // stream holds back; the stream matched from the tenth. A match now takes at most the
        // longest form's length, line breaks included.
        let secret = "\r\r\rABTED\u{1}A\u{18}\u{1}A";
        let r = Arc::new(redactor(&[("SECRET", secret), ("llm_api_key", "[RE\r")]));
        let escaped: String = secret.chars().map(|c| format!("\\u{:04X}", u32::from(c))).collect();
        let text = format!("{}{escaped}\r?", "\r".repeat(13));
        let whole = r.redact(&text);
        assert!(!whole.contains("\\u0041"), "{whole:?}");
        assert_every_cut_agrees(&r, &text, &whole);
        // Line breaks inside a match still count, up to the limit.
        let r = redactor(&[("K", "0123456789")]);
        assert_eq!(r.redact("01234\n\n56789"), "[REDACTED:K]");
        let many = format!("01234{}56789", "\n".repeat(200));
        assert_eq!(r.redact(&many), many);
    }

    #[test]
    fn redactor_prefers_longer_secret() {
        let r = redactor(&[("SHORT", "abc"), ("LONG", "abcdef")]);
        assert_eq!(r.redact("xabcdefx abc"), "x[REDACTED:LONG]x [REDACTED:SHORT]");
        let r = redactor(&[("SHORT", "abcdefgh"), ("LONG", "abcdefghijkl")]);
        assert_eq!(r.redact("abcdefghijkl abcdefgh"), "[REDACTED:LONG] [REDACTED:SHORT]");
    }

    #[test]
    fn short_values_are_redacted_raw_only() {
        // Only LLM credentials can be this short (secrets are refused); their hex or base64
        // would be two or four characters found in any text.
        let r = redactor(&[("llm_api_key", "ab")]);
        assert_eq!(r.redact("ab 6162 YWI="), "[REDACTED:llm_api_key] 6162 YWI=");
    }

    #[test]
    fn redactor_debug_hides_needles() {
        let r = redactor(&[("K", "topsecretvalue")]);
        assert!(!format!("{r:?}").contains("topsecret"));
        assert!(!format!("{:?}", Arc::new(r).stream()).contains("topsecret"));
    }

    #[test]
    fn empty_redactor_changes_nothing() {
        let r = Redactor::default();
        assert!(r.is_empty());
        assert_eq!(r.redact("[REDACTED:X] text"), "[REDACTED:X] text");
        let mut stream = Arc::new(r).stream();
        assert_eq!(stream.push(b"abc"), b"abc");
        assert_eq!(stream.held(), 0);
    }

    #[test]
    fn a_stream_cut_anywhere_redacts_like_one_piece() {
        let value = "str3am-s3cret\"value";
        let r = Arc::new(redactor(&[("S", value), ("llm_token", "k")]));
        let text = format!(
            "one {value} two {} three {} four {}\nfive [REDACTED:S] k six {}",
            STANDARD.encode(value),
            json_inner(value),
            utf8_percent_encode(value, NON_ALPHANUMERIC),
            "tail"
        );
        let whole = r.redact_bytes(text.as_bytes());
        assert!(!String::from_utf8_lossy(&whole).contains("s3cret"));
        let bytes = text.as_bytes();
        for cut in 0..=bytes.len() {
            let mut stream = r.stream();
            let mut out = stream.push(&bytes[..cut]);
            assert!(stream.held() <= r.holdback(), "held {} at {cut}", stream.held());
            out.extend(stream.push(&bytes[cut..]));
            assert!(stream.held() <= r.holdback());
            out.extend(stream.finish());
            assert_eq!(stream.held(), 0);
            assert_eq!(out, whole, "cut at {cut}");
        }
        // One byte at a time.
        let mut stream = r.stream();
        let mut out = Vec::new();
        for b in bytes {
            out.extend(stream.push(std::slice::from_ref(b)));
            assert!(stream.held() <= r.holdback());
        }
        out.extend(stream.finish());
        assert_eq!(out, whole);
    }

    #[test]
    fn a_stream_holds_back_only_a_possible_beginning() {
        let r = Arc::new(redactor(&[("S", "stream-secret")]));
        let mut stream = r.stream();
        assert_eq!(stream.push(b"plain text, nothing to hide\n"), b"plain text, nothing to hide\n");
        assert_eq!(stream.held(), 0);
        assert_eq!(stream.push(b"and then stream-se"), b"and then ");
        assert_eq!(stream.held(), "stream-se".len());
        assert_eq!(stream.push(b"cret!"), b"[REDACTED:S]!");
        assert_eq!(stream.push(b"stream-sea"), b"stream-sea");
        assert!(r.holdback() >= "stream-secret".len() * 6 - 1);
    }
}
