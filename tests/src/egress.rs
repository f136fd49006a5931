//! Helpers shared by the egress tests: a started listener with its own data directory, the
//! audit lines it wrote, and small local servers to be the "internet".

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use nexbot_egress::{
    Attribution, AttributionTable, Cidr, Egress, EgressConfig, InternalAllow, Network, ProviderKeys,
};
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub const WAIT: Duration = Duration::from_secs(20);

/// The egress credential the test client presents to each listener (by its address): the
/// client stands for the processes of the task its source address is attributed to, and those
/// carry that task's credential. [`connect`] and [`Started::proxy_client`] read it per request,
/// so a test that switches the task ([`Started::run_task`]) switches the credential too.
static CREDENTIALS: LazyLock<Mutex<HashMap<SocketAddr, SecretString>>> =
    LazyLock::new(Mutex::default);

/// The credential registered for the listener at `proxy`, if any.
pub fn credential_for(proxy: SocketAddr) -> Option<SecretString> {
    CREDENTIALS.lock().unwrap_or_else(|p| p.into_inner()).get(&proxy).cloned()
}

/// Makes the test client present `credential` to the listener at `proxy` (`None`: nothing).
pub fn present_credential(proxy: SocketAddr, credential: Option<SecretString>) {
    let mut map = CREDENTIALS.lock().unwrap_or_else(|p| p.into_inner());
    match credential {
        Some(credential) => map.insert(proxy, credential),
        None => map.remove(&proxy),
    };
}

/// The `Proxy-Authorization` header line (with its CRLF) of the credential registered for
/// the listener at `proxy`, for requests written by hand; empty when there is none.
pub fn auth_line(proxy: SocketAddr) -> String {
    credential_for(proxy)
        .map(|c| format!("Proxy-Authorization: {}\r\n", proxy_authorization(c.expose_secret())))
        .unwrap_or_default()
}

/// `Proxy-Authorization` for an egress credential, as a task's processes send it.
/// `egress.proxy.allow_internal`'s entry for exactly `addr` (its address, its port): how a
/// test lets the proxy reach a server of its own on this machine.
pub fn allow(addr: std::net::SocketAddr) -> InternalAllow {
    InternalAllow { cidr: Cidr::try_from(addr.ip().to_string()).unwrap(), ports: vec![addr.port()] }
}

pub fn proxy_authorization(token: &str) -> String {
    use base64::Engine;
    let pair = format!("task:{token}");
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(pair))
}

/// A fresh data directory under the system temp dir, removed on drop.
#[derive(Debug)]
pub struct DataDir(pub PathBuf);

impl DataDir {
    pub fn new(tag: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("nxe-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        Self(path)
    }
}

impl Drop for DataDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[derive(Debug)]
pub struct Started {
    pub egress: Egress,
    pub table: Arc<AttributionTable>,
    pub dir: DataDir,
}

impl Started {
    /// Every audit line so far, parsed.
    pub fn audit(&self) -> Vec<Value> {
        read_audit(self.egress.audit_path())
    }

    /// Waits until `count` audit lines exist (lines are written when connections end).
    pub async fn audit_lines(&self, count: usize) -> Vec<Value> {
        wait_audit(self.egress.audit_path(), |lines| lines.len() >= count).await
    }

    /// A client that sends everything through the listener with the credential registered for
    /// it at the time of each request.
    pub fn proxy_client(&self) -> reqwest::Client {
        reqwest::Client::builder().proxy(self.proxy()).timeout(WAIT).build().unwrap()
    }

    /// The listener as a reqwest proxy, presenting the credential registered for it at the
    /// time of each request (see [`present_credential`]).
    pub fn proxy(&self) -> reqwest::Proxy {
        let proxy = self.egress.local_addr();
        reqwest::Proxy::custom(move |_| {
            let url = match credential_for(proxy) {
                Some(token) => format!("http://task:{}@{proxy}", token.expose_secret()),
                None => format!("http://{proxy}"),
            };
            Some(url)
        })
    }

