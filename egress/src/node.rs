//! The egress node: the sandboxes' only way out when they run on an engine on another machine.
//!
//! Why a tunnel, not a second proxy: the node sits on the pool network's gateway there (the
//! only address the containers can reach) and its firewall rules confine that network to its
//! port, but it decides nothing and holds nothing. Every connection it accepts goes, with the
//! container address it came from, over one link to the daemon, which serves it as one of its
//! own listener's (`proxy::serve_tunnelled`): the same attribution, task credentials, policy,
//! approvals, secret injection, audit and relay. So no secret value, relay token check or
//! provider key ever exists on the remote machine, and the node's policy cannot drift from
//! the daemon's. The price: the tasks' traffic leaves from the daemon's machine.
//!
//! The link is HTTP/2 (hyper's, flow control per stream) over the node container's attached
//! stdin/stdout, which the daemon reaches through the engine's own mutually authenticated API:
//! no port, certificate or key of the node's own. The node opens one stream per connection
//! (its source in [`SOURCE_HEADER`]); the request body carries the container's bytes, the
//! response body the answer. When the link ends the node exits: nothing listens on the gateway
//! any more, so nothing new gets out (fail closed), and held connections end with it.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::TryStreamExt;
use http_body_util::{combinators::BoxBody, BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio_util::io::ReaderStream;

use crate::{firewall, proxy, Egress, EgressError, Shared};

/// The header that names the container address a tunnelled connection came from.
pub const SOURCE_HEADER: &str = "x-nexbot-source";

type Body = BoxBody<Bytes, std::io::Error>;

/// Copies `body`'s data into `to`, then shuts `to`'s write side (the far end's half close).
async fn drain(mut body: Incoming, mut to: impl AsyncWrite + Unpin) {
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else { break };
        if let Ok(data) = frame.into_data() {
            if to.write_all(&data).await.is_err() {
                return;
            }
        }
    }
    let _ = to.shutdown().await;
}

/// A body that streams what `from` yields until its end.
fn body_of(from: impl AsyncRead + Send + Sync + 'static) -> Body {
    StreamBody::new(ReaderStream::new(from).map_ok(Frame::data)).boxed()
}

/// The daemon's end of egress nodes' links ([`Egress::node_links`]): cheap to clone, alive as
/// long as the listener is.
#[derive(Clone)]
pub struct NodeLinks(Arc<Shared>);

impl std::fmt::Debug for NodeLinks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeLinks").finish_non_exhaustive()
    }
}

impl Egress {
    /// Where egress nodes' links are served.
    pub fn node_links(&self) -> NodeLinks {
        NodeLinks(self.shared.clone())
    }
}

impl NodeLinks {
    /// Serves one node's link (`io`: the node container's attached stdin/stdout): each
    /// connection it tunnels as one of the listener's own, until the link ends.
    pub async fn serve<IO>(&self, io: IO) -> Result<(), String>
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let shared = self.0.clone();
        let service = hyper::service::service_fn(move |request: Request<Incoming>| {
            let shared = shared.clone();
            async move { Ok::<_, Infallible>(tunnel(request, shared)) }
        });
        hyper::server::conn::http2::Builder::new(TokioExecutor::new())
            .serve_connection(TokioIo::new(io), service)
            .await
            .map_err(|e| e.to_string())
    }
}

/// One tunnelled connection: its bytes into the listener's own handling, its answer back.
fn tunnel(request: Request<Incoming>, shared: Arc<Shared>) -> Response<Body> {
    let peer = request
        .headers()
        .get(SOURCE_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<SocketAddr>().ok());
    let Some(peer) = peer else {
        let mut refused = Response::new(body_of(&b"no source address\n"[..]));
        *refused.status_mut() = StatusCode::BAD_REQUEST;
        return refused;
    };
    let (ours, theirs) = tokio::io::duplex(64 * 1024);
    shared.tracker.spawn(proxy::serve_tunnelled(ours, peer, shared.clone()));
    let (read, write) = tokio::io::split(theirs);
    shared.tracker.spawn(drain(request.into_body(), write));
    Response::new(body_of(read))
}

/// Runs an egress node: listens on `listen` (the pool network's gateway on this machine),
/// confines the network's `bridge` to it (when given), and tunnels every connection over the
/// link on this process's stdin/stdout. Returns when the link ends (the listener and the
/// rules go with it).
pub async fn run_node(listen: SocketAddr, bridge: Option<&str>) -> Result<(), EgressError> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|source| EgressError::Bind { addr: listen, source })?;
    let firewall = match bridge {
        Some(bridge) => {
            Some(firewall::Firewall::install(bridge, listen.ip(), listen.port()).await?)
        }
        None => None,
    };
    let io = tokio::io::join(tokio::io::stdin(), tokio::io::stdout());
    let handshake =
        hyper::client::conn::http2::handshake::<_, _, Body>(TokioExecutor::new(), TokioIo::new(io))
            .await;
    let (sender, link) = match handshake {
        Ok(found) => found,
        Err(e) => {
            tracing::error!("egress node: the link did not open: {e}");
            return Ok(());
        }
    };
    tracing::info!(%listen, "egress node: listening, every connection tunnelled to the daemon");
    let mut link = tokio::spawn(link);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, peer)) = accepted else { continue };
                let _ = stream.set_nodelay(true);
                tokio::spawn(forward(stream, peer, sender.clone()));
            }
            ended = &mut link => {
                tracing::warn!("egress node: the link to the daemon ended ({ended:?}); stopping");
                break;
            }
        }
    }
    if let Some(firewall) = firewall {
        firewall.remove().await;
    }
    Ok(())
}

/// One accepted connection, over the link and back.
async fn forward(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    mut sender: hyper::client::conn::http2::SendRequest<Body>,
) {
    let (read, write) = stream.into_split();
    let request = Request::post("http://egress-node/tunnel")
        .header(SOURCE_HEADER, peer.to_string())
        .body(body_of(read));
    let Ok(request) = request else { return };
    match sender.send_request(request).await {
        Ok(response) => drain(response.into_body(), write).await,
        Err(e) => tracing::debug!(%peer, "egress node: the daemon did not take a connection: {e}"),
    }
}
