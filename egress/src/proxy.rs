//! The listener and the forward proxy: how a container's request leaves the sandbox.
//!
//! One HTTP/1 listener (hyper) on the pool network's gateway serves three kinds of request:
//! `CONNECT host:port` (a TLS tunnel), absolute-form `GET http://host/...` (plain HTTP,
//! forwarded) and origin-form `POST /v1/...` (the LLM relay, see `relay.rs`). Proxied
//! requests are attributed to a container, checked by the policy, dialled at the checked
//! address only, metered, and audited.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::audit::{ConnAudit, Direction, Origin, Verdict};
use super::meter::{full, pump, MeteredBody, PumpEnd, ResponseBody};
use super::policy::{CheckedAddr, Refusal, Target};
use super::{relay, Shared};

/// One client connection's share of the listener's capacity. A CONNECT tunnel outlives the
/// HTTP connection it came from, so it holds a clone: the permit frees only when both are gone.
struct ConnectionPermit {
    _permit: OwnedSemaphorePermit,
    source: IpAddr,
    per_source: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl Drop for ConnectionPermit {
    fn drop(&mut self) {
        let mut counts = self.per_source.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = counts.get_mut(&self.source) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.source);
            }
        }
    }
}

/// Accepts connections until the listener is told to stop. At most `max_connections` are
/// served at once (the rest wait in the backlog), and at most `max_connections_per_source`
/// from one address, so one container cannot starve the others.
pub(crate) async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    let capacity = Arc::new(Semaphore::new(shared.config.max_connections));
    let per_source = Arc::new(Mutex::new(HashMap::<IpAddr, usize>::new()));
    loop {
        let permit = tokio::select! {
            permit = capacity.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
            () = shared.stop.cancelled() => return,
        };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = shared.stop.cancelled() => return,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(err) => {
                // Out of descriptors and the like: say so and keep serving.
                tracing::warn!(%err, "egress listener: accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        // Streamed answers and tunnels are many small writes: without TCP_NODELAY each waits
        // on the peer's delayed ACK (tens of ms per SSE event).
        let _ = stream.set_nodelay(true);
        let source = peer.ip().to_canonical();
        {
            let mut counts = per_source.lock().unwrap_or_else(|p| p.into_inner());
            let count = counts.entry(source).or_insert(0);
            if *count >= shared.config.max_connections_per_source {
                tracing::warn!(%source, limit = *count, "egress: too many connections from one source; refused");
                continue; // dropping the stream closes it
            }
            *count += 1;
        }
        let permit =
            Arc::new(ConnectionPermit { _permit: permit, source, per_source: per_source.clone() });
        shared.tracker.spawn(connection(stream, peer, permit, shared.clone()));
    }
}

async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    permit: Arc<ConnectionPermit>,
    shared: Arc<Shared>,
) {
    let service_shared = shared.clone();
    let service = hyper::service::service_fn(move |req| {
        let shared = service_shared.clone();
        let permit = permit.clone();
        async move { Ok::<_, Infallible>(handle(req, peer, permit, shared).await) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(shared.header_timeout)
        // Clients such as `nc` shut their write side after the request; still answer them.
        .half_close(true)
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades();
    tokio::pin!(conn);
    tokio::select! {
        result = conn.as_mut() => {
            if let Err(err) = result {
                tracing::debug!(%peer, %err, "egress client connection ended with an error");
            }
        }
        () = shared.stop.cancelled() => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), conn).await;
        }
    }
}

async fn handle(
    req: Request<Incoming>,
    peer: SocketAddr,
    permit: Arc<ConnectionPermit>,
    shared: Arc<Shared>,
) -> Response<ResponseBody> {
    let source = peer.ip().to_canonical();
    let attributed = shared.attribution.lookup(source);
    let origin = Origin {
        source: Some(source),
        container: attributed.as_ref().map(|a| a.container.clone()),
        task_id: attributed.as_ref().and_then(|a| a.task_id.clone()),
    };
    if req.method() == Method::CONNECT {
        return connect(req, origin, attributed.is_some(), permit, shared).await;
    }
    if req.uri().scheme().is_none() {
        return relay::handle(req, origin, shared).await;
    }
    if targets_listener(req.uri(), shared.local) {
        // A client that sent its relay call through the proxy (NO_PROXY not honoured).
        let (mut parts, body) = req.into_parts();
        parts.uri =
            parts.uri.path_and_query().map_or("/", |p| p.as_str()).parse().unwrap_or_default();
        return relay::handle(Request::from_parts(parts, body), origin, shared).await;
    }
    forward(req, origin, attributed.is_some(), shared).await
}

