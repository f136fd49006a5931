//! The dashboard's connections: how many are served at once and how long one may sit without
//! sending a request.
//!
//! Why not `axum::serve`: it keeps every connection it accepts for as long as the client
//! likes (no header or idle timeout, no cap), so a client that opens connections and sends
//! nothing holds a descriptor each until the daemon runs out. Here hyper serves each
//! connection with a header-read timeout, and a semaphore taken before `accept` caps how many
//! are open at once (as the egress proxy's listener does, `egress/src/proxy.rs`).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Most dashboard connections open at once. A browser opens up to six to one host and each
/// open page holds one more for its live stream, so an operator with a few tabs stays far
/// below; a client opening connections in a loop stops at this many descriptors. Beyond it a
/// new connection waits in the kernel's listen queue (no descriptor of the daemon's) until
/// one closes: a burst is served late rather than refused, and an idle one frees its place
/// within [`HEADER_TIMEOUT`].
pub const MAX_CONNECTIONS: usize = 64;

/// How long a connection has to send a whole request head, counted from when it starts
/// waiting for one: when it is accepted and again after each answer (hyper's
/// `header_read_timeout` restarts there). So it is also the keep-alive idle timeout: a
/// connection that sends nothing, or half a head, is closed after it. It never applies while
/// an answer is being sent, so a live stream (server-sent events, open for as long as the
/// page is) is not cut. A browser reopens a closed keep-alive connection by itself.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(30);

/// How long connections get to finish their answers at stop. A page is rendered in
/// milliseconds; only a live stream (which never finishes) waits this out, and the daemon's
/// stop must not wait on an open browser tab.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// The limits of [`serve`]: [`MAX_CONNECTIONS`] and [`HEADER_TIMEOUT`] by default (the
/// tests shorten them to see their effect quickly).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
    pub header_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self { max_connections: MAX_CONNECTIONS, header_timeout: HEADER_TIMEOUT }
    }
}

