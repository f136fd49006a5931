//! Text rendering shared by every command: aligned tables and `key: value` blocks; the
//! human forms of durations, sizes and UTC times are `nexbot_control::human`'s (the
//! dashboard shows them the same way; sizes as everywhere), re-exported here.
//!
//! Everything here is pure (strings in, string out) so that it is unit-tested without a
//! daemon. Cells are made safe for a terminal: table cells and values come from chats, task
//! texts and container logs, and a stray escape sequence or newline must neither break the
//! alignment nor drive the operator's terminal.

use std::fmt::Write as _;

pub use nexbot_control::human::{human_ms, human_secs, human_size, or_dash, short_id, utc_time};

/// A table whose columns are padded to their widest cell, two spaces apart, header in upper
/// case. An empty table renders as its header alone.
#[derive(Debug, Clone)]
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: &[&str]) -> Self {
        Self { headers: headers.iter().map(|h| h.to_uppercase()).collect(), rows: Vec::new() }
    }

    /// Adds a row; missing cells are empty, extra cells are dropped (the header decides).
    pub fn row(&mut self, cells: Vec<String>) {
        let mut cells: Vec<String> = cells.into_iter().map(|c| one_line(&c)).collect();
        cells.resize(self.headers.len(), String::new());
        self.rows.push(cells);
    }

    /// The table with a trailing newline; no line ends with padding.
    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.headers.iter().map(|h| width(h)).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(width(cell));
            }
        }
        let mut out = String::new();
        for line in std::iter::once(&self.headers).chain(&self.rows) {
            let mut text = String::new();
            for (i, (cell, w)) in line.iter().zip(&widths).enumerate() {
                if i > 0 {
                    text.push_str("  ");
                }
                text.push_str(cell);
                text.extend(std::iter::repeat_n(' ', w - width(cell)));
            }
            out.push_str(text.trim_end());
            out.push('\n');
        }
        out
    }
}

/// Terminal columns taken by `s`, counted in chars (no East Asian width table: good enough
/// for ids, states and numbers; long free text is cut anyway).
fn width(s: &str) -> usize {
    s.chars().count()
}

/// `key: value` lines with the values aligned; multi-line values are not expected.
pub fn key_values(pairs: &[(String, String)]) -> String {
    let key_width = pairs.iter().map(|(k, _)| width(k)).max().unwrap_or(0);
    let mut out = String::new();
    for (key, value) in pairs {
        let pad = key_width - width(key);
        let _ = writeln!(out, "{key}:{}  {}", " ".repeat(pad), one_line(value));
    }
    out
}

/// `s` on one line, safe for a terminal: newlines and tabs become spaces, other control
/// characters (ESC and friends) become U+FFFD.
pub fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '\n' | '\r' | '\t' => ' ',
            c if c.is_control() => '\u{FFFD}',
            c => c,
        })
        .collect()
}

/// Like [`one_line`] but keeps newlines and tabs: for a task's text, printed as a block.
pub fn safe_block(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '\n' | '\t' => c,
            c if c.is_control() => '\u{FFFD}',
            c => c,
        })
        .collect()
}

/// At most `max` chars of `s`, the last one an ellipsis when something was cut.
pub fn cut(s: &str, max: usize) -> String {
    if width(s) <= max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_columns_align_to_the_widest_cell() {
        let mut t = Table::new(&["id", "state", "tasks"]);
        t.row(vec!["pool-0".into(), "idle".into(), "3".into()]);
        t.row(vec!["pool-10".into(), "starting".into(), "12".into()]);
        assert_eq!(
            t.render(),
            "ID       STATE     TASKS\n\
             pool-0   idle      3\n\
             pool-10  starting  12\n"
        );
    }

    #[test]
    fn an_empty_table_is_its_header() {
        assert_eq!(Table::new(&["id", "chat"]).render(), "ID  CHAT\n");
    }

    #[test]
    fn cells_are_one_terminal_safe_line_and_rows_are_padded() {
        let mut t = Table::new(&["a", "b"]);
        t.row(vec!["x\ny\x1b[2J".into()]);
        assert_eq!(t.render(), "A        B\nx y\u{FFFD}[2J\n");
    }

    #[test]
    fn key_values_align() {
        let pairs = [("pid".to_owned(), "7".to_owned()), ("data dir".to_owned(), "/d".to_owned())];
        assert_eq!(key_values(&pairs), "pid:       7\ndata dir:  /d\n");
    }

    #[test]
    fn cut_keeps_short_text_and_marks_a_cut() {
        assert_eq!(cut("hello", 5), "hello");
        assert_eq!(cut("hello world", 5), "hell…");
        assert_eq!(cut("ééééé", 4), "ééé…");
    }
}
