//! The attached stdio link to one container: requests written to its stdin as JSON lines,
//! responses read from its stdout and routed to whoever waits for that `id`, stderr lines
//! handed to the log.
//!
//! Routing by `id` is what lets a health `ping` travel to a container that is busy with a
//! task: both wait on the same link, each for its own answer. When the link dies (the
//! container exited, was killed, or stopped answering), every waiter is woken at once with the
//! reason: their channel closes, and [`Link::reason`] says why. Nobody is left hanging.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bollard::container::LogOutput;
use bytes::BytesMut;
use futures_util::{Stream, StreamExt};
use nexbot_protocol::{JsonLinesCodec, LineError, Request, Response};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_util::codec::Decoder;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};
use zeroize::Zeroizing;

use crate::lines::LineSplitter;
use crate::logs::{self, LogRing};
use crate::restart::RestartReason;

pub(crate) type Input = Pin<Box<dyn AsyncWrite + Send>>;
pub(crate) type Output =
    Pin<Box<dyn Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>;

/// A response line may be far longer than a request: a 1 MiB `result` grows when escaped.
const MAX_RESPONSE_LINE: usize = 16 * 1024 * 1024;
/// Stderr lines longer than this are cut before they are logged and kept.
const MAX_LOG_LINE: usize = 16 * 1024;

/// Why a link operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LinkError {
    /// The link is dead; the text says why (exit code, OOM, unanswered ping...).
    Closed(String),
    /// No final answer within the time allowed.
    Timeout,
    /// A request with this id is already waiting on this link.
    Duplicate(String),
}

#[derive(Default)]
struct Waiters {
    senders: HashMap<String, mpsc::UnboundedSender<Response>>,
    reason: Option<String>,
    /// What killed the link, when whoever failed it knew (the engine's account of a death).
    cause: Option<RestartReason>,
}

/// One container's attached stdio.
pub(crate) struct Link {
    container: String,
    input: tokio::sync::Mutex<Input>,
    waiters: Mutex<Waiters>,
    closed: CancellationToken,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("container", &self.container)
            .field("closed", &self.closed.is_cancelled())
            .finish()
    }
}

impl Link {
    /// Wraps an attached container's stdin; `container` names it in error messages.
    pub(crate) fn new(container: impl Into<String>, input: Input) -> Arc<Self> {
        Arc::new(Self {
            container: container.into(),
            input: tokio::sync::Mutex::new(input),
            waiters: Mutex::new(Waiters::default()),
            closed: CancellationToken::new(),
        })
    }

    fn waiters(&self) -> std::sync::MutexGuard<'_, Waiters> {
        self.waiters.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts waiting for the answers to request `id`: progress lines, then one final line.
    pub(crate) fn register(
        &self,
        id: &str,
    ) -> Result<mpsc::UnboundedReceiver<Response>, LinkError> {
        let mut waiters = self.waiters();
        if let Some(reason) = &waiters.reason {
            return Err(LinkError::Closed(reason.clone()));
        }
        if waiters.senders.contains_key(id) {
            return Err(LinkError::Duplicate(id.to_owned()));
        }
        let (tx, rx) = mpsc::unbounded_channel();
        waiters.senders.insert(id.to_owned(), tx);
        Ok(rx)
    }

    pub(crate) fn unregister(&self, id: &str) {
        self.waiters().senders.remove(id);
    }

