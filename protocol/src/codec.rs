//! JSON-lines framing for tokio with a per-line size limit that is *recoverable*.
//!
//! A long-lived container serves many requests over one stream, so one bad line must cost one
//! error answer, not the stream. That is why framing problems are returned as items
//! (`Ok(Some(Err(LineError)))`) rather than as the decoder's error: `FramedRead` ends the stream
//! after a decoder error, while an item lets the reader answer and carry on. Only I/O errors end
//! the stream.

use std::fmt;
use std::io;
use std::marker::PhantomData;

use bytes::{Buf, BufMut, BytesMut};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use thiserror::Error;
use tokio_util::codec::{Decoder, Encoder};

/// A request line may be at most this many bytes (without its `\n`).
pub const MAX_REQUEST_LINE: usize = 1024 * 1024;

/// A line that could not be turned into a message. The stream goes on after it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LineError {
    #[error("line too long: {len} bytes (limit {limit})")]
    TooLong { len: usize, limit: usize },
    /// Not JSON, or JSON of the wrong shape. `id`/`correlation_id` are filled in when the line
    /// was a JSON object that carried them, so the answer can still be routed.
    #[error("invalid JSON: {message}")]
    Invalid { message: String, id: String, correlation_id: Option<String> },
}

/// Decodes `In` values from `\n`-terminated JSON lines and encodes `Out` values as such lines.
pub struct JsonLinesCodec<In, Out> {
    max_line: usize,
    /// Where to resume the newline search, so a line arriving in many reads is scanned once.
    scanned: usize,
    /// `Some(n)` while skipping the rest of an oversize line; `n` bytes skipped so far.
    discarding: Option<usize>,
    /// Every byte skipped so far was whitespace: the line is blank, and ignored like any
    /// blank line, whatever its length.
    discarding_blank: bool,
    _types: PhantomData<fn(Out) -> In>,
}

impl<In, Out> JsonLinesCodec<In, Out> {
    /// A codec with the protocol's 1 MiB line limit.
    pub fn new() -> Self {
        Self::with_max_line(MAX_REQUEST_LINE)
    }

    /// A codec with another limit; the host reads responses with a larger one, since a
    /// 1 MiB `result` grows when escaped.
    pub fn with_max_line(max_line: usize) -> Self {
        Self { max_line, scanned: 0, discarding: None, discarding_blank: true, _types: PhantomData }
    }

    pub fn max_line(&self) -> usize {
        self.max_line
    }
}

impl<In, Out> Default for JsonLinesCodec<In, Out> {
    fn default() -> Self {
        Self::new()
    }
}

impl<In, Out> fmt::Debug for JsonLinesCodec<In, Out> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JsonLinesCodec")
            .field("max_line", &self.max_line)
            .field("discarding", &self.discarding)
            .finish()
    }
}

#[derive(Deserialize)]
struct IdProbe {
    #[serde(default)]
    id: Option<serde_json::Value>,
    #[serde(default)]
    correlation_id: Option<serde_json::Value>,
}

fn probe_string(value: Option<serde_json::Value>) -> Option<String> {
    match value? {
        serde_json::Value::String(s) => Some(s),
        _ => None,
    }
}

fn parse_line<In: DeserializeOwned>(line: &[u8]) -> Result<In, LineError> {
    serde_json::from_slice(line).map_err(|err| {
        let probe = serde_json::from_slice::<IdProbe>(line).ok();
        let (id, correlation_id) = match probe {
            Some(p) => (probe_string(p.id).unwrap_or_default(), probe_string(p.correlation_id)),
            None => (String::new(), None),
        };
        LineError::Invalid { message: err.to_string(), id, correlation_id }
    })
}

fn is_blank(line: &[u8]) -> bool {
    line.iter().all(u8::is_ascii_whitespace)
}

