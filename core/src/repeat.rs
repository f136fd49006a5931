//! Logging an error that repeats (a loop retrying the same failing step every second) once,
//! then once a window with how many times it came back, instead of once per try.
//!
//! Why: a retry loop that logs every failure buries everything else in the log (a full disk
//! made the Telegram channel write the same line about once a second), yet a silent loop hides
//! that the failure goes on. So the first occurrence is logged at once, the same message again
//! is only counted, and the count is logged with the message when the window has passed, when
//! another message comes, or when the loop recovers ([`RepeatFilter::clear`]).
//!
//! The filter decides; the caller logs (with its own level and fields), so it needs no logger.

use std::time::{Duration, Instant};

/// The window [`RepeatFilter::default`] counts repeats over.
pub const REPEAT_WINDOW: Duration = Duration::from_secs(60);

/// What to do with one occurrence of a message ([`RepeatFilter::check`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogDecision {
    /// Log it as it is: the first time, or the first after another message or a recovery.
    Log,
    /// Log nothing: the same message was logged less than a window ago; it is counted.
    Quiet,
    /// Log it with [`Repeated::note`]: the window passed since the last line; it came back
    /// this many times meanwhile (this occurrence included).
    Repeated(Repeated),
}

/// How often a message came back between two of its log lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repeated {
    /// The message that repeated.
    pub message: String,
    /// Occurrences not logged on their own.
    pub times: u64,
    /// Since the last line that named it.
    pub over: Duration,
}

impl Repeated {
    /// The suffix for the log line: "repeated 57 times in the last 60 s".
    pub fn note(&self) -> String {
        let times =
            if self.times == 1 { "once".to_owned() } else { format!("{} times", self.times) };
        format!("repeated {times} in the last {} s", self.over.as_secs().max(1))
    }
}

/// Remembers the last message logged and how often it came back since. Not shared: each loop
/// keeps its own.
#[derive(Debug)]
pub struct RepeatFilter {
    window: Duration,
    last: Option<Last>,
}

#[derive(Debug)]
struct Last {
    message: String,
    logged_at: Instant,
    quiet: u64,
}

impl Default for RepeatFilter {
    fn default() -> Self {
        Self::new(REPEAT_WINDOW)
    }
}

impl RepeatFilter {
    /// A filter that logs a repeating message at most once per `window`.
    pub fn new(window: Duration) -> Self {
        Self { window, last: None }
    }

    /// One occurrence of `message` at `now`. A different message than the last one ends the
    /// last one's count: the caller loses it unless it took it with [`Self::clear`] first
    /// (the usual loop logs one message at a time, so [`Self::check`] alone is enough).
    pub fn check(&mut self, message: &str, now: Instant) -> LogDecision {
        match &mut self.last {
            Some(last) if last.message == message => {
                last.quiet += 1;
                let over = now.saturating_duration_since(last.logged_at);
                if over < self.window {
                    return LogDecision::Quiet;
                }
                let times = std::mem::take(&mut last.quiet);
                last.logged_at = now;
                LogDecision::Repeated(Repeated { message: message.to_owned(), times, over })
            }
            _ => {
                self.last = Some(Last { message: message.to_owned(), logged_at: now, quiet: 0 });
                LogDecision::Log
            }
        }
    }

    /// The failure is over (the loop succeeded): the count not logged yet, if any, and the
    /// next occurrence of any message is logged again at once.
    pub fn clear(&mut self, now: Instant) -> Option<Repeated> {
        let last = self.last.take()?;
        (last.quiet > 0).then(|| Repeated {
            over: now.saturating_duration_since(last.logged_at),
            message: last.message,
            times: last.quiet,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    #[test]
    fn a_message_every_second_is_logged_once_then_with_its_count_each_window() {
        let mut filter = RepeatFilter::default();
        let start = Instant::now();
        let mut lines = Vec::new();
        for second in 0..=130u64 {
            match filter.check("database or disk is full", start + SEC * second as u32) {
                LogDecision::Quiet => {}
                LogDecision::Log => lines.push(format!("{second}: logged")),
                LogDecision::Repeated(r) => lines.push(format!("{second}: {}", r.note())),
            }
        }
        assert_eq!(
            lines,
            [
                "0: logged",
                "60: repeated 60 times in the last 60 s",
                "120: repeated 60 times in the last 60 s"
            ]
        );
        // Recovery: the ten quiet ones since second 120 are reported, then nothing is pending.
        let rest = filter.clear(start + SEC * 131).unwrap();
        assert_eq!((rest.times, rest.message.as_str()), (10, "database or disk is full"));
        assert_eq!(rest.note(), "repeated 10 times in the last 11 s");
        assert_eq!(filter.clear(start + SEC * 132), None);
        // After a recovery the same message is news again.
        assert_eq!(filter.check("database or disk is full", start + SEC * 140), LogDecision::Log);
    }

    #[test]
    fn another_message_is_logged_at_once_and_a_lone_failure_leaves_nothing_pending() {
        let mut filter = RepeatFilter::new(Duration::from_secs(60));
        let now = Instant::now();
        assert_eq!(filter.check("a", now), LogDecision::Log);
        assert_eq!(filter.check("b", now + SEC), LogDecision::Log);
        assert_eq!(filter.check("b", now + SEC * 2), LogDecision::Quiet);
        assert_eq!(filter.check("a", now + SEC * 3), LogDecision::Log);
        assert_eq!(filter.clear(now + SEC * 4), None);
        let once = Repeated { message: "a".into(), times: 1, over: Duration::ZERO };
        assert_eq!(once.note(), "repeated once in the last 1 s");
    }
}