/// Serves `app` on `listener` within `limits` until `stop`; then no new connection is
/// accepted, idle ones close and answers in flight get [`SHUTDOWN_GRACE`] to finish.
pub async fn serve(listener: TcpListener, app: Router, limits: Limits, stop: CancellationToken) {
    let capacity = Arc::new(Semaphore::new(limits.max_connections));
    let connections = TaskTracker::new();
    loop {
        let permit = tokio::select! {
            permit = capacity.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            () = stop.cancelled() => break,
        };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = stop.cancelled() => break,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors and the like: say so, let some close, serve on.
                tracing::warn!(error = %e, "the dashboard: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // The live stream is many small writes: without TCP_NODELAY each waits on the
        // browser's delayed ACK.
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let stop = stop.clone();
        connections.spawn(async move {
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                served = conn.as_mut() => {
                    if let Err(e) = served {
                        tracing::debug!(error = %e, "a dashboard connection ended with an error");
                    }
                }
                () = stop.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(SHUTDOWN_GRACE, conn).await;
                }
            }
            drop(permit);
        });
    }
    drop(listener);
    connections.close();
    connections.wait().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::response::sse::{Event, Sse};
    use axum::routing::get;
    use std::net::SocketAddr;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::TcpStream;

    /// Long enough for any answer here on a loaded machine: a wait that ends sooner is a
    /// pass, one that reaches it a failure (never a measure of speed).
    const PATIENCE: Duration = Duration::from_secs(20);
    const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: dashboard\r\n\r\n";

    /// A dashboard's shape: a page, and a live stream that sends one event and then nothing.
    fn app() -> Router {
        let events = || async {
            let first = futures_util::stream::once(async {
                Ok::<_, std::convert::Infallible>(Event::default().event("pool").data("x"))
            });
            Sse::new(futures_util::StreamExt::chain(first, futures_util::stream::pending()))
        };
        Router::new().route("/", get(|| async { "page" })).route("/events", get(events))
    }

    async fn start(limits: Limits) -> (SocketAddr, CancellationToken, tokio::task::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let served = tokio::spawn(serve(listener, app(), limits, stop.clone()));
        (addr, stop, served)
    }

    /// Reads until `needle` has come; `false` if the connection ended or `within` passed first.
    async fn reads(stream: &mut TcpStream, needle: &[u8], within: Duration) -> bool {
        let mut seen = Vec::new();
        let read = async {
            let mut buf = [0u8; 4096];
            loop {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return false,
                    Ok(n) => seen.extend_from_slice(&buf[..n]),
                }
                if seen.windows(needle.len()).any(|w| w == needle) {
                    return true;
                }
            }
        };
        tokio::time::timeout(within, read).await.unwrap_or(false)
    }

    /// Whether the server closed the connection within `within` (whatever it sent before).
    async fn closed(stream: &mut TcpStream, within: Duration) -> bool {
        let read = async {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stream.read(&mut buf).await {
                if n == 0 {
                    break;
                }
            }
        };
        tokio::time::timeout(within, read).await.is_ok()
    }

    #[tokio::test]
    async fn idle_connections_and_half_heads_are_closed_and_a_live_stream_is_not() {
        let timeout = Duration::from_millis(300);
        let (addr, stop, served) =
            start(Limits { max_connections: 8, header_timeout: timeout }).await;
        let mut silent = TcpStream::connect(addr).await.unwrap();
        let mut half = TcpStream::connect(addr).await.unwrap();
        half.write_all(b"GET / HTTP/1.1\r\nHost: dash").await.unwrap();
        let mut kept = TcpStream::connect(addr).await.unwrap();
        kept.write_all(GET).await.unwrap();
        assert!(reads(&mut kept, b"page", PATIENCE).await, "a page is served");
        assert!(closed(&mut silent, PATIENCE).await, "a connection that sent nothing");
        assert!(closed(&mut half, PATIENCE).await, "a connection that sent half a head");
        assert!(closed(&mut kept, PATIENCE).await, "a keep-alive connection left idle");

        // Afterwards a page and the live stream are served, and the stream, silent after its
        // first event, outlives the header timeout many times over.
        let mut page = TcpStream::connect(addr).await.unwrap();
        page.write_all(GET).await.unwrap();
        assert!(reads(&mut page, b"page", PATIENCE).await);
        let mut live = TcpStream::connect(addr).await.unwrap();
        live.write_all(b"GET /events HTTP/1.1\r\nHost: dashboard\r\n\r\n").await.unwrap();
        assert!(reads(&mut live, b"event: pool", PATIENCE).await, "the stream's first event");
        assert!(!closed(&mut live, timeout * 5).await, "a live stream was cut");

        // Stop: the open stream does not hold the dashboard up, and it is closed.
        stop.cancel();
        tokio::time::timeout(PATIENCE, served).await.expect("serve ended").unwrap();
        assert!(closed(&mut live, PATIENCE).await, "the stream closed at stop");
    }

    #[tokio::test]
    async fn connections_beyond_the_cap_wait_until_one_closes() {
        let cap = 4;
        let limits = Limits { max_connections: cap, header_timeout: Duration::from_secs(600) };
        let (addr, stop, served) = start(limits).await;
        let (answered, mut answers) = tokio::sync::mpsc::unbounded_channel();
        for _ in 0..cap * 3 {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            stream.write_all(GET).await.unwrap();
            let answered = answered.clone();
            tokio::spawn(async move {
                if reads(&mut stream, b"page", Duration::from_secs(600)).await {
                    let _ = answered.send(stream);
                }
            });
        }
        let mut served_first = Vec::new();
        for _ in 0..cap {
            let stream = tokio::time::timeout(PATIENCE, answers.recv()).await;
            served_first.push(stream.expect("answered within the cap").unwrap());
        }
        // The served ones stay open (keep-alive); no other is served while they do.
        let more = tokio::time::timeout(Duration::from_millis(500), answers.recv()).await;
        assert!(more.is_err(), "a connection beyond the cap was served");
        // They close: the waiting ones are served, not refused.
        drop(served_first);
        for _ in 0..cap {
            let stream = tokio::time::timeout(PATIENCE, answers.recv()).await;
            assert!(stream.is_ok(), "a waiting connection was not served once others closed");
        }
        stop.cancel();
        tokio::time::timeout(PATIENCE, served).await.expect("serve ended").unwrap();
    }
}
