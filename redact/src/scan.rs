//! The matcher behind [`crate::Redactor`]: linear in the text, whatever the number
//! and shape of the secrets.
//!
//! Why this shape: the forms a value takes (raw, base64, hex, percent-, JSON- and
//! HTML-escaped, cut by line breaks or invisible characters) used to be matched one needle
//! at a time from every text position, so a periodic 64 KiB value against a 64 KiB text
//! took minutes. Here the text is decoded once per *view* (raw, hex case-folded, percent-,
//! JSON- and HTML-decoded, each without its line breaks and invisible characters), and one
//! Aho-Corasick automaton per view (the `aho-corasick` crate) finds, in one pass over the
//! view read backwards, the longest needle that starts at each place. A second automaton per
//! view, read forwards over a stream's tail, tells where a needle may have begun and not
//! ended (what a stream must hold back). Both passes are one automaton step a byte.
//!
//! The crate gives the transitions; the per-state tables this needs (a state's depth, its
//! failure state, the longest needle ending there, whether it has children) are computed
//! here once per redactor by walking each needle through the automaton.
//!
//! A match may skip at most [`MAX_TRANSPARENT_RUN`] line breaks or invisible characters in a
//! row (or as many as a value itself holds in a row): a longer run ends it. That bounds the text one match can take, so a stream that
//! holds back that much redacts as one piece does.

use aho_corasick::automaton::{Automaton, StateID};
use aho_corasick::nfa::noncontiguous::NFA;
use aho_corasick::{Anchored, MatchKind};
use zeroize::Zeroizing;

use crate::is_invisible_char;

/// Line breaks or invisible characters in a row that a match skips (unless a value holds a
/// longer run); a longer run ends it.
pub(crate) const MAX_TRANSPARENT_RUN: usize = 2;

/// The longest run of line breaks or invisible characters in `value`.
pub(crate) fn longest_run(value: &[u8]) -> usize {
    let (mut i, mut run, mut longest) = (0, 0, 0);
    while i < value.len() {
        match transparent_at(value, i) {
            Some(Some(len)) => {
                run += 1;
                longest = longest.max(run);
                i += len;
            }
            _ => {
                run = 0;
                i += 1;
            }
        }
    }
    longest
}
/// The longest HTML entity decoded (`&#x0001F4A1;` is 12 bytes); a longer one is text.
const MAX_ENTITY_LEN: usize = 12;
/// A stream's cut may move back this far, to the start of an escape it fell into.
pub(crate) const ALIGN_SLACK: usize = 12;

/// How text is decoded before needles are looked for in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum View {
    /// Byte for byte (the raw value, its base64 forms).
    Exact,
    /// ASCII letters folded to lower case (hex in any case).
    Hex,
    /// `%XX` (either case) decoded; `+` and space both read as space.
    Percent,
    /// As inside a JSON string: `\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`, `\t`, `\uXXXX` in
    /// either case, surrogate pairs.
    Json,
    /// HTML character references: `&amp;` `&lt;` `&gt;` `&quot;` `&apos;`, and numeric ones
    /// (`&#39;`, `&#x27;`, any character, either case, at most [`MAX_ENTITY_LEN`] bytes).
    Html,
}

pub(crate) const VIEWS: [View; 5] = [View::Exact, View::Hex, View::Percent, View::Json, View::Html];

impl View {
    /// The most text bytes one view byte of a match can take: its own unit, and the run of
    /// skipped characters before the next one.
    pub(crate) fn expansion(self, max_run: usize) -> usize {
        let (unit, skipped) = match self {
            View::Exact | View::Hex => (1, 4),
            View::Percent => (3, 4),
            View::Json => (6, 12),
            View::Html => (MAX_ENTITY_LEN, MAX_ENTITY_LEN),
        };
        unit + max_run * skipped
    }

    /// Whether this view may read `text` differently from [`View::Exact`]: only where the text
    /// holds one of its escape characters. Otherwise the exact view's decoding is reused.
    pub(crate) fn differs(self, text: &[u8]) -> bool {
        match self {
            View::Exact => false,
            View::Hex => true,
            View::Percent => memchr::memchr2(b'%', b'+', text).is_some(),
            View::Json => memchr::memchr(b'\\', text).is_some(),
            View::Html => memchr::memchr(b'&', text).is_some(),
        }
    }

