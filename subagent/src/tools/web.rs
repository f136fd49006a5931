//! `web_fetch` and `http_request`: the network tools.
//!
//! Both use the process's shared client ([`crate::net`]: rustls, proxy from the environment).
//! Secret placeholders are filled in only here, at execution time; bodies are read up to a
//! size limit, HTML is turned into readable text, and non-text content is described, not dumped.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use zeroize::Zeroizing;

use super::{ToolError, ToolOutput};
use crate::secrets::SecretStore;

/// At most this much of a response body is read.
pub const MAX_BODY: usize = 5 * 1024 * 1024;
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(30);
pub const MAX_REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// Only http(s), and never a cloud metadata service.
fn check_url(url: &str) -> Result<reqwest::Url, ToolError> {
    let parsed = reqwest::Url::parse(url.trim())
        .map_err(|e| ToolError::Invalid(format!("invalid URL {url:?}: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(ToolError::Invalid(format!(
            "unsupported URL scheme {:?}: only http and https",
            parsed.scheme()
        )));
    }
    let host = parsed.host_str().unwrap_or_default().trim_matches(['[', ']']);
    const METADATA: &[&str] = &[
        "169.254.169.254",
        "169.254.170.2",
        "metadata.google.internal",
        "100.100.100.200",
        "fd00:ec2::254",
    ];
    if METADATA.contains(&host) {
        return Err(ToolError::Refused(format!(
            "refused: {host} is a cloud metadata address, which this sandbox does not allow"
        )));
    }
    Ok(parsed)
}

#[derive(Debug, Deserialize)]
pub struct FetchArgs {
    pub url: String,
}

pub async fn web_fetch(secrets: &SecretStore, args: FetchArgs) -> Result<ToolOutput, ToolError> {
    let url = secrets.substitute(&args.url).map_err(|e| ToolError::Invalid(e.to_string()))?;
    let carries_value = secrets.fills_a_value(&args.url);
    let url = check_url(&url)?;
    let outgoing = Outgoing {
        method: reqwest::Method::GET,
        url,
        headers: Vec::new(),
        body: None,
        timeout: FETCH_TIMEOUT,
    };
    let fetched = send(secrets, outgoing, carries_value, "web_fetch").await?;
    let mut text = describe_body(&fetched.content_type, &fetched.body.bytes, true);
    if fetched.body.truncated {
        text.push_str(&format!("\n[body cut at {MAX_BODY} bytes]"));
    }
    if !fetched.status.is_success() {
        text = format!("HTTP {}{}\n{text}", fetched.status, fetched.redirect_note());
    }
    Ok(ToolOutput::external(format!("web_fetch {}", args.url), text))
}

#[derive(Debug, Deserialize)]
pub struct RequestArgs {
    #[serde(default)]
    pub method: Option<String>,
    pub url: String,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default)]
    pub body: Option<String>,
    #[serde(default)]
    pub timeout_secs: Option<u64>,
}

pub async fn http_request(
    secrets: &SecretStore,
    args: RequestArgs,
) -> Result<ToolOutput, ToolError> {
    let fill = |text: &str| secrets.substitute(text).map_err(|e| ToolError::Invalid(e.to_string()));
    let method_name = args.method.as_deref().unwrap_or("GET").trim().to_ascii_uppercase();
    let method = reqwest::Method::from_bytes(method_name.as_bytes())
        .map_err(|_| ToolError::Invalid(format!("invalid HTTP method {method_name:?}")))?;
    let url = check_url(&fill(&args.url)?)?;
    let timeout = args
        .timeout_secs
        .map_or(FETCH_TIMEOUT, Duration::from_secs)
        .clamp(Duration::from_secs(1), MAX_REQUEST_TIMEOUT);
    let mut carries_value = secrets.fills_a_value(&args.url);
    let mut headers = Vec::new();
    for (name, value) in &args.headers {
        carries_value |= secrets.fills_a_value(value);
        let value = fill(value)?;
        let name = reqwest::header::HeaderName::from_bytes(name.trim().as_bytes())
            .map_err(|_| ToolError::Invalid(format!("invalid header name {name:?}")))?;
        let mut value = reqwest::header::HeaderValue::from_str(value.as_str())
            .map_err(|_| ToolError::Invalid(format!("invalid value for header {name}")))?;
        value.set_sensitive(true);
        headers.push((name, value));
    }
    let body = match &args.body {
        Some(body) => {
            carries_value |= secrets.fills_a_value(body);
            Some(Zeroizing::new(fill(body)?.as_bytes().to_vec()))
        }
        None => None,
    };
    let outgoing = Outgoing { method, url, headers, body, timeout };
    let fetched = send(secrets, outgoing, carries_value, "http_request").await?;
    let mut text = format!(
        "HTTP {}{}\ncontent-type: {}\n",
        fetched.status,
        fetched.redirect_note(),
        fetched.content_type
    );
    if let Some(location) = &fetched.location {
        text.push_str(&format!("location: {location}\n"));
    }
    text.push('\n');
    text.push_str(&describe_body(&fetched.content_type, &fetched.body.bytes, false));
    if fetched.body.truncated {
        text.push_str(&format!("\n[body cut at {MAX_BODY} bytes]"));
    }
    Ok(ToolOutput::external(format!("http_request {method_name} {}", args.url), text))
}

