//! When a job runs: a cron expression (five fields, or six with seconds first) or one instant,
//! read in the job's time zone. The cron arithmetic, daylight-saving gaps and overlaps
//! included, is `croner`'s (OCPS rules: a fixed time inside a spring-forward gap runs at the
//! first instant after it, a fixed time inside a fall-back overlap runs once; interval fields
//! such as `*/10` keep their pace in real time).

use chrono::{DateTime, LocalResult, NaiveDateTime, TimeZone, Utc};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;
use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum ScheduleError {
    #[error("{expr:?} is not a cron expression: {reason} (five fields, or six with seconds first, e.g. \"*/10 * * * * *\")")]
    BadCron { expr: String, reason: String },
    #[error("{0:?} is not an IANA time zone (e.g. \"UTC\", \"Europe/Berlin\")")]
    BadZone(String),
    #[error("{text:?} is not a time: use RFC 3339 (2026-05-01T09:00:00+02:00), a local \"YYYY-MM-DD HH:MM[:SS]\" or a delay such as \"in 10m\"")]
    BadTime { text: String },
    #[error("{text:?} does not exist in {zone} (the clocks skip it)")]
    Skipped { text: String, zone: String },
    #[error("{expr:?} never fires")]
    Never { expr: String },
}

/// A parsed schedule.
#[derive(Debug, Clone)]
pub enum Schedule {
    Cron { expr: String, cron: Box<Cron>, zone: Tz },
    At { at: i64, zone: Tz },
}

/// Parses a zone name.
pub fn zone(name: &str) -> Result<Tz, ScheduleError> {
    name.parse().map_err(|_| ScheduleError::BadZone(name.to_owned()))
}

fn parser() -> CronParser {
    CronParser::builder().seconds(Seconds::Optional).year(Year::Disallowed).build()
}

impl Schedule {
    /// A recurring schedule; it must fire at least once.
    pub fn cron(expr: &str, zone: Tz) -> Result<Self, ScheduleError> {
        let expr = expr.trim();
        let cron = parser()
            .parse(expr)
            .map_err(|e| ScheduleError::BadCron { expr: expr.to_owned(), reason: e.to_string() })?;
        let schedule = Self::Cron { expr: expr.to_owned(), cron: Box::new(cron), zone };
        if schedule.next_after(Utc::now().timestamp()).is_none() {
            return Err(ScheduleError::Never { expr: expr.to_owned() });
        }
        Ok(schedule)
    }

    /// A one-shot schedule at `at` (unix seconds).
    pub fn at(at: i64, zone: Tz) -> Self {
        Self::At { at, zone }
    }

    pub fn zone(&self) -> Tz {
        match self {
            Self::Cron { zone, .. } | Self::At { zone, .. } => *zone,
        }
    }

    /// The first run strictly after `t` (unix seconds); `None` when there is none.
    pub fn next_after(&self, t: i64) -> Option<i64> {
        match self {
            Self::At { at, .. } => (*at > t).then_some(*at),
            Self::Cron { cron, zone, .. } => {
                let from = zone.timestamp_opt(t, 0).single()?;
                cron.find_next_occurrence(&from, false).ok().map(|d| d.timestamp())
            }
        }
    }

    /// The latest run at or before `t`.
    pub fn latest_at_or_before(&self, t: i64) -> Option<i64> {
        match self {
            Self::At { at, .. } => (*at <= t).then_some(*at),
            Self::Cron { cron, zone, .. } => {
                let from = zone.timestamp_opt(t, 0).single()?;
                cron.find_previous_occurrence(&from, true).ok().map(|d| d.timestamp())
            }
        }
    }

    /// The first run at or after `t`.
    pub fn first_from(&self, t: i64) -> Option<i64> {
        match self {
            Self::At { at, .. } => Some(*at),
            Self::Cron { .. } => self.next_after(t - 1),
        }
    }

    pub fn is_recurring(&self) -> bool {
        matches!(self, Self::Cron { .. })
    }
}

/// Reads a one-shot time: RFC 3339, a local `YYYY-MM-DD HH:MM[:SS]` (or with `T`) in `zone`,
/// or a delay (`in 10m`, `+90s`, `10m`) from `now`. Returns unix seconds.
pub fn parse_at(text: &str, zone: Tz, now: i64) -> Result<i64, ScheduleError> {
    let t = text.trim();
    let bad = || ScheduleError::BadTime { text: text.to_owned() };
    let delay = t.strip_prefix("in ").or_else(|| t.strip_prefix('+')).unwrap_or(t).trim();
    if let Ok(d) = humantime::parse_duration(delay) {
        return i64::try_from(d.as_secs()).ok().and_then(|s| now.checked_add(s)).ok_or_else(bad);
    }
    if let Ok(d) = DateTime::parse_from_rfc3339(t) {
        return Ok(d.timestamp());
    }
    let naive = ["%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M"]
        .iter()
        .find_map(|f| NaiveDateTime::parse_from_str(t, f).ok())
        .ok_or_else(bad)?;
    match zone.from_local_datetime(&naive) {
        LocalResult::Single(d) => Ok(d.timestamp()),
        // In a fall-back overlap the earlier of the two instants.
        LocalResult::Ambiguous(a, b) => Ok(a.timestamp().min(b.timestamp())),
        LocalResult::None => {
            Err(ScheduleError::Skipped { text: text.to_owned(), zone: zone.name().to_owned() })
        }
    }
}