    /// A value's bytes as this view reads them: without line breaks and invisible characters
    /// (which a view skips), and with `+` as space for [`View::Percent`]. Hex needles are
    /// already lower case.
    pub(crate) fn normalize(self, value: &[u8]) -> Zeroizing<Vec<u8>> {
        let mut out = Zeroizing::new(Vec::with_capacity(value.len()));
        let mut i = 0;
        while i < value.len() {
            match transparent_at(value, i) {
                Some(Some(len)) => i += len,
                _ => {
                    let b = value[i];
                    out.push(if self == View::Percent && b == b'+' { b' ' } else { b });
                    i += 1;
                }
            }
        }
        out
    }
}

/// A text as one view reads it: each byte with the text range of the unit it came from.
#[derive(Default)]
pub(crate) struct Decoded {
    pub(crate) bytes: Zeroizing<Vec<u8>>,
    pub(crate) starts: Vec<u32>,
    pub(crate) ends: Vec<u32>,
    /// More than the redactor's run of skipped characters lie before this byte.
    pub(crate) broken: Vec<bool>,
    /// Units longer than one byte (escapes, characters), in order: a stream is never cut
    /// inside one.
    pub(crate) wide: Vec<(u32, u32)>,
    /// Where the text ends inside what may be an escape (a stream must wait for its end).
    pub(crate) incomplete: Option<usize>,
}

enum Step {
    Unit { bytes: [u8; 4], len: usize, used: usize, skipped: bool },
    Incomplete,
}

impl Step {
    fn literal(b: u8) -> Self {
        Step::Unit { bytes: [b, 0, 0, 0], len: 1, used: 1, skipped: false }
    }
    fn decoded(bytes: &[u8], used: usize) -> Self {
        let mut buf = [0; 4];
        buf[..bytes.len()].copy_from_slice(bytes);
        Step::Unit { bytes: buf, len: bytes.len(), used, skipped: is_transparent(bytes) }
    }
}

/// Decodes `text` as `view` reads it. With `at_end` false an escape cut by the end of the
/// text stops the view there (`incomplete`); with it true it is read as plain text.
pub(crate) fn decode(view: View, text: &[u8], at_end: bool, max_run: usize) -> Decoded {
    let mut d = Decoded::default();
    d.bytes.reserve(text.len());
    d.starts.reserve(text.len());
    d.ends.reserve(text.len());
    d.broken.reserve(text.len());
    let (mut i, mut run) = (0, 0);
    while i < text.len() {
        match unit(view, text, i, at_end) {
            Step::Incomplete => {
                d.incomplete = Some(i);
                break;
            }
            Step::Unit { bytes, len, used, skipped } => {
                if used > 1 {
                    d.wide.push((i as u32, (i + used) as u32));
                }
                if skipped {
                    run += 1;
                } else {
                    for (k, &b) in bytes[..len].iter().enumerate() {
                        d.bytes.push(b);
                        d.starts.push(i as u32);
                        d.ends.push((i + used) as u32);
                        d.broken.push(k == 0 && run > max_run);
                    }
                    run = 0;
                }
                i += used;
            }
        }
    }
    d
}

/// How far before a tail needle its head may begin in `view`: each dropped byte's unit with the
/// run of skipped characters after it, and one more run before the first (a head read from
/// inside an escape may first read escaped line breaks).
pub(crate) fn head_window(view: View, max_run: usize, dropped: usize) -> usize {
    (dropped + 1) * view.expansion(max_run)
}

/// Where a tail needle's head begins: the tail matched from `start`, and `dropped` (its
/// value's first bytes) must be what the text decodes to, read afresh from a place strictly
/// inside an escape of `d` (the left-to-right reading swallowed it) up to `start`.
pub(crate) fn swallowed_head(
    view: View,
    text: &[u8],
    d: &Decoded,
    (start, max_run): (usize, usize),
    dropped: &[u8],
) -> Option<usize> {
    let from = start.saturating_sub(head_window(view, max_run, dropped.len()));
    // Only the escapes that reach into the window: a place strictly inside one of them.
    let first = d.wide.partition_point(|&(_, end)| (end as usize) <= from);
    d.wide[first..].iter().take_while(|&&(s, _)| (s as usize) < start).find_map(|&(s, e)| {
        let inside = (s as usize + 1).max(from)..(e as usize).min(start);
        inside.into_iter().find(|&x| decodes_to(view, text, x, start, dropped))
    })
}

