//! `web_fetch` and `http_request`: the network tools.
//!
//! Both use the process's shared client ([`crate::net`]: rustls, proxy from the environment).
//! Secret placeholders are filled in only here, at execution time; bodies are read up to a
//! size limit, HTML is turned into readable text, and non-text content is described, not dumped.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::{ToolError, ToolOutput};
use crate::secrets::SecretStore;

fn client() -> Result<&'static reqwest::Client, ToolError> {
    crate::net::http_client().map_err(ToolError::Failed)
}

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
    let url = check_url(&url)?;
    let response = client()?
        .get(url)
        .timeout(FETCH_TIMEOUT)
        .send()
        .await
        .map_err(|e| request_error("web_fetch", e))?;
    let status = response.status();
    let content_type = content_type(&response);
    let body = read_limited(response).await?;
    let mut text = describe_body(&content_type, &body.bytes, true);
    if body.truncated {
        text.push_str(&format!("\n[body cut at {MAX_BODY} bytes]"));
    }
    if !status.is_success() {
        text = format!("HTTP {status}\n{text}");
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
    let mut request = client()?.request(method, url).timeout(timeout);
    for (name, value) in &args.headers {
        let value = fill(value)?;
        let name = reqwest::header::HeaderName::from_bytes(name.trim().as_bytes())
            .map_err(|_| ToolError::Invalid(format!("invalid header name {name:?}")))?;
        let mut value = reqwest::header::HeaderValue::from_str(value.as_str())
            .map_err(|_| ToolError::Invalid(format!("invalid value for header {name}")))?;
        value.set_sensitive(true);
        request = request.header(name, value);
    }
    if let Some(body) = &args.body {
        request = request.body(fill(body)?.as_str().to_owned());
    }
    let response = request.send().await.map_err(|e| request_error("http_request", e))?;
    let status = response.status();
    let content_type = content_type(&response);
    let body = read_limited(response).await?;
    let mut text = format!("HTTP {status}\ncontent-type: {content_type}\n\n");
    text.push_str(&describe_body(&content_type, &body.bytes, false));
    if body.truncated {
        text.push_str(&format!("\n[body cut at {MAX_BODY} bytes]"));
    }
    Ok(ToolOutput::external(format!("http_request {method_name} {}", args.url), text))
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

fn content_type(response: &reqwest::Response) -> String {
    response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase()
}

struct Body {
    bytes: Vec<u8>,
    truncated: bool,
}

async fn read_limited(mut response: reqwest::Response) -> Result<Body, ToolError> {
    let mut bytes = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| ToolError::Failed(format!("reading the response: {}", e.without_url())))?
    {
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
