//! Byte and time limits on what flows through the proxy, counted as it flows.
//!
//! Bodies of plain HTTP requests and relay answers are wrapped in [`MeteredBody`]; CONNECT
//! tunnels are pumped by [`pump`]. Both count into the connection's audit counters
//! ([`ConnAudit::count`]) and stop the flow — with a reason the audit line records — when a
//! byte limit or the connection's deadline is reached.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::audit::{ConnAudit, Direction};

/// Error type of the bodies the listener serves.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// The body type of every response the listener sends.
pub type ResponseBody = http_body_util::combinators::UnsyncBoxBody<Bytes, BoxError>;

pub fn full(bytes: impl Into<Bytes>) -> ResponseBody {
    http_body_util::Full::new(bytes.into()).map_err(|never| match never {}).boxed_unsync()
}

/// Why a flow was cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Cut {
    #[error("byte limit reached")]
    Bytes,
    #[error("duration limit reached")]
    Duration,
    #[error("task ended")]
    TaskEnded,
}

/// A body that counts its bytes into the connection's audit and fails once it passes `limit`
/// or the deadline (if it has one). It holds the audit guard, so the audit line waits for the
/// body to end.
#[derive(Debug)]
pub struct MeteredBody<B> {
    inner: B,
    audit: Arc<ConnAudit>,
    direction: Direction,
    limit: u64,
    deadline: Option<Pin<Box<Sleep>>>,
    /// Resolves when the connection's task ends.
    task_end: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
}

impl<B> MeteredBody<B> {
    pub fn new(
        inner: B,
        audit: Arc<ConnAudit>,
        direction: Direction,
        limit: u64,
        deadline: Option<Instant>,
    ) -> Self {
        let deadline = deadline.map(|at| Box::pin(tokio::time::sleep_until(at)));
        let task_end = audit.task_cut().map(|cut| Box::pin(cut.cancelled_owned()));
        Self { inner, audit, direction, limit, deadline, task_end }
    }
}

impl<B> Body for MeteredBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.deadline.as_mut().is_some_and(|deadline| deadline.as_mut().poll(cx).is_ready()) {
            self.audit.reason(format!("cut: {} ({})", Cut::Duration, self.direction.name()));
            return Poll::Ready(Some(Err(Box::new(Cut::Duration))));
        }
        if self.task_end.as_mut().is_some_and(|end| end.as_mut().poll(cx).is_ready()) {
            self.audit.reason(format!("cut: {} ({})", Cut::TaskEnded, self.direction.name()));
            return Poll::Ready(Some(Err(Box::new(Cut::TaskEnded))));
        }
        let frame = match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => frame,
            Poll::Ready(Some(Err(err))) => return Poll::Ready(Some(Err(err.into()))),
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Pending => return Poll::Pending,
        };
        if let Some(data) = frame.data_ref() {
            if self.audit.count(self.direction, data.len()) > self.limit {
                let reason =
                    format!("cut: {} ({} > {})", Cut::Bytes, self.direction.name(), self.limit);
                self.audit.reason(reason);
                return Poll::Ready(Some(Err(Box::new(Cut::Bytes))));
            }
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// How a tunnel ended.
#[derive(Debug)]
pub enum PumpEnd {
    /// Both sides closed.
    Closed,
    BytesLimit(Direction),
    DurationLimit,
    Failed(std::io::Error),
    Shutdown,
    /// The task the tunnel belongs to ended.
    TaskEnded,
}

/// Copies one direction, counting into the audit; stops (after forwarding exactly up to the
/// limit) when `limit` would be passed.
async fn copy_limited<R, W>(
    mut from: R,
    mut to: W,
    (audit, direction): (&ConnAudit, Direction),
    limit: u64,
) -> std::io::Result<bool>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            // Half-close: the other direction may still be talking.
            let _ = to.shutdown().await;
            return Ok(false);
        }
        let room = limit.saturating_sub(audit.counted(direction)).min(n as u64) as usize;
        to.write_all(&buf[..room]).await?;
        audit.count(direction, room);
        if room < n {
            let _ = to.flush().await;
            return Ok(true);
        }
    }
}

/// Pumps bytes both ways between the container and the destination until both close, a limit
/// or the deadline is hit, an I/O error happens, the listener shuts down, or the tunnel's task
/// ends.
pub async fn pump<C, D>(
    client: C,
    dest: D,
    audit: &ConnAudit,
    limits: (u64, u64),
    deadline: Instant,
    stop: &CancellationToken,
) -> PumpEnd
where
    C: AsyncRead + AsyncWrite,
    D: AsyncRead + AsyncWrite,
{
    let (client_read, client_write) = tokio::io::split(client);
    let (dest_read, dest_write) = tokio::io::split(dest);
    let up = copy_limited(client_read, dest_write, (audit, Direction::Up), limits.0);
    let down = copy_limited(dest_read, client_write, (audit, Direction::Down), limits.1);
    tokio::pin!(up, down);
    let sleep = tokio::time::sleep_until(deadline);
    tokio::pin!(sleep);
    let task_cut = audit.task_cut();
    let task_end = async {
        match &task_cut {
            Some(cut) => cut.cancelled().await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(task_end);
    let (mut up_open, mut down_open) = (true, true);
    loop {
        tokio::select! {
            result = &mut up, if up_open => match result {
                Ok(false) => up_open = false,
                Ok(true) => return PumpEnd::BytesLimit(Direction::Up),
                Err(err) => return PumpEnd::Failed(err),
            },
            result = &mut down, if down_open => match result {
                Ok(false) => down_open = false,
                Ok(true) => return PumpEnd::BytesLimit(Direction::Down),
                Err(err) => return PumpEnd::Failed(err),
            },
            () = &mut sleep => return PumpEnd::DurationLimit,
            () = stop.cancelled() => return PumpEnd::Shutdown,
            () = &mut task_end => return PumpEnd::TaskEnded,
        }
        if !up_open && !down_open {
            return PumpEnd::Closed;
        }
    }
}
