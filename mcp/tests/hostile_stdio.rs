//! A hostile stdio MCP server of the test's own (a python3 script): huge answers are cut as
//! they are read and the session goes on; escapes reach the model shown, not obeyed.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use nexbot_mcp::Session;
use serde_json::Map;
use tokio_util::sync::CancellationToken;

/// Answers `initialize`, lists one tool, and answers `tools/call` by the tool's name: `big`
/// with a text of `mib` MiB (the `id` after the result), `escape` with terminal escapes,
/// anything else with `ok`.
const SERVER: &str = r#"
import json, sys
def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()
for line in sys.stdin:
    msg = json.loads(line)
    method, id = msg.get("method"), msg.get("id")
    if id is None:
        continue
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": id, "result": {"protocolVersion": msg["params"]["protocolVersion"],
              "capabilities": {"tools": {}}, "serverInfo": {"name": "hostile", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": id, "result": {"tools": [{"name": "big",
              "description": "evil\u001b[2J\u0007", "inputSchema": {"type": "object"}}]}})
    elif method == "tools/call":
        args = msg["params"].get("arguments") or {}
        name = msg["params"]["name"]
        if name == "big":
            text = "A" * (args["mib"] << 20)
        elif name == "escape":
            text = "red\u001b[31m\u0007\rover"
        else:
            text = "ok"
        result = {"content": [{"type": "text", "text": text}]}
        send({"jsonrpc": "2.0", "result": result, "id": id})
    else:
        send({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "no"}})
"#;

/// The peak resident size of this process so far (`VmHWM`), in KiB.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

async fn start() -> (tokio::process::Child, Arc<Session>) {
    let mut child = tokio::process::Command::new("python3")
        .args(["-c", SERVER])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python3 runs");
    let (read, write) = (child.stdout.take().unwrap(), child.stdin.take().unwrap());
    let transport = nexbot_mcp::stdio::transport(read, write);
    let session = Session::connect("hostile", transport, Duration::from_secs(30)).await.unwrap();
    (child, session)
}

async fn call(
    session: &Session,
    tool: &str,
    args: Map<String, serde_json::Value>,
) -> Result<nexbot_mcp::answer::Answer, nexbot_mcp::McpError> {
    session.call(tool, args, Duration::from_secs(20), &CancellationToken::new(), None).await
}

#[tokio::test]
async fn a_huge_result_is_cut_while_read_and_the_next_call_works() {
    let (_child, session) = start().await;
    let before = peak_rss_kib();
    for mib in [10, 20] {
        let answer =
            call(&session, "big", Map::from_iter([("mib".to_owned(), mib.into())])).await.unwrap();
        let note = format!("[cut by Nexbot while reading: {} bytes in all]", mib << 20);
        assert!(
            answer.text.ends_with(&note),
            "{mib} MiB: {}",
            &answer.text[answer.text.len() - 80..]
        );
        assert!(answer.text.len() <= nexbot_mcp::answer::MAX_RESULT_BYTES);
        let next = call(&session, "small", Map::new()).await.unwrap();
        assert_eq!(next.text, "ok", "the session goes on after {mib} MiB");
        let now = peak_rss_kib();
        println!("peak RSS (VmHWM) after {mib} MiB: {now} kB (+{} kB since before)", now - before);
    }
    println!("peak RSS (VmHWM) before the calls: {before} kB");
}

#[tokio::test]
async fn escapes_of_a_result_and_a_description_reach_the_model_shown() {
    let (_child, session) = start().await;
    let answer = call(&session, "escape", Map::new()).await.unwrap();
    assert_eq!(answer.text, "red␛[31m␇␍over");
    let tools = session.tools();
    assert!(tools[0].description.ends_with("evil␛[2J␇"), "{}", tools[0].description);
}
