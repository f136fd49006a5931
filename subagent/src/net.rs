//! The HTTP client of the network tools (`web_fetch`, `http_request`). The LLM client is
//! `nexbot-llm`'s, built per task with the same rustls, proxy and resolver features.
//!
//! `reqwest` with rustls and the webpki built-in roots: no OpenSSL, no CA bundle in the image.
//! It honours `HTTP_PROXY`/`HTTPS_PROXY`/`NO_PROXY` from the environment: in production the
//! container reaches the world only through the host's egress proxy, by IP, with the LLM relay
//! in `NO_PROXY`. Direct connections resolve names with the pure-Rust hickory resolver (it reads
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
/// `HTTP_PROXY` for http (`NO_PROXY` honoured), presenting the credential of the task running
/// at the time of each request. `None` when the container has no proxy variables.
pub fn task_proxy() -> Option<reqwest::Proxy> {
    let env = |names: [&str; 2]| names.iter().find_map(|n| std::env::var(n).ok());
    let http = env(["HTTP_PROXY", "http_proxy"]);
    let https = env(["HTTPS_PROXY", "https_proxy"]).or_else(|| http.clone());
    if http.is_none() && https.is_none() {
        return None;
    }
    let proxy = reqwest::Proxy::custom(move |url| {
        let base = if url.scheme() == "https" { https.as_deref() } else { http.as_deref() }?;
        Some(with_credential(base))
    });
    Some(proxy.no_proxy(reqwest::NoProxy::from_env()))
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
}
