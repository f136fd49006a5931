//! The listener and the forward proxy: how a container's request leaves the sandbox.
//!
//! One HTTP/1 listener (hyper) on the pool network's gateway serves three kinds of request:
//! `CONNECT host:port` (a TLS tunnel), absolute-form `GET http://host/...` and
//! `GET https://host/...` (forwarded; for `https://` the proxy makes the TLS connection, see
//! `tls.rs`) and origin-form `POST /v1/...` (the LLM relay, see `relay.rs`). Proxied requests
//! are attributed to a container, checked by the policy, dialled at the checked address only,
//! metered, and audited.
//!
//! For a task with proxy-mode secrets (`credentials.rs`) absolute-form requests get the values
//! put in for the hosts they are bound to and every answer is scrubbed (`inject.rs`); a
//! CONNECT to such a host is refused, since a tunnel can be neither.

use std::collections::{BTreeSet, HashMap};
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use base64::Engine;
use secrecy::{ExposeSecret, SecretString};
use tokio_util::sync::CancellationToken;
use zeroize::Zeroizing;

use super::approval::EgressMode;
use super::attribution::Attributed;
use super::audit::{ConnAudit, Direction, Origin, Verdict};
use super::binding::Destination;
use super::credentials::TaskSecrets;
use super::inject::{self, ScrubbedBody, MAX_SECRET_BODY_BYTES};
use super::meter::{full, pump, MeteredBody, PumpEnd, ResponseBody};
use super::policy::{CheckedAddr, Refusal, Target};
use super::tokens::ProxyCredential;
use super::EgressConfig;
use super::{relay, Shared};
use gate::{confirm_secrets, gate, Held};

mod gate;

/// One client connection's share of the listener's capacity. A CONNECT tunnel outlives the
/// HTTP connection it came from, so it holds a clone: the permit frees only when both are gone.
pub(crate) struct ConnectionPermit {
    _permit: OwnedSemaphorePermit,
    source: IpAddr,
    /// The room (chat) of the source's container, when it has one.
    room: Option<String>,
    counts: Arc<Mutex<Counts>>,
}

/// Open client connections by source address and by room (chat).
#[derive(Default)]
pub(crate) struct Counts {
    per_source: HashMap<IpAddr, usize>,
    per_room: HashMap<String, usize>,
}

/// One less of `key` in `counts` (the entry goes at zero).
fn release<K: std::hash::Hash + Eq>(counts: &mut HashMap<K, usize>, key: &K) {
    if let Some(count) = counts.get_mut(key) {
        *count -= 1;
        if *count == 0 {
            counts.remove(key);
        }
    }
}

impl Drop for ConnectionPermit {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        release(&mut counts.per_source, &self.source);
        if let Some(room) = &self.room {
            release(&mut counts.per_room, room);
        }
    }
}

impl Counts {
    /// Counts a new connection from `source` (of `room`), or says which share it would pass.
    fn admit(
        &mut self,
        source: IpAddr,
        room: Option<&String>,
        config: &EgressConfig,
    ) -> Result<(), String> {
        let from_source = self.per_source.get(&source).copied().unwrap_or(0);
        if from_source >= config.max_connections_per_source {
            return Err(format!("{from_source} from source {source} (max_connections_per_source)"));
        }
        if let Some(room) = room {
            let from_room = self.per_room.get(room).copied().unwrap_or(0);
            if from_room >= config.max_connections_per_chat {
                return Err(format!(
                    "{from_room} from the chat {room}'s containers (max_connections_per_chat)"
                ));
            }
            *self.per_room.entry(room.clone()).or_insert(0) += 1;
        }
        *self.per_source.entry(source).or_insert(0) += 1;
        Ok(())
    }
}

/// The listener's capacity and each source's and room's share of it, for the listener's own
/// connections and those an egress node tunnels in alike (`node.rs`).
pub(crate) struct Intake {
    capacity: Arc<Semaphore>,
    counts: Arc<Mutex<Counts>>,
}