/// The start of the first escape (wide unit) of `d` that begins before `at` and ends less
/// than `window` bytes before it: from there on, a tail needle matched at `at` may have its
/// head.
pub(crate) fn escape_before(d: &Decoded, at: usize, window: usize) -> Option<usize> {
    let i = d.wide.partition_point(|&(_, end)| (end as usize) + window <= at);
    let (start, _) = *d.wide.get(i)?;
    ((start as usize) < at).then_some(start as usize)
}

/// Whether `text[from..to]`, read as `view` reads it, is exactly `want`.
fn decodes_to(view: View, text: &[u8], from: usize, to: usize, want: &[u8]) -> bool {
    let (mut i, mut got) = (from, Zeroizing::new(Vec::with_capacity(want.len())));
    while i < to {
        match unit(view, &text[..to], i, true) {
            Step::Unit { bytes, len, used, skipped } => {
                if !skipped {
                    got.extend_from_slice(&bytes[..len]);
                }
                i += used;
            }
            Step::Incomplete => return false,
        }
    }
    i == to && *got == want
}

/// The unit of `text` at `i` in `view`.
fn unit(view: View, text: &[u8], i: usize, at_end: bool) -> Step {
    let b = text[i];
    let wait = |literal: u8| if at_end { Step::literal(literal) } else { Step::Incomplete };
    match (view, b) {
        (View::Percent, b'%') => {
            let digits = &text[i + 1..text.len().min(i + 3)];
            if !digits.iter().all(u8::is_ascii_hexdigit) {
                return Step::literal(b);
            }
            if digits.len() < 2 {
                return wait(b);
            }
            let byte = hex_value(digits[0]) << 4 | hex_value(digits[1]);
            match percent_char(text, i, byte) {
                Ok(Some(used)) => Step::Unit { bytes: [0; 4], len: 0, used, skipped: true },
                Err(()) if !at_end => Step::Incomplete,
                _ => Step::decoded(&[if byte == b'+' { b' ' } else { byte }], 3),
            }
        }
        (View::Percent, b'+') => Step::literal(b' '),
        (View::Json, b'\\') => {
            let Some(&kind) = text.get(i + 1) else {
                return wait(b);
            };
            let short = match kind {
                b'"' => b'"',
                b'\\' => b'\\',
                b'/' => b'/',
                b'b' => 0x08,
                b'f' => 0x0C,
                b'n' => b'\n',
                b'r' => b'\r',
                b't' => b'\t',
                b'u' => return json_u(text, i, at_end),
                _ => return Step::literal(b),
            };
            Step::decoded(&[short], 2)
        }
        (View::Html, b'&') => entity(text, i, at_end),
        (View::Hex, _) if b.is_ascii() && !matches!(b, b'\n' | b'\r') => {
            Step::literal(b.to_ascii_lowercase())
        }
        _ => match transparent_at(text, i) {
            Some(Some(used)) => Step::Unit { bytes: [0; 4], len: 0, used, skipped: true },
            Some(None) if !at_end => Step::Incomplete,
            _ => Step::literal(b),
        },
    }
}

/// An invisible character percent-encoded byte by byte (`%E2%80%8B`) starting with the escape
/// at `i` (decoded: `lead`): how many text bytes it takes. Its bytes one by one are not
/// invisible, so without this a match would not skip it. `Err` when the text ends inside it.
fn percent_char(text: &[u8], i: usize, lead: u8) -> Result<Option<usize>, ()> {
    let len = match lead {
        0xC2..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF4 => 4,
        _ => return Ok(None),
    };
    let mut bytes = [lead, 0, 0, 0];
    for (k, byte) in bytes.iter_mut().enumerate().take(len).skip(1) {
        let at = i + 3 * k;
        let escape = &text[at.min(text.len())..(at + 3).min(text.len())];
        if !b"%".starts_with(&escape[..escape.len().min(1)])
            || !escape.iter().skip(1).all(u8::is_ascii_hexdigit)
        {
            return Ok(None);
        }
        if escape.len() < 3 {
            return Err(());
        }
        *byte = hex_value(escape[1]) << 4 | hex_value(escape[2]);
    }
    Ok(is_transparent(&bytes[..len]).then_some(3 * len))
}