fn targets_listener(uri: &Uri, local: SocketAddr) -> bool {
    let host = uri.host().unwrap_or_default();
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    let port = uri.port_u16().unwrap_or(80);
    host.parse::<IpAddr>().is_ok_and(|ip| ip.to_canonical() == local.ip()) && port == local.port()
}

fn text(status: StatusCode, message: String) -> Response<ResponseBody> {
    let mut response = Response::new(full(message + "\n"));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}

/// Refuses with `status`, recording the verdict and reason in the audit line.
fn refuse(
    audit: &ConnAudit,
    verdict: Verdict,
    status: StatusCode,
    reason: String,
) -> Response<ResponseBody> {
    audit.verdict(verdict, reason.clone());
    text(status, format!("nexbot egress proxy: {reason}"))
}

/// Attribution, policy and dialling, shared by CONNECT and plain HTTP. Returns the connected
/// stream, or the response to send instead.
async fn open(
    target: Result<Target, super::policy::Denial>,
    attributed: bool,
    audit: &ConnAudit,
    shared: &Shared,
) -> Result<TcpStream, Response<ResponseBody>> {
    if shared.config.require_attribution && !attributed {
        let source = audit.origin().source.map(|s| s.to_string()).unwrap_or_default();
        let reason = format!("unattributed: source {source} is not a known container");
        return Err(refuse(audit, Verdict::Denied, StatusCode::FORBIDDEN, reason));
    }
    if let Some(task_id) = audit.ended_task() {
        let reason =
            format!("task_ended: task {task_id} has ended; nothing more leaves in its name");
        return Err(refuse(audit, Verdict::Denied, StatusCode::FORBIDDEN, reason));
    }
    let target = target.map_err(|denial| {
        refuse(audit, Verdict::Denied, StatusCode::BAD_REQUEST, denial.to_string())
    })?;
    let timeout = shared.config.proxy.connect_timeout();
    let addrs: Vec<CheckedAddr> = match shared.policy.resolve(&target, timeout).await {
        Ok(addrs) => addrs,
        Err(Refusal::Denied { denial, resolved }) => {
            if let Some(ip) = resolved {
                audit.resolved(ip);
            }
            return Err(refuse(audit, Verdict::Denied, StatusCode::FORBIDDEN, denial.to_string()));
        }
        Err(Refusal::Unresolved(reason)) => {
            return Err(refuse(audit, Verdict::Error, StatusCode::BAD_GATEWAY, reason));
        }
    };
    let mut last_error = String::new();
    for checked in addrs {
        let addr = checked.addr();
        audit.resolved(addr.ip());
        match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => {
                audit.verdict(Verdict::Allowed, "connected");
                if checked.host_address() {
                    audit.host_address();
                    tracing::warn!(%addr, "egress: a container reached this host's own address through an explicit allow_internal entry");
                }
                return Ok(stream);
            }
            Ok(Err(err)) => last_error = format!("connect {addr}: {err}"),
            Err(_) => last_error = format!("connect {addr}: timed out"),
        }
    }
    Err(refuse(audit, Verdict::Error, StatusCode::BAD_GATEWAY, last_error))
}

async fn connect(
    req: Request<Incoming>,
    origin: Origin,
    attributed: bool,
    permit: Arc<ConnectionPermit>,
    shared: Arc<Shared>,
) -> Response<ResponseBody> {
    let authority = req.uri().authority().cloned();
    let host = authority.as_ref().map(|a| a.host().to_owned()).unwrap_or_default();
    let port = authority.as_ref().and_then(|a| a.port_u16());
    let audit =
        ConnAudit::new(shared.audit.clone(), "connect", origin, host.clone(), port.unwrap_or(0));
    let Some(port) = port else {
        let reason =
            format!("bad_request: CONNECT needs host:port, got {:?}", req.uri().to_string());
        return refuse(&audit, Verdict::Error, StatusCode::BAD_REQUEST, reason);
    };
    let deadline = Instant::now() + shared.config.proxy.max_duration();
    let stream = match open(Target::parse(&host, port), attributed, &audit, &shared).await {
        Ok(stream) => stream,
        Err(response) => return response,
    };
    let limits = (shared.config.proxy.max_bytes_up, shared.config.proxy.max_bytes_down);
    let stop = shared.stop.clone();
    shared.tracker.spawn(async move {
        let upgraded = match tokio::time::timeout_at(deadline, hyper::upgrade::on(req)).await {
            Ok(Ok(upgraded)) => upgraded,
            Ok(Err(err)) => return audit.reason(format!("client upgrade failed: {err}")),
            Err(_) => return audit.reason("client upgrade timed out"),
        };
        let end = pump(TokioIo::new(upgraded), stream, &audit, limits, deadline, &stop).await;
        audit.reason(match end {
            PumpEnd::Closed => "closed".to_owned(),
            PumpEnd::BytesLimit(direction) => {
                format!("cut: byte limit reached ({})", direction.name())
            }
            PumpEnd::DurationLimit => "cut: duration limit reached".to_owned(),
            PumpEnd::Failed(err) => format!("closed: {err}"),
            PumpEnd::Shutdown => "cut: proxy shutting down".to_owned(),
            PumpEnd::TaskEnded => "cut: task ended".to_owned(),
        });
        // Free the permit before the audit line is written (when `audit` drops after this).
        drop(permit);
    });
    Response::new(full(""))
}

