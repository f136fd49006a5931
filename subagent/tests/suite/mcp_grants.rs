//! MCP tools granted to a task (`execute.mcp_tools`), over pipes with the real binary: the
//! model is offered them; a call becomes an `mcp_call` line and the task waits for this test
//! (the host here) to answer with `mcp_result`; the wait ends with the task's cancel or its
//! deadline; a name it was not granted is never asked of the host.

use crate::common;

use common::Subagent;
use nexbot_tests::scripted_llm::{ScriptedLlm, Step};
use serde_json::{json, Value};

fn echo_spec() -> Value {
    json!({
        "name": "mcp__everything__echo",
        "description": "Tool of MCP server `everything`. Echoes back the input",
        "input_schema": {"type": "object", "properties": {"message": {"type": "string"}},
                         "required": ["message"]}
    })
}

fn execute(id: &str, llm: &ScriptedLlm, timeout: u64) -> Value {
    json!({
        "version": "1.0", "type": "execute", "id": id, "task": "echo hi", "timeout": timeout,
        "tools": [], "mcp_tools": [echo_spec()],
        "llm_api_key": "sk-llm-key-0123456789", "llm_base_url": llm.base_url(),
        "llm_model": "scripted"
    })
}

fn result(id: &str, call_id: &str, field: &str, text: &str) -> Value {
    json!({"version": "1.0", "type": "mcp_result", "id": id, "call_id": call_id, field: text})
}

/// Reads past progress lines to the next other line.
async fn next_call(sub: &mut Subagent) -> Value {
    let (line, _) = sub.recv_final().await;
    assert_eq!(line["status"], "mcp_call", "{line}");
    line
}

/// A task `id` (soft limit `timeout` s) whose model called the echo once: the subagent, its
/// model and the `mcp_call` it is waiting on.
async fn waiting_for_the_host(id: &str, timeout: u64) -> (ScriptedLlm, Subagent, Value) {
    let llm =
        ScriptedLlm::start(vec![Step::tool_call("mcp__everything__echo", json!({"message": "x"}))])
            .await;
    let mut sub = Subagent::spawn(&[]);
    sub.send(&execute(id, &llm, timeout)).await;
    let call = next_call(&mut sub).await;
    (llm, sub, call)
}

fn tool_messages(request: &Value) -> Vec<String> {
    let messages = request["messages"].as_array().unwrap();
    messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn a_granted_tool_is_asked_of_the_host_and_the_model_reads_its_answer() {
    let llm = ScriptedLlm::start(vec![
        Step::tool_call("mcp__everything__echo", json!({"message": "hi"})),
        Step::tool_call("mcp__everything__echo", json!({"message": "again"})),
        Step::tool_call("mcp__everything__get-env", json!({})),
        Step::text("echoed"),
    ])
    .await;
    let mut sub = Subagent::spawn(&[]);
    sub.send(&execute("t1", &llm, 60)).await;

    let call = next_call(&mut sub).await;
    assert_eq!(call["id"], "t1");
    assert_eq!(call["tool"], "mcp__everything__echo");
    assert_eq!(call["arguments"], json!({"message": "hi"}));
    let call_id = call["call_id"].as_str().unwrap().to_owned();
    // While the task waits, the reader serves: a ping is answered, an answer to a call nobody
    // made is dropped without a line of its own.
    sub.send(&result("t1", "no-such-call", "result", "stray")).await;
    sub.send(&json!({"type": "ping", "id": "p1"})).await;
    let pong = sub.recv().await;
    assert_eq!(
        (pong["status"].as_str(), pong["capabilities"]["task_id"].as_str()),
        (Some("pong"), Some("t1"))
    );
    let envelope = "<<<MCP_RESULT server=everything tool=echo>>>\nEcho: hi\n<<<END_MCP_RESULT>>>";
    sub.send(&result("t1", &call_id, "result", envelope)).await;

    // The second call gets the host's refusal, which the model reads as the tool's error.
    let again = next_call(&mut sub).await;
    assert_ne!(again["call_id"], call["call_id"], "each call has its own id");
    let refusal = "mcp__everything__echo: the MCP server's connection closed";
    sub.send(&result("t1", again["call_id"].as_str().unwrap(), "error", refusal)).await;

    let (done, progress) = sub.recv_final().await;
    assert_eq!(
        (done["status"].as_str(), done["result"].as_str()),
        (Some("success"), Some("echoed")),
        "{done}"
    );
    // The tool calls are shown like any (the refused one too).
    assert!(progress
        .iter()
        .any(|p| p["event"] == "tool_call" && p["tool"] == "mcp__everything__get-env"));

    let chats = llm.chat_requests();
    assert_eq!(chats.len(), 4);
    // Offered: the granted tool and the planning tool, nothing of the subagent's own (the
    // delegation granted none).
    let offered: Vec<&str> = chats[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(offered, ["mcp__everything__echo", "update_todos"]);
    let echo = &chats[0].body["tools"][0]["function"];
    assert_eq!(echo["parameters"]["required"], json!(["message"]));
    let results = tool_messages(&chats[3].body);
    assert_eq!(results[0], envelope, "the host's envelope, as it came");
    assert_eq!(results[1], format!("Error: {refusal}"));
    // A tool it was not granted is refused here and never asked of the host.
    assert!(
        results[2].starts_with("Error: tool 'mcp__everything__get-env' is not available"),
        "{}",
        results[2]
    );
    let calls = sub.stdout_lines.iter().filter(|l| l.contains(r#""status":"mcp_call""#)).count();
    assert_eq!(calls, 2, "{:#?}", sub.stdout_lines);
    assert!(
        sub.stdout_lines.iter().all(|l| !l.contains(r#""status":"error""#)),
        "{:#?}",
        sub.stdout_lines
    );
    sub.close_stdin();
    assert_eq!(sub.wait_exit().await.code(), Some(0));
    let logs = sub.logs();
    assert!(
        logs.iter().any(|l| l["message"] == "mcp_result for no waiting call; dropped"),
        "{logs:#?}"
    );
}

#[tokio::test]
async fn a_cancel_ends_the_wait_and_a_late_answer_is_dropped() {
    let (_llm, mut sub, call) = waiting_for_the_host("t2", 60).await;
    sub.send(&json!({"type": "cancel", "id": "t2"})).await;
    let (done, _) = sub.recv_final().await;
    assert_eq!(
        (done["status"].as_str(), done["error"].as_str()),
        (Some("error"), Some("task cancelled")),
        "{done}"
    );
    assert!(done["report"].is_object(), "{done}");
    // The answer the host sends after the cancel reaches nobody and gets no line: the next
    // line is the pong.
    sub.send(&result("t2", call["call_id"].as_str().unwrap(), "result", "late")).await;
    sub.send(&json!({"type": "ping", "id": "p2"})).await;
    assert_eq!(sub.recv().await["status"], "pong");
    sub.close_stdin();
    assert_eq!(sub.wait_exit().await.code(), Some(0));
}

#[tokio::test]
async fn the_tasks_deadline_ends_a_wait_the_host_never_answers() {
    let (_llm, mut sub, _) = waiting_for_the_host("t3", 2).await;
    let (done, _) = sub.recv_final().await;
    assert_eq!(done["status"], "timeout", "{done}");
    let recent = done["report"]["recent_messages"].to_string();
    assert!(recent.contains("called mcp__everything__echo"), "{recent}");
    sub.close_stdin();
    assert_eq!(sub.wait_exit().await.code(), Some(0));
}