impl Intake {
    pub(crate) fn new(max_connections: usize) -> Self {
        Self { capacity: Arc::new(Semaphore::new(max_connections)), counts: Arc::default() }
    }

    /// Waits for a free place in the listener's capacity; `None` once the listener stops.
    async fn place(&self, stop: &CancellationToken) -> Option<OwnedSemaphorePermit> {
        tokio::select! {
            permit = self.capacity.clone().acquire_owned() => permit.ok(),
            () = stop.cancelled() => None,
        }
    }

    /// Admits a connection from `source` under `permit`; `None` (said in the log) when it
    /// would pass its source's or its room's share.
    fn admit(
        &self,
        permit: OwnedSemaphorePermit,
        source: IpAddr,
        shared: &Shared,
    ) -> Option<Arc<ConnectionPermit>> {
        let room = shared.attribution.lookup(source).and_then(|a| a.room);
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(over) = counts.admit(source, room.as_ref(), &shared.config) {
            tracing::warn!(%source, "egress: too many connections ({over}); refused");
            return None;
        }
        let counts = self.counts.clone();
        Some(Arc::new(ConnectionPermit { _permit: permit, source, room, counts }))
    }
}

/// Accepts connections until the listener is told to stop. At most `max_connections` are
/// served at once (the rest wait in the backlog), at most `max_connections_per_source` from
/// one address and `max_connections_per_chat` from the containers of one room together, so
/// one container or one chat cannot starve the others.
pub(crate) async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let Some(permit) = shared.intake.place(&shared.stop).await else { return };
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
        // Refused: dropping the stream closes it.
        if let Some(permit) = shared.intake.admit(permit, source, &shared) {
            let caller = Caller::Peer(peer);
            shared.tracker.spawn(connection(stream, caller, Some(permit), shared.clone()));
        }
    }
}

/// Serves a connection an egress node accepted from `peer` on its network and tunnelled here
/// (`node.rs`): as one of the listener's own, counted against the same shares.
pub(crate) async fn serve_tunnelled<S>(stream: S, peer: SocketAddr, shared: Arc<Shared>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Some(permit) = shared.intake.place(&shared.stop).await else { return };
    let source = peer.ip().to_canonical();
    if let Some(permit) = shared.intake.admit(permit, source, &shared) {
        connection(stream, Caller::Peer(peer), Some(permit), shared).await;
    }
}

/// Who a connection comes from.
#[derive(Debug, Clone)]
pub(crate) enum Caller {
    /// A client of the listener: its source address says whose it is (the attribution).
    Peer(SocketAddr),
    /// A door's client (`door.rs`): the host itself, in the door's one name.
    Door(Arc<Attributed>),
}