/// Headers that describe one hop, not the message (RFC 9110 §7.6.1), plus the proxy's own.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let listed: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::try_from(name.trim()).ok())
        .collect();
    for name in listed {
        headers.remove(name);
    }
    for name in [
        "connection",
        "proxy-connection",
        "keep-alive",
        "proxy-authorization",
        "proxy-authenticate",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    ] {
        headers.remove(name);
    }
}

async fn forward(
    req: Request<Incoming>,
    origin: Origin,
    attributed: bool,
    shared: Arc<Shared>,
) -> Response<ResponseBody> {
    let uri = req.uri().clone();
    let host = uri.host().unwrap_or_default().to_owned();
    let port = uri.port_u16().unwrap_or(80);
    let audit = ConnAudit::new(shared.audit.clone(), "http", origin, host.clone(), port);
    if uri.scheme_str() != Some("http") {
        let reason = format!("bad_request: only http:// is forwarded; use CONNECT for {uri}");
        return refuse(&audit, Verdict::Error, StatusCode::BAD_REQUEST, reason);
    }
    let deadline = Instant::now() + shared.config.proxy.max_duration();
    let stream = match open(Target::parse(&host, port), attributed, &audit, &shared).await {
        Ok(stream) => stream,
        Err(response) => return response,
    };
    let (mut sender, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(stream)).await
    {
        Ok(pair) => pair,
        Err(err) => {
            return refuse(
                &audit,
                Verdict::Error,
                StatusCode::BAD_GATEWAY,
                format!("upstream: {err}"),
            )
        }
    };
    shared.tracker.spawn(async move {
        let _ = tokio::time::timeout_at(deadline, conn).await;
    });

    let (mut parts, body) = req.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    if let Some(authority) = uri.authority() {
        if let Ok(value) = HeaderValue::from_str(authority.as_str()) {
            parts.headers.insert(header::HOST, value);
        }
    }
    parts.uri = uri.path_and_query().map_or("/", |p| p.as_str()).parse().unwrap_or_default();
    let limits = &shared.config.proxy;
    let body =
        MeteredBody::new(body, audit.clone(), Direction::Up, limits.max_bytes_up, Some(deadline));
    let upstream = Request::from_parts(parts, body);
    let task_cut = audit.task_cut();
    let task_end = async {
        match &task_cut {
            Some(cut) => cut.cancelled().await,
            None => std::future::pending().await,
        }
    };
    let sent = tokio::select! {
        sent = tokio::time::timeout_at(deadline, sender.send_request(upstream)) => sent,
        () = task_end => {
            return refuse(&audit, Verdict::Allowed, StatusCode::BAD_GATEWAY, "cut: task ended before a response".into());
        }
    };
    let response = match sent {
        Ok(Ok(response)) => response,
        Ok(Err(err)) => {
            return refuse(
                &audit,
                Verdict::Allowed,
                StatusCode::BAD_GATEWAY,
                format!("upstream: {err}"),
            )
        }
        Err(_) => {
            return refuse(
                &audit,
                Verdict::Allowed,
                StatusCode::GATEWAY_TIMEOUT,
                "cut: duration limit reached before a response".into(),
            )
        }
    };
    audit.verdict(Verdict::Allowed, format!("status {}", response.status().as_u16()));
    let (mut parts, body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let body =
        MeteredBody::new(body, audit, Direction::Down, limits.max_bytes_down, Some(deadline));
    Response::from_parts(parts, body.boxed_unsync())
}