/// `\uXXXX` at `i` (with a following `\uXXXX` for a surrogate pair); a malformed one is a
/// literal backslash.
fn json_u(text: &[u8], i: usize, at_end: bool) -> Step {
    let wait = || if at_end { Step::literal(b'\\') } else { Step::Incomplete };
    let first = match hex4(text, i + 2) {
        Hex4::Value(v) => v,
        Hex4::Short => return wait(),
        Hex4::Bad => return Step::literal(b'\\'),
    };
    let (c, used) = match first {
        0xD800..=0xDBFF => {
            let marks = text.get(i + 6..(i + 8).min(text.len())).unwrap_or_default();
            if marks.len() < 2 {
                return if b"\\u".starts_with(marks) { wait() } else { Step::literal(b'\\') };
            }
            if marks != b"\\u" {
                return Step::literal(b'\\');
            }
            let low = match hex4(text, i + 8) {
                Hex4::Value(v @ 0xDC00..=0xDFFF) => v,
                Hex4::Short => return wait(),
                _ => return Step::literal(b'\\'),
            };
            (char::from_u32(0x10000 + ((first - 0xD800) << 10) + (low - 0xDC00)), 12)
        }
        0xDC00..=0xDFFF => (None, 6),
        _ => (char::from_u32(first), 6),
    };
    let Some(c) = c else {
        return Step::literal(b'\\');
    };
    let mut buf = [0u8; 4];
    Step::decoded(c.encode_utf8(&mut buf).as_bytes(), used)
}

/// An HTML character reference at `i` (`&amp;`, `&#39;`, `&#x1F4A1;`); anything else is a
/// literal `&`.
fn entity(text: &[u8], i: usize, at_end: bool) -> Step {
    let window = &text[i + 1..text.len().min(i + MAX_ENTITY_LEN)];
    let Some(semi) = window.iter().position(|&b| b == b';') else {
        let entity_like = window.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'#');
        let cut = i + MAX_ENTITY_LEN > text.len();
        return if cut && entity_like && !at_end { Step::Incomplete } else { Step::literal(b'&') };
    };
    let body = &window[..semi];
    let c = match body {
        b"amp" => Some('&'),
        b"lt" => Some('<'),
        b"gt" => Some('>'),
        b"quot" => Some('"'),
        b"apos" => Some('\''),
        [b'#', b'x' | b'X', hex @ ..]
            if !hex.is_empty() && hex.iter().all(u8::is_ascii_hexdigit) =>
        {
            hex.iter()
                .try_fold(0u32, |acc, d| acc.checked_mul(16)?.checked_add(u32::from(hex_value(*d))))
                .and_then(char::from_u32)
        }
        [b'#', dec @ ..] if !dec.is_empty() && dec.iter().all(u8::is_ascii_digit) => dec
            .iter()
            .try_fold(0u32, |acc, d| acc.checked_mul(10)?.checked_add(u32::from(d - b'0')))
            .and_then(char::from_u32),
        _ => None,
    };
    match c {
        Some(c) if c != '\0' => {
            let mut buf = [0u8; 4];
            Step::decoded(c.encode_utf8(&mut buf).as_bytes(), semi + 2)
        }
        _ => Step::literal(b'&'),
    }
}

enum Hex4 {
    Value(u32),
    /// The text ends before four digits (all hex so far).
    Short,
    Bad,
}

fn hex4(text: &[u8], at: usize) -> Hex4 {
    let digits = text.get(at..(at + 4).min(text.len())).unwrap_or_default();
    if !digits.iter().all(u8::is_ascii_hexdigit) {
        return Hex4::Bad;
    }
    if digits.len() < 4 {
        return Hex4::Short;
    }
    Hex4::Value(digits.iter().fold(0, |acc, d| acc << 4 | u32::from(hex_value(*d))))
}

fn hex_value(digit: u8) -> u8 {
    match digit {
        b'0'..=b'9' => digit - b'0',
        b'a'..=b'f' => digit - b'a' + 10,
        _ => digit - b'A' + 10,
    }
}

/// Decoded bytes that a match skips: a line break or an invisible character.
fn is_transparent(bytes: &[u8]) -> bool {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| {
            let mut chars = s.chars();
            let c = chars.next()?;
            chars.next().is_none().then_some(c)
        })
        .is_some_and(|c| c == '\n' || c == '\r' || is_invisible_char(c))
}