/// Serves one client connection (a listener's, under `permit`, or a door's).
pub(crate) async fn connection<S>(
    stream: S,
    caller: Caller,
    permit: Option<Arc<ConnectionPermit>>,
    shared: Arc<Shared>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service_shared = shared.clone();
    let service_caller = caller.clone();
    let service = hyper::service::service_fn(move |req| {
        let shared = service_shared.clone();
        let permit = permit.clone();
        let caller = service_caller.clone();
        async move { Ok::<_, Infallible>(handle(req, caller, permit, shared).await) }
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
                tracing::debug!(?caller, %err, "egress client connection ended with an error");
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
    caller: Caller,
    permit: Option<Arc<ConnectionPermit>>,
    shared: Arc<Shared>,
) -> Response<ResponseBody> {
    let (source, attributed) = match caller {
        Caller::Peer(peer) => {
            let source = peer.ip().to_canonical();
            (Some(source), shared.attribution.lookup(source))
        }
        Caller::Door(who) => (None, Some(Attributed::clone(&who))),
    };
    // No task yet: the relay names it from its token, the proxy from the task's credential.
    let origin = Origin {
        source,
        container: attributed.as_ref().map(|a| a.container.clone()),
        task_id: None,
    };
    let running = attributed.as_ref().map(|a| a.task_id.clone());
    if req.method() != Method::CONNECT {
        if req.uri().scheme().is_none() {
            return relay::handle(req, origin, running, shared).await;
        }
        if targets_listener(req.uri(), shared.local) || targets_listener(req.uri(), shared.public())
        {
            // A client that sent its relay call through the proxy (NO_PROXY not honoured).
            let (mut parts, body) = req.into_parts();
            parts.uri =
                parts.uri.path_and_query().map_or("/", |p| p.as_str()).parse().unwrap_or_default();
            let req = Request::from_parts(parts, body);
            return relay::handle(req, origin, running, shared).await;
        }
    }
    let admission = admit(req.headers(), attributed.as_ref(), &shared);
    if req.method() == Method::CONNECT {
        let Some(permit) = permit else {
            // A door's client sends absolute-form requests only (they can be filled in).
            let message = "nexbot egress proxy: a door forwards absolute-form http:// and \
                           https:// requests, not CONNECT"
                .to_owned();
            return text(StatusCode::METHOD_NOT_ALLOWED, message);
        };
        return connect(req, origin, attributed.is_some(), admission, permit, shared).await;
    }
    forward(req, origin, attributed.is_some(), admission, shared).await
}

/// Whose a proxied request is, decided before anything else is looked at.
enum Admission {
    /// Served in the name of this task (`None`: not a pool container, where
    /// `require_attribution` decides).
    Serve(Option<String>),
    /// Refused with this status and audit reason; `task_id` names the task whose credential
    /// was presented (never the container's current task, which did not send it).
    Refuse { status: StatusCode, reason: String, task_id: Option<String> },
}

/// The user name egress credentials are presented with (the password is the token).
pub(crate) const CREDENTIAL_USER: &str = "task";

/// A request from a pool container is served only in the name of the task that sent it: the
/// container must be running a task, and the request must carry that task's egress
/// credential (`Proxy-Authorization: Basic`, user [`CREDENTIAL_USER`], the token as the
/// password). The source address alone says only which container; a process left over from
/// an earlier task, or any request between tasks, would otherwise leave in the name of
/// whatever task runs there now.
fn admit(headers: &HeaderMap, attributed: Option<&Attributed>, shared: &Shared) -> Admission {
    let Some(attributed) = attributed else { return Admission::Serve(None) };
    let container = &attributed.container;
    let Some(running) = &attributed.task_id else {
        return Admission::Refuse {
            status: StatusCode::FORBIDDEN,
            reason: format!(
                "idle_container: container {container} runs no task; nothing leaves a pool \
                 container between tasks"
            ),
            task_id: None,
        };
    };
    if attributed.dedicated {
        // One identity for life (an MCP server's container): the address says whose it is.
        return Admission::Serve(Some(running.clone()));
    }
    let refuse = |reason: String, task_id: Option<String>| Admission::Refuse {
        status: StatusCode::PROXY_AUTHENTICATION_REQUIRED,
        reason,
        task_id,
    };
    let presented = match proxy_credential(headers) {
        Ok(presented) => presented,
        Err(what) => {
            return refuse(
                format!(
                    "proxy_credential_missing: {what}; a request from a pool container must \
                     carry its task's egress credential (Proxy-Authorization: Basic with user \
                     `{CREDENTIAL_USER}` and the execute request's `egress_token` as the \
                     password, e.g. HTTP_PROXY=http://{CREDENTIAL_USER}:<token>@{}); a \
                     subagent older than that field sends none",
                    shared.public()
                ),
                None,
            )
        }
    };
    match shared.tokens.proxy_task(presented.expose_secret()) {
        ProxyCredential::Live(task_id) if task_id == *running => Admission::Serve(Some(task_id)),
        ProxyCredential::Live(task_id) => refuse(
            format!(
                "task_mismatch: the credential is task {task_id}'s, but container {container} \
                 runs task {running}; a task's credential is good only in its own container"
            ),
            Some(task_id),
        ),
        ProxyCredential::Ended(task_id) => refuse(
            format!(
                "task_ended: task {task_id} has ended; its egress credential came from \
                 container {container}, which now runs task {running}; nothing more leaves in \
                 the ended task's name"
            ),
            Some(task_id),
        ),
        ProxyCredential::Unknown => refuse(
            "proxy_credential_invalid: the egress credential presented is no task's (forged, \
             or of a task ended long ago)"
                .to_owned(),
            None,
        ),
    }
}

/// The token of a `Proxy-Authorization: Basic` header with user [`CREDENTIAL_USER`]; `Err`
/// says what is missing or wrong (never the value).
fn proxy_credential(headers: &HeaderMap) -> Result<SecretString, &'static str> {
    let value = headers
        .get(header::PROXY_AUTHORIZATION)
        .ok_or("the request has no Proxy-Authorization header")?;
    let value = value.to_str().map_err(|_| "the Proxy-Authorization header is not text")?;
    let (scheme, encoded) =
        value.trim().split_once(' ').ok_or("the Proxy-Authorization header is malformed")?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return Err("the Proxy-Authorization header is not Basic");
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .map(Zeroizing::new)
        .ok_or("the Proxy-Authorization header is not base64 of user:password")?;
    match decoded.split_once(':') {
        Some((user, token)) if user == CREDENTIAL_USER => Ok(SecretString::from(token.to_owned())),
        _ => Err("the Proxy-Authorization user is not `task`"),
    }
}

/// A refusal of [`admit`], audited on the connection's line; a 407 asks for Basic
/// credentials as RFC 9110 wants.
fn refuse_admission(
    audit: &ConnAudit,
    status: StatusCode,
    reason: String,
) -> Response<ResponseBody> {
    let mut response = refuse(audit, Verdict::Denied, status, reason);
    if status == StatusCode::PROXY_AUTHENTICATION_REQUIRED {
        response.headers_mut().insert(
            header::PROXY_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"nexbot-egress\""),
        );
    }
    response
}