/// A request ready to go, secrets filled in (or left as `{{secret:NAME}}` for the proxy).
pub(crate) struct Outgoing {
    pub(crate) method: reqwest::Method,
    pub(crate) url: reqwest::Url,
    pub(crate) headers: Vec<(reqwest::header::HeaderName, reqwest::header::HeaderValue)>,
    pub(crate) body: Option<Zeroizing<Vec<u8>>>,
    pub(crate) timeout: Duration,
}

/// What came back.
pub(crate) struct Fetched {
    pub(crate) status: reqwest::StatusCode,
    pub(crate) content_type: String,
    pub(crate) location: Option<String>,
    pub(crate) body: Body,
}

impl Fetched {
    /// A redirect is never followed when the request carried a secret (nor ever on the
    /// proxy path): say so, with where it pointed.
    fn redirect_note(&self) -> &'static str {
        if self.status.is_redirection() && self.location.is_some() {
            " (redirect not followed: the request carried a secret)"
        } else {
            ""
        }
    }
}

/// Sends `outgoing`. A task with proxy-mode secrets sends every request to the egress proxy
/// in absolute form (`https://` too: the proxy makes the TLS connection, fills in the
/// secrets for their bound hosts and scrubs the answer); otherwise reqwest, through the
/// proxy's tunnel. A request that carries a value filled in here follows no redirect to
/// another host.
pub(crate) async fn send(
    secrets: &SecretStore,
    outgoing: Outgoing,
    carries_value: bool,
    tool: &str,
) -> Result<Fetched, ToolError> {
    if secrets.has_proxied() {
        return tokio::time::timeout(outgoing.timeout, via_proxy(outgoing, tool)).await.map_err(
            |_| ToolError::Timeout(format!("{tool}: the server did not answer in time")),
        )?;
    }
    let client =
        if carries_value { crate::net::same_host_client() } else { crate::net::http_client() };
    let client = client.map_err(ToolError::Failed)?;
    let mut request = client.request(outgoing.method, outgoing.url).timeout(outgoing.timeout);
    for (name, value) in outgoing.headers {
        request = request.header(name, value);
    }
    if let Some(body) = outgoing.body {
        request = request.body(body.to_vec());
    }
    let response = request.send().await.map_err(|e| request_error(tool, e))?;
    let (status, content_type, location) = head(response.status(), response.headers());
    let body = read_limited(response.bytes_stream()).await?;
    Ok(Fetched { status, content_type, location: location.filter(|_| carries_value), body })
}

fn head(
    status: reqwest::StatusCode,
    headers: &reqwest::header::HeaderMap,
) -> (reqwest::StatusCode, String, Option<String>) {
    let get = |name| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let content_type = get(reqwest::header::CONTENT_TYPE).unwrap_or_default().to_ascii_lowercase();
    let location = get(reqwest::header::LOCATION).filter(|_| status.is_redirection());
    (status, content_type, location)
}

/// One request to the egress proxy in absolute form over a fresh connection (none outlives
/// its request, as with the shared client).
async fn via_proxy(outgoing: Outgoing, tool: &str) -> Result<Fetched, ToolError> {
    use http_body_util::{BodyDataStream, Full};
    let failed = |what: &str, err: &dyn std::fmt::Display| {
        ToolError::Failed(format!("{tool}: {what}: {err}"))
    };
    let proxy = crate::net::proxy_address().ok_or_else(|| {
        ToolError::Failed(format!(
            "{tool}: this task's secrets are filled in by the egress proxy, but no HTTP_PROXY \
             is set"
        ))
    })?;
    let stream = tokio::net::TcpStream::connect(&proxy)
        .await
        .map_err(|e| failed("cannot reach the egress proxy", &e))?;
    let _ = stream.set_nodelay(true);
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| failed("egress proxy", &e))?;
    tokio::spawn(conn);
    let authority = match outgoing.url.port() {
        Some(port) => format!("{}:{port}", outgoing.url.host_str().unwrap_or_default()),
        None => outgoing.url.host_str().unwrap_or_default().to_owned(),
    };
    let mut builder = http::Request::builder()
        .method(outgoing.method)
        .uri(outgoing.url.as_str())
        .header(http::header::HOST, authority)
        .header(http::header::USER_AGENT, crate::net::USER_AGENT);
    if let Some(credential) = crate::net::proxy_authorization() {
        builder = builder.header(http::header::PROXY_AUTHORIZATION, credential);
    }
    for (name, value) in outgoing.headers {
        builder = builder.header(name, value);
    }
    let body = outgoing.body.map(|b| bytes::Bytes::from(b.to_vec())).unwrap_or_default();
    let request = builder
        .body(Full::new(body))
        .map_err(|e| ToolError::Invalid(format!("{tool}: cannot build the request: {e}")))?;
    let response = sender.send_request(request).await.map_err(|e| failed("request", &e))?;
    let (status, content_type, location) = head(response.status(), response.headers());
    let stream = BodyDataStream::new(response.into_body());
    let body = read_limited(stream).await?;
    Ok(Fetched { status, content_type, location, body })
}

