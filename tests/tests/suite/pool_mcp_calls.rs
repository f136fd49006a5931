//! A task's MCP calls through the pool (`docs/protocol.md#mcp-tools`), with the real subagent in
//! a pool container and its model scripted on the network's gateway: each `mcp_call` the task
//! writes reaches the caller the task was run with, its answer goes back as `mcp_result` and the
//! model reads it; a call the caller never answers ends with the task's cancel, and the caller's
//! future is dropped with it; a task run without a caller gets a refusal, not a hang.

use crate::pool_common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use nexbot_docker::{Pool, PoolConfig, Room, TaskIo};
use nexbot_protocol::{McpAnswer, McpCall, McpCalls, McpToolSpec, ResponseBody};
use nexbot_tests::scripted_llm::{last_user, Step};
use pool_common::{eventually, llm_on, setup, success_text, task, tool_results};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

const LIMIT: Duration = Duration::from_secs(90);
const ECHO: &str = "mcp__t__echo";

/// The host's side in these tests: answers `ECHO <message>`, except `hang`, which it never
/// answers (and notes when that call is dropped).
#[derive(Debug, Default)]
struct Caller {
    seen: Mutex<Vec<McpCall>>,
    dropped: Arc<AtomicBool>,
}

/// Sets its flag when dropped.
struct Dropped(Arc<AtomicBool>);

impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl McpCalls for Caller {
    fn call(&self, call: McpCall) -> BoxFuture<'static, McpAnswer> {
        let message = call.arguments["message"].as_str().unwrap_or_default().to_owned();
        self.seen.lock().unwrap().push(call);
        if message == "hang" {
            let dropped = Dropped(self.dropped.clone());
            return Box::pin(async move {
                let _dropped = dropped;
                std::future::pending().await
            });
        }
        Box::pin(std::future::ready(McpAnswer::Result(format!("ECHO {message}"))))
    }
}

/// The tool results of a chat request, in order.
/// The model: by the task, echo twice then answer with what it read; echo `hang`; echo once.
fn responder(body: &Value) -> Step {
    let results = tool_results(body);
    let task = last_user(body);
    let call = |message: &str| Step::tool_call(ECHO, json!({"message": message}));
    match (task.contains("twice"), task.contains("hang"), results.len()) {
        (true, _, 0) => call("one"),
        (true, _, 1) => call("two"),
        (false, true, 0) => call("hang"),
        (false, false, 0) => call("once"),
        _ => Step::text(&format!("read: {}", results.join(" | "))),
    }
}

fn granted(
    id: &str,
    text: &str,
    llm: &nexbot_tests::scripted_llm::ScriptedLlm,
    pool: &Pool,
) -> nexbot_protocol::Request {
    let mut request = task(id, text, llm, pool.network().gateway);
    request.tools = Some(Vec::new());
    request.mcp_tools = Some(vec![McpToolSpec {
        name: ECHO.into(),
        description: "Echoes".into(),
        input_schema: json!({"type": "object", "properties": {"message": {"type": "string"}}}),
    }]);
    request
}

#[tokio::test]
async fn a_tasks_mcp_calls_reach_its_caller_and_end_with_it() {
    let Some((docker, config)) = setup("mcp-calls").await else { return };
    let pool = Pool::start(docker, PoolConfig { size: 1, ..config }).await.expect("pool starts");
    let llm = llm_on(pool.network().gateway, Vec::new()).await;
    llm.set_responder(responder);
    let room = Room::default();
    let caller = Arc::new(Caller::default());
    let io = || TaskIo { mcp: Some(caller.clone() as Arc<dyn McpCalls>), ..TaskIo::default() };

    // Two calls, each answered through the caller and read by the model.
    let request = granted("mcp-1", "echo twice", &llm, &pool);
    let run = pool.run_task_with(request, &room, CancellationToken::new(), io());
    let answer = tokio::time::timeout(LIMIT, run).await.expect("in time").expect("ran");
    assert_eq!(success_text(&answer.response.body), "read: ECHO one | ECHO two");
    let seen: Vec<(String, String, String)> = caller
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|c| (c.task_id.clone(), c.call_id.clone(), c.tool.clone()))
        .collect();
    assert_eq!(
        seen,
        [("mcp-1".into(), "c1".into(), ECHO.into()), ("mcp-1".into(), "c2".into(), ECHO.into())]
    );

    // A call the caller never answers: the task's cancel ends the wait, the subagent answers
    // for itself, and the caller's future is dropped.
    let cancel = CancellationToken::new();
    let request = granted("mcp-2", "echo hang", &llm, &pool);
    let run = pool.run_task_with(request, &room, cancel.clone(), io());
    let stop = async {
        let asked = eventually(LIMIT, || async { caller.seen.lock().unwrap().len() == 3 }).await;
        assert!(asked, "the hanging call never came");
        cancel.cancel();
    };
    let (answer, ()) =
        tokio::time::timeout(LIMIT, async { tokio::join!(run, stop) }).await.expect("in time");
    let answer = answer.expect("the subagent answered the cancel");
    match &answer.response.body {
        ResponseBody::Error { error, .. } => assert_eq!(error, "task cancelled"),
        other => panic!("expected the cancelled task's error, got {other:?}"),
    }
    assert!(caller.dropped.load(Ordering::SeqCst), "the unanswered call was dropped");

    // Run without a caller, a call is refused by the pool, and the task goes on.
    let request = granted("mcp-3", "echo once", &llm, &pool);
    let run = pool.run_task_with(request, &room, CancellationToken::new(), TaskIo::default());
    let answer = tokio::time::timeout(LIMIT, run).await.expect("in time").expect("ran");
    assert_eq!(
        success_text(&answer.response.body),
        "read: Error: no MCP tool was granted to this task, so not mcp__t__echo"
    );
    assert_eq!(caller.seen.lock().unwrap().len(), 3, "the caller of other tasks was not asked");
    pool.shutdown().await.expect("shutdown");
}
