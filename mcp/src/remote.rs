//! A remote server's session: Streamable HTTP (rmcp's transport; [`DoorClient`] reads the
//! answers, cut as they stream in like stdio's) through a Unix socket the caller names, which
//! is the egress proxy's door for that server (the host's business): every request goes there
//! in absolute form (`POST https://host/mcp`), so the proxy applies its policy, fills in
//! `{{secret:NAME}}` where a secret is bound, scrubs the answers and audits. This crate never
//! dials the network itself.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rmcp::transport::common::client_side_sse::SseRetryPolicy;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;

use crate::door::DoorClient;
use crate::{McpError, ServerConfig, Session};

/// How often a response stream the server dropped is resumed before its call fails.
const MAX_RESUMES: usize = 3;
/// The wait before a resume when the server gave none (its `retry` field, SEP-1699, wins).
const RESUME_WAIT: Duration = Duration::from_secs(1);

/// How often a waiting call checks that the server still answers (a dropped response stream
/// is resumed, and a server that is gone leaves the call waiting for its limit otherwise).
const HEARTBEAT: Duration = Duration::from_secs(5);

/// Resuming a dropped stream ([`MAX_RESUMES`] tries, [`RESUME_WAIT`] apart): rmcp's default
/// tries for ever, so a call to a server that is gone would wait for its whole limit.
#[derive(Debug)]
struct Resume;

impl SseRetryPolicy for Resume {
    fn retry(&self, tries: usize) -> Option<Duration> {
        (tries < MAX_RESUMES).then_some(RESUME_WAIT)
    }
}

/// Connects to `server`'s `url` through the proxy door at `door` within `timeout`.
pub async fn connect(
    server: &ServerConfig,
    door: &Path,
    timeout: Duration,
) -> Result<Arc<Session>, McpError> {
    let url = server
        .url
        .as_deref()
        .ok_or_else(|| McpError::Start(format!("{} is not a remote server", server.name)))?;
    let door = door
        .to_str()
        .ok_or_else(|| McpError::Start(format!("the proxy door {door:?} is no UTF-8 path")))?;
    let mut headers = HashMap::new();
    for (name, value) in &server.headers {
        // Checked when the configuration was read (`McpConfig::validate`).
        let name = http::HeaderName::from_bytes(name.as_bytes())
            .map_err(|e| McpError::Start(format!("header {name:?}: {e}")))?;
        let value = http::HeaderValue::from_str(value)
            .map_err(|e| McpError::Start(format!("header {name}: {e}")))?;
        headers.insert(name, value);
    }
    let mut config = StreamableHttpClientTransportConfig::with_uri(url).custom_headers(headers);
    config.retry_config = Arc::new(Resume);
    let transport = StreamableHttpClientTransport::with_client(DoorClient::new(door, url), config);
    let session = Session::connect(&server.name, transport, timeout).await?;
    session.keep_alive(HEARTBEAT);
    Ok(session)
}