/// A line break or invisible character at `i`: `Some(Some(len))`; `Some(None)` when the text
/// ends inside a character that might be one; `None` otherwise.
pub(crate) fn transparent_at(text: &[u8], i: usize) -> Option<Option<usize>> {
    let len = match text[i] {
        b'\n' | b'\r' => return Some(Some(1)),
        0xC2..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF4 => 4,
        _ => return None,
    };
    let Some(bytes) = text.get(i..i + len) else {
        return Some(None);
    };
    is_transparent(bytes).then_some(Some(len))
}

const NONE: u32 = u32::MAX;

/// One Aho-Corasick automaton over a view's needles, with the per-state tables the matcher
/// needs. `reversed`: built over the needles read backwards, to find the longest needle that
/// *starts* at each place; otherwise forwards, to find where a needle may have begun.
pub(crate) struct Trie {
    nfa: NFA,
    start: StateID,
    /// Per state: its depth (forward) — how many bytes of a needle it has seen.
    depth: Vec<u32>,
    /// Per state: its failure state (forward), for the chain of partial matches.
    fail: Vec<StateID>,
    /// Per state: some needle goes on past it (forward).
    prefix: Vec<bool>,
    /// Per state: the longest needle that ends here, own or by a failure link (reversed).
    out: Vec<u32>,
    /// Every needle that ends at each state (reversed, built with `every`): needles of equal
    /// bytes and shorter ones too, for tail needles, whose match still depends on the text
    /// before them.
    every: Option<Every>,
}

/// Every needle ending at a state: its own (a list, since tail needles of two values can have
/// the same bytes and different heads), then those of the states its dictionary links reach.
struct Every {
    /// Per state: the first of its own needles in `chain`, or `NONE`.
    first: Vec<u32>,
    /// (needle index, next in the same state's list or `NONE`).
    chain: Vec<(u32, u32)>,
    /// Per state: the nearest state on its failure chain with needles of its own, or `NONE`.
    dict: Vec<u32>,
}

impl std::fmt::Debug for Trie {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trie").field("states", &self.depth.len().max(self.out.len())).finish()
    }
}

/// Why a redactor could not be built: more needle bytes than an automaton can index.
#[derive(Debug)]
pub(crate) struct TooLarge;

impl Trie {
    /// `needles`: (bytes, index), in priority order (the first of equal length wins a tie
    /// elsewhere, so each needle keeps its index; of equal bytes the first is `out`'s).
    /// `every`: also keep every needle of each state, for [`Trie::every_start`].
    pub(crate) fn build(
        needles: &[(&[u8], u32)],
        reversed: bool,
        every: bool,
    ) -> Result<Self, TooLarge> {
        let patterns: Vec<Zeroizing<Vec<u8>>> = needles
            .iter()
            .map(|(bytes, _)| {
                let mut p = Zeroizing::new(bytes.to_vec());
                if reversed {
                    p.reverse();
                }
                p
            })
            .collect();
        let nfa = NFA::builder()
            .match_kind(MatchKind::Standard)
            .prefilter(false)
            .dense_depth(1)
            .build(patterns.iter().map(|p| p.as_slice()))
            .map_err(|_| TooLarge)?;
        let start = nfa.start_state(Anchored::No).map_err(|_| TooLarge)?;
        // Walk every needle: each state it passes is the trie node of that prefix.
        let mut parent: Vec<(u32, u8)> = Vec::new();
        let mut depth: Vec<u32> = Vec::new();
        let mut prefix: Vec<bool> = Vec::new();
        let mut own: Vec<u32> = Vec::new();
        let grow = |v: &mut Vec<u32>, at: usize, fill: u32| {
            if v.len() <= at {
                v.resize(at + 1, fill);
            }
        };
        let mut order: Vec<u32> = Vec::new();
        let mut chain: Vec<(u32, u32)> = Vec::new();
        let mut first: Vec<u32> = Vec::new();
        grow(&mut depth, start.as_usize(), NONE);
        depth[start.as_usize()] = 0;
        for (pattern, (_, index)) in patterns.iter().zip(needles) {
            let mut s = start;
            for (k, &b) in pattern.iter().enumerate() {
                let next = nfa.next_state(Anchored::No, s, b);
                let at = next.as_usize();
                grow(&mut depth, at, NONE);
                if parent.len() <= at {
                    parent.resize(at + 1, (NONE, 0));
                }
                if prefix.len() <= s.as_usize() {
                    prefix.resize(s.as_usize() + 1, false);
                }
                prefix[s.as_usize()] = true;
                if depth[at] == NONE {
                    depth[at] = (k + 1) as u32;
                    parent[at] = (s.as_usize() as u32, b);
                    order.push(at as u32);
                }
                s = next;
            }
            grow(&mut own, s.as_usize(), NONE);
            if own[s.as_usize()] == NONE {
                own[s.as_usize()] = *index;
            }
            if every {
                grow(&mut first, s.as_usize(), NONE);
                chain.push((*index, first[s.as_usize()]));
                first[s.as_usize()] = (chain.len() - 1) as u32;
            }
        }
        let states = depth.len().max(parent.len()).max(own.len()).max(prefix.len());
        depth.resize(states, 0);
        prefix.resize(states, false);
        own.resize(states, NONE);
        // Breadth first: a state's failure state is shallower, so it is done before.
        order.sort_by_key(|&s| depth[s as usize]);
        let mut fail = vec![start; states];
        let mut out = if reversed { vec![NONE; states] } else { Vec::new() };
        first.resize(if every { states } else { 0 }, NONE);
        let mut dict = vec![NONE; first.len()];
        for &s in &order {
            let s = s as usize;
            let (p, b) = parent[s];
            let f = if p as usize == start.as_usize() {
                start
            } else {
                nfa.next_state(Anchored::No, fail[p as usize], b)
            };
            fail[s] = f;
            if reversed {
                out[s] = if own[s] != NONE { own[s] } else { out[f.as_usize()] };
            }
            if every {
                let f = f.as_usize();
                dict[s] = if first[f] != NONE { f as u32 } else { dict[f] };
            }
        }
        let every = every.then_some(Every { first, chain, dict });
        if reversed {
            let (depth, fail, prefix) = (Vec::new(), Vec::new(), Vec::new());
            Ok(Self { nfa, start, depth, fail, prefix, out, every })
        } else {
            Ok(Self { nfa, start, depth, fail, prefix, out, every })
        }
    }

