//! `nexbot chat` end to end against a third-party model stand-in: LLMock from PyPI
//! (`nexbot_tests::llmock`), which rate-limits the first call, cuts a streamed tool call short,
//! and answers in text once the tool's result comes back.

use crate::common;

use std::time::Duration;

use common::{base_env, chat, text, TempWorkspace};
use nexbot_tests::llmock::Llmock;
use serde_json::{json, Value};

const LIMIT: Duration = Duration::from_secs(60);

#[tokio::test]
async fn chat_survives_llmocks_rate_limit_and_cut_stream_and_runs_its_tool_call() {
    let test = "chat_survives_llmocks_rate_limit_and_cut_stream_and_runs_its_tool_call";
    let Some(llmock) = Llmock::start_or_skip(test, &[]).await else { return };
    // The first request is refused (429, Retry-After: 1); the next two get a scripted
    // `write_file` call, streamed, the first of them cut after three chunks; the request with
    // the tool's result gets LLMock's own text answer.
    llmock
        .scenario(json!([
            {"type": "fail", "status": 429, "retry_after": 1},
            {"type": "reply", "times": 2, "tool_calls": [{"name": "write_file",
                "arguments": {"path": "notes/llmock.md", "content": "written for llmock"}}]},
            {"type": "stream_fault", "kind": "truncate", "after_chunks": 3},
        ]))
        .await;
    let ws = TempWorkspace::init("llmock");
    let mut env = base_env(&llmock.base_url());
    env.push(("NEXBOT_LLM__MAX_RETRIES".into(), "2".into()));
    let out = chat(&ws.config(), &env, &["please keep a note"], LIMIT).await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");

    // One answer, LLMock's (it echoes the start of the conversation), nothing of the cut call.
    let lines: Vec<&str> = stdout.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{stdout}");
    assert!(lines[0].starts_with("Hello! You said: "), "{stdout}");
    // The tool call ran once, from the whole stream.
    let note =
        std::fs::read_to_string(ws.dir.join("chats/console_default/notes/llmock.md")).unwrap();
    assert_eq!(note, "written for llmock");

    let requests = llmock.requests().await;
    let statuses: Vec<&Value> = requests.iter().map(|r| &r["status"]).collect();
    assert_eq!(statuses, [&json!(429), &json!(200), &json!(200), &json!(200)], "{requests:?}");
    let faults: Vec<&Value> = requests.iter().map(|r| &r["fault"]).collect();
    assert_eq!(faults[..2], [&json!("scenario:429"), &json!("stream:truncate@3")]);
    assert!(requests.iter().all(|r| r["stream"] == true), "{requests:?}");
    // The retry waited out Retry-After, as LLMock measured it.
    let gap =
        requests[1]["started_at"].as_f64().unwrap() - requests[0]["ended_at"].as_f64().unwrap();
    assert!(gap >= 1.0, "retried {gap:.3}s after the 429");
    // The cut call was never acted on: the next request asked the same again.
    assert_eq!(requests[2]["body"], requests[1]["body"]);
    // The last request carries the tool's result for the call LLMock made.
    let messages = requests[3]["body"]["messages"].as_array().unwrap();
    let result = messages.last().unwrap();
    assert_eq!(result["role"], "tool");
    let call = &messages[messages.len() - 2]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "write_file");
    assert_eq!(result["tool_call_id"], call["id"]);
    // LLMock's verdict on the whole exchange: nothing ignored, nothing cut accepted.
    let findings = llmock.findings().await;
    assert!(findings.is_empty(), "{}", llmock.verdict().await);
}
