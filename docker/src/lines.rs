//! Reassembles lines from the chunks the attach stream delivers.
//!
//! Docker frames a container's output by the writes the process made, not by lines: one JSON
//! line can arrive split over several frames, and one frame can hold several lines. The stdout
//! side goes through the protocol's `JsonLinesCodec`; this splitter does the same job for the
//! stderr log lines, with a cap so a runaway line cannot grow host memory without bound.

use bytes::{Buf, BytesMut};

/// Splits a byte stream into `\n`-terminated lines; a line longer than `max_line` is cut at
/// the cap (marked with `…[cut]`) and the rest of it, up to its newline, is skipped.
#[derive(Debug)]
pub(crate) struct LineSplitter {
    buf: BytesMut,
    max_line: usize,
    skipping: bool,
}

const CUT_MARK: &str = "…[cut]";

impl LineSplitter {
    pub(crate) fn new(max_line: usize) -> Self {
        Self { buf: BytesMut::new(), max_line, skipping: false }
    }

    /// Adds `chunk` and returns the lines it completed (without `\n` or `\r`), in order.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Vec<String> {
        let mut lines = Vec::new();
        let mut rest = chunk;
        while !rest.is_empty() {
            match memchr_newline(rest) {
                Some(pos) => {
                    let (head, tail) = rest.split_at(pos);
                    rest = &tail[1..];
                    if self.skipping {
                        self.skipping = false;
                        continue;
                    }
                    self.append_capped(head);
                    lines.push(self.take_line());
                }
                None => {
                    if !self.skipping {
                        self.append_capped(rest);
                        if self.buf.len() >= self.max_line {
                            lines.push(format!("{}{CUT_MARK}", self.take_line()));
                            self.skipping = true;
                        }
                    }
                    rest = &[];
                }
            }
        }
        lines
    }

    /// What is left without a final newline (at end of stream).
    pub(crate) fn finish(&mut self) -> Option<String> {
        (!self.buf.is_empty() && !self.skipping).then(|| self.take_line())
    }

    fn append_capped(&mut self, bytes: &[u8]) {
        let room = self.max_line.saturating_sub(self.buf.len());
        self.buf.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    fn take_line(&mut self) -> String {
        let mut line = self.buf.split();
        if line.last() == Some(&b'\r') {
            line.truncate(line.len() - 1);
        }
        let text = String::from_utf8_lossy(line.chunk()).into_owned();
        line.clear();
        text
    }
}

fn memchr_newline(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|b| *b == b'\n')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_across_chunks_are_joined() {
        let mut s = LineSplitter::new(1024);
        assert!(s.push(b"{\"mess").is_empty());
        assert!(s.push(b"age\":").is_empty());
        assert_eq!(s.push(b"1}\n{\"a\":2}\n{\"b\""), vec!["{\"message\":1}", "{\"a\":2}"]);
        assert_eq!(s.push(b":3}\r\n"), vec!["{\"b\":3}"]);
        assert_eq!(s.finish(), None);
    }

    #[test]
    fn every_split_point_gives_the_same_lines() {
        let input = "línea uno\nline two\n\nthree\n";
        let expected: Vec<String> = input.lines().map(str::to_owned).collect();
        for cut in 0..=input.len() {
            let mut s = LineSplitter::new(1024);
            let mut got = s.push(&input.as_bytes()[..cut]);
            got.extend(s.push(&input.as_bytes()[cut..]));
            assert_eq!(got, expected, "cut at {cut}");
        }
    }

    #[test]
    fn overlong_line_is_cut_and_the_stream_goes_on() {
        let mut s = LineSplitter::new(8);
        let got = s.push(b"0123456789abcdef");
        assert_eq!(got, vec![format!("01234567{CUT_MARK}")]);
        assert!(s.push(b"still the same line").is_empty());
        assert_eq!(s.push(b" end\nnext\n"), vec!["next"]);
    }

    #[test]
    fn unterminated_tail_is_returned_at_the_end() {
        let mut s = LineSplitter::new(64);
        assert!(s.push(b"partial").is_empty());
        assert_eq!(s.finish().as_deref(), Some("partial"));
    }
}
