//! The HTTP client of the network tools (`web_fetch`, `http_request`). The LLM client is
//! `nexbot-llm`'s, built per task with the same rustls, proxy and resolver features.
//!
//! `reqwest` with rustls and the webpki built-in roots: no OpenSSL, no CA bundle in the image.
//! It honours `HTTP_PROXY`/`HTTPS_PROXY`/`NO_PROXY` from the environment ([`task_proxy`] says
//! why `NO_PROXY` is safe to honour): in production the container reaches the world only
//! through the host's egress proxy, by IP, with the LLM relay and loopback in `NO_PROXY`. Direct connections resolve names with the pure-Rust hickory resolver (it reads
//! `/etc/resolv.conf`), because static glibc has no working resolver in a scratch image; behind
//! the proxy no resolution happens in the container at all (the proxy resolves).
//!
//! The proxy serves a request only with the running task's egress credential
//! (`execute.egress_token`): [`set_task_credential`] holds it while the task runs, and every
//! way out of this process presents it — the clients here (through [`task_proxy`], which
//! reads it per request), the absolute-form requests of `web.rs` ([`proxy_authorization`]),
//! the LLM client (`llm.rs`) and the commands a task runs ([`task_proxy_env`]).

use std::sync::{OnceLock, RwLock};
use std::time::Duration;

use base64::Engine;
use secrecy::{ExposeSecret, SecretString};

pub const USER_AGENT: &str = concat!("nexbot-subagent/", env!("CARGO_PKG_VERSION"));

/// The user name the egress credential is presented with (the token is the password).
const CREDENTIAL_USER: &str = "task";
/// The proxy variables a credential goes into, in the order they are looked up.
const PROXY_VARS: [&str; 4] = ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"];

/// The running task's egress credential (one task at a time runs in a subagent).
static TASK_CREDENTIAL: RwLock<Option<SecretString>> = RwLock::new(None);

/// Sets (or, with `None`, clears) the egress credential of the task that starts now.
pub fn set_task_credential(credential: Option<SecretString>) {
    *TASK_CREDENTIAL.write().unwrap_or_else(|p| p.into_inner()) = credential;
}

fn task_credential() -> Option<SecretString> {
    TASK_CREDENTIAL.read().unwrap_or_else(|p| p.into_inner()).clone()
}

/// `Proxy-Authorization` for the running task (marked sensitive), when it has a credential.
pub fn proxy_authorization() -> Option<http::HeaderValue> {
    let token = task_credential()?;
    let pair = zeroize::Zeroizing::new(format!("{CREDENTIAL_USER}:{}", token.expose_secret()));
    let encoded = base64::engine::general_purpose::STANDARD.encode(pair.as_bytes());
    let mut value = http::HeaderValue::from_str(&format!("Basic {encoded}")).ok()?;
    value.set_sensitive(true);
    Some(value)
}