    /// Writes one request line. A write that does not finish within `timeout` (a frozen
    /// container whose stdin pipe is full) kills the link.
    pub(crate) async fn send(&self, request: &Request, timeout: Duration) -> Result<(), LinkError> {
        // The line may hold the task's secrets: wipe it once written.
        let mut line = Zeroizing::new(
            serde_json::to_vec(request)
                .map_err(|e| LinkError::Closed(format!("request could not be encoded: {e}")))?,
        );
        line.push(b'\n');
        if let Some(reason) = &self.waiters().reason {
            return Err(LinkError::Closed(reason.clone()));
        }
        let write = async {
            let mut input = self.input.lock().await;
            input.write_all(&line).await?;
            input.flush().await
        };
        let reason = match tokio::time::timeout(timeout, write).await {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(e)) => format!("writing to its stdin failed: {e}"),
            Err(_) => format!("writing to its stdin blocked for more than {timeout:?}"),
        };
        self.fail(&reason);
        Err(LinkError::Closed(self.reason()))
    }

    /// Sends `request` and waits up to `timeout` for its final answer.
    pub(crate) async fn roundtrip(
        &self,
        request: &Request,
        timeout: Duration,
    ) -> Result<Response, LinkError> {
        let mut rx = self.register(&request.id)?;
        let answer = async {
            self.send(request, timeout).await?;
            loop {
                match rx.recv().await {
                    Some(response) if response.is_final() => return Ok(response),
                    Some(_progress) => continue,
                    None => return Err(LinkError::Closed(self.reason())),
                }
            }
        };
        let result = tokio::time::timeout(timeout, answer).await.unwrap_or(Err(LinkError::Timeout));
        self.unregister(&request.id);
        result
    }

    /// Marks the link dead with `reason` (the first reason wins) and wakes every waiter.
    pub(crate) fn fail(&self, reason: &str) {
        self.fail_because(None, reason);
    }

    /// [`Link::fail`], also recording what killed the link, so that the replacement can be
    /// counted by its cause (see [`RestartReason`]) rather than by parsing the text.
    pub(crate) fn fail_because(&self, cause: Option<RestartReason>, reason: &str) {
        let senders = {
            let mut waiters = self.waiters();
            if waiters.reason.is_none() {
                waiters.reason = Some(reason.to_owned());
                waiters.cause = cause;
            }
            std::mem::take(&mut waiters.senders)
        };
        drop(senders);
        self.closed.cancel();
    }

    /// Why the link died ("" while it is alive).
    pub(crate) fn reason(&self) -> String {
        self.waiters().reason.clone().unwrap_or_default()
    }

    /// What killed the link, if it is dead and whoever failed it knew.
    pub(crate) fn cause(&self) -> Option<RestartReason> {
        self.waiters().cause.clone()
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    pub(crate) fn closed(&self) -> WaitForCancellationFuture<'_> {
        self.closed.cancelled()
    }

    fn route(&self, response: Response) {
        let mut waiters = self.waiters();
        let sender = if response.is_final() {
            waiters.senders.remove(&response.id)
        } else {
            waiters.senders.get(&response.id).cloned()
        };
        drop(waiters);
        match sender {
            Some(tx) => {
                let _ = tx.send(response);
            }
            None => tracing::debug!(
                container = %self.container,
                id = %response.id,
                status = response.status(),
                "response nobody waits for (late answer to an abandoned request)"
            ),
        }
    }

    /// Reads the attach stream until it ends or `stop` fires, routing stdout lines as
    /// responses and stderr lines to the log. Returns a description of how it ended; the
    /// caller then fails the link with a reason it may refine (exit code, OOM).
    pub(crate) async fn read_output(
        &self,
        mut output: Output,
        logs: &LogRing,
        stop: &CancellationToken,
    ) -> Option<String> {
        let mut stdout = StdoutDecoder::new();
        let mut stderr = LineSplitter::new(MAX_LOG_LINE);
        let ended = loop {
            let item = tokio::select! {
                _ = stop.cancelled() => return None,
                item = output.next() => item,
            };
            match item {
                Some(Ok(LogOutput::StdOut { message } | LogOutput::Console { message })) => {
                    for response in stdout.push(&message, &self.container) {
                        self.route(response);
                    }
                }
                Some(Ok(LogOutput::StdErr { message })) => {
                    for line in stderr.push(&message) {
                        logs::record(logs, &self.container, line);
                    }
                }
                Some(Ok(LogOutput::StdIn { .. })) => {}
                Some(Err(e)) => break format!("its attach stream failed: {e}"),
                None => break "its attach stream ended".to_owned(),
            }
        };
        for response in stdout.finish(&self.container) {
            self.route(response);
        }
        if let Some(line) = stderr.finish() {
            logs::record(logs, &self.container, line);
        }
        Some(ended)
    }
}

/// Turns stdout chunks into responses with the protocol's codec, which keeps the partial
/// line between chunks; bad lines are logged and skipped.
struct StdoutDecoder {
    buf: BytesMut,
    codec: JsonLinesCodec<Response, Request>,
}

impl StdoutDecoder {
    fn new() -> Self {
        Self { buf: BytesMut::new(), codec: JsonLinesCodec::with_max_line(MAX_RESPONSE_LINE) }
    }

    fn push(&mut self, chunk: &[u8], container: &str) -> Vec<Response> {
        self.buf.extend_from_slice(chunk);
        let mut out = Vec::new();
        while let Ok(Some(item)) = self.codec.decode(&mut self.buf) {
            keep(item, container, &mut out);
        }
        out
    }

    fn finish(&mut self, container: &str) -> Vec<Response> {
        let mut out = Vec::new();
        while let Ok(Some(item)) = self.codec.decode_eof(&mut self.buf) {
            keep(item, container, &mut out);
        }
        out
    }
}

