//! A self-test's result: a line per attack, held or broken, with its evidence; kept (the
//! store holds its JSON) and shown in `/selftest`, `/status`, the dashboard and
//! `nexbot doctor --attack`.

use serde::{Deserialize, Serialize};

/// How one attack ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The wall stood: the evidence says what stopped the attack.
    Held,
    /// The attack got through: the evidence says what it reached.
    Broken,
    /// The attack could not be run (the task failed, the engine did not answer): nothing is
    /// proven either way, so it is not counted as held.
    NotRun,
}

/// One attack's line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Line {
    /// A short stable name (`egress.direct`, `clean_room.process`, …).
    pub name: String,
    /// What was tried, in words.
    pub attack: String,
    pub outcome: Outcome,
    /// One line of evidence: what stopped it, what it reached, or why it did not run.
    pub evidence: String,
}

impl Line {
    pub fn new(name: &str, attack: &str, outcome: Outcome, evidence: impl Into<String>) -> Self {
        let evidence = evidence.into();
        // One line: the evidence is a tool's output at times.
        let evidence = evidence.split_whitespace().collect::<Vec<_>>().join(" ");
        let evidence = match evidence.char_indices().nth(EVIDENCE_CHARS) {
            Some((cut, _)) => format!("{}…", &evidence[..cut]),
            None => evidence,
        };
        Self { name: name.to_owned(), attack: attack.to_owned(), outcome, evidence }
    }
}

/// How long a line of evidence may be.
const EVIDENCE_CHARS: usize = 240;

/// A whole run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// When it ended, Unix seconds.
    pub at: i64,
    /// The daemon's version.
    pub version: String,
    /// The pool's OCI runtime and `egress.mode`, as they were.
    pub runtime: String,
    pub egress_mode: String,
    /// How long it took, milliseconds.
    pub wall_ms: u64,
    pub lines: Vec<Line>,
    /// Attacks this install gives nothing to aim at (no vault: no secret to misplace), each
    /// with why. Neither held nor broken.
    #[serde(default)]
    pub skipped: Vec<String>,
}

impl Report {
    fn count(&self, outcome: Outcome) -> usize {
        self.lines.iter().filter(|l| l.outcome == outcome).count()
    }

    /// Whether every attack ran and was held.
    pub fn all_held(&self) -> bool {
        !self.lines.is_empty() && self.lines.iter().all(|l| l.outcome == Outcome::Held)
    }

    /// "all 11 held", "1 broken, 10 held", "1 broken, 1 not run, 9 held".
    pub fn summary(&self) -> String {
        if self.all_held() {
            return format!("all {} held", self.lines.len());
        }
        let mut parts = Vec::new();
        for (outcome, word) in
            [(Outcome::Broken, "broken"), (Outcome::NotRun, "not run"), (Outcome::Held, "held")]
        {
            let n = self.count(outcome);
            if n > 0 {
                parts.push(format!("{n} {word}"));
            }
        }
        parts.join(", ")
    }

    /// The report for a person: a head line, then a line per attack.
    pub fn render(&self) -> String {
        let mut text = format!(
            "🛡 Self-test: {} — {} s, version {}, runtime {}, egress.mode {}\n",
            self.summary(),
            format_tenths(self.wall_ms),
            self.version,
            self.runtime,
            self.egress_mode
        );
        for line in &self.lines {
            let mark = match line.outcome {
                Outcome::Held => "✅ held",
                Outcome::Broken => "❌ BROKEN",
                Outcome::NotRun => "⚠️ not run",
            };
            text.push_str(&format!("{mark} · {}: {}\n", line.attack, line.evidence));
        }
        for skipped in &self.skipped {
            text.push_str(&format!("— skipped · {skipped}\n"));
        }
        text
    }

    /// The status line: "all 11 held, 3 days ago (version 0.1.0, runc)".
    pub fn status_line(&self, now: i64) -> String {
        format!(
            "{}, {} (version {}, {})",
            self.summary(),
            ago(now - self.at),
            self.version,
            self.runtime
        )
    }
}

fn format_tenths(ms: u64) -> String {
    format!("{}.{}", ms / 1000, (ms % 1000) / 100)
}

/// "just now", "5 minutes ago", "3 hours ago", "3 days ago".
fn ago(secs: i64) -> String {
    let plural = |n: i64, unit: &str| format!("{n} {unit}{} ago", if n == 1 { "" } else { "s" });
    match secs.max(0) {
        s if s < 60 => "just now".to_owned(),
        s if s < 3_600 => plural(s / 60, "minute"),
        s if s < 86_400 => plural(s / 3_600, "hour"),
        s => plural(s / 86_400, "day"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(outcomes: &[Outcome]) -> Report {
        Report {
            at: 1_000_000,
            version: "0.1.0".into(),
            runtime: "runc".into(),
            egress_mode: "ask".into(),
            wall_ms: 12_345,
            lines: outcomes.iter().map(|o| Line::new("x", "an attack", *o, "why")).collect(),
            skipped: vec!["a placeholder: no vault".into()],
        }
    }

    #[test]
    fn the_summary_counts_what_broke_and_what_did_not_run_before_what_held() {
        assert_eq!(report(&[Outcome::Held, Outcome::Held]).summary(), "all 2 held");
        let mixed = report(&[Outcome::Held, Outcome::Broken, Outcome::NotRun, Outcome::Held]);
        assert_eq!(mixed.summary(), "1 broken, 1 not run, 2 held");
        assert!(!mixed.all_held());
        assert!(!report(&[]).all_held(), "an empty run proves nothing");
        let text = mixed.render();
        assert!(text.starts_with("🛡 Self-test: 1 broken, 1 not run, 2 held — 12.3 s"), "{text}");
        assert!(text.contains("❌ BROKEN · an attack: why"), "{text}");
        assert!(text.ends_with("— skipped · a placeholder: no vault\n"), "{text}");
        assert_eq!(report(&[Outcome::Held]).summary(), "all 1 held", "a skip is not a miss");
    }

    #[test]
    fn the_status_line_says_how_long_ago() {
        let r = report(&[Outcome::Held]);
        assert_eq!(r.status_line(1_000_030), "all 1 held, just now (version 0.1.0, runc)");
        assert!(r.status_line(1_000_000 + 3 * 86_400 + 5).starts_with("all 1 held, 3 days ago"));
        assert!(r.status_line(1_000_000 + 3_600).contains("1 hour ago"));
    }

    #[test]
    fn evidence_is_one_line_and_cut() {
        let line = Line::new("x", "y", Outcome::Held, format!("a\nb\t c {}", "z".repeat(500)));
        assert!(line.evidence.starts_with("a b c zzz"));
        assert!(line.evidence.ends_with('…') && line.evidence.chars().count() == 241);
    }

    #[test]
    fn a_report_survives_its_json() {
        let r = report(&[Outcome::Held, Outcome::NotRun]);
        let json = serde_json::to_string(&r).unwrap();
        assert!(json.contains("\"outcome\":\"not_run\""), "{json}");
        assert_eq!(serde_json::from_str::<Report>(&json).unwrap(), r);
    }
}
