//! The client the MCP conformance suite drives (`conformance client --command <this>`): the
//! suite starts a scenario's server and runs this with its URL as the last argument (and the
//! scenario's name in `MCP_CONFORMANCE_SCENARIO`).
//!
//! It is Nexbot's own path to a remote server, not a stand-in: an egress proxy started here
//! (its policy allowing exactly the scenario server's address, as an operator's `allow_internal`
//! would), a door into it in the identity `mcp:conformance`, and `nexbot_mcp::remote` over that
//! door: initialize, the tool list, then a call of every listed tool with arguments made from
//! its schema. Exits 0 when every step worked; the suite judges the rest.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use nexbot_egress::{
    AttributionTable, Cidr, Egress, EgressConfig, InternalAllow, Network, ProviderKeys,
};
use nexbot_mcp::ServerConfig;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

const LIMIT: Duration = Duration::from_secs(20);

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt().with_writer(std::io::stderr).with_env_filter("warn").init();
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcp-conformance-client: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), String> {
    let url = std::env::args().next_back().filter(|a| a.starts_with("http")).ok_or(
        "usage: mcp-conformance-client <server URL> (the suite passes it as the last argument)",
    )?;
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    eprintln!("mcp-conformance-client: scenario {scenario:?}, server {url}");
    let target = server_addresses(&url)?;
    let mut config = EgressConfig { port: 0, firewall: false, ..EgressConfig::default() };
    config.proxy.allow_internal = target
        .iter()
        .map(|addr| InternalAllow {
            cidr: Cidr::try_from(addr.ip().to_string()).expect("an address is a CIDR"),
            ports: vec![addr.port()],
        })
        .collect();
    let data = std::env::temp_dir().join(format!("nxb-conformance-{}", std::process::id()));
    let network = Network { gateway: "127.0.0.1".parse().unwrap(), bridge: String::new() };
    let attribution = Arc::new(AttributionTable::default());
    let egress = Egress::start_with_keys(config, &network, &data, attribution, ProviderKeys::new())
        .await
        .map_err(|e| format!("the egress proxy did not start: {e}"))?;
    let result = talk(&egress, &url).await;
    egress.shutdown(Duration::from_secs(2)).await;
    let _ = std::fs::remove_dir_all(&data);
    result
}

/// The addresses the URL's host names (the suite's `localhost`: loopback, either family).
fn server_addresses(url: &str) -> Result<Vec<SocketAddr>, String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("{url:?} is not a URL: {e}"))?;
    let host = uri.host().ok_or(format!("{url:?} names no host"))?;
    let port = uri.port_u16().unwrap_or(80);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let found: Vec<SocketAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => (host, port).to_socket_addrs().map_err(|e| format!("{host}: {e}"))?.collect(),
    };
    Ok(found)
}

async fn talk(egress: &Egress, url: &str) -> Result<(), String> {
    let door = egress.doors().open("mcp:conformance", Vec::new()).map_err(|e| e.to_string())?;
    let server: ServerConfig = serde_json::from_value(serde_json::json!({
        "name": "conformance", "url": url,
    }))
    .map_err(|e| e.to_string())?;
    let session = nexbot_mcp::remote::connect(&server, door.path(), LIMIT)
        .await
        .map_err(|e| e.to_string())?;
    eprintln!(
        "mcp-conformance-client: connected to {}, {} tools",
        session.server_info().unwrap_or("a server"),
        session.tools().len()
    );
    let cancel = CancellationToken::new();
    let mut failed = Vec::new();
    for tool in session.tools() {
        if tool.kind != nexbot_mcp::catalog::ToolKind::Call {
            continue; // the client's own resource and prompt readers
        }
        let arguments = arguments_for(&tool.schema);
        match session.call(&tool.tool, arguments, LIMIT, &cancel, None).await {
            Ok(answer) => {
                eprintln!("mcp-conformance-client: {} answered: {}", tool.tool, answer.text)
            }
            Err(e) => {
                eprintln!("mcp-conformance-client: {} failed: {e}", tool.tool);
                failed.push(tool.tool.clone());
            }
        }
    }
    session.close();
    match failed.is_empty() {
        true => Ok(()),
        false => Err(format!("calls failed: {}", failed.join(", "))),
    }
}

/// A value for every required property, by its type (numbers 1, strings "x", ...).
fn arguments_for(schema: &Value) -> Map<String, Value> {
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut arguments = Map::new();
    for name in required {
        let value = match schema["properties"][name]["type"].as_str() {
            Some("number" | "integer") => Value::from(1),
            Some("boolean") => Value::Bool(true),
            Some("array") => Value::Array(Vec::new()),
            Some("object") => Value::Object(Map::new()),
            _ => Value::from("x"),
        };
        arguments.insert(name.to_owned(), value);
    }
    arguments
}
