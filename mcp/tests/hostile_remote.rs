//! A hostile remote MCP server of the test's own (Streamable HTTP, axum on a Unix socket that
//! stands for the egress door): a huge result, as a JSON body or as an SSE event, is cut as
//! it is read, the answer says so, and the session goes on.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use nexbot_mcp::{ServerConfig, Session};
use serde_json::{json, Map, Value};
use tokio_util::sync::CancellationToken;

/// The server never holds a huge text either: it streams the same 64 KiB of `A`s.
const PIECE: usize = 64 * 1024;

/// Answers `initialize` (with a session id), `tools/list` and `tools/call`: `big` with a text
/// of `mib` MiB (as an SSE event when `sse` is true, the `id` after the result), anything else
/// with `ok`. A notification is accepted; GET (a server's own stream) is not offered.
async fn mcp(Json(message): Json<Value>) -> Response {
    let (Some(id), Some(method)) = (message.get("id"), message["method"].as_str()) else {
        return StatusCode::ACCEPTED.into_response();
    };
    let result = match method {
        "initialize" => json!({"protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"tools": {}}, "serverInfo": {"name": "hostile", "version": "1"}}),
        "tools/list" => json!({"tools": [{"name": "big", "inputSchema": {"type": "object"}}]}),
        "tools/call" if message["params"]["name"] == "big" => {
            let args = &message["params"]["arguments"];
            let mib = args["mib"].as_u64().unwrap() as usize;
            return big(id, mib << 20, args["sse"] == true);
        }
        _ => json!({"content": [{"type": "text", "text": "ok"}]}),
    };
    let answer = Json(json!({"jsonrpc": "2.0", "id": id, "result": result}));
    ([("mcp-session-id", "hostile-1")], answer).into_response()
}

/// A `tools/call` answer with a text of `bytes` `A`s, streamed.
fn big(id: &Value, bytes: usize, sse: bool) -> Response {
    let (open, close, kind) = match sse {
        true => ("data: ", "\n\n", "text/event-stream"),
        false => ("", "", "application/json"),
    };
    let head = format!(r#"{open}{{"jsonrpc":"2.0","result":{{"content":[{{"type":"text","text":""#);
    let tail = format!(r#""}}]}},"id":{id}}}{close}"#);
    let piece = Bytes::from(vec![b'A'; PIECE]);
    let pieces = std::iter::repeat_n(piece, bytes / PIECE);
    let parts = std::iter::once(Bytes::from(head))
        .chain(pieces)
        .chain(std::iter::once(Bytes::from(tail)))
        .map(Ok::<_, Infallible>);
    let body = Body::from_stream(futures_util::stream::iter(parts));
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}

/// The peak resident size of this process so far (`VmHWM`), in KiB.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The server at a door of its own, and a session with it through that door.
async fn start(name: &str) -> (tokio::task::JoinHandle<()>, Arc<Session>) {
    let dir = std::env::temp_dir().join(format!("nexbot-mcp-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let door = dir.join("door.sock");
    let listener = tokio::net::UnixListener::bind(&door).unwrap();
    let app = Router::new().route("/mcp", post(mcp));
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let config: ServerConfig =
        serde_json::from_value(json!({"name": name, "url": "http://remote.test/mcp"})).unwrap();
    let session =
        nexbot_mcp::remote::connect(&config, &door, Duration::from_secs(30)).await.unwrap();
    (server, session)
}

async fn call(session: &Session, tool: &str, args: Value) -> nexbot_mcp::answer::Answer {
    let Value::Object(args) = args else { unreachable!() };
    let limit = Duration::from_secs(20);
    session.call(tool, args, limit, &CancellationToken::new(), None).await.unwrap()
}

/// Each way a remote server answers (a JSON body, an SSE event): 10 MiB and then 20 MiB.
#[tokio::test]
async fn a_huge_remote_result_is_cut_while_read_and_the_next_call_works() {
    let (_server, session) = start("hostile").await;
    let before = peak_rss_kib();
    println!("peak RSS (VmHWM) before the calls: {before} kB");
    for sse in [false, true] {
        for mib in [10, 20] {
            let answer = call(&session, "big", json!({"mib": mib, "sse": sse})).await;
            let now = peak_rss_kib();
            println!(
                "peak RSS (VmHWM) after {mib} MiB (SSE {sse}): {now} kB (+{} kB)",
                now - before
            );
            let note = format!("[cut by Nexbot while reading: {} bytes in all]", mib << 20);
            let end = &answer.text[answer.text.len().saturating_sub(80)..];
            assert!(answer.text.ends_with(&note), "{mib} MiB (SSE {sse}): {end}");
            assert_eq!(answer.cut, Some(mib << 20), "the answer says it was cut");
            assert!(answer.text.len() <= nexbot_mcp::answer::MAX_RESULT_BYTES);
            let next = call(&session, "small", Value::Object(Map::new())).await;
            assert_eq!(next.text, "ok", "the session goes on after {mib} MiB (SSE {sse})");
        }
    }
}
