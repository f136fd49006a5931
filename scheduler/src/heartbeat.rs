//! `HEARTBEAT.md` in the workspace: periodic checks the agent runs, in the seed's format:
//!
//! ```text
//! ### Disk space
//! - Schedule: "0 9 * * *"
//! - Task: "Check that the backups of last night exist"
//! ```
//!
//! Each `###` heading starts a check; its `Schedule` (cron, five fields or six with seconds)
//! and `Task` lines are required. A bad entry is reported with its line and left out; the
//! others run. A check whose answer is exactly `HEARTBEAT_OK` is not sent to anyone.

use chrono_tz::Tz;

use super::schedule::Schedule;

/// The file's name in the workspace.
pub use nexbot_agent::workspace::HEARTBEAT_FILE as FILE;
/// The answer that means "all good": never sent.
pub const OK: &str = "HEARTBEAT_OK";

/// A valid check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatCheck {
    pub name: String,
    pub cron: String,
    pub task: String,
}

/// What the file holds: the valid checks and why the others were left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parsed {
    pub checks: Vec<HeartbeatCheck>,
    pub problems: Vec<String>,
}

fn value(line: &str, key: &str) -> Option<String> {
    let rest = line.strip_prefix(key)?.trim_start().strip_prefix(':')?.trim();
    let unquoted = rest
        .strip_prefix('"')
        .and_then(|r| r.strip_suffix('"'))
        .or_else(|| rest.strip_prefix('`').and_then(|r| r.strip_suffix('`')))
        .unwrap_or(rest);
    Some(unquoted.trim().to_owned())
}

/// Parses the file's text; cron expressions are checked in `zone`.
pub fn parse(text: &str, zone: Tz) -> Parsed {
    struct Entry {
        line: usize,
        name: String,
        cron: Option<String>,
        task: Option<String>,
    }
    let mut entries: Vec<Entry> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if let Some(name) = line.strip_prefix("### ") {
            entries.push(Entry {
                line: i + 1,
                name: name.trim().to_owned(),
                cron: None,
                task: None,
            });
            continue;
        }
        let Some(entry) = entries.last_mut() else { continue };
        let Some(item) = line.strip_prefix("- ").or_else(|| line.strip_prefix("* ")) else {
            continue;
        };
        if let Some(v) = value(item, "Schedule") {
            entry.cron = Some(v);
        } else if let Some(v) = value(item, "Task") {
            entry.task = Some(v);
        }
    }
    let mut parsed = Parsed::default();
    let mut seen = std::collections::HashSet::new();
    for e in entries {
        let at = format!("{FILE} line {} ({:?})", e.line, e.name);
        if e.name.is_empty() {
            parsed.problems.push(format!("{at}: the heading has no name"));
            continue;
        }
        if !seen.insert(e.name.clone()) {
            parsed.problems.push(format!("{at}: a check of this name comes earlier"));
            continue;
        }
        let Some(cron) = e.cron.filter(|c| !c.is_empty()) else {
            parsed.problems.push(format!("{at}: no `- Schedule: \"<cron>\"` line"));
            continue;
        };
        let Some(task) = e.task.filter(|t| !t.is_empty()) else {
            parsed.problems.push(format!("{at}: no `- Task: \"...\"` line"));
            continue;
        };
        if let Err(err) = Schedule::cron(&cron, zone) {
            parsed.problems.push(format!("{at}: {err}"));
            continue;
        }
        parsed.checks.push(HeartbeatCheck { name: e.name, cron, task });
    }
    parsed
}

/// What the agent is asked for a check.
pub fn prompt(check_name: &str, task: &str) -> String {
    format!(
        "Heartbeat check {check_name:?}: {task}\n\nIf everything is fine and there is nothing \
         to tell the owner, answer exactly {OK} and nothing else."
    )
}

/// Whether an answer is the silent "all good".
pub fn is_ok(answer: &str) -> bool {
    answer.trim() == OK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_entries_run_and_bad_ones_are_reported() {
        let text = r#"# Heartbeat Tasks

### Morning
- Schedule: "0 9 * * *"
- Task: "Say good morning"

### Broken cron
- Schedule: "every day"
- Task: "x"

### No task
- Schedule: "0 9 * * *"

### Fast
- Schedule: "*/5 * * * * *"
- Task: "Check the disk"

### Morning
- Schedule: "0 10 * * *"
- Task: "again"
"#;
        let parsed = parse(text, Tz::UTC);
        assert_eq!(
            parsed.checks,
            vec![
                HeartbeatCheck {
                    name: "Morning".into(),
                    cron: "0 9 * * *".into(),
                    task: "Say good morning".into()
                },
                HeartbeatCheck {
                    name: "Fast".into(),
                    cron: "*/5 * * * * *".into(),
                    task: "Check the disk".into()
                },
            ]
        );
        assert_eq!(parsed.problems.len(), 3, "{:?}", parsed.problems);
        assert!(parsed.problems[0].contains("line 7") && parsed.problems[0].contains("every day"));
        assert!(parsed.problems[1].contains("No task"));
        assert!(parsed.problems[2].contains("comes earlier"));
    }

    #[test]
    fn an_empty_file_has_no_checks_and_only_the_exact_ok_is_silent() {
        assert_eq!(parse("# Heartbeat\n\nnothing yet\n", Tz::UTC), Parsed::default());
        assert!(is_ok("  HEARTBEAT_OK\n"));
        assert!(!is_ok("HEARTBEAT_OK, but the disk is 95% full"));
        assert!(!is_ok("heartbeat_ok"));
    }
}