/// `t` (unix seconds) as local time in `zone`, with its offset.
pub fn local(t: i64, zone: Tz) -> String {
    zone.timestamp_opt(t, 0)
        .single()
        .map(|d| d.format("%Y-%m-%d %H:%M:%S %Z").to_string())
        .unwrap_or_else(|| t.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(zone: Tz, text: &str) -> i64 {
        parse_at(text, zone, 0).unwrap()
    }

    fn utc(text: &str) -> i64 {
        DateTime::parse_from_rfc3339(text).unwrap().timestamp()
    }

    #[test]
    fn six_fields_have_seconds_and_five_do_not() {
        let every_10s = Schedule::cron("*/10 * * * * *", Tz::UTC).unwrap();
        let t = utc("2026-01-01T00:00:03Z");
        assert_eq!(every_10s.next_after(t), Some(utc("2026-01-01T00:00:10Z")));
        let minutely = Schedule::cron("* * * * *", Tz::UTC).unwrap();
        assert_eq!(minutely.next_after(t), Some(utc("2026-01-01T00:01:00Z")));
        assert!(matches!(Schedule::cron("* * *", Tz::UTC), Err(ScheduleError::BadCron { .. })));
        assert!(matches!(
            Schedule::cron("61 * * * * *", Tz::UTC),
            Err(ScheduleError::BadCron { .. })
        ));
    }

    #[test]
    fn the_zone_decides_the_hour() {
        let nine = Schedule::cron("0 0 9 * * *", zone("Asia/Tokyo").unwrap()).unwrap();
        // 09:00 in Tokyo is 00:00 UTC.
        assert_eq!(nine.next_after(utc("2026-03-01T12:00:00Z")), Some(utc("2026-03-02T00:00:00Z")));
        let ny = Schedule::cron("0 0 9 * * *", zone("America/New_York").unwrap()).unwrap();
        assert_eq!(ny.next_after(utc("2026-03-01T12:00:00Z")), Some(utc("2026-03-01T14:00:00Z")));
    }

    #[test]
    fn daily_runs_keep_local_time_across_dst() {
        let berlin = zone("Europe/Berlin").unwrap();
        let nine = Schedule::cron("0 0 9 * * *", berlin).unwrap();
        // Clocks go forward on 2026-03-29: 09:00 is 08:00 UTC before, 07:00 UTC after.
        let before = nine.next_after(utc("2026-03-28T00:00:00Z")).unwrap();
        let after = nine.next_after(before).unwrap();
        assert_eq!(before, utc("2026-03-28T08:00:00Z"));
        assert_eq!(after, utc("2026-03-29T07:00:00Z"));
        assert_eq!(after - before, 23 * 3600);
    }

    #[test]
    fn a_time_in_the_spring_gap_runs_once_right_after_it() {
        let berlin = zone("Europe/Berlin").unwrap();
        // 02:30 does not exist on 2026-03-29 in Berlin (02:00 → 03:00).
        let s = Schedule::cron("0 30 2 * * *", berlin).unwrap();
        let first = s.next_after(utc("2026-03-28T12:00:00Z")).unwrap();
        assert_eq!(first, utc("2026-03-29T01:00:00Z"), "03:00 CEST, the first instant after");
        let second = s.next_after(first).unwrap();
        assert_eq!(second, utc("2026-03-30T00:30:00Z"), "02:30 CEST the day after");
    }

    #[test]
    fn a_time_in_the_autumn_overlap_runs_once() {
        let berlin = zone("Europe/Berlin").unwrap();
        // 02:30 happens twice on 2026-10-25 (CEST then CET).
        let s = Schedule::cron("0 30 2 * * *", berlin).unwrap();
        let first = s.next_after(utc("2026-10-24T12:00:00Z")).unwrap();
        assert_eq!(first, utc("2026-10-25T00:30:00Z"), "the first 02:30 (CEST)");
        let next = s.next_after(first).unwrap();
        assert_eq!(next, utc("2026-10-26T01:30:00Z"), "not again at 02:30 CET");
    }

    #[test]
    fn one_shot_times_read_in_the_zone() {
        let berlin = zone("Europe/Berlin").unwrap();
        assert_eq!(ts(berlin, "2026-07-01 12:00"), utc("2026-07-01T10:00:00Z"));
        assert_eq!(ts(Tz::UTC, "2026-07-01T12:00:05"), utc("2026-07-01T12:00:05Z"));
        assert_eq!(ts(berlin, "2026-07-01T12:00:00+00:00"), utc("2026-07-01T12:00:00Z"));
        assert_eq!(parse_at("in 10m", berlin, 1000), Ok(1600));
        assert_eq!(parse_at("+90s", berlin, 1000), Ok(1090));
        assert!(matches!(
            parse_at("2026-03-29 02:30", berlin, 0),
            Err(ScheduleError::Skipped { .. })
        ));
        // Ambiguous: the earlier instant (CEST).
        assert_eq!(ts(berlin, "2026-10-25 02:30"), utc("2026-10-25T00:30:00Z"));
        assert!(matches!(parse_at("tomorrow-ish", berlin, 0), Err(ScheduleError::BadTime { .. })));
        let at = Schedule::at(500, berlin);
        assert_eq!(at.next_after(499), Some(500));
        assert_eq!(at.next_after(500), None);
    }
}
