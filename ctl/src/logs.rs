//! `subagents logs`: pretty-printing the subagent's JSON log lines, and finding the new lines
//! of a poll for `--follow`.
//!
//! The subagent logs one JSON object per line, `{"time","level","message","task_id"?,
//! "correlation_id"?,"metadata":{…}}` (docs/protocol-limits.md#logs). The pretty form puts time,
//! level and message first and every other field after as `key=value`; a line that is not such
//! an object (a panic message, a stray print) is shown as it is.

use serde_json::{Map, Value};

use crate::render::one_line;

/// One log line for a human: `time LEVEL message key=value …`, or the raw line (made
/// terminal-safe) when it is not a JSON object.
pub fn pretty_line(raw: &str) -> String {
    let Ok(Value::Object(mut map)) = serde_json::from_str::<Value>(raw) else {
        return one_line(raw);
    };
    let time = take_string(&mut map, &["time", "timestamp"]);
    let level = take_string(&mut map, &["level"]).to_uppercase();
    let mut message = take_string(&mut map, &["message", "msg"]);
    // tracing-subscriber's stock JSON nests the event's fields (and the message) in `fields`.
    if let Some(Value::Object(fields)) = map.get_mut("fields") {
        if message.is_empty() {
            message = take_string(fields, &["message"]);
        }
    }
    let mut pairs = Vec::new();
    flatten("", &map, &mut pairs);
    let mut out = String::new();
    for part in [time, format!("{level:<5}"), message] {
        if !part.trim().is_empty() {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(&part);
        }
    }
    for (key, value) in pairs {
        out.push(' ');
        out.push_str(&key);
        out.push('=');
        out.push_str(&value);
    }
    one_line(&out)
}

/// Removes and returns the first of `keys` present, as text (empty when none is).
fn take_string(map: &mut Map<String, Value>, keys: &[&str]) -> String {
    for key in keys {
        match map.remove(*key) {
            Some(Value::String(s)) => return s,
            Some(other) => return other.to_string(),
            None => {}
        }
    }
    String::new()
}

/// `key=value` pairs of `map`, sorted by key, plain values before nested objects (so the
/// top-level `task_id` comes before the metadata); the nesting objects `metadata` and `fields`
/// are flattened (their keys stand alone), any other nested object keeps a dotted prefix.
fn flatten(prefix: &str, map: &Map<String, Value>, out: &mut Vec<(String, String)>) {
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    entries.sort_by_key(|(key, value)| (value.is_object(), key.as_str()));
    for (key, value) in entries {
        let name = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
        match value {
            Value::Object(inner) if prefix.is_empty() && (key == "metadata" || key == "fields") => {
                flatten("", inner, out)
            }
            Value::Object(inner) => flatten(&name, inner, out),
            Value::String(s) => out.push((name, quote_if_needed(s))),
            other => out.push((name, other.to_string())),
        }
    }
}

/// A string value bare when it is one word, JSON-quoted otherwise (so `key=value` pairs stay
/// unambiguous).
fn quote_if_needed(s: &str) -> String {
    if !s.is_empty() && !s.chars().any(|c| c.is_whitespace() || c == '"' || c == '=') {
        s.to_owned()
    } else {
        Value::String(s.to_owned()).to_string()
    }
}

/// The lines of `current` that come after what `previous` (the last poll) ended with.
///
/// The endpoint answers the last N lines of a ring, so two polls overlap: the new lines start
/// where the previous window's tail ends. The latest position in `current` where the whole
/// previous window (or as much of it as fits before that position) lines up wins. When nothing
/// lines up (more than a window of lines went by, or the container was replaced and its ring
/// started over), every line of `current` is new.
pub fn new_lines<'a>(previous: &[String], current: &'a [String]) -> &'a [String] {
    if previous.is_empty() {
        return current;
    }
    for end in (1..=current.len()).rev() {
        let m = end.min(previous.len());
        if current[end - m..end] == previous[previous.len() - m..] {
            return &current[end..];
        }
    }
    current
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_subagent_line_is_time_level_message_then_fields() {
        let raw = r#"{"time":"2026-01-02T03:04:05.678Z","level":"warn","message":"refused","task_id":"t-1","metadata":{"event":"tool","tool":"run_command","detail":"no such file"}}"#;
        assert_eq!(
            pretty_line(raw),
            r#"2026-01-02T03:04:05.678Z WARN  refused task_id=t-1 detail="no such file" event=tool tool=run_command"#
        );
    }

    #[test]
    fn non_string_fields_are_json_and_nested_objects_dotted() {
        let raw = r#"{"time":"t","level":"info","message":"m","metadata":{"n":3,"ok":true,"x":{"y":null}}}"#;
        assert_eq!(pretty_line(raw), "t INFO  m n=3 ok=true x.y=null");
    }

    #[test]
    fn stock_tracing_json_is_understood_too() {
        let raw =
            r#"{"timestamp":"t","level":"INFO","fields":{"message":"hi","k":"v"},"target":"a"}"#;
        assert_eq!(pretty_line(raw), "t INFO  hi target=a k=v");
    }

    #[test]
    fn a_line_that_is_not_a_json_object_is_shown_raw_and_safe() {
        assert_eq!(pretty_line("thread 'main' panicked"), "thread 'main' panicked");
        assert_eq!(pretty_line("[1,2]"), "[1,2]");
        assert_eq!(pretty_line("bad\x1b[2Jline"), "bad\u{FFFD}[2Jline");
    }

    #[test]
    fn escapes_inside_values_cannot_reach_the_terminal() {
        let raw = r#"{"time":"t","level":"info","message":"a\u001b[2Jb\nc"}"#;
        assert_eq!(pretty_line(raw), "t INFO  a\u{FFFD}[2Jb c");
    }

    #[test]
    fn new_lines_after_an_overlapping_window() {
        let prev = lines(&["a", "b", "c"]);
        assert_eq!(new_lines(&prev, &lines(&["b", "c", "d", "e"])), lines(&["d", "e"]));
        assert_eq!(new_lines(&prev, &lines(&["a", "b", "c"])), Vec::<String>::new());
        assert_eq!(new_lines(&[], &lines(&["a"])), lines(&["a"]));
    }

    #[test]
    fn new_lines_when_the_window_grew() {
        // The first fetch asked for 2 lines, the follow polls ask for more.
        let prev = lines(&["c", "d"]);
        assert_eq!(new_lines(&prev, &lines(&["a", "b", "c", "d", "e"])), lines(&["e"]));
    }

    #[test]
    fn a_repeated_line_is_not_mistaken_for_the_old_tail() {
        let prev = lines(&["x", "a"]);
        assert_eq!(new_lines(&prev, &lines(&["x", "a", "a"])), lines(&["a"]));
        assert_eq!(new_lines(&prev, &lines(&["a", "a"])), lines(&["a"]));
    }

    #[test]
    fn no_overlap_means_everything_is_new() {
        let prev = lines(&["a", "b"]);
        assert_eq!(new_lines(&prev, &lines(&["c", "d"])), lines(&["c", "d"]));
    }
}
