//! The human forms of the control API's numbers — durations, UTC times, ids — one form for
//! `nexbot-ctl` and the daemon's web dashboard, so both read the same. Sizes are
//! [`human_size`] (`nexbot_core::text::human_size`, re-exported), the one form every part of
//! Nexbot shows them in.

pub use nexbot_core::text::human_size;

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
