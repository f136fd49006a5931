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

/// The shared client, built on first use (an idle subagent never builds it).
pub fn http_client() -> Result<&'static reqwest::Client, String> {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    if let Some(client) = CLIENT.get() {
        return Ok(client);
    }
    let client = reqwest::Client::builder()
        .user_agent(concat!("nexbot-subagent/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(Duration::from_secs(10))
        .redirect(reqwest::redirect::Policy::limited(5))
        // No connection outlives the request that opened it: a pooled keep-alive (or proxy
        // tunnel) would carry one task's connection into the next.
        .pool_max_idle_per_host(0)
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
    Ok(CLIENT.get_or_init(|| client))
}