impl<In: DeserializeOwned, Out> Decoder for JsonLinesCodec<In, Out> {
    type Item = Result<In, LineError>;
    type Error = io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> io::Result<Option<Self::Item>> {
        loop {
            let newline = memchr::memchr(b'\n', &buf[self.scanned..]).map(|i| i + self.scanned);
            match (self.discarding, newline) {
                (Some(skipped), Some(pos)) => {
                    let blank = self.discarding_blank && is_blank(&buf[..pos]);
                    buf.advance(pos + 1);
                    self.discarding = None;
                    self.scanned = 0;
                    if blank {
                        continue;
                    }
                    let len = skipped + pos;
                    return Ok(Some(Err(LineError::TooLong { len, limit: self.max_line })));
                }
                (Some(skipped), None) => {
                    self.discarding = Some(skipped + buf.len());
                    self.discarding_blank &= is_blank(buf);
                    buf.clear();
                    self.scanned = 0;
                    return Ok(None);
                }
                (None, Some(pos)) => {
                    let line = buf.split_to(pos + 1);
                    self.scanned = 0;
                    let line = line.strip_suffix(b"\n").unwrap_or(&line);
                    let line = line.strip_suffix(b"\r").unwrap_or(line);
                    if line.len() > self.max_line && !is_blank(line) {
                        return Ok(Some(Err(LineError::TooLong {
                            len: line.len(),
                            limit: self.max_line,
                        })));
                    }
                    if is_blank(line) {
                        continue;
                    }
                    return Ok(Some(parse_line(line)));
                }
                (None, None) => {
                    if buf.len() > self.max_line {
                        self.discarding = Some(buf.len());
                        self.discarding_blank = is_blank(buf);
                        buf.clear();
                        self.scanned = 0;
                    } else {
                        self.scanned = buf.len();
                    }
                    return Ok(None);
                }
            }
        }
    }

    /// A last line without `\n` still counts; an oversize line cut off by EOF is reported.
    fn decode_eof(&mut self, buf: &mut BytesMut) -> io::Result<Option<Self::Item>> {
        if let Some(item) = self.decode(buf)? {
            return Ok(Some(item));
        }
        if let Some(skipped) = self.discarding.take() {
            if self.discarding_blank {
                return Ok(None);
            }
            return Ok(Some(Err(LineError::TooLong { len: skipped, limit: self.max_line })));
        }
        if buf.is_empty() {
            return Ok(None);
        }
        let line = buf.split();
        self.scanned = 0;
        if is_blank(&line) {
            return Ok(None);
        }
        Ok(Some(parse_line(&line)))
    }
}

impl<In, Out: Serialize> Encoder<Out> for JsonLinesCodec<In, Out> {
    type Error = io::Error;

    fn encode(&mut self, item: Out, dst: &mut BytesMut) -> io::Result<()> {
        serde_json::to_writer(dst.writer(), &item).map_err(io::Error::other)?;
        dst.put_u8(b'\n');
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Request, RequestType, Response};
    use futures_util::StreamExt;
    use tokio_util::codec::FramedRead;

    type ReqCodec = JsonLinesCodec<Request, Response>;

    fn decode_all(codec: &mut ReqCodec, input: &[u8]) -> Vec<Result<Request, LineError>> {
        let mut buf = BytesMut::from(input);
        let mut out = Vec::new();
        while let Some(item) = codec.decode(&mut buf).unwrap() {
            out.push(item);
        }
        while let Some(item) = codec.decode_eof(&mut buf).unwrap() {
            out.push(item);
        }
        out
    }