    /// The test client becomes task `task`'s processes: the table says its container runs
    /// `task`, and its requests carry a fresh credential of `task`.
    pub fn run_task(&self, task: &str) -> SecretString {
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        self.table.set_task(local, Some(task.to_owned()));
        self.issue_credential(task)
    }

    /// Issues `task`'s egress credential and makes the test client present it.
    pub fn issue_credential(&self, task: &str) -> SecretString {
        let credential = self.egress.issue_proxy_token(task).expect("credential issued");
        present_credential(self.egress.local_addr(), Some(credential.clone()));
        credential
    }
}

pub fn read_audit(path: &std::path::Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().map(|l| serde_json::from_str(l).expect("audit line is JSON")).collect()
}

/// Waits (bounded) until the audit lines satisfy `done`, and returns them.
pub async fn wait_audit(path: &std::path::Path, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let lines = read_audit(path);
        if done(&lines) {
            return lines;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "audit lines never as expected: {lines:#?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Starts the listener on 127.0.0.1 (standing in for the gateway); the test client at
/// 127.0.0.1 is attributed to container `c-test` running task `t-1`, and presents `t-1`'s
/// egress credential.
pub async fn start(config: EgressConfig, key: Option<&str>) -> Started {
    let table = Arc::new(AttributionTable::default());
    let local: IpAddr = "127.0.0.1".parse().unwrap();
    table.set_container(local, "c-test");
    table.set_task(local, Some("t-1".into()));
    let (egress, dir) = launch(config, local, table.clone(), key).await;
    let started = Started { egress, table, dir };
    started.issue_credential("t-1");
    started
}

/// [`start`] for tests of the relay alone: 127.0.0.1 is no pool container (nobody is in the
/// table), so a call is judged by its token only, whatever task it names. That tokens are
/// bound to the container running their task is tested with [`start`].
pub async fn start_relay(config: EgressConfig, key: Option<&str>) -> Started {
    let table = Arc::new(AttributionTable::default());
    let (egress, dir) = launch(config, "127.0.0.1".parse().unwrap(), table.clone(), key).await;
    Started { egress, table, dir }
}

/// [`start`] with a key per relay provider: `(variable name, key)` pairs, as the host reads
/// them for `egress.relay.providers`.
pub async fn start_with_keys(mut config: EgressConfig, keys: &[(&str, &str)]) -> Started {
    config.firewall = false;
    let table = Arc::new(AttributionTable::default());
    let local: IpAddr = "127.0.0.1".parse().unwrap();
    table.set_container(local, "c-test");
    table.set_task(local, Some("t-1".into()));
    let mut provider_keys = ProviderKeys::new();
    for (env, key) in keys {
        provider_keys.insert(*env, SecretString::from(key.to_string()));
    }
    let network = Network { gateway: local, bridge: String::new() };
    let (egress, dir) = launch_keyed(config, &network, table.clone(), provider_keys).await;
    let started = Started { egress, table, dir };
    started.issue_credential("t-1");
    started
}

/// Starts the listener on `ip` (no network to firewall) at a free port.
pub async fn launch(
    mut config: EgressConfig,
    ip: IpAddr,
    attribution: Arc<dyn Attribution>,
    key: Option<&str>,
) -> (Egress, DataDir) {
    let network = Network { gateway: ip, bridge: String::new() };
    config.firewall = false;
    launch_on(config, &network, attribution, key).await
}

/// Starts the listener on `network`'s gateway at a free port, with its own data directory.
pub async fn launch_on(
    config: EgressConfig,
    network: &Network,
    attribution: Arc<dyn Attribution>,
    key: Option<&str>,
) -> (Egress, DataDir) {
    let key = key.map(|k| SecretString::from(k.to_owned()));
    let keys = ProviderKeys::single(&config.relay.api_key_env, key);
    launch_keyed(config, network, attribution, keys).await
}

async fn launch_keyed(
    mut config: EgressConfig,
    network: &Network,
    attribution: Arc<dyn Attribution>,
    keys: ProviderKeys,
) -> (Egress, DataDir) {
    let dir = DataDir::new("egress");
    config.port = 0;
    let egress = Egress::start_with_keys(config, network, &dir.0, attribution, keys)
        .await
        .expect("egress starts");
    (egress, dir)
}

/// A TCP server that echoes, counting the connections it accepted.
pub async fn echo_server() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let (mut r, mut w) = stream.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    (addr, accepted)
}

/// A TCP server that writes `size` bytes to every client, then closes.
pub async fn firehose_server(size: usize) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let _ = stream.write_all(&vec![b'x'; size]).await;
            });
        }
    });
    addr
}

