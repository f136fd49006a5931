//! The HTTP client of the network tools (`web_fetch`, `http_request`). The LLM client is
//! `nexbot-llm`'s, built per task with the same rustls, proxy and resolver features.
//!
//! `reqwest` with rustls and the webpki built-in roots: no OpenSSL, no CA bundle in the image.
//! It honours `HTTP_PROXY`/`HTTPS_PROXY`/`NO_PROXY` from the environment: in production the
//! container reaches the world only through the host's egress proxy, by IP, with the LLM relay
//! in `NO_PROXY`. Direct connections resolve names with the pure-Rust hickory resolver (it reads
//! `/etc/resolv.conf`), because static glibc has no working resolver in a scratch image; behind
//! the proxy no resolution happens in the container at all (the proxy resolves).

use std::sync::OnceLock;
use std::time::Duration;

pub const USER_AGENT: &str = concat!("nexbot-subagent/", env!("CARGO_PKG_VERSION"));

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
    let client = reqwest::Client::builder()
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
