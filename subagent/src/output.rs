//! The single writer of stdout.
//!
//! Responses come from the stdin reader (pongs, request errors) and from the running task
//! (progress, the final answer) at the same time. Funnelling them through one channel into one
//! task guarantees whole lines that never interleave, and gives one last place to scrub
//! secrets before a byte leaves the process.

use std::sync::Arc;

use bytes::BytesMut;
use nexbot_protocol::{JsonLinesCodec, Redactor, Report, Request, Response, ResponseBody};
use serde_json::Value;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::codec::Encoder;

use crate::redaction::{RedactingWriter, Redaction};

/// Responses waiting for stdout. Bounded so a host that stops reading slows us down instead
/// of growing memory.
const QUEUE: usize = 256;

/// A handle for sending response lines. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Output {
    tx: mpsc::Sender<(Response, Option<Arc<Redactor>>)>,
}

impl Output {
    /// Starts the writer task on `sink`. It ends when every [`Output`] is dropped and the
    /// queue is drained; await the returned handle to be sure everything was flushed.
    pub fn spawn<W>(sink: W, redaction: Arc<Redaction>) -> (Self, JoinHandle<()>)
    where
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (tx, mut rx) = mpsc::channel::<(Response, Option<Arc<Redactor>>)>(QUEUE);
        // The last pass, on the encoded bytes (values JSON-escaped); each line's flush
        // releases it whole.
        let mut sink = RedactingWriter::new(sink, redaction.clone());
        let handle = tokio::spawn(async move {
            let mut codec = JsonLinesCodec::<Request, Response>::new();
            let mut buf = BytesMut::new();
            while let Some((response, own)) = rx.recv().await {
                let response = redact_response(response, |text| {
                    let text = own.as_ref().map_or_else(|| text.to_owned(), |r| r.redact(text));
                    redaction.redact(&text).into_owned()
                });
                buf.clear();
                let written = match codec.encode(response, &mut buf) {
                    Ok(()) => {
                        async {
                            sink.write_all(&buf).await?;
                            sink.flush().await
                        }
                        .await
                    }
                    Err(err) => Err(err),
                };
                if let Err(err) = written {
                    tracing::error!(event = "protocol", error = %err, "cannot write to stdout");
                    break;
                }
            }
        });
        (Self { tx }, handle)
    }

    /// Queues one response line. A closed stdout is logged by the writer; nothing to do here.
    pub async fn send(&self, response: Response) {
        let _ = self.tx.send((response, None)).await;
    }

    /// Queues a line from a task, scrubbed with the task's own `redactor` as well as the
    /// process-wide one: the task's secrets may be gone from the process-wide slot by the
    /// time the writer gets to its final answer.
    pub async fn send_redacted(&self, response: Response, redactor: Arc<Redactor>) {
        let _ = self.tx.send((response, Some(redactor))).await;
    }
}

/// `value` with `f` applied to every string in it.
fn map_strings(value: Value, f: &impl Fn(&str) -> String) -> Value {
    match value {
        Value::String(text) => Value::String(f(&text)),
        Value::Array(items) => Value::Array(items.into_iter().map(|v| map_strings(v, f)).collect()),
        Value::Object(map) => {
            Value::Object(map.into_iter().map(|(k, v)| (k, map_strings(v, f))).collect())
        }
        other => other,
    }
}

/// Applies `f` to every free-text field of a response (`result`, `error`, `detail`, the
/// report's texts): used to redact and sanitize before anything is written.
pub fn redact_response(mut response: Response, f: impl Fn(&str) -> String) -> Response {
    let map_report = |report: Option<Report>| report.map(|r| r.map_text(&f));
    // A success's texts are its result and its open todos' contents; the rest are counts and
    // the returned files' names, checked when they were taken.
    if let ResponseBody::Success { result, open_todos, .. } = &mut response.body {
        *result = f(result);
        for todo in open_todos.iter_mut() {
            todo.content = f(&todo.content);
        }
        return response;
    }
    response.body = match response.body {
        success @ ResponseBody::Success { .. } => success,
        ResponseBody::Error { error, report } => {
            ResponseBody::Error { error: f(&error), report: map_report(report) }
        }
        ResponseBody::Timeout { error, report } => {
            ResponseBody::Timeout { error: f(&error), report: map_report(report) }
        }
        ResponseBody::Progress { event, tool, detail } => {
            ResponseBody::Progress { event, tool, detail: detail.map(|d| f(&d)) }
        }
        pong @ ResponseBody::Pong { .. } => pong,
        // The bytes were checked for the task's secrets when the file was taken
        // (`tools::files::take_for_return`); base64 is not text to redact.
        ResponseBody::File { name, offset, size, data } => {
            ResponseBody::File { name: f(&name), offset, size, data }
        }
        // The model's arguments for a tool of the host's: every string in them.
        ResponseBody::McpCall { call_id, tool, arguments } => ResponseBody::McpCall {
            call_id,
            tool,
            arguments: arguments.into_iter().map(|(k, v)| (k, map_strings(v, &f))).collect(),
        },
    };
    response
}