/// A host address that is NOT on the internal network (the one the host uses towards the
/// outside), to show containers cannot reach the host except through the gateway, and for
/// servers the pool's tasks reach through the proxy. Found by "connecting" a UDP socket,
/// which sends nothing.
pub fn host_address_off_network() -> IpAddr {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").expect("udp socket");
    socket.connect("1.1.1.1:80").expect("the host has a route out");
    socket.local_addr().expect("local address").ip()
}

/// An HTTP server recording the requests it got (method, uri, headers as text).
pub async fn http_server() -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    http_server_at("127.0.0.1".parse().unwrap()).await
}

/// [`http_server`] listening on `ip`.
pub async fn http_server_at(ip: IpAddr) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    use axum::routing::get;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let app = axum::Router::new()
        .route(
            "/hello",
            get(move |req: axum::extract::Request| {
                let record = record.clone();
                async move {
                    record.lock().unwrap().push(format!(
                        "{} {} {:?}",
                        req.method(),
                        req.uri(),
                        req.headers()
                    ));
                    "hello from the allowed server"
                }
            }),
        )
        .route("/big", get(|| async { "y".repeat(100_000) }));
    let listener = TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (addr, seen)
}

/// Sends `CONNECT target` on a fresh connection to the proxy; returns the status line's code
/// and the stream (ready for tunnel bytes on 200).
/// It presents the credential registered for the listener ([`present_credential`]).
pub async fn connect(proxy: SocketAddr, target: &str) -> (u16, TcpStream) {
    let credential = credential_for(proxy);
    connect_with(proxy, target, credential.as_ref().map(|c| c.expose_secret())).await
}

/// How the proxy met a request sent from a given source ([`request_from`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answered {
    /// The answer's status code.
    Status(u16),
    /// The connection was closed before a whole answer head came.
    Closed,
    /// No whole answer head within the limit (a held request).
    Waiting,
}

/// Sends `request` (a whole request head) to `proxy` from the loopback address `source` (a
/// container of the test's attribution table) and reads the answer's head within `limit`.
/// The stream stays open for the caller (a tunnel, or a held request).
pub async fn request_from(
    source: &str,
    proxy: SocketAddr,
    request: &str,
    limit: Duration,
) -> (Answered, TcpStream) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(source.parse().unwrap(), 0)).unwrap();
    let mut stream = socket.connect(proxy).await.unwrap();
    let _ = stream.write_all(request.as_bytes()).await;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    let read = async {
        while !head.ends_with(b"\r\n\r\n") {
            if stream.read(&mut byte).await.unwrap_or(0) == 0 {
                return false;
            }
            head.push(byte[0]);
        }
        true
    };
    let answered = match tokio::time::timeout(limit, read).await {
        Err(_) => Answered::Waiting,
        Ok(false) => Answered::Closed,
        Ok(true) => {
            let head = String::from_utf8_lossy(&head).into_owned();
            let code = head.split(' ').nth(1).and_then(|c| c.parse().ok());
            Answered::Status(code.expect("a status line"))
        }
    };
    (answered, stream)
}

