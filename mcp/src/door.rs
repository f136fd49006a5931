//! A remote server's HTTP client: Streamable HTTP over the egress door's Unix socket, every
//! message the server answers cut as it streams in ([`crate::cut`]), never held whole.
//!
//! Why a client of our own: rmcp's (`UnixSocketHttpClient`) reads a JSON body whole (up to
//! 16 MiB) and an SSE event whole (up to 16 MiB) before it parses them, and a result was cut
//! for the model only after that, so one 10 MiB result of a remote server was held, parsed and
//! copied, as stdio's was before `stdio.rs`. The protocol stays rmcp's
//! (`StreamableHttpClientTransport`: the session, resuming a dropped stream, the GET stream);
//! this client only sends its requests and reads the answers through the one cutter.
//!
//! What a message over the limit becomes over HTTP (as on stdio, the next one is read as ever):
//! - a JSON body (`application/json`) is one message: its strings are cut as read; one still
//!   over [`MAX_MESSAGE_BYTES`] is dropped as read, and when it answered a request of ours the
//!   error answering that request (naming the limit) stands in for it, so the call fails
//!   saying why; otherwise the POST fails with that reason (the body held nothing else);
//! - an SSE stream (`text/event-stream`) carries one message an event, in its `data:` lines
//!   (joined by newlines, JSON whitespace): each event's data goes through the cutter, so its
//!   strings are cut as read; an event still over the limit keeps its `id` (a resume starts
//!   after it) and its data becomes the error answering its request, or none when it answered
//!   nothing (rmcp skips an event without data), and the stream goes on with the next event.
//!   `event`, `id` and `retry` keep at most [`MAX_FIELD_BYTES`]; other fields and comments are
//!   skipped as read;
//! - an error status's body is read the same way and used only when it is a JSON-RPC error.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use futures_util::stream::{BoxStream, StreamExt};
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HOST};
use http::{HeaderName, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::common::http_header::{
    EVENT_STREAM_MIME_TYPE, HEADER_LAST_EVENT_ID, HEADER_SESSION_ID, JSON_MIME_TYPE,
};
use rmcp::transport::common::unix_socket::UnixSocketError;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use rmcp::transport::UnixSocketHttpClient;
use sse_stream::{Error as SseError, Sse};

use crate::cut::{Cutter, MAX_MESSAGE_BYTES};

/// Bytes of an SSE `event`, `id` or `retry` value kept (an id names a place in a stream).
pub const MAX_FIELD_BYTES: usize = 1024;
/// Bytes of an error status's body shown in the error.
const SHOWN_ERROR_BYTES: usize = 1024;

type Error = StreamableHttpError<UnixSocketError>;

/// The HTTP client of a remote server's session through the door at a Unix socket path (a
/// file; every request goes there in absolute form, one connection each, as rmcp's does).
#[derive(Clone, Debug)]
pub struct DoorClient {
    door: Arc<str>,
    host: HeaderValue,
    /// rmcp's own client, for what reads no answer (ending the session).
    plain: UnixSocketHttpClient,
}

impl DoorClient {
    pub fn new(door: &str, url: &str) -> Self {
        let host = url
            .parse::<http::Uri>()
            .ok()
            .and_then(|u| u.authority().and_then(|a| HeaderValue::from_str(a.as_str()).ok()))
            .unwrap_or(HeaderValue::from_static("localhost"));
        Self { door: door.into(), host, plain: UnixSocketHttpClient::new(door, url) }
    }

    fn request(
        &self,
        method: Method,
        uri: &str,
        session_id: Option<&str>,
        auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
    ) -> http::request::Builder {
        let mut builder = Request::builder()
            .method(method)
            .uri(uri)
            .header(HOST, self.host.clone())
            .header(ACCEPT, format!("{EVENT_STREAM_MIME_TYPE}, {JSON_MIME_TYPE}"));
        if let Some(session_id) = session_id {
            builder = builder.header(HEADER_SESSION_ID, session_id);
        }
        if let Some(auth) = auth {
            builder = builder.header(AUTHORIZATION, format!("Bearer {auth}"));
        }
        // Checked when the configuration was read (`McpConfig::validate`): none is ours.
        for (name, value) in headers {
            builder = builder.header(name, value);
        }
        builder
    }

    async fn send(&self, request: Request<Full<Bytes>>) -> Result<Response<Incoming>, Error> {
        let stream = tokio::net::UnixStream::connect(&*self.door).await.map_err(client)?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(client)?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("a connection to the MCP door failed: {e}");
            }
        });
        sender.send_request(request).await.map_err(client)
    }

    async fn post(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, Error> {
        let body = serde_json::to_vec(&message).map_err(client)?;
        let attached = session_id.is_some();
        let request = self
            .request(Method::POST, &uri, session_id.as_deref(), auth, headers)
            .header(CONTENT_TYPE, JSON_MIME_TYPE)
            .body(Full::new(Bytes::from(body)))
            .map_err(client)?;
        let response = self.send(request).await?;
        let status = response.status();
        if matches!(status, StatusCode::ACCEPTED | StatusCode::NO_CONTENT) {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if status == StatusCode::NOT_FOUND && attached {
            return Err(StreamableHttpError::SessionExpired);
        }
        let session = response
            .headers()
            .get(HEADER_SESSION_ID)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let content_type = response.headers().get(CONTENT_TYPE).cloned();
        let is = |expected| content_type.as_ref().is_some_and(|ct| media_type_is(ct, expected));
        // Only a request awaits an answer; what comes back to anything else is not read.
        let awaits_none = !matches!(message, ClientJsonRpcMessage::Request(_));
        if !status.is_success() {
            let body = read_message(response.into_body()).await?;
            return match serde_json::from_slice::<ServerJsonRpcMessage>(&body) {
                Ok(error @ ServerJsonRpcMessage::Error(_)) => {
                    Ok(StreamableHttpPostResponse::Json(error, session))
                }
                _ => Err(unexpected(format!("HTTP {status}: {}", shown(&body)))),
            };
        }
        if is(EVENT_STREAM_MIME_TYPE) {
            return Ok(StreamableHttpPostResponse::Sse(cut_sse(response.into_body()), session));
        }
        if is(JSON_MIME_TYPE) {
            let body = read_message(response.into_body()).await?;
            return match serde_json::from_slice::<ServerJsonRpcMessage>(&body) {
                Ok(answer) => Ok(StreamableHttpPostResponse::Json(answer, session)),
                Err(_) if awaits_none => Ok(StreamableHttpPostResponse::Accepted),
                Err(e) => Err(e.into()),
            };
        }
        if awaits_none {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        Err(StreamableHttpError::UnexpectedContentType(
            content_type.map(|ct| String::from_utf8_lossy(ct.as_bytes()).into_owned()),
        ))
    }

    async fn get(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, Error> {
        let mut builder = self.request(Method::GET, &uri, session_id.as_deref(), auth, headers);
        if let Some(last) = last_event_id {
            builder = builder.header(HEADER_LAST_EVENT_ID, last);
        }
        let response = self.send(builder.body(Full::new(Bytes::new())).map_err(client)?).await?;
        let status = response.status();
        if status == StatusCode::METHOD_NOT_ALLOWED {
            return Err(StreamableHttpError::ServerDoesNotSupportSse);
        }
        if !status.is_success() {
            return Err(unexpected(format!("get_stream returned {status}")));
        }
        match response.headers().get(CONTENT_TYPE) {
            Some(ct) if media_type_is(ct, EVENT_STREAM_MIME_TYPE) => {
                Ok(cut_sse(response.into_body()))
            }
            ct => Err(StreamableHttpError::UnexpectedContentType(
                ct.map(|ct| String::from_utf8_lossy(ct.as_bytes()).into_owned()),
            )),
        }
    }
}

/// The transport's own limits (16 MiB an event or a body) are not used: every message is
/// bounded by the cutter's, which are smaller ([`MAX_MESSAGE_BYTES`]).
impl StreamableHttpClient for DoorClient {
    type Error = UnixSocketError;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, Error> {
        self.post(uri, message, session_id, auth, headers).await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
        _max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, Error> {
        self.post(uri, message, session_id, auth, headers).await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
        _limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, Error> {
        self.post(uri, message, session_id, auth, headers).await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), Error> {
        self.plain.delete_session(uri, session_id, auth, headers).await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, Error> {
        self.get(uri, session_id, last_event_id, auth, headers).await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
        _max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, Error> {
        self.get(uri, session_id, last_event_id, auth, headers).await
    }
}

fn client(e: impl Into<UnixSocketError>) -> Error {
    StreamableHttpError::Client(e.into())
}

fn unexpected(why: String) -> Error {
    StreamableHttpError::UnexpectedServerResponse(why.into())
}

/// The start of an error status's body, for the error.
fn shown(body: &[u8]) -> String {
    String::from_utf8_lossy(&body[..body.len().min(SHOWN_ERROR_BYTES)]).into_owned()
}

/// Whether a `Content-Type` is `expected` (parameters such as `charset` aside).
fn media_type_is(value: &HeaderValue, expected: &str) -> bool {
    let value = value.to_str().unwrap_or_default();
    value.split(';').next().is_some_and(|t| t.trim().eq_ignore_ascii_case(expected))
}

/// A body of one message, read through the cutter.
async fn read_message(body: Incoming) -> Result<Vec<u8>, Error> {
    let mut cutter = Cutter::default();
    let mut body = body.into_data_stream();
    while let Some(chunk) = body.next().await {
        cutter.scan(&chunk.map_err(client)?);
    }
    let mut message = Vec::new();
    if cutter.end(&mut message) {
        return Ok(message);
    }
    Err(unexpected(format!(
        "the server's answer was over the limit of {MAX_MESSAGE_BYTES} bytes a message and \
         answered no request; it was dropped"
    )))
}

/// An SSE body's events, each one's data cut as it is read ([`SseCut`]).
fn cut_sse(body: Incoming) -> BoxStream<'static, Result<Sse, SseError>> {
    let start = (body.into_data_stream(), SseCut::default());
    futures_util::stream::unfold(start, |(mut body, mut cut)| async move {
        loop {
            if let Some(event) = cut.ready.pop_front() {
                return Some((Ok(event), (body, cut)));
            }
            match body.next().await? {
                Ok(chunk) => cut.feed(&chunk),
                Err(e) => {
                    // The stream ends here (rmcp resumes it from the last event's id).
                    cut.ready.clear();
                    return Some((Err(SseError::Body(Box::new(e))), (body, cut)));
                }
            }
        }
    })
    .boxed()
}

/// Where the current SSE line's value goes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Field {
    /// Before the line's colon: its bytes are the field's name.
    #[default]
    Name,
    Data,
    Event,
    Id,
    Retry,
    /// A comment or a field of no use: skipped.
    Skip,
}

/// The SSE parser of one response stream (the `text/event-stream` format: `field: value`
/// lines, an empty line ending an event), each event's data through a [`Cutter`].
#[derive(Debug, Default)]
struct SseCut {
    field: Field,
    /// The current line's name (at most a few bytes are needed to know it).
    name: Vec<u8>,
    /// A value's first byte is still to come (one space there is not the value's).
    value_starts: bool,
    /// The value of the current `event`, `id` or `retry` line.
    value: Vec<u8>,
    /// The last byte was a CR: an LF right after it ends no other line.
    after_cr: bool,
    data: Cutter,
    data_lines: usize,
    event: Option<String>,
    id: Option<String>,
    retry: Option<u64>,
    /// Events complete, for the reader.
    ready: VecDeque<Sse>,
}

impl SseCut {
    fn feed(&mut self, mut bytes: &[u8]) {
        while let Some(&b) = bytes.first() {
            let after_cr = std::mem::take(&mut self.after_cr);
            if b == b'\n' || b == b'\r' {
                self.after_cr = b == b'\r';
                if !(after_cr && b == b'\n') {
                    self.end_line();
                }
                bytes = &bytes[1..];
            } else if self.field == Field::Data && !self.value_starts {
                // A data line's value goes to the cutter a run at a time.
                let end = bytes.iter().position(|b| *b == b'\n' || *b == b'\r');
                let (run, rest) = bytes.split_at(end.unwrap_or(bytes.len()));
                self.data.scan(run);
                bytes = rest;
            } else {
                self.byte(b);
                bytes = &bytes[1..];
            }
        }
    }

    fn byte(&mut self, b: u8) {
        match self.field {
            Field::Name if b == b':' => self.start_value(),
            Field::Name => {
                if self.name.len() < 8 {
                    self.name.push(b);
                } else {
                    self.field = Field::Skip;
                }
            }
            Field::Skip => {}
            _ if std::mem::take(&mut self.value_starts) && b == b' ' => {}
            Field::Data => self.data.scan(&[b]),
            _ if self.value.len() < MAX_FIELD_BYTES => self.value.push(b),
            _ => {}
        }
    }

    /// The line's name is read: where its value goes.
    fn start_value(&mut self) {
        self.value_starts = true;
        self.value.clear();
        self.field = match self.name.as_slice() {
            b"data" => {
                if self.data_lines > 0 {
                    self.data.scan(b"\n");
                }
                self.data_lines += 1;
                Field::Data
            }
            b"event" => Field::Event,
            b"id" => Field::Id,
            b"retry" => Field::Retry,
            _ => Field::Skip,
        };
    }

    fn end_line(&mut self) {
        if self.field == Field::Name {
            if self.name.is_empty() {
                return self.dispatch();
            }
            // A name without a colon is that field with an empty value.
            self.start_value();
        }
        let value = String::from_utf8_lossy(&self.value).into_owned();
        match self.field {
            Field::Event => self.event = Some(value),
            Field::Id if !value.contains('\0') => self.id = Some(value),
            Field::Retry => self.retry = value.parse().ok().or(self.retry),
            _ => {}
        }
        self.field = Field::Name;
        self.name.clear();
        self.value.clear();
    }

    /// An empty line: the event read so far is complete.
    fn dispatch(&mut self) {
        let (event, id, retry) = (self.event.take(), self.id.take(), self.retry.take());
        if self.data_lines == 0 && event.is_none() && id.is_none() && retry.is_none() {
            return;
        }
        let mut data = None;
        if std::mem::take(&mut self.data_lines) > 0 {
            let mut kept = Vec::new();
            if self.data.end(&mut kept) {
                data = Some(
                    String::from_utf8(kept)
                        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
                );
            }
        }
        self.ready.push_back(Sse { event, data, id, retry });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// `input` through an [`SseCut`] in chunks of `size` bytes.
    fn events(input: &[u8], size: usize) -> Vec<Sse> {
        let mut cut = SseCut::default();
        for chunk in input.chunks(size) {
            cut.feed(chunk);
        }
        cut.ready.into()
    }

    fn data(event: &Sse) -> Value {
        serde_json::from_str(event.data.as_deref().unwrap()).expect("the data stays JSON")
    }

    #[test]
    fn events_pass_as_they_are_however_they_are_split() {
        let input = b": hello\r\nid: 7\nevent: message\ndata: {\"id\":1,\ndata:\"result\":\"\\u00e9\"}\r\rretry: 30\nid\n\ndata\n\n";
        for size in [1, 2, 5, 1000] {
            let got = events(input, size);
            assert_eq!(got.len(), 3, "chunks of {size}");
            assert_eq!(
                (got[0].id.as_deref(), got[0].event.as_deref()),
                (Some("7"), Some("message"))
            );
            assert_eq!(data(&got[0]), json!({"id": 1, "result": "é"}));
            assert_eq!(
                (got[1].retry, got[1].id.as_deref(), got[1].data.as_deref()),
                (Some(30), Some(""), None)
            );
            assert_eq!(got[2].data.as_deref(), Some(""));
        }
    }

    #[test]
    fn a_huge_string_in_an_event_is_cut_while_read() {
        let text = "A".repeat(3 * MAX_MESSAGE_BYTES);
        let input =
            format!("id: 1\ndata: {{\"id\":2,\"result\":\"{text}\"}}\n\ndata: {{\"id\":3}}\n\n");
        let got = events(input.as_bytes(), 64 * 1024);
        let note = format!("[cut by Nexbot while reading: {} bytes in all]", text.len());
        assert!(data(&got[0])["result"].as_str().unwrap().ends_with(&note));
        assert_eq!(data(&got[1]), json!({"id": 3}));
    }

    #[test]
    fn an_event_too_big_even_cut_answers_its_request_with_an_error_and_keeps_its_id() {
        let many: Vec<String> = (0..MAX_MESSAGE_BYTES / 4).map(|i| i.to_string()).collect();
        let answer = json!({"jsonrpc": "2.0", "id": "call-3", "result": {"parts": many}});
        let note = json!({"jsonrpc": "2.0", "method": "x", "params": {"p": many}});
        let input = format!("id: 9\ndata: {answer}\n\ndata: {note}\n\ndata: {{}}\n\n");
        let got = events(input.as_bytes(), 16 * 1024);
        assert_eq!(got[0].id.as_deref(), Some("9"));
        let why = data(&got[0])["error"]["message"].as_str().unwrap().to_owned();
        assert!(why.contains("over the limit"), "{why}");
        assert_eq!(got[1].data, None, "a notification over the limit is only dropped");
        assert_eq!(data(&got[2]), json!({}));
    }
}