/// The origin a request is audited under once admitted (or refused).
fn admitted_origin(mut origin: Origin, admission: &Admission) -> Origin {
    origin.task_id = match admission {
        Admission::Serve(task_id) => task_id.clone(),
        Admission::Refuse { task_id, .. } => task_id.clone(),
    };
    origin
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

/// Refuses with `status`, recording the verdict and reason in the audit line. For a task
/// with secrets the reason is scrubbed on its way back too (it may quote an upstream error).
fn refuse(
    audit: &ConnAudit,
    verdict: Verdict,
    status: StatusCode,
    reason: String,
) -> Response<ResponseBody> {
    let message = format!("nexbot egress proxy: {}", audit.scrub_text(&reason));
    audit.verdict(verdict, reason);
    text(status, message)
}

/// Marks a refused CONNECT's answer `Connection: close`: a client whose tunnel was refused has
/// nothing more to send, and an idle connection kept alive after the refusal would hold one of
/// the listener's slots until its header timeout (a flood of refused tunnels must not keep
/// the connections other chats need). Plain requests keep their keep-alive: a client may send
/// its next request on the same connection.
fn closing(mut response: Response<ResponseBody>) -> Response<ResponseBody> {
    response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Attribution, policy and dialling, shared by CONNECT and plain HTTP. Returns the connected
/// stream, or the response to send instead.
async fn open(
    target: Result<Target, super::policy::Denial>,
    attributed: bool,
    held: Held,
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
    // The deny list, the name rules and a literal address's rules, then whether the
    // destination is allowed (a rule, a grant, the question), and only then the lookup: in
    // `ask` and `allowlist` modes no name leaves before the decision (see
    // `Policy::check_before_lookup`). A held request's addresses are the ones looked up after
    // the answer.
    let decided = match shared.policy.check_before_lookup(&target) {
        Ok(()) => match gate(&target, held, audit, shared).await {
            Ok(()) => shared.policy.resolve(&target, timeout).await,
            Err(response) => return Err(response),
        },
        Err(refusal) => Err(refusal),
    };
    let addrs: Vec<CheckedAddr> = match decided {
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
                    tracing::warn!(%addr, task = audit.origin().task_id.as_deref().unwrap_or("-"), "egress: a request reached this host's own address through an explicit allow_internal entry");
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
    admission: Admission,
    permit: Arc<ConnectionPermit>,
    shared: Arc<Shared>,
) -> Response<ResponseBody> {
    let authority = req.uri().authority().cloned();
    let host = authority.as_ref().map(|a| a.host().to_owned()).unwrap_or_default();
    let port = authority.as_ref().and_then(|a| a.port_u16());
    let origin = admitted_origin(origin, &admission);
    let audit =
        ConnAudit::new(shared.audit.clone(), "connect", origin, host.clone(), port.unwrap_or(0));
    if let Admission::Refuse { status, reason, .. } = admission {
        return refuse_admission(&audit, status, reason);
    }
    let Some(port) = port else {
        let reason =
            format!("bad_request: CONNECT needs host:port, got {:?}", req.uri().to_string());
        return refuse(&audit, Verdict::Error, StatusCode::BAD_REQUEST, reason);
    };
    let target = Target::parse(&host, port);
    let secrets = audit.origin().task_id.as_deref().and_then(|t| shared.credentials.for_task(t));
    if let (Some(secrets), Ok(target)) = (&secrets, &target) {
        if let Some(credential) = secrets.proxied() {
            let reason = format!(
                "secret_bound_host: CONNECT to {} is refused for this task: it holds the \
                 proxy-mode secret {}, and a tunnel can be neither filled in nor scrubbed (a \
                 value stored on its host could come back through it unseen); send requests \
                 through the proxy as absolute-form https:// URLs instead (the http_request \
                 tool does)",
                target.host, credential.name
            );
            audit.mention_secrets(vec![credential.name.clone()]);
            return refuse(&audit, Verdict::Denied, StatusCode::FORBIDDEN, reason);
        }
    }
    let held = Held::tunnel();
    let stream = match open(target, attributed, held, &audit, &shared).await {
        Ok(stream) => stream,
        Err(response) => return closing(response),
    };
    // The connection's life starts when it is allowed, not while it was held.
    let deadline = Instant::now() + shared.config.proxy.max_duration();
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

/// Whether a request carries a body (RFC 9112 §6.3): a `Transfer-Encoding`, or a
/// `Content-Length` that is not 0 (an unreadable one counts: the proxy does not guess).
fn carries_body(headers: &HeaderMap) -> bool {
    headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get_all(header::CONTENT_LENGTH)
            .iter()
            .any(|v| v.to_str().ok().and_then(|v| v.trim().parse::<u64>().ok()) != Some(0))
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

/// Forwards an absolute-form request: plain HTTP, or for `https://` over TLS the proxy makes
/// itself to the checked address. For a task with credentials the values go in first (or the
/// request is refused before anything is dialled) and the answer is scrubbed on its way back.
/// In `ask` mode an unlisted destination is held (after the values went in, so the question
/// can say whether one would be filled) until the approver answers.
async fn forward(
    req: Request<Incoming>,
    origin: Origin,
    attributed: bool,
    admission: Admission,
    shared: Arc<Shared>,
) -> Response<ResponseBody> {
    let uri = req.uri().clone();
    let https = uri.scheme_str() == Some("https");
    let host = uri.host().unwrap_or_default().to_owned();
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let kind = if https { "https" } else { "http" };
    let origin = admitted_origin(origin, &admission);
    if let Admission::Refuse { status, reason, .. } = admission {
        let audit = ConnAudit::new(shared.audit.clone(), kind, origin, host, port);
        return refuse_admission(&audit, status, reason);
    }
    let secrets = origin.task_id.as_deref().and_then(|t| shared.credentials.for_task(t));
    let audit = ConnAudit::new(shared.audit.clone(), kind, origin, host.clone(), port);
    if let Some(secrets) = &secrets {
        audit.scrub_with(secrets.redactor().clone());
    }
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        let reason = format!(
            "bad_request: only http:// and https:// URLs are forwarded; use CONNECT for {uri}"
        );
        return refuse(&audit, Verdict::Error, StatusCode::BAD_REQUEST, reason);
    }
    // A request held for an answer (`ask` mode) gets the wait on top of its life.
    let held_for = match shared.config.effective_mode() {
        EgressMode::Ask => shared.config.approval_timeout(),
        _ => std::time::Duration::ZERO,
    };
    let deadline = Instant::now() + shared.config.proxy.max_duration() + held_for;
    let target = Target::parse(&host, port);
    let method = req.method().to_string();
    let server_name = target.as_ref().map(|t| t.host.clone()).unwrap_or_default();
    // Read before the hop-by-hop headers go (a chunked body says so only there).
    let body_sent = carries_body(req.headers());
    let url_len = uri.to_string().len();

    let (mut parts, body) = req.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    if let Some(authority) = uri.authority() {
        // The host and port only: userinfo never goes upstream as a Host header.
        let host = match authority.port() {
            Some(port) => format!("{}:{port}", authority.host()),
            None => authority.host().to_owned(),
        };
        if let Ok(value) = HeaderValue::from_str(&host) {
            parts.headers.insert(header::HOST, value);
        }
    }
    parts.uri = uri.path_and_query().map_or("/", |p| p.as_str()).parse().unwrap_or_default();
    let limits = &shared.config.proxy;
    let path = Some(uri.path().to_owned());
    let (body, secret) = match (&secrets, &target) {
        (Some(secrets), Ok(target)) => {
            let to = Destination { host: &target.host, port, https };
            let (body, filled) =
                match prepare(&mut parts, body, secrets, &to, &audit, deadline, &shared).await {
                    Ok(prepared) => prepared,
                    Err(response) => return response,
                };
            let held = Held {
                method: method.clone(),
                path: path.clone(),
                secret: true,
                body: body_sent,
                url_len,
            };
            let to = (target.host.as_str(), port);
            if let Err(response) =
                confirm_secrets(&filled, secrets, to, &held, &audit, &shared).await
            {
                return response;
            }
            (body, !filled.is_empty())
        }
        _ => {
            let body = MeteredBody::new(
                body,
                audit.clone(),
                Direction::Up,
                limits.max_bytes_up,
                Some(deadline),
            );
            (body.boxed_unsync(), false)
        }
    };
    let upstream = Request::from_parts(parts, body);

    let held = Held { method, path, secret, body: body_sent, url_len };
    let stream = match open(target, attributed, held, &audit, &shared).await {
        Ok(stream) => stream,
        Err(response) => return response,
    };
    let sent = if https {
        let timeout = limits.connect_timeout();
        match super::tls::connect(&shared.tls, &server_name, stream, timeout).await {
            Ok(tls) => exchange(tls, upstream, &audit, &shared, deadline).await,
            Err(reason) => return refuse(&audit, Verdict::Error, StatusCode::BAD_GATEWAY, reason),
        }
    } else {
        exchange(stream, upstream, &audit, &shared, deadline).await
    };
    let response = match sent {
        Ok(response) => response,
        Err(response) => return response,
    };
    let (mut parts, body) = response.into_parts();
    if secrets.is_some() {
        if let Some(coding) = inject::content_coding(&parts.headers) {
            let reason = format!(
                "compressed_response: {server_name} answered compressed ({coding}) although \
                 the proxy asked for no content coding; a compressed body or archive could \
                 hide a secret's value from the scrub, so it is not passed on"
            );
            return refuse(&audit, Verdict::Denied, StatusCode::BAD_GATEWAY, reason);
        }
    }
    audit.verdict(Verdict::Allowed, format!("status {}", parts.status.as_u16()));
    strip_hop_by_hop(&mut parts.headers);
    let body = match &secrets {
        Some(secrets) => {
            inject::scrub_head(&mut parts, secrets.redactor());
            let scrubbed = ScrubbedBody::new(body, secrets.redactor().clone());
            MeteredBody::new(
                scrubbed,
                audit,
                Direction::Down,
                limits.max_bytes_down,
                Some(deadline),
            )
            .boxed_unsync()
        }
        None => {
            MeteredBody::new(body, audit, Direction::Down, limits.max_bytes_down, Some(deadline))
                .boxed_unsync()
        }
    };
    Response::from_parts(parts, body)
}

/// For a task with credentials, before anything is dialled: reads the body whole (at most
/// [`MAX_SECRET_BODY_BYTES`]), puts the values into the target, the headers and the body for
/// `host` — or refuses the request when one may not go there — fixes `Content-Length`, and
/// asks for an uncompressed answer (which is scrubbed on its way back). Returns the body and
/// the names of the secrets filled in.
async fn prepare(
    parts: &mut http::request::Parts,
    body: Incoming,
    secrets: &TaskSecrets,
    to: &Destination<'_>,
    audit: &Arc<ConnAudit>,
    deadline: Instant,
    shared: &Shared,
) -> Result<(ResponseBody, BTreeSet<String>), Response<ResponseBody>> {
    let limits = &shared.config.proxy;
    // Before the body is read (a refusal for its size must not hide a placeholder in the URL).
    if let Some(name) = super::decoy::carried(secrets, super::decoy::head(parts)) {
        return Err(tripped(name, parts, to, secrets, audit, shared));
    }
    let too_large = || {
        let reason = format!(
            "secret_body_too_large: a request of a task with secrets is read whole to put them \
             in, up to {MAX_SECRET_BODY_BYTES} bytes; this body is larger"
        );
        refuse(audit, Verdict::Denied, StatusCode::PAYLOAD_TOO_LARGE, reason)
    };
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|len| len > MAX_SECRET_BODY_BYTES as u64) {
        return Err(too_large());
    }
    let read =
        tokio::time::timeout_at(deadline, Limited::new(body, MAX_SECRET_BODY_BYTES).collect());
    let bytes = match read.await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(err)) if err.is::<http_body_util::LengthLimitError>() => return Err(too_large()),
        Ok(Err(err)) => {
            let reason = format!("bad_request: the request body could not be read: {err}");
            return Err(refuse(audit, Verdict::Error, StatusCode::BAD_REQUEST, reason));
        }
        Err(_) => {
            let reason = "cut: duration limit reached while reading the request body".to_owned();
            return Err(refuse(audit, Verdict::Error, StatusCode::REQUEST_TIMEOUT, reason));
        }
    };
    if let Some(name) = super::decoy::carried(secrets, [&bytes[..]]) {
        return Err(tripped(name, parts, to, secrets, audit, shared));
    }
    let mut used = BTreeSet::new();
    let escape = inject::body_escape(&parts.headers);
    let body = inject::Part::Body;
    let substituted = inject::substitute_head(parts, secrets, to, &mut used)
        .and_then(|()| inject::substitute(&bytes, secrets, to, body, escape, &mut used));
    let new_body = match substituted {
        Ok(new_body) => new_body,
        Err(refused) => {
            audit.secrets(vec![refused.name().to_owned()], false);
            let status = match refused {
                inject::Refused::NotBound { .. }
                | inject::Refused::Legacy { .. }
                | inject::Refused::Misplaced { .. }
                | inject::Refused::UnsafePath { .. } => StatusCode::FORBIDDEN,
                _ => StatusCode::BAD_REQUEST,
            };
            return Err(refuse(audit, Verdict::Denied, status, refused.to_string()));
        }
    };
    let had_body = !bytes.is_empty() || declared.is_some();
    let bytes = match new_body {
        Some(new_body) => Bytes::from(new_body.to_vec()),
        None => bytes,
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    if had_body {
        parts.headers.insert(header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
    }
    // The body is all here: nothing to wait for a 100 Continue about.
    parts.headers.remove(header::EXPECT);
    // Without it any coding is acceptable (RFC 9110 §12.5.3), and a compressed answer could
    // hide a value from the scrub.
    parts.headers.insert(header::ACCEPT_ENCODING, HeaderValue::from_static("identity"));
    if !used.is_empty() {
        audit.secrets(used.iter().cloned().collect(), true);
    }
    let body = http_body_util::Full::new(bytes);
    let body =
        MeteredBody::new(body, audit.clone(), Direction::Up, limits.max_bytes_up, Some(deadline));
    Ok((body.boxed_unsync(), used))
}

/// A request carrying the decoy `name`: refused with the answer a secret not bound to `to`
/// gets (the task must not learn it held a decoy), its audit line marked, the alarm rung.
/// The request is told scrubbed of the task's values (it goes to the owner's chat, whose exit
/// scan does not know this chat's), then cut.
fn tripped(
    name: &str,
    parts: &http::request::Parts,
    to: &Destination<'_>,
    secrets: &TaskSecrets,
    audit: &Arc<ConnAudit>,
    shared: &Shared,
) -> Response<ResponseBody> {
    audit.decoy(name);
    let scheme = if to.https { "https" } else { "http" };
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let request = format!("{} {scheme}://{}:{}{target}", parts.method, to.host, to.port);
    let request = nexbot_core::text::clip(&secrets.redactor().redact(&request), 300).into_owned();
    let origin = audit.origin();
    super::decoy::ring(
        &shared.decoys,
        super::decoy::DecoyTrip {
            task_id: origin.task_id.clone(),
            container: origin.container.clone(),
            secret: name.to_owned(),
            request,
        },
    );
    let refused = inject::Refused::NotBound { name: name.to_owned(), host: to.host.to_owned() };
    refuse(audit, Verdict::Denied, StatusCode::FORBIDDEN, refused.to_string())
}

/// Sends `request` over `io` (a connection to the checked address, TLS or not) and waits for
/// the answer's head, within the deadline and while the task runs.
async fn exchange<S>(
    io: S,
    request: Request<ResponseBody>,
    audit: &Arc<ConnAudit>,
    shared: &Shared,
    deadline: Instant,
) -> Result<Response<Incoming>, Response<ResponseBody>>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(io)).await {
        Ok(pair) => pair,
        Err(err) => {
            let reason = format!("upstream: {err}");
            return Err(refuse(audit, Verdict::Error, StatusCode::BAD_GATEWAY, reason));
        }
    };
    shared.tracker.spawn(async move {
        let _ = tokio::time::timeout_at(deadline, conn).await;
    });
    let task_cut = audit.task_cut();
    let task_end = async {
        match &task_cut {
            Some(cut) => cut.cancelled().await,
            None => std::future::pending().await,
        }
    };
    let sent = tokio::select! {
        sent = tokio::time::timeout_at(deadline, sender.send_request(request)) => sent,
        () = task_end => {
            let reason = "cut: task ended before a response".to_owned();
            return Err(refuse(audit, Verdict::Allowed, StatusCode::BAD_GATEWAY, reason));
        }
    };
    match sent {
        Ok(Ok(response)) => Ok(response),
        Ok(Err(err)) => {
            let reason = format!("upstream: {err}");
            Err(refuse(audit, Verdict::Allowed, StatusCode::BAD_GATEWAY, reason))
        }
        Err(_) => {
            let reason = "cut: duration limit reached before a response".to_owned();
            Err(refuse(audit, Verdict::Allowed, StatusCode::GATEWAY_TIMEOUT, reason))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_is_a_length_over_zero_or_a_transfer_encoding() {
        let with = |pairs: &[(&str, &str)]| {
            let mut headers = HeaderMap::new();
            for (name, value) in pairs {
                headers.append(
                    HeaderName::try_from(*name).unwrap(),
                    HeaderValue::from_str(value).unwrap(),
                );
            }
            carries_body(&headers)
        };
        assert!(!with(&[]));
        assert!(!with(&[("content-length", "0")]));
        assert!(with(&[("content-length", "12")]));
        assert!(with(&[("content-length", "soon")]), "unreadable counts as a body");
        assert!(with(&[("content-length", "0"), ("content-length", "5")]));
        assert!(with(&[("transfer-encoding", "chunked")]));
    }
}