/// [`connect`] presenting `credential` (or none), whatever is registered.
pub async fn connect_with(
    proxy: SocketAddr,
    target: &str,
    credential: Option<&str>,
) -> (u16, TcpStream) {
    let mut stream = TcpStream::connect(proxy).await.unwrap();
    let auth = credential
        .map(|token| format!("Proxy-Authorization: {}\r\n", proxy_authorization(token)))
        .unwrap_or_default();
    let request = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{auth}\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(WAIT, stream.read(&mut byte))
            .await
            .expect("proxy answers")
            .unwrap();
        assert_eq!(
            n,
            1,
            "proxy closed before the end of its answer: {:?}",
            String::from_utf8_lossy(&head)
        );
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap();
    let code = head.split(' ').nth(1).and_then(|c| c.parse().ok()).expect("status line");
    (code, stream)
}

/// What [`web_echo_server`] got: method, request target (path and query, as sent), headers
/// and body.
#[derive(Debug, Clone)]
pub struct Echoed {
    pub method: String,
    pub target: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Echoed {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// The app of [`web_echo_server`] (also served over TLS by tests that bring a certificate).
/// Every request is recorded in `seen` and answered with what it got, as JSON
/// (`method`, `target`, `headers`, `body`), with its `Authorization` repeated in the response
/// header `x-echo-authorization`; and by path:
/// - `/b64…`: the same JSON, base64-encoded (standard alphabet);
/// - `/redirect…`: `302 Found` to `http://elsewhere.example/collect?<the request's query>`;
/// - `/gzip…`: a body marked `Content-Encoding: gzip`;
/// - `/zip…`: a body typed `application/zip`.
pub fn web_echo_app(seen: Arc<Mutex<Vec<Echoed>>>) -> axum::Router {
    use axum::response::IntoResponse;
    use base64::Engine;
    axum::Router::new().fallback(move |req: axum::extract::Request| {
        let seen = seen.clone();
        async move {
            let (parts, body) = req.into_parts();
            let body = axum::body::to_bytes(body, 8 << 20).await.unwrap_or_default();
            let echoed = Echoed {
                method: parts.method.to_string(),
                target: parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_owned(),
                headers: parts
                    .headers
                    .iter()
                    .map(|(n, v)| (n.to_string(), String::from_utf8_lossy(v.as_bytes()).into()))
                    .collect(),
                body: String::from_utf8_lossy(&body).into_owned(),
            };
            seen.lock().unwrap().push(echoed.clone());
            let json = serde_json::json!({
                "method": echoed.method,
                "target": echoed.target,
                "headers": echoed.headers.iter().cloned().collect::<std::collections::BTreeMap<_, _>>(),
                "body": echoed.body,
            })
            .to_string();
            let authorization = echoed.header("authorization").unwrap_or_default().to_owned();
            let path = parts.uri.path();
            let mut response = if path.starts_with("/b64") {
                base64::engine::general_purpose::STANDARD.encode(&json).into_response()
            } else if path.starts_with("/redirect") {
                let location = format!(
                    "http://elsewhere.example/collect?{}",
                    parts.uri.query().unwrap_or_default()
                );
                (axum::http::StatusCode::FOUND, [("location", location)], json).into_response()
            } else if path.starts_with("/gzip") {
                ([("content-encoding", "gzip")], json).into_response()
            } else if path.starts_with("/zip") {
                ([("content-type", "application/zip")], json).into_response()
            } else {
                ([("content-type", "application/json")], json).into_response()
            };
            if let Ok(value) = axum::http::HeaderValue::from_str(&authorization) {
                response.headers_mut().insert("x-echo-authorization", value);
            }
            response
        }
    })
}

/// An HTTP server on `ip` answering every request with what it got ([`web_echo_app`]).
pub async fn web_echo_server(ip: IpAddr) -> (SocketAddr, Arc<Mutex<Vec<Echoed>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let app = web_echo_app(seen.clone());
    let listener = TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (addr, seen)
}