fn keep(item: Result<Response, LineError>, container: &str, out: &mut Vec<Response>) {
    match item {
        Ok(response) => out.push(response),
        Err(e) => tracing::warn!(container, "unreadable stdout line from subagent skipped: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use nexbot_protocol::{ProgressEvent, Usage};
    use tokio::io::AsyncBufReadExt;

    fn line(r: &Response) -> Vec<u8> {
        let mut v = serde_json::to_vec(r).unwrap();
        v.push(b'\n');
        v
    }

    #[test]
    fn responses_split_over_frames_are_reassembled() {
        let a = Response::pong("p1", None, None);
        let b = Response::success("t1", None, "done".into(), Usage::default(), 1, 5);
        let mut bytes = line(&a);
        bytes.extend(line(&b));
        for cut in 0..bytes.len() {
            let mut dec = StdoutDecoder::new();
            let mut got = dec.push(&bytes[..cut], "c");
            got.extend(dec.push(&bytes[cut..], "c"));
            assert_eq!(got, vec![a.clone(), b.clone()], "cut at {cut}");
        }
    }

    #[test]
    fn bad_stdout_lines_are_skipped() {
        let mut dec = StdoutDecoder::new();
        let mut bytes = b"not json\n{\"id\":\"x\",\"status\":\"weird\"}\n".to_vec();
        bytes.extend(line(&Response::pong("p", None, None)));
        let got = dec.push(&bytes, "c");
        assert_eq!(got, vec![Response::pong("p", None, None)]);
    }

    /// A link over an in-memory pipe, with a fake container on the other end that answers
    /// with the frames the test gives it.
    fn link_pair() -> (Arc<Link>, tokio::io::BufReader<tokio::io::DuplexStream>) {
        let (ours, theirs) = tokio::io::duplex(64 * 1024);
        (Link::new("c1", Box::pin(ours)), tokio::io::BufReader::new(theirs))
    }

    fn frames(items: Vec<LogOutput>) -> Output {
        Box::pin(
            futures_util::stream::iter(items.into_iter().map(Ok))
                .chain(futures_util::stream::pending()),
        )
    }

    #[tokio::test]
    async fn roundtrip_routes_by_id_and_stderr_goes_to_the_log() {
        let (link, mut peer) = link_pair();
        let ring = LogRing::new(10);
        let pong = line(&Response::pong("ping-1", None, None));
        let (first, second) = pong.split_at(7);
        let output = frames(vec![
            LogOutput::StdErr { message: Bytes::from_static(b"{\"level\":\"info\",\"mes") },
            LogOutput::StdOut { message: Bytes::copy_from_slice(first) },
            LogOutput::StdErr { message: Bytes::from_static(b"sage\":\"hi\"}\n") },
            LogOutput::StdOut { message: Bytes::copy_from_slice(second) },
        ]);
        let stop = CancellationToken::new();
        let reader = {
            let link = link.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                link.read_output(output, &ring, &stop).await.map(|_| ring.snapshot())
            })
        };
        let answer =
            link.roundtrip(&Request::ping("ping-1"), Duration::from_secs(5)).await.unwrap();
        assert_eq!(answer.status(), "pong");
        let mut sent = String::new();
        peer.read_line(&mut sent).await.unwrap();
        assert!(sent.contains("\"ping-1\""), "{sent}");
        stop.cancel();
        assert!(reader.await.unwrap().is_none(), "stop returns None");
    }

    #[tokio::test]
    async fn progress_then_final_reach_the_waiter_and_fail_wakes_everyone() {
        let (link, _peer) = link_pair();
        let mut task = link.register("t1").unwrap();
        let mut ping = link.register("p1").unwrap();
        assert_eq!(link.register("t1").unwrap_err(), LinkError::Duplicate("t1".into()));
        link.route(Response::progress("t1", None, ProgressEvent::Iteration, None, None));
        link.route(Response::pong("p1", None, None));
        assert_eq!(task.recv().await.unwrap().status(), "progress");
        assert_eq!(ping.recv().await.unwrap().status(), "pong");
        link.fail("exited with code 137");
        link.fail("second reason is ignored");
        assert!(task.recv().await.is_none());
        assert_eq!(link.reason(), "exited with code 137");
        assert!(link.is_closed());
        assert_eq!(
            link.register("t2").unwrap_err(),
            LinkError::Closed("exited with code 137".into())
        );
    }

    #[tokio::test]
    async fn unanswered_roundtrip_times_out_and_unregisters() {
        let (link, _peer) = link_pair();
        let err = link.roundtrip(&Request::ping("p"), Duration::from_millis(20)).await.unwrap_err();
        assert_eq!(err, LinkError::Timeout);
        assert!(link.register("p").is_ok(), "the id is free again");
    }

    #[tokio::test]
    async fn stream_end_is_reported() {
        let (link, _peer) = link_pair();
        let ring = LogRing::new(4);
        let output: Output = Box::pin(futures_util::stream::iter(vec![Ok(LogOutput::StdErr {
            message: Bytes::from_static(b"last words without newline"),
        })]));
        let ended = link.read_output(output, &ring, &CancellationToken::new()).await;
        assert_eq!(ended.as_deref(), Some("its attach stream ended"));
        assert_eq!(ring.snapshot(), vec!["last words without newline"]);
    }
}
