//! The process-wide set of values that must never be printed, and the byte-level last pass of
//! the two writers.
//!
//! Secrets arrive with a task and the LLM key with a request, but they must be scrubbed from
//! every stdout line and every stderr log line, whoever writes it. The stdout writer
//! (`output.rs`) and the log layer (`logging.rs`) both consult this one slot, as defence in
//! depth behind the task's own redaction: first on every text field before encoding
//! ([`Redaction::redact`]), then on the encoded bytes themselves, where a value sits
//! JSON-escaped — the stdout writer through [`RedactingWriter`] (a [`StreamRedactor`] that
//! holds back at a chunk boundary and releases a line whole at its flush), the log layer with
//! [`Redaction::redact_bytes`] on each finished line. The redaction itself is
//! `nexbot_protocol::Redactor`, the one implementation.

use std::borrow::Cow;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{ready, Context, Poll};

use nexbot_protocol::{Redactor, StreamRedactor};
use tokio::io::AsyncWrite;

/// Holds the redactor for the secrets currently alive in the process (the task's secrets and
/// the LLM credentials), swapped as tasks start and end.
#[derive(Debug, Default)]
pub struct Redaction {
    current: RwLock<Option<Arc<Redactor>>>,
}

impl Redaction {
    /// Replaces the set of values to scrub.
    pub fn set(&self, redactor: Arc<Redactor>) {
        let redactor = if redactor.is_empty() { None } else { Some(redactor) };
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = redactor;
    }

    /// The redactor in force now, if any value must be scrubbed.
    pub fn get(&self) -> Option<Arc<Redactor>> {
        self.current.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// `text` with every live secret value (and its encoded forms) replaced by its label.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        match self.get() {
            Some(redactor) => Cow::Owned(redactor.redact(text)),
            None => Cow::Borrowed(text),
        }
    }

    /// [`Redaction::redact`] for bytes that go out whole (one encoded log line).
    pub fn redact_bytes<'a>(&self, line: &'a [u8]) -> Cow<'a, [u8]> {
        match self.get() {
            Some(redactor) => Cow::Owned(redactor.redact_bytes(line)),
            None => Cow::Borrowed(line),
        }
    }
}

/// A writer that redacts everything written through it with the live [`Redaction`].
///
/// Between writes it holds back at most [`Redactor::holdback`] bytes — only from where a form
/// may have begun — so a value cut between two writes is still replaced whole; a flush
/// releases everything held, so a writer that flushes after each line sends each line whole
/// and at once. A new redactor (a task started or ended) takes over at the next flush.
#[derive(Debug)]
pub struct RedactingWriter<W> {
    inner: W,
    redaction: Arc<Redaction>,
    stream: Option<(Arc<Redactor>, StreamRedactor)>,
    /// Redacted bytes not yet taken by `inner`.
    out: Vec<u8>,
}

impl<W: AsyncWrite + Unpin> RedactingWriter<W> {
    pub fn new(inner: W, redaction: Arc<Redaction>) -> Self {
        Self { inner, redaction, stream: None, out: Vec::new() }
    }

    /// Hands `out` to `inner` until it is empty.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.out.is_empty() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.out))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.out.drain(..n);
        }
        Poll::Ready(Ok(()))
    }

    /// Releases what the stream holds, and lets the next write pick up the live redactor.
    fn finish_stream(&mut self) {
        if let Some((_, mut stream)) = self.stream.take() {
            self.out.extend(stream.finish());
        }
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for RedactingWriter<W> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        let live = this.redaction.get();
        let same = match (&this.stream, &live) {
            (Some((used, _)), Some(live)) => Arc::ptr_eq(used, live),
            (None, None) => true,
            _ => false,
        };
        if !same {
            this.finish_stream();
            this.stream = live.map(|r| (r.clone(), r.stream()));
        }
        match &mut this.stream {
            Some((_, stream)) => this.out.extend(stream.push(buf)),
            None => this.out.extend_from_slice(buf),
        }
        // Pass on what is ready; what `inner` does not take yet goes first next time.
        let _ = this.poll_drain(cx)?;
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.finish_stream();
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.as_mut().poll_flush(cx))?;
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nexbot_protocol::SecretMap;
    use secrecy::SecretString;
    use tokio::io::AsyncWriteExt;

    fn redactor(pairs: &[(&str, &str)]) -> Arc<Redactor> {
        let mut map = SecretMap::new();
        for (name, value) in pairs {
            map.insert(*name, SecretString::from((*value).to_owned()));
        }
        Arc::new(Redactor::new(&map))
    }

    #[test]
    fn scrubs_only_while_set() {
        let slot = Redaction::default();
        assert_eq!(slot.redact("key=abc12345"), "key=abc12345");
        slot.set(redactor(&[("KEY", "abc12345")]));
        assert_eq!(slot.redact("key=abc12345"), "key=[REDACTED:KEY]");
        assert_eq!(&*slot.redact_bytes(b"key=abc12345"), b"key=[REDACTED:KEY]");
        slot.set(Arc::new(Redactor::default()));
        assert!(slot.get().is_none());
        assert_eq!(&*slot.redact_bytes(b"key=abc12345"), b"key=abc12345");
    }

    #[tokio::test]
    async fn a_value_cut_between_two_writes_is_replaced_and_a_flush_sends_the_line_whole() {
        let slot = Arc::new(Redaction::default());
        slot.set(redactor(&[("TOKEN", "tok-cut-in-two"), ("llm_api_key", "K")]));
        let (mut reader, writer) = tokio::io::duplex(1 << 16);
        let mut writer = RedactingWriter::new(writer, slot.clone());
        writer.write_all(b"{\"result\":\"a tok-cut").await.unwrap();
        writer.write_all(b"-in-two b [REDACTED:API] K\"}\n").await.unwrap();
        writer.flush().await.unwrap();
        // JSON-escaped, in one write: the value as it sits in an encoded line.
        slot.set(redactor(&[("Q", "say \"hi\"\\now")]));
        writer.write_all(b"{\"result\":\"say \\\"hi\\\"\\\\now\"}\n").await.unwrap();
        writer.shutdown().await.unwrap();
        let mut got = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut reader, &mut got).await.unwrap();
        assert_eq!(
            got,
            "{\"result\":\"a [REDACTED:TOKEN] b [REDACTED:API] [REDACTED:llm_api_key]\"}\n\
             {\"result\":\"[REDACTED:Q]\"}\n"
        );
    }

    #[tokio::test]
    async fn without_secrets_bytes_pass_unchanged() {
        let (mut reader, writer) = tokio::io::duplex(1024);
        let mut writer = RedactingWriter::new(writer, Arc::default());
        writer.write_all(b"[REDACTED:X] plain\n").await.unwrap();
        writer.shutdown().await.unwrap();
        let mut got = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut reader, &mut got).await.unwrap();
        assert_eq!(got, b"[REDACTED:X] plain\n");
    }
}
