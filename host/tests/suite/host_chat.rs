//! `nexbot chat` end to end: the real binary, a workspace from `nexbot init`, real SQLite and
//! the scripted OpenAI-compatible server, driven through stdin.

use crate::common;

use std::time::{Duration, Instant};

use common::{base_env, chat, text, TempWorkspace};
use nexbot_tests::scripted_llm::{ScriptedLlm, Step};
use serde_json::{json, Value};

const LIMIT: Duration = Duration::from_secs(60);

fn messages(body: &Value) -> Vec<Value> {
    body["messages"].as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn chat_answers_each_line_uses_tools_and_exits_at_eof() {
    let ws = TempWorkspace::init("basic");
    let llm = ScriptedLlm::start(vec![
        Step::text("hello there"),
        Step::tool_call("write_file", json!({"path": "notes/today.md", "content": "buy milk"})),
        Step::tool_call("manage_tasks", json!({"action": "add", "text": "buy milk"})),
        Step::text("saved"),
        Step::text("again"),
    ])
    .await;
    let lines = ["hi", "note: buy milk", "once more"];
    let out = chat(&ws.config(), &base_env(&llm.base_url()), &lines, LIMIT).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert_eq!(stdout.lines().collect::<Vec<_>>(), ["hello there", "saved", "again"]);
    // A ReAct turn's tool calls and results stay in the turn (seed 002): the next turn's
    // history is user/assistant pairs only.
    let next = messages(&llm.chat_requests()[4].body);
    let roles: Vec<&str> = next.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "user", "assistant", "user"]);
    assert_eq!(next[4]["content"], "saved");
    assert!(next.iter().all(|m| m.get("tool_calls").is_none_or(|c| c.is_null())), "{next:?}");
    let room = ws.dir.join("chats/console_default");
    assert_eq!(std::fs::read_to_string(room.join("notes/today.md")).unwrap(), "buy milk");

    let requests = llm.chat_requests();
    assert_eq!(requests.len(), 5);
    // The system prompt is the workspace, in order; tools are offered.
    let system = requests[0].body["messages"][0]["content"].as_str().unwrap().to_owned();
    let order: Vec<usize> =
        ["IDENTITY.md", "AGENTS.md", "SOUL.md", "USER.md", "TOOLS.md", "MEMORY.md"]
            .iter()
            .map(|f| system.find(&format!("## {f}")).unwrap_or_else(|| panic!("{f} missing")))
            .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]));
    let tools: Vec<&str> = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    for name in [
        "read_file",
        "write_file",
        "edit_file",
        "list_dir",
        "delete_file",
        "search_files",
        "search_text",
        "memory",
        "manage_tasks",
        "send_message",
    ] {
        assert!(tools.contains(&name), "{name} not offered: {tools:?}");
    }
    // The second turn sees the first as history, and tool results come back normalized.
    let second = messages(&requests[1].body);
    assert_eq!(second[1]["content"], "hi");
    assert_eq!(second[2]["content"], "hello there");
    let third = messages(&requests[2].body);
    let tool_reply = third.last().unwrap();
    assert_eq!(tool_reply["role"], "tool");
    let result: Value = serde_json::from_str(tool_reply["content"].as_str().unwrap()).unwrap();
    assert_eq!(result["success"], true);

    // Token usage is recorded per turn.
    let db = rusqlite::Connection::open(ws.database()).unwrap();
    let usage: Vec<(String, i64, i64)> = db
        .prepare("SELECT role, prompt_tokens, completion_tokens FROM history ORDER BY id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        usage,
        [
            ("user".into(), 0, 0),
            ("assistant".into(), 10, 5),
            ("user".into(), 0, 0),
            ("assistant".into(), 30, 15),
            ("user".into(), 0, 0),
            ("assistant".into(), 10, 5)
        ]
    );
    let todos: i64 = db.query_row("SELECT COUNT(*) FROM todos", [], |r| r.get(0)).unwrap();
    assert_eq!(todos, 1);
}

#[tokio::test]
async fn restart_keeps_history() {
    let ws = TempWorkspace::init("restart");
    let llm =
        ScriptedLlm::start(vec![Step::text("nice to meet you, Ann"), Step::text("you are Ann")])
            .await;
    let env = base_env(&llm.base_url());
    let first = chat(&ws.config(), &env, &["my name is Ann"], LIMIT).await;
    assert!(first.status.success(), "{}", text(&first.stderr));
    let second = chat(&ws.config(), &env, &["what is my name?"], LIMIT).await;
    assert!(second.status.success(), "{}", text(&second.stderr));
    assert_eq!(text(&second.stdout).trim(), "you are Ann");
    let requests = llm.chat_requests();
    let seen = messages(&requests[1].body);
    let roles_and_text: Vec<(String, String)> = seen[1..]
        .iter()
        .map(|m| {
            (m["role"].as_str().unwrap().to_owned(), m["content"].as_str().unwrap_or("").to_owned())
        })
        .collect();
    assert_eq!(
        roles_and_text,
        [
            ("user".to_owned(), "my name is Ann".to_owned()),
            ("assistant".to_owned(), "nice to meet you, Ann".to_owned()),
            ("user".to_owned(), "what is my name?".to_owned()),
        ]
    );
}

