//! Text rendering shared by every command: aligned tables, `key: value` blocks, and the
//! human forms of durations, sizes and UTC times.
//!
//! Everything here is pure (strings in, string out) so that it is unit-tested without a
//! daemon. Cells are made safe for a terminal: table cells and values come from chats, task
//! texts and container logs, and a stray escape sequence or newline must neither break the
//! alignment nor drive the operator's terminal.

use std::fmt::Write as _;

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

/// Seconds as the two largest units: `45s`, `3m12s`, `2h05m`, `3d04h`.
pub fn human_secs(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    if d > 0 {
        format!("{d}d{h:02}h")
    } else if h > 0 {
        format!("{h}h{m:02}m")
    } else if m > 0 {
        format!("{m}m{s:02}s")
    } else {
        format!("{s}s")
    }
}

/// Milliseconds: `850ms` under a second, `12.3s` under a minute, else as [`human_secs`].
pub fn human_ms(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else {
        human_secs(ms / 1000)
    }
}

/// Bytes in binary units with one decimal: `512B`, `1.5KiB`, `52.3MiB`, `1.2GiB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes}B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1}{}", UNITS[unit])
}

/// The proleptic Gregorian date `(year, month, day)` of a day count since 1970-01-01
/// (Howard Hinnant's `civil_from_days`): a date crate for one function would be too much.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11], March first
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = (if mp < 10 { mp + 3 } else { mp - 9 }) as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Unix seconds as `YYYY-MM-DD HH:MM:SS` (UTC).
pub fn utc_time(unix_secs: i64) -> String {
    let (days, secs) = (unix_secs.div_euclid(86_400), unix_secs.rem_euclid(86_400));
    let (y, mo, d) = civil_from_days(days);
    format!("{y:04}-{mo:02}-{d:02} {:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60)
}

/// A value that may be missing, `-` when it is.
pub fn or_dash<T>(value: Option<T>, show: impl FnOnce(T) -> String) -> String {
    value.map(show).unwrap_or_else(|| "-".to_owned())
}

/// The first 8 chars of an id (a uuid's first group), as tables show it.
pub fn short_id(id: &str) -> String {
    id.chars().take(8).collect()
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

    #[test]
    fn durations_are_humanized() {
        assert_eq!(human_secs(0), "0s");
        assert_eq!(human_secs(45), "45s");
        assert_eq!(human_secs(192), "3m12s");
        assert_eq!(human_secs(2 * 3600 + 5 * 60 + 9), "2h05m");
        assert_eq!(human_secs(3 * 86_400 + 4 * 3600), "3d04h");
        assert_eq!(human_ms(850), "850ms");
        assert_eq!(human_ms(12_340), "12.3s");
        assert_eq!(human_ms(192_000), "3m12s");
    }

    #[test]
    fn sizes_are_humanized() {
        assert_eq!(human_bytes(512), "512B");
        assert_eq!(human_bytes(1536), "1.5KiB");
        assert_eq!(human_bytes(52 * 1024 * 1024 + 300 * 1024), "52.3MiB");
        assert_eq!(human_bytes(3 << 30), "3.0GiB");
    }

    #[test]
    fn civil_dates_match_known_days() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(civil_from_days(59), (1970, 3, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
        assert_eq!(civil_from_days(20_454), (2026, 1, 1));
    }

    #[test]
    fn civil_dates_advance_one_day_at_a_time() {
        // Every day for ±800 years: the day after is the next day of the calendar.
        let mut prev = civil_from_days(-292_000);
        for days in -291_999..292_000 {
            let (y, m, d) = civil_from_days(days);
            let (py, pm, pd) = prev;
            let next_same_month = (y, m, d) == (py, pm, pd + 1);
            let next_month = d == 1 && ((y, m) == (py, pm + 1) || (y, m, pm) == (py + 1, 1, 12));
            assert!(next_same_month || next_month, "{prev:?} -> {:?}", (y, m, d));
            let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
            if m == 2 && d == 29 {
                assert!(leap, "{y}-02-29");
            }
            prev = (y, m, d);
        }
    }

    #[test]
    fn utc_times_format() {
        assert_eq!(utc_time(0), "1970-01-01 00:00:00");
        assert_eq!(utc_time(1_700_000_000), "2023-11-14 22:13:20");
        assert_eq!(utc_time(951_782_399), "2000-02-28 23:59:59");
        assert_eq!(utc_time(-1), "1969-12-31 23:59:59");
    }

    #[test]
    fn short_ids_and_dashes() {
        assert_eq!(short_id("1a2b3c4d-0000-4000-8000-000000000000"), "1a2b3c4d");
        assert_eq!(short_id("abc"), "abc");
        assert_eq!(or_dash(None::<u64>, |v| v.to_string()), "-");
        assert_eq!(or_dash(Some(3u64), |v| v.to_string()), "3");
    }
}