/// A request error without its URL (which may hold a substituted secret).
fn request_error(tool: &str, err: reqwest::Error) -> ToolError {
    if err.is_timeout() {
        return ToolError::Timeout(format!("{tool}: the server did not answer in time"));
    }
    let cause = std::error::Error::source(&err).map(|c| c.to_string());
    let mut text = err.without_url().to_string();
    if let Some(cause) = cause {
        text.push_str(&format!(": {cause}"));
    }
    ToolError::Failed(format!("{tool}: {text}"))
}

pub(crate) struct Body {
    pub(crate) bytes: Vec<u8>,
    pub(crate) truncated: bool,
}

/// Reads a body of chunks up to [`MAX_BODY`].
async fn read_limited<E: std::fmt::Display>(
    stream: impl futures_util::Stream<Item = Result<bytes::Bytes, E>>,
) -> Result<Body, ToolError> {
    use futures_util::StreamExt;
    let mut stream = std::pin::pin!(stream);
    let mut bytes = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| ToolError::Failed(format!("reading the response: {e}")))?;
        let room = MAX_BODY - bytes.len();
        if chunk.len() > room {
            bytes.extend_from_slice(&chunk[..room]);
            return Ok(Body { bytes, truncated: true });
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(Body { bytes, truncated: false })
}

/// Text for the model: HTML rendered as readable text (when `render_html`), text as is,
/// anything else described by type and size.
fn describe_body(content_type: &str, bytes: &[u8], render_html: bool) -> String {
    let sniffed_html = content_type.is_empty()
        && bytes
            .iter()
            .take(512)
            .copied()
            .collect::<Vec<_>>()
            .to_ascii_lowercase()
            .windows(5)
            .any(|w| w == b"<html");
    if render_html && (content_type.contains("html") || sniffed_html) {
        return match html2text::from_read(bytes, 100) {
            Ok(text) => text,
            Err(err) => format!("[HTML could not be rendered: {err}]"),
        };
    }
    let textual = content_type.starts_with("text/")
        || ["json", "xml", "javascript", "yaml", "csv", "x-www-form-urlencoded"]
            .iter()
            .any(|t| content_type.contains(t));
    if textual || (content_type.is_empty() && std::str::from_utf8(bytes).is_ok()) {
        return String::from_utf8_lossy(bytes).into_owned();
    }
    format!(
        "[non-text content: {}, {} bytes; not shown]",
        if content_type.is_empty() { "unknown type" } else { content_type },
        bytes.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked() {
        assert!(check_url("https://example.org/x").is_ok());
        assert!(matches!(check_url("ftp://x/"), Err(ToolError::Invalid(_))));
        assert!(matches!(check_url("not a url"), Err(ToolError::Invalid(_))));
        let err = check_url("http://169.254.169.254/latest/meta-data").unwrap_err();
        assert!(err.to_string().contains("cloud metadata"), "{err}");
        assert!(check_url("http://[fd00:ec2::254]/").is_err());
    }

    #[test]
    fn bodies_are_rendered_or_described() {
        let html = b"<html><body><h1>Title</h1><p>Hello <b>world</b></p><script>x()</script></body></html>";
        let text = describe_body("text/html; charset=utf-8", html, true);
        assert!(
            text.contains("Title") && text.contains("Hello") && !text.contains("<p>"),
            "{text}"
        );
        assert_eq!(describe_body("application/json", b"{\"a\":1}", true), "{\"a\":1}");
        let png = describe_body("image/png", &[0x89, b'P', b'N', b'G', 0, 0], true);
        assert_eq!(png, "[non-text content: image/png, 6 bytes; not shown]");
    }
}