    #[test]
    fn oversize_line_is_reported_and_next_line_decodes() {
        let mut codec = ReqCodec::with_max_line(64);
        let mut input = vec![b'x'; 200];
        input.extend_from_slice(b"\n{\"type\":\"ping\",\"id\":\"after\"}\n");
        let items = decode_all(&mut codec, &input);
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].as_ref().err(), Some(&LineError::TooLong { len: 200, limit: 64 }));
        assert_eq!(items[1].as_ref().unwrap().id, "after");
    }

    #[test]
    fn oversize_line_arriving_in_chunks_is_discarded_without_buffering() {
        let mut codec = ReqCodec::with_max_line(16);
        let mut buf = BytesMut::new();
        for _ in 0..10 {
            buf.extend_from_slice(&[b'a'; 10]);
            assert!(codec.decode(&mut buf).unwrap().is_none());
            assert!(buf.len() <= 16 + 10);
        }
        buf.extend_from_slice(b"aa\n{\"type\":\"ping\"}\n");
        let first = codec.decode(&mut buf).unwrap().unwrap();
        assert_eq!(first.err(), Some(LineError::TooLong { len: 102, limit: 16 }));
        let second = codec.decode(&mut buf).unwrap().unwrap().unwrap();
        assert_eq!(second.kind, RequestType::Ping);
    }

    #[test]
    fn line_of_exactly_the_limit_is_accepted() {
        let body = r#"{"type":"ping","id":""#;
        let pad = 1000 - body.len() - 2;
        let line = format!("{body}{}\"}}", "p".repeat(pad));
        assert_eq!(line.len(), 1000);
        let mut codec = ReqCodec::with_max_line(1000);
        let items = decode_all(&mut codec, format!("{line}\n").as_bytes());
        assert!(items[0].is_ok(), "{:?}", items[0]);
        let mut codec = ReqCodec::with_max_line(999);
        let items = decode_all(&mut codec, format!("{line}\n").as_bytes());
        assert!(matches!(items[0], Err(LineError::TooLong { len: 1000, .. })));
    }

    #[test]
    fn default_limit_is_one_mebibyte() {
        assert_eq!(ReqCodec::new().max_line(), 1024 * 1024);
    }

    #[test]
    fn blank_lines_are_skipped_and_crlf_is_accepted() {
        let mut codec = ReqCodec::new();
        let items = decode_all(&mut codec, b"\n   \n\r\n{\"type\":\"ping\",\"id\":\"a\"}\r\n\n");
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].as_ref().unwrap().id, "a");
    }

    #[test]
    fn invalid_json_has_empty_id_and_stream_goes_on() {
        let mut codec = ReqCodec::new();
        let items = decode_all(&mut codec, b"{not json\n{\"type\":\"ping\",\"id\":\"b\"}\n");
        match &items[0] {
            Err(LineError::Invalid { id, message, .. }) => {
                assert_eq!(id, "");
                assert!(!message.is_empty());
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(items[1].as_ref().unwrap().id, "b");
    }

    #[test]
    fn wrong_shape_keeps_the_id() {
        let mut codec = ReqCodec::new();
        let items =
            decode_all(&mut codec, b"{\"id\":\"k\",\"correlation_id\":\"c\",\"timeout\":\"x\"}\n");
        match &items[0] {
            Err(LineError::Invalid { id, correlation_id, .. }) => {
                assert_eq!(id, "k");
                assert_eq!(correlation_id.as_deref(), Some("c"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn last_line_without_newline_decodes_at_eof() {
        let mut codec = ReqCodec::new();
        let items = decode_all(&mut codec, b"{\"type\":\"ping\",\"id\":\"eof\"}");
        assert_eq!(items[0].as_ref().unwrap().id, "eof");
    }

    #[test]
    fn encoder_writes_one_line() {
        let mut codec = ReqCodec::new();
        let mut buf = BytesMut::new();
        codec.encode(Response::error("a", None, "multi\nline", None), &mut buf).unwrap();
        assert_eq!(buf.iter().filter(|b| **b == b'\n').count(), 1);
        assert!(buf.ends_with(b"\n"));
    }

    #[tokio::test]
    async fn framed_read_survives_errors() {
        let input: &[u8] =
            b"garbage\n{\"type\":\"ping\",\"id\":\"1\"}\nxx\n{\"type\":\"ping\",\"id\":\"2\"}\n";
        let items: Vec<_> = FramedRead::new(input, ReqCodec::new()).collect().await;
        let ids: Vec<_> = items
            .into_iter()
            .map(|i| i.unwrap().map(|r| r.id).unwrap_or_else(|_| "ERR".into()))
            .collect();
        assert_eq!(ids, ["ERR", "1", "ERR", "2"]);
    }
}