/// `url` (a proxy URL from the environment) with the running task's credential as its
/// userinfo; `url` as it is when there is no credential (or it is not a URL).
fn with_credential(url: &str) -> String {
    let Some(token) = task_credential() else { return url.to_owned() };
    match reqwest::Url::parse(url.trim()) {
        Ok(mut parsed) if parsed.has_host() => {
            let set = parsed.set_username(CREDENTIAL_USER).is_ok()
                && parsed.set_password(Some(token.expose_secret())).is_ok();
            // The URL type adds a `/` path; the variable keeps the shape it had.
            let with = parsed.to_string();
            match (set, url.trim().ends_with('/')) {
                (false, _) => url.to_owned(),
                (true, true) => with,
                (true, false) => with.trim_end_matches('/').to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

/// The proxy variables of the container, with the running task's credential in them, for the
/// environment of the commands a task runs (overriding the container's own); empty without a
/// credential. The values are secrets: they go into a child's environment, nowhere else.
pub fn task_proxy_env() -> Vec<(&'static str, String)> {
    if task_credential().is_none() {
        return Vec::new();
    }
    PROXY_VARS
        .iter()
        .filter_map(|name| std::env::var(name).ok().map(|value| (*name, with_credential(&value))))
        .collect()
}

/// The egress proxy as reqwest sees it: the container's `HTTPS_PROXY` for https, its
/// `HTTP_PROXY` for http, except for the hosts of `NO_PROXY`, presenting the credential of the
/// task running at the time of each request. `None` when the container has no proxy
/// variables.
pub fn task_proxy() -> Option<reqwest::Proxy> {
    let env = |names: [&str; 2]| names.iter().find_map(|n| std::env::var(n).ok());
    proxy_for(
        env(["HTTP_PROXY", "http_proxy"]),
        env(["HTTPS_PROXY", "https_proxy"]),
        env(["NO_PROXY", "no_proxy"]),
    )
}

/// [`task_proxy`] for these values of the variables.
///
/// `NO_PROXY` is checked here, in the closure, because reqwest (0.12.28) keeps a custom
/// proxy's `no_proxy` but never consults it (`Custom::call`): `.no_proxy(NoProxy::from_env())`
/// on this proxy was a no-op, and `http_request`/`web_fetch` to `127.0.0.1` went to the egress
/// proxy, which resolves loopback as the *host's* and refuses it.
///
/// Why honouring it does not weaken the sandbox: `NO_PROXY` comes from the container's
/// environment, which the host sets (`Egress::container_env`: the listener's address,
/// `localhost`, `127.0.0.1`, `::1`) and a task cannot change; the commands a task runs get the
/// same variable and `curl` & co. honour it already. The pool network is internal: bypassing
/// the proxy reaches only the container itself and the listener (whose relay wants the task's
/// relay token and serves a relay call through the proxy as well) — nothing the network would
/// not let a command reach anyway. A bypassed request carries no egress credential (it is only
/// in the proxy URL). Requests that carry proxy-mode secrets (`web.rs`, `via_proxy`) always go
/// to the proxy, `NO_PROXY` or not: only the proxy fills their placeholders.
fn proxy_for(
    http: Option<String>,
    https: Option<String>,
    no_proxy: Option<String>,
) -> Option<reqwest::Proxy> {
    let https = https.or_else(|| http.clone());
    if http.is_none() && https.is_none() {
        return None;
    }
    // The same matching rules reqwest applies to its own env proxies (domains with their
    // subdomains, IPs, CIDRs, `*`).
    let matcher = hyper_util::client::proxy::matcher::Matcher::builder()
        .http(http.clone().unwrap_or_default())
        .https(https.clone().unwrap_or_default())
        .no(no_proxy.unwrap_or_default())
        .build();
    Some(reqwest::Proxy::custom(move |url| {
        let uri = url.as_str().parse::<http::Uri>().ok()?;
        matcher.intercept(&uri)?;
        let base = if url.scheme() == "https" { https.as_deref() } else { http.as_deref() }?;
        Some(with_credential(base))
    }))
}

/// At most this many redirects are followed.
const MAX_REDIRECTS: usize = 5;

/// The shared client, built on first use (an idle subagent never builds it).
pub fn http_client() -> Result<&'static reqwest::Client, String> {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    build(&CLIENT, reqwest::redirect::Policy::limited(MAX_REDIRECTS))
}

/// The client for a request that carries a secret's value: it follows a redirect only to
/// the origin (scheme, host, port) the request was sent to, so a server cannot bounce the value elsewhere (the 3xx
/// comes back to the model instead).
pub fn same_host_client() -> Result<&'static reqwest::Client, String> {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    // The same origin: scheme, host and port (an https → http hop on the same host would send
    // the value in clear text).
    let origin = |u: &reqwest::Url| {
        (u.scheme().to_owned(), u.host_str().map(str::to_owned), u.port_or_known_default())
    };
    let policy = reqwest::redirect::Policy::custom(move |attempt| {
        let first = attempt.previous().first().map(origin);
        if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error("too many redirects")
        } else if Some(origin(attempt.url())) != first {
            attempt.stop()
        } else {
            attempt.follow()
        }
    });
    build(&CLIENT, policy)
}

/// The egress proxy's `host:port`, from `HTTP_PROXY` (or `http_proxy`).
pub fn proxy_address() -> Option<String> {
    let raw = std::env::var("HTTP_PROXY").or_else(|_| std::env::var("http_proxy")).ok()?;
    let url = reqwest::Url::parse(raw.trim()).ok()?;
    Some(format!("{}:{}", url.host_str()?, url.port_or_known_default()?))
}

fn build(
    cell: &'static OnceLock<reqwest::Client>,
    policy: reqwest::redirect::Policy,
) -> Result<&'static reqwest::Client, String> {
    if let Some(client) = cell.get() {
        return Ok(client);
    }
    let mut builder = reqwest::Client::builder();
    if let Some(proxy) = task_proxy() {
        builder = builder.proxy(proxy);
    }
    let client = builder
        .user_agent(USER_AGENT)
        .connect_timeout(Duration::from_secs(10))
        .redirect(policy)
        // No connection outlives the request that opened it: a pooled keep-alive (or proxy
        // tunnel) would carry one task's connection into the next.
        .pool_max_idle_per_host(0)
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
    Ok(cell.get_or_init(|| client))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::*;

    #[test]
    fn the_credential_goes_into_the_proxy_url_as_userinfo_and_the_url_keeps_its_shape() {
        set_task_credential(None);
        assert_eq!(with_credential("http://10.0.0.1:3128"), "http://10.0.0.1:3128");
        assert!(proxy_authorization().is_none());
        set_task_credential(Some(SecretString::from("nxp_abc-_1".to_owned())));
        let expected = "http://task:nxp_abc-_1@10.0.0.1:3128";
        assert_eq!(with_credential("http://10.0.0.1:3128"), expected);
        assert_eq!(with_credential("http://10.0.0.1:3128/"), format!("{expected}/"));
        assert_eq!(with_credential("not a url"), "not a url");
        let header = proxy_authorization().unwrap();
        assert!(header.is_sensitive());
        // base64("task:nxp_abc-_1")
        assert_eq!(header.to_str().unwrap(), "Basic dGFzazpueHBfYWJjLV8x");
        set_task_credential(None);
    }

    /// A server on 127.0.0.1 that answers every request with `name` and counts them.
    async fn server(name: &'static str) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let hits = Arc::new(AtomicUsize::new(0));
        let counter = hits.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let (mut request, mut buf) = (Vec::new(), [0; 4096]);
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{name}",
                        name.len()
                    );
                    let _ = stream.write_all(answer.as_bytes()).await;
                });
            }
        });
        (address, hits)
    }

    #[tokio::test]
    async fn no_proxy_hosts_are_reached_directly_and_the_rest_through_the_proxy() {
        let (origin, origin_hits) = server("direct").await;
        let (proxy, proxy_hits) = server("proxied").await;
        let get = |proxy: reqwest::Proxy, url: String| async move {
            let client = reqwest::Client::builder().proxy(proxy).build().unwrap();
            client.get(url).send().await.unwrap().text().await.unwrap()
        };
        let proxy_url = Some(format!("http://{proxy}"));
        // The container's NO_PROXY, as the egress sets it.
        let no_proxy = Some("172.30.0.1,localhost,127.0.0.1,::1".to_owned());
        let with_no_proxy = || proxy_for(proxy_url.clone(), proxy_url.clone(), no_proxy.clone());
        assert_eq!(get(with_no_proxy().unwrap(), format!("http://{origin}/")).await, "direct");
        assert_eq!(origin_hits.load(Ordering::SeqCst), 1);
        assert_eq!(proxy_hits.load(Ordering::SeqCst), 0, "127.0.0.1 is in NO_PROXY");
        // Any other host goes to the proxy (which answers for it here).
        let elsewhere = "http://elsewhere.invalid/".to_owned();
        assert_eq!(get(with_no_proxy().unwrap(), elsewhere).await, "proxied");
        assert_eq!(proxy_hits.load(Ordering::SeqCst), 1);
        // Without NO_PROXY even loopback goes to the proxy.
        let without = proxy_for(proxy_url.clone(), None, None).unwrap();
        assert_eq!(get(without, format!("http://{origin}/")).await, "proxied");
        assert_eq!((origin_hits.load(Ordering::SeqCst), proxy_hits.load(Ordering::SeqCst)), (1, 2));
        assert!(proxy_for(None, None, no_proxy).is_none(), "no proxy variables, no proxy");
    }
}