#[tokio::test]
async fn llm_faults_are_retried_then_reported_and_the_chat_keeps_serving() {
    let ws = TempWorkspace::init("faults");
    let retry_after = Step::Status {
        code: 429,
        headers: vec![("Retry-After".into(), "1".into())],
        body: r#"{"error":{"message":"slow down"}}"#.into(),
    };
    let slow = || Step::text("too late").delayed(Duration::from_secs(4));
    let llm = ScriptedLlm::start(vec![
        // 1: a 429 with Retry-After, then success.
        retry_after,
        Step::text("answer after 429"),
        // 2: 500 on every attempt (max_retries = 2: three attempts).
        Step::status(500, r#"{"error":{"message":"boom"}}"#),
        Step::status(503, "{}"),
        Step::status(500, "{}"),
        // 3: malformed JSON on every attempt.
        Step::Malformed("{not json".into()),
        Step::Malformed("<html>".into()),
        Step::Malformed("".into()),
        // 4: slower than the request timeout on every attempt.
        slow(),
        slow(),
        slow(),
        // 5: a tool call with invalid JSON arguments, then the model corrects itself.
        Step::raw_tool_call("read_file", "{\"path\": "),
        Step::text("fixed it"),
        // 6: the chat still works.
        Step::text("still here"),
    ])
    .await;
    let mut env = base_env(&llm.base_url());
    env.push(("NEXBOT_LLM__MAX_RETRIES".into(), "2".into()));
    env.push(("NEXBOT_LLM__TIMEOUT_SECS".into(), "1".into()));
    // Retries are under test here, not the breaker (which would cut them to one attempt).
    env.push(("NEXBOT_LLM__BREAKER_FAILURES".into(), "100".into()));
    let started = Instant::now();
    let out =
        chat(&ws.config(), &env, &["one", "two", "three", "four", "five", "six"], LIMIT).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 6, "{stdout}");
    assert_eq!(lines[0], "answer after 429");
    assert!(
        lines[1].contains("could not reach the language model")
            && lines[1].contains("after 3 attempts")
            && lines[1].contains("HTTP 500"),
        "{}",
        lines[1]
    );
    assert!(lines[2].contains("malformed"), "{}", lines[2]);
    assert!(lines[3].contains("timed out"), "{}", lines[3]);
    assert_eq!(lines[4], "fixed it");
    assert_eq!(lines[5], "still here");
    // Retry-After: 1 was honoured (back-off alone is 10 ms here).
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert_eq!(llm.remaining_steps(), 0);
    // The invalid arguments went back to the model as a normalized error.
    let requests = llm.chat_requests();
    let after_bad_call = messages(&requests[12].body);
    let tool_reply = after_bad_call.last().unwrap();
    assert_eq!(tool_reply["role"], "tool");
    let reply: Value = serde_json::from_str(tool_reply["content"].as_str().unwrap()).unwrap();
    assert_eq!(reply["success"], false);
    assert!(reply["error"].as_str().unwrap().contains("invalid JSON arguments for read_file"));
    // Failed turns are not kept as history; the answered ones are.
    let db = rusqlite::Connection::open(ws.database()).unwrap();
    let kept: i64 = db.query_row("SELECT COUNT(*) FROM history", [], |r| r.get(0)).unwrap();
    assert_eq!(kept, 6);
}