    /// For each byte of `d`, the longest needle starting there (`NONE` if none): reads the
    /// view backwards, one step a byte; a run of skipped characters ends a match.
    pub(crate) fn longest_starts(&self, d: &Decoded, mut found: impl FnMut(usize, u32)) {
        let mut s = self.start;
        for i in (0..d.bytes.len()).rev() {
            if d.broken.get(i + 1).copied().unwrap_or(false) {
                s = self.start;
            }
            s = self.nfa.next_state(Anchored::No, s, d.bytes[i]);
            let needle = self.out[s.as_usize()];
            if needle != NONE {
                found(i, needle);
            }
        }
    }

    /// For each byte of `d`, every needle starting there, longest first (of a trie built with
    /// `every`; otherwise only the longest): reads the view backwards, one step a byte.
    pub(crate) fn every_start(&self, d: &Decoded, mut found: impl FnMut(usize, u32)) {
        let Some(every) = &self.every else {
            return self.longest_starts(d, found);
        };
        let mut s = self.start;
        for i in (0..d.bytes.len()).rev() {
            if d.broken.get(i + 1).copied().unwrap_or(false) {
                s = self.start;
            }
            s = self.nfa.next_state(Anchored::No, s, d.bytes[i]);
            let own = s.as_usize() as u32;
            let mut state =
                if every.first[own as usize] != NONE { own } else { every.dict[own as usize] };
            while state != NONE {
                let mut link = every.first[state as usize];
                while link != NONE {
                    let (needle, next) = every.chain[link as usize];
                    found(i, needle);
                    link = next;
                }
                state = every.dict[state as usize];
            }
        }
    }

    /// Each view index at or after `from` where a needle may have begun and not ended by the
    /// end of `d`: the suffixes of the view that are proper prefixes of some needle.
    pub(crate) fn partial_starts(&self, d: &Decoded, from: usize, mut found: impl FnMut(usize)) {
        let len = d.bytes.len();
        let mut s = self.start;
        for i in from..len {
            if i > from && d.broken[i] {
                s = self.start;
            }
            s = self.nfa.next_state(Anchored::No, s, d.bytes[i]);
        }
        while s != self.start {
            let at = s.as_usize();
            if self.prefix[at] {
                found(len - self.depth[at] as usize);
            }
            s = self.fail[at];
        }
    }
}
