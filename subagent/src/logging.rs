//! JSON log lines on stderr in the exact shape `docs/protocol-limits.md#logs` names:
//! `{"time","level","message","task_id"?,"correlation_id"?,"metadata":{"event",...}}`.
//!
//! The host parses these lines and re-emits them, so the shape is a contract; the stock JSON
//! formatter of `tracing-subscriber` nests fields differently, hence this small layer. Fields
//! named `task_id` and `correlation_id` (on the event or on any enclosing span) go to the top
//! level, every other field into `metadata`. Every string passes through the live
//! [`Redaction`] before it is written.

use std::fmt;
use std::io::Write;
use std::sync::Arc;
use std::time::SystemTime;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

use crate::redaction::Redaction;

/// Environment variable naming the lowest level logged (`error`…`trace`, default `info`).
pub const LOG_LEVEL_ENV: &str = "NEXBOT_LOG_LEVEL";

/// Installs the JSON layer as the global subscriber. Called once, first thing in `main`.
pub fn init(redaction: Arc<Redaction>) {
    let level = std::env::var(LOG_LEVEL_ENV)
        .ok()
        .and_then(|v| v.parse::<LevelFilter>().ok())
        .unwrap_or(LevelFilter::INFO);
    let subscriber =
        tracing_subscriber::registry().with(JsonLayer::new(redaction).with_filter(level));
    // A second init (only possible in tests) keeps the first subscriber; nothing to report.
    let _ = tracing::subscriber::set_global_default(subscriber);
}

/// Where finished lines go: stderr in the program, a buffer in tests.
type Sink = Arc<dyn Fn(&[u8]) + Send + Sync>;

/// The layer that writes one JSON object per event to stderr.
pub struct JsonLayer {
    redaction: Arc<Redaction>,
    sink: Sink,
}

impl fmt::Debug for JsonLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JsonLayer").finish_non_exhaustive()
    }
}

impl JsonLayer {
    /// A layer writing to stderr, one `write` per line so concurrent writers never
    /// interleave inside a line.
    pub fn new(redaction: Arc<Redaction>) -> Self {
        Self::with_sink(
            redaction,
            Arc::new(|line| {
                let _ = std::io::stderr().lock().write_all(line);
            }),
        )
    }

    /// A layer handing each finished line (with its `\n`) to `sink`.
    pub fn with_sink(redaction: Arc<Redaction>, sink: Sink) -> Self {
        Self { redaction, sink }
    }

    /// Builds the log object for an event with `fields` (span fields first, event's last).
    fn render(&self, level: &Level, mut fields: Map<String, Value>) -> String {
        let message = match fields.remove("message") {
            Some(Value::String(s)) => s,
            Some(other) => other.to_string(),
            None => String::new(),
        };
        let mut line = Map::new();
        let time = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
        line.insert("time".into(), Value::String(time));
        line.insert("level".into(), Value::String(level.as_str().to_ascii_lowercase()));
        line.insert("message".into(), Value::String(message));
        for key in ["task_id", "correlation_id"] {
            if let Some(value) = fields.remove(key) {
                if value.as_str().is_some_and(|s| !s.is_empty()) {
                    line.insert(key.into(), value);
                }
            }
        }
        if !fields.is_empty() {
            line.insert("metadata".into(), Value::Object(fields));
        }
        let mut line = Value::Object(line);
        redact_strings(&mut line, &self.redaction);
        line.to_string()
    }
}

fn redact_strings(value: &mut Value, redaction: &Redaction) {
    match value {
        Value::String(s) => {
            if let std::borrow::Cow::Owned(clean) = redaction.redact(s) {
                *s = clean;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| redact_strings(v, redaction)),
        Value::Object(map) => map.values_mut().for_each(|v| redact_strings(v, redaction)),
        _ => {}
    }
}

/// Span fields, stored in the span's extensions so events inside it can inherit them.
#[derive(Debug, Default)]
struct SpanFields(Map<String, Value>);

impl<S> Layer<S> for JsonLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut visitor = JsonVisitor::default();
        attrs.record(&mut visitor);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(SpanFields(visitor.0));
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            let mut visitor = JsonVisitor::default();
            values.record(&mut visitor);
            let mut extensions = span.extensions_mut();
            if let Some(fields) = extensions.get_mut::<SpanFields>() {
                fields.0.extend(visitor.0);
            }
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = Map::new();
        if let Some(scope) = ctx.event_scope(event) {
            for span in scope.from_root() {
                if let Some(span_fields) = span.extensions().get::<SpanFields>() {
                    fields.extend(span_fields.0.clone());
                }
            }
        }
        let mut visitor = JsonVisitor(fields);
        event.record(&mut visitor);
        let mut line = self.render(event.metadata().level(), visitor.0);
        line.push('\n');
        // The last pass, on the encoded line (values JSON-escaped); a line goes out whole.
        (self.sink)(&self.redaction.redact_bytes(line.as_bytes()));
    }
}

#[derive(Default)]
struct JsonVisitor(Map<String, Value>);

impl Visit for JsonVisitor {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), Value::String(value.to_owned()));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().into(), Value::from(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), Value::from(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().into(), Value::from(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().into(), Value::from(value));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().into(), Value::String(format!("{value:?}")));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nexbot_protocol::{Redactor, SecretMap};
    use secrecy::SecretString;

    fn capture(redaction: Arc<Redaction>, f: impl FnOnce()) -> Vec<Value> {
        let lines = Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
        let sink = lines.clone();
        let layer = JsonLayer::with_sink(
            redaction,
            Arc::new(move |line| sink.lock().unwrap().extend_from_slice(line)),
        );
        tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), f);
        let bytes = lines.lock().unwrap().clone();
        String::from_utf8(bytes)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn lines_have_the_protocol_shape_and_span_ids() {
        let lines = capture(Arc::default(), || {
            let span = tracing::info_span!("task", task_id = "t-1", correlation_id = "c-9");
            let _guard = span.enter();
            tracing::warn!(event = "tool", tool = "run_command", "refused");
        });
        let line = &lines[0];
        assert_eq!(line["level"], "warn");
        assert_eq!(line["message"], "refused");
        assert_eq!(line["task_id"], "t-1");
        assert_eq!(line["correlation_id"], "c-9");
        assert_eq!(line["metadata"]["event"], "tool");
        assert_eq!(line["metadata"]["tool"], "run_command");
        assert!(line["metadata"].get("task_id").is_none());
        assert!(line["time"].as_str().unwrap().ends_with('Z'));
    }

    #[test]
    fn secret_values_are_scrubbed_from_every_field() {
        let redaction = Arc::new(Redaction::default());
        let mut map = SecretMap::new();
        map.insert("TOKEN", SecretString::from("tok-very-secret".to_owned()));
        redaction.set(Arc::new(Redactor::new(&map)));
        let lines = capture(redaction, || {
            tracing::info!(event = "tool", detail = "x tok-very-secret y", "got tok-very-secret");
        });
        let text = lines[0].to_string();
        assert!(!text.contains("tok-very-secret"), "{text}");
        assert_eq!(lines[0]["message"], "got [REDACTED:TOKEN]");
    }
}