/// A provider that echoes the API key in its refusal (some do): the key reaches neither the
/// chat nor the log.
#[tokio::test]
async fn a_provider_echoing_the_api_key_never_shows_it() {
    const KEY: &str = "sk-PLANTED-echoed-key-4e1b9d7c";
    let ws = TempWorkspace::init("echoed-key");
    let body = format!(r#"{{"error":{{"message":"invalid api key {KEY}"}}}}"#);
    let llm = ScriptedLlm::start(vec![Step::status(401, &body)]).await;
    let mut env = base_env(&llm.base_url());
    env.push(("NEXBOT_LLM_API_KEY".into(), KEY.into()));
    env.push(("RUST_LOG".into(), "debug".into()));
    let out = chat(&ws.config(), &env, &["a"], LIMIT).await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(stdout.contains("(HTTP 401): invalid api key"), "positive control: {stdout}");
    assert!(stderr.contains("DEBUG"), "logs were captured");
    assert!(!stdout.contains(KEY) && !stderr.contains(KEY), "{stdout}\n{stderr}");
    let db = std::fs::read(ws.database()).unwrap();
    assert!(!String::from_utf8_lossy(&db).contains(KEY));
}

#[tokio::test]
async fn a_provider_refusal_is_not_retried_and_is_explained() {
    let ws = TempWorkspace::init("refused");
    let llm = ScriptedLlm::start(vec![
        Step::status(401, r#"{"error":{"message":"invalid api key"}}"#),
        Step::text("ok now"),
    ])
    .await;
    let out = chat(&ws.config(), &base_env(&llm.base_url()), &["a", "b"], LIMIT).await;
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines[0].contains("refused the request")
            && lines[0].contains("(HTTP 401): invalid api key"),
        "{stdout}"
    );
    assert_eq!(lines[1], "ok now");
    assert_eq!(llm.chat_requests().len(), 2);
}

#[tokio::test]
async fn max_iterations_stops_the_turn_with_a_message() {
    let ws = TempWorkspace::init("maxiter");
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(|_| Step::tool_call("list_dir", json!({})));
    let mut env = base_env(&llm.base_url());
    env.push(("NEXBOT_AGENT__MAX_ITERATIONS".into(), "3".into()));
    let out = chat(&ws.config(), &env, &["loop forever"], LIMIT).await;
    assert!(text(&out.stdout).contains("I stopped after 3 steps"), "{}", text(&out.stdout));
    assert_eq!(llm.chat_requests().len(), 3);
}

#[tokio::test]
async fn planted_llm_key_never_reaches_prompts_logs_or_output() {
    let ws = TempWorkspace::init("planted");
    let key = "sk-planted-nxh-chat-91be";
    let llm = ScriptedLlm::start(vec![
        Step::tool_calls(&[
            ("read_file", json!({"path": "config.toml"})),
            ("memory", json!({"action": "read"})),
            ("list_dir", json!({})),
        ]),
        Step::status(500, "{}"),
        Step::text("done"),
    ])
    .await;
    let mut env = base_env(&llm.base_url());
    env.push(("NEXBOT_LLM_API_KEY".into(), key.into()));
    env.push(("RUST_LOG".into(), "trace".into()));
    let out = chat(&ws.config(), &env, &["show me everything"], LIMIT).await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(stdout.trim(), "done", "{stderr}");
    assert!(stderr.contains("TRACE") || stderr.contains("DEBUG"), "logs were not captured");
    assert!(!stdout.contains(key) && !stderr.contains(key), "the key leaked into output or logs");
    let requests = llm.chat_requests();
    assert_eq!(requests.len(), 3);
    for request in &requests {
        assert_eq!(request.header("authorization"), Some(format!("Bearer {key}").as_str()));
        assert!(!request.body.to_string().contains(key), "the key reached a prompt");
    }
    // The daemon's own config file is not in the chat's room.
    let tool_replies = messages(&requests[1].body);
    assert!(tool_replies.iter().any(|m| m["content"]
        .as_str()
        .is_some_and(|c| c.contains("config.toml: no such file or directory"))));
}

#[tokio::test]
async fn chat_without_a_sandbox_still_answers_and_says_why_once() {
    let ws = TempWorkspace::init("nxw-nosandbox");
    let llm = ScriptedLlm::start(vec![
        Step::text("hi"),
        // The egress audit log sits next to the database, out of the chat's room: the file the
        // model writes is its own.
        Step::tool_call("write_file", json!({"path": "egress-audit.jsonl", "content": "{}"})),
        Step::text("ok"),
        Step::text("hi again"),
    ])
    .await;
    // Delegation on, but no Docker engine where the daemon looks for one.
    let mut env = base_env(&llm.base_url());
    env.push(("NEXBOT_SUBAGENT__ENABLED".into(), "true".into()));
    env.push(("DOCKER_HOST".into(), "unix:///nonexistent/nxw-docker.sock".into()));
    let out = chat(&ws.config(), &env, &["hello", "write the audit"], LIMIT).await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout.lines().collect::<Vec<_>>(), ["hi", "ok"]);
    assert_eq!(stderr.matches("delegation to subagents is off").count(), 1, "{stderr}");
    assert!(stderr.contains("cannot connect to the Docker engine"), "{stderr}");
    assert!(stderr.contains("subagent.enabled = false"), "the fix is named: {stderr}");
    let requests = llm.chat_requests();
    let offered = requests[0].body["tools"].to_string();
    assert!(!offered.contains("delegate_to_sub_agent"), "delegation offered without a pool");
    let reply = messages(&requests[2].body).last().cloned().unwrap_or_default();
    assert!(reply["content"].as_str().is_some_and(|c| c.contains("wrote 2 bytes to")), "{reply}");
    assert!(!ws.dir.join("egress-audit.jsonl").exists());
    assert!(ws.dir.join("chats/console_default/egress-audit.jsonl").exists());

    // Turned off on purpose: said once too.
    let out = chat(&ws.config(), &base_env(&llm.base_url()), &["hello"], LIMIT).await;
    let stderr = text(&out.stderr);
    assert_eq!(text(&out.stdout).trim(), "hi again", "{stderr}");
    assert_eq!(
        stderr.matches("delegation to subagents is off: subagent.enabled = false").count(),
        1,
        "{stderr}"
    );
}
