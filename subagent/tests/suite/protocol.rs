//! Every framing, version and request rule of `docs/protocol.md`, checked against the real
//! binary over pipes (no LLM needed).

use crate::common;

use common::Subagent;
use serde_json::json;

/// The health pings' form: a bare pong, ids echoed, no lists (2.5 KB less each way to write,
/// carry and parse); the lists still come to a plain ping.
#[tokio::test]
async fn a_brief_ping_is_answered_without_capabilities() {
    let mut sub = Subagent::spawn(&[]);
    sub.send(&json!({"type": "ping", "id": "b1", "correlation_id": "c1", "brief": true})).await;
    let pong = sub.recv().await;
    assert_eq!((pong["status"].as_str(), pong["id"].as_str()), (Some("pong"), Some("b1")));
    assert_eq!(pong["correlation_id"], "c1");
    assert!(pong.get("capabilities").is_none(), "{pong}");
    sub.send(&json!({"type": "ping", "id": "p1", "brief": false})).await;
    let full = sub.recv().await;
    assert!(full["capabilities"]["tools"].as_array().is_some_and(|t| !t.is_empty()), "{full}");
}

#[tokio::test]
async fn ping_is_answered_with_version_ids_and_capabilities() {
    let mut sub = Subagent::spawn(&[]);
    sub.send(&json!({"version": "1.0", "type": "ping", "id": "p1", "correlation_id": "c1"})).await;
    let pong = sub.recv().await;
    assert_eq!(pong["status"], "pong");
    assert_eq!(pong["id"], "p1");
    assert_eq!(pong["correlation_id"], "c1");
    assert_eq!(pong["version"], "1.0");
    let caps = &pong["capabilities"];
    assert_eq!(caps["busy"], false);
    assert!(caps.get("task_id").is_none());
    let tools: Vec<&str> =
        caps["tools"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    for tool in [
        "web_fetch",
        "http_request",
        "run_command",
        "read_file",
        "write_file",
        "list_dir",
        "read_skill",
    ] {
        assert!(tools.contains(&tool), "{tool} missing from {tools:?}");
    }
    for blocked in nexbot_protocol::BLOCKED_TOOLS {
        assert!(!tools.contains(blocked));
    }
    // The programs on its PATH (additive, for skills' `requires`): the test's PATH has `sh`.
    let programs: Vec<&str> =
        caps["programs"].as_array().unwrap().iter().map(|p| p.as_str().unwrap()).collect();
    assert!(programs.contains(&"sh"), "{programs:?}");
}

#[tokio::test]
async fn invalid_json_gets_an_error_with_empty_id_and_the_stream_goes_on() {
    let mut sub = Subagent::spawn(&[]);
    sub.send_raw(b"{this is not json\n\n   \n{\"type\":\"ping\",\"id\":\"after\"}\n").await;
    let err = sub.recv().await;
    assert_eq!(err["status"], "error");
    assert_eq!(err["id"], "");
    assert!(err["error"].as_str().unwrap().starts_with("invalid JSON"), "{err}");
    // Blank lines are ignored: the very next answer is the ping's.
    assert_eq!(sub.recv().await["id"], "after");
}

#[tokio::test]
async fn wrong_shape_keeps_the_id_and_hides_quoted_values() {
    let mut sub = Subagent::spawn(&[]);
    sub.send_raw(b"{\"type\":\"execute\",\"id\":\"w1\",\"timeout\":\"hunter2-secret\"}\n").await;
    let err = sub.recv().await;
    assert_eq!(err["id"], "w1");
    assert!(err["error"].as_str().unwrap().starts_with("invalid JSON"));
    assert!(!sub.stdout_lines.concat().contains("hunter2"), "{:?}", sub.stdout_lines);
}

#[tokio::test]
async fn an_oversize_line_is_answered_and_skipped_then_serving_goes_on() {
    let mut sub = Subagent::spawn(&[]);
    let mut big = br#"{"type":"ping","id":"big","pad":""#.to_vec();
    big.extend(std::iter::repeat_n(b'x', 1024 * 1024));
    big.extend_from_slice(b"\"}\n{\"type\":\"ping\",\"id\":\"next\"}\n");
    sub.send_raw(&big).await;
    let err = sub.recv().await;
    assert_eq!(err["status"], "error");
    assert_eq!(err["id"], "");
    assert!(err["error"].as_str().unwrap().contains("too long"), "{err}");
    let pong = sub.recv().await;
    assert_eq!((pong["id"].as_str(), pong["status"].as_str()), (Some("next"), Some("pong")));
}

#[tokio::test]
async fn a_line_just_under_the_limit_is_served() {
    let mut sub = Subagent::spawn(&[]);
    let head = r#"{"type":"ping","id":""#;
    let pad = 1024 * 1024 - head.len() - 2;
    let line = format!("{head}{}\"}}\n", "p".repeat(pad));
    assert_eq!(line.len(), 1024 * 1024 + 1);
    sub.send_raw(line.as_bytes()).await;
    assert_eq!(sub.recv().await["status"], "pong");
}

#[tokio::test]
async fn versions_follow_the_negotiation_rules() {
    let mut sub = Subagent::spawn(&[]);
    sub.send(&json!({"type": "ping", "id": "none"})).await;
    assert_eq!(sub.recv().await["status"], "pong");
    sub.send(&json!({"version": "0.9", "type": "ping", "id": "old"})).await;
    let pong = sub.recv().await;
    assert_eq!(pong["status"], "pong");
    assert_eq!(pong["version"], "1.0");
    sub.send(&json!({"version": "2.0", "type": "ping", "id": "new"})).await;
    let err = sub.recv().await;
    assert_eq!(err["id"], "new");
    assert_eq!(err["error"], "unsupported protocol version: 2.0");
    let log = sub.wait_log(|l| l["message"].as_str().unwrap_or("").contains("deprecated")).await;
    assert_eq!(log["task_id"], "old");
    assert_eq!(log["metadata"]["event"], "protocol");
}

#[tokio::test]
async fn bad_requests_are_refused_with_clear_errors() {
    let mut sub = Subagent::spawn(&[]);
    let cases = [
        (json!({"type": "explode", "id": "u1"}), "unknown request type: explode"),
        (json!({"type": "execute", "task": "t"}), "missing field: id"),
        (json!({"type": "execute", "id": "m1"}), "missing field: task"),
        (
            json!({"type": "execute", "id": "d1", "task": "t", "deadline": 1_000_000}),
            "request expired",
        ),
        (
            json!({"type": "execute", "id": "n1", "task": "t"}),
            "LLM not initialized: send llm_api_key",
        ),
        (json!({"type": "cancel", "id": "ghost"}), "no running task with id ghost"),
        (
            json!({"type": "execute", "id": "s1", "task": "t", "secrets": {"bad-name": "v"}}),
            "secrets validation: invalid secret name",
        ),
    ];
    for (request, expected) in cases {
        sub.send(&request).await;
        let err = sub.recv().await;
        assert_eq!(err["status"], "error", "{request}");
        assert_eq!(err["id"], request.get("id").cloned().unwrap_or(json!("")));
        let text = err["error"].as_str().unwrap();
        assert!(text.starts_with(expected), "{request}: {text}");
    }
}

#[tokio::test]
async fn a_whitelist_with_no_usable_tool_is_refused() {
    let mut sub = Subagent::spawn(&[]);
    sub.send(&json!({
        "type": "execute", "id": "t1", "task": "t", "tools": ["delegate_to_sub_agent", "nope"],
        "llm_api_key": "k", "llm_base_url": "http://127.0.0.1:9/v1", "llm_model": "m"
    }))
    .await;
    let err = sub.recv().await;
    assert_eq!(err["id"], "t1");
    assert!(err["error"].as_str().unwrap().starts_with("no usable tools"), "{err}");
}

#[tokio::test]
async fn eof_exits_zero_after_answering_everything() {
    let mut sub = Subagent::spawn(&[]);
    sub.send_raw(b"{\"type\":\"ping\",\"id\":\"a\"}\n{\"type\":\"ping\",\"id\":\"b\"}").await;
    sub.close_stdin();
    let status = sub.wait_exit().await;
    assert_eq!(status.code(), Some(0));
    let ids: Vec<String> = sub
        .stdout_lines
        .iter()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["id"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(ids, ["a", "b"], "the last line had no newline and still counts");
    let last = sub.logs().pop().unwrap();
    assert_eq!(last["metadata"]["event"], "shutdown");
}

#[tokio::test]
async fn sigterm_while_idle_exits_zero() {
    let mut sub = Subagent::spawn(&[]);
    sub.send(&json!({"type": "ping", "id": "up"})).await;
    sub.recv().await;
    sub.signal("TERM");
    assert_eq!(sub.wait_exit().await.code(), Some(0));
    let log = sub.wait_log(|l| l["metadata"]["reason"] == "SIGTERM").await;
    assert_eq!(log["metadata"]["event"], "shutdown");
}

#[tokio::test]
async fn log_lines_have_the_protocol_shape() {
    let mut sub = Subagent::spawn(&[]);
    sub.send(&json!({"type": "execute", "id": "shape", "correlation_id": "corr", "task": "t"}))
        .await;
    sub.recv().await;
    let log = sub.wait_log(|l| l["task_id"] == "shape").await;
    assert!(["info", "warn"].contains(&log["level"].as_str().unwrap()));
    assert!(log["metadata"]["event"].is_string(), "{log}");
    let time = log["time"].as_str().unwrap();
    assert!(time.len() >= 20 && time.ends_with('Z'), "RFC 3339 UTC: {time}");
}

/// The protocol's pipes are read and written by the runtime itself when they are pipes (as the
/// engine's attach and the other tests make them); anything else (a file here) still serves,
/// through tokio's own stdin and stdout.
#[tokio::test]
async fn stdin_and_stdout_that_are_files_are_served_too() {
    let dir = std::env::temp_dir().join(format!("nxs-stdio-files-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("in.jsonl");
    let output = dir.join("out.jsonl");
    std::fs::write(
        &input,
        "{\"type\":\"ping\",\"id\":\"p1\"}\n{\"type\":\"ping\",\"id\":\"p2\"}\n",
    )
    .unwrap();
    let status = tokio::process::Command::new(env!("CARGO_BIN_EXE_nexbot-subagent"))
        .stdin(std::fs::File::open(&input).unwrap())
        .stdout(std::fs::File::create(&output).unwrap())
        .stderr(std::process::Stdio::null())
        .status();
    let status = tokio::time::timeout(std::time::Duration::from_secs(30), status)
        .await
        .expect("it ends at the file's end")
        .unwrap();
    assert!(status.success(), "{status:?}");
    let answers = std::fs::read_to_string(&output).unwrap();
    let ids: Vec<String> = answers
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["id"].to_string())
        .collect();
    assert_eq!(ids, ["\"p1\"", "\"p2\""], "{answers}");
    assert!(answers.lines().all(|l| l.contains("\"status\":\"pong\"")), "{answers}");
    std::fs::remove_dir_all(&dir).unwrap();
}
