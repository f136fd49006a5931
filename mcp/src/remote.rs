//! A remote server's session: Streamable HTTP (rmcp's client over hyper) through a Unix
//! socket the caller names, which is the egress proxy's door for that server (the host's
//! business): every request goes there in absolute form (`POST https://host/mcp`), so the
//! proxy applies its policy, fills in `{{secret:NAME}}` where a secret is bound, scrubs the
//! answers and audits. This crate never dials the network itself.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, UnixSocketHttpClient};

use crate::{McpError, ServerConfig, Session};

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
    let config = StreamableHttpClientTransportConfig::with_uri(url).custom_headers(headers);
    let transport =
        StreamableHttpClientTransport::with_client(UnixSocketHttpClient::new(door, url), config);
    Session::connect(&server.name, transport, timeout).await
}
