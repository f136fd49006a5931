//! MCP tools granted to a delegated task by name (`delegate_to_sub_agent` with
//! `tools: ["mcp__everything__echo"]`), against the real thing: server-everything in its own
//! container (`nexbot-mcp:dev`), the real pool with the branch's subagent image
//! (`NEXBOT_TEST_IMAGE`), the scripted model for both agents.
//!
//! - Through the product (the in-process daemon): the sub-agent's model is offered the granted
//!   tool and nothing else of the chat's, calls it, the host makes the call in the delegating
//!   chat's own server instance (counted like the main agent's calls), and the answer comes back
//!   with the echo; a chat the server does not allow cannot grant it: refused, named, nothing
//!   run.
//! - Against a sub-agent that asks for what it was not granted (a compromised container, played
//!   here by the runner itself): the host answers with an error and calls nothing; only the
//!   granted tool reaches the server.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nexbot_agent::tools::{Tool, ToolContext, ToolSource};
use nexbot_core::ChatRef;
use nexbot_host::config::Config;
use nexbot_host::deadlines::TaskDeadlines;
use nexbot_host::delegation::{
    AccessEnd, LlmAccess, SubagentError, SubagentOutcome, SubagentRunner, TaskLlm,
};
use nexbot_host::store::Store;
use nexbot_host::tools::delegate::{Delegate, DelegateSettings};
use nexbot_mcp::{McpTools, ServerScope};
use nexbot_protocol::{McpAnswer, McpCall, McpCalls, Request, Response, Usage};
use nexbot_tests::docker_or_skip;
use nexbot_tests::scripted_llm::{is_main, last_user, ScriptedLlm, Step};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::common::{base_env, Leftovers, TempWorkspace};
use crate::host_delegation::{contents, test_image, InProcess};
use crate::mcp::{ctx, server, Harness};

const ECHO: &str = "mcp__everything__echo";
/// A tool of the same server the chat may use, never granted in these tests.
const ENV: &str = "mcp__everything__get-env";

/// The scripted model of both agents: the main one delegates with the echo tool granted and
/// relays what it got; the sub-agent calls the echo and answers with what it read.
fn responder(body: &Value) -> Step {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let results = contents(&messages, "tool");
    if !is_main(body) {
        return match results.last() {
            None => Step::tool_call(ECHO, json!({"message": "grants-ping-42"})),
            Some(result) => Step::text(&format!("the tool said: {result}")),
        };
    }
    match (messages.last().and_then(|m| m["role"].as_str()), results.last()) {
        (Some("tool"), Some(result)) => Step::text(&format!("relayed: {result}")),
        _ if last_user(body).starts_with("grant echo") => Step::tool_call(
            "delegate_to_sub_agent",
            json!({"task": "echo grants-ping-42", "tools": [ECHO]}),
        ),
        _ => Step::text("unexpected"),
    }
}

#[tokio::test]
async fn a_delegated_task_calls_the_granted_tool_in_its_chats_own_server() {
    if docker_or_skip("mcp-grants").await.is_none() {
        return;
    }
    let leftovers = Leftovers::new("mcp-grants");
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(responder);
    let ws = TempWorkspace::init("nxw-mcp-grants");
    let mut env = base_env(&llm.base_url());
    env.extend(leftovers.env());
    env.extend(test_image());
    // One instance per chat, for the owner's chats only.
    env.push((
        "NEXBOT_MCP__SERVERS".into(),
        r#"[{ name = "everything", command = "mcp-server-everything", args = ["stdio"], scope = "chat" }]"#.into(),
    ));
    let host = InProcess::start(&ws, env).await;
    let owner = ChatRef::console("c1").unwrap();
    let stranger = ChatRef::Telegram(4242);
    let checks = async |host: &mut InProcess| {
        host.send_in(owner.clone(), 1, "grant echo").await;
        let answer = host.answers(1).await.remove(&1).unwrap_or_default();
        assert!(answer.starts_with("relayed: "), "{answer}");
        assert!(answer.contains("Echo: grants-ping-42"), "the echo came back: {answer}");

        let requests = llm.chat_requests();
        let sub: Vec<&Value> =
            requests.iter().map(|r| &r.body).filter(|body| !is_main(body)).collect();
        assert_eq!(sub.len(), 2, "call, then answer");
        // The sub-agent's model is offered the granted tool (with the chat's model's
        // definition), the planning tool and `return_file` (a delegation takes files back):
        // nothing else of the chat's MCP tools.
        let offered: Vec<&str> = sub[0]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(offered, [ECHO, "update_todos", "return_file"]);
        let echo = &sub[0]["tools"][0]["function"];
        assert!(echo["description"].as_str().unwrap().starts_with("Tool of MCP server"));
        assert_eq!(echo["parameters"]["properties"]["message"]["type"], "string");
        // It read the server's answer in the envelope the main agent reads it in.
        let messages = sub[1]["messages"].as_array().cloned().unwrap();
        let result = contents(&messages, "tool")[0];
        assert!(result.starts_with("<<<MCP_RESULT server=everything tool=echo>>>"), "{result}");
        assert!(result.contains("Echo: grants-ping-42"), "{result}");

        // The call ran in the delegating chat's own instance, and was counted as the main
        // agent's calls are.
        let mcp = host.sandbox().mcp().clone();
        assert_eq!(mcp.counters()["everything"].calls, 1);
        let views = mcp.instances().await;
        let serving: Vec<&str> =
            views.iter().filter(|v| v.state == "running").map(|v| v.serves.as_str()).collect();
        assert_eq!(serving, [owner.to_string()], "{views:?}");
        let records = host.store.tasks(&owner).await.unwrap();
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].status.as_str(), "success", "{records:?}");

        // A chat the server does not allow: its model is not offered the tool, and naming it
        // in a delegation is refused, named, before anything runs.
        host.send_in(stranger.clone(), 2, "grant echo from elsewhere").await;
        let deadline = Instant::now() + Duration::from_secs(60);
        let refusal = loop {
            let requests = llm.chat_requests();
            let seen = requests.iter().map(|r| &r.body).find_map(|body| {
                let messages = body["messages"].as_array()?;
                let last = messages.last()?;
                let content = last["content"].as_str()?;
                (last["role"] == "tool" && content.contains("cannot be granted"))
                    .then(|| (content.to_owned(), body["tools"].to_string()))
            });
            if let Some(seen) = seen {
                break seen;
            }
            assert!(Instant::now() < deadline, "no refusal reached the model: {requests:#?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let (error, offered) = refusal;
        assert!(
            error.contains("mcp__everything__echo is not an MCP tool this chat may use"),
            "{error}"
        );
        assert!(error.contains("this chat may use no MCP tool"), "{error}");
        assert!(!offered.contains("mcp__everything"), "offered to the stranger: {offered}");
        assert!(host.store.tasks(&stranger).await.unwrap().is_empty(), "nothing ran");
        assert_eq!(mcp.counters()["everything"].calls, 1, "nothing was called");
        Ok::<_, String>(())
    };
    host.run_then_stop(checks, leftovers).await;
}

/// A relay that issues a token nobody can use: the task never reaches a model here.
#[derive(Debug)]
struct NoRelay;

impl LlmAccess for NoRelay {
    fn issue(&self, _: &str, _: Option<u64>) -> Result<TaskLlm, String> {
        let token = secrecy::SecretString::from("nxr_unused_in_this_test".to_owned());
        Ok(TaskLlm::Relay { base_url: "http://relay.invalid/v1".into(), token })
    }
    fn revoke(&self, _: &str) -> AccessEnd {
        AccessEnd::default()
    }
}

/// A compromised sub-agent: given its task's MCP caller, it asks for the granted tool, for a
/// tool of the same server the chat may use but did not grant, for a tool of no server, and
/// in another task's name; it answers with what it got.
#[derive(Debug, Default)]
struct Rogue {
    requests: Mutex<Vec<Request>>,
    answers: Mutex<Vec<(String, McpAnswer)>>,
}

impl SubagentRunner for Rogue {
    fn execute(
        &self,
        _: &ChatRef,
        request: Request,
        _: CancellationToken,
        _: Option<mpsc::Sender<Response>>,
        mcp: Option<Arc<dyn McpCalls>>,
        _: Vec<nexbot_protocol::TaskFile>,
    ) -> nexbot_core::BoxFuture<'_, Result<SubagentOutcome, SubagentError>> {
        Box::pin(async move {
            let Some(mcp) = mcp else { return Err(SubagentError::new("no MCP caller")) };
            let asks = [
                (request.id.as_str(), ECHO, json!({"message": "granted"})),
                (request.id.as_str(), ENV, json!({})),
                (request.id.as_str(), "mcp__elsewhere__read_secrets", json!({})),
                ("another-task", ECHO, json!({"message": "not mine"})),
            ];
            for (n, (task, tool, arguments)) in asks.into_iter().enumerate() {
                let call = McpCall {
                    task_id: task.to_owned(),
                    call_id: format!("c{n}"),
                    tool: tool.to_owned(),
                    arguments: arguments.as_object().unwrap().clone(),
                };
                let answer = mcp.call(call).await;
                self.answers.lock().unwrap().push((tool.to_owned(), answer));
            }
            let id = request.id.clone();
            self.requests.lock().unwrap().push(request);
            let response = Response::success(&id, None, "done".into(), Usage::default(), 1, 1);
            Ok(SubagentOutcome { response, container: None, files: Vec::new() })
        })
    }
}

/// A delegation tool over `runner` that may grant what `h`'s servers offer a chat.
async fn delegate(h: &Harness, runner: Arc<Rogue>, dir: &std::path::Path) -> Delegate {
    let config =
        Config::from_parts("", &dir.join("config.toml"), dir, Vec::<(String, String)>::new())
            .unwrap();
    let store = Store::open(&dir.join("t.db")).await.unwrap();
    let settings = DelegateSettings {
        longest: TaskDeadlines::plan(&config.task_limits(), None),
        llm_model: "scripted".into(),
        llm_context_window: None,
        spend: None,
        exits: None,
        search: None,
        max_blocked_commands: 3,
        search_budget: 20,
        approvals: None,
        traps: None,
    };
    let source = McpTools::new(h.mcp.servers().to_vec(), h.mcp.clone());
    Delegate::new(runner, store, None, Arc::new(NoRelay), settings)
        .with_mcp(Some(Arc::new(source) as Arc<dyn ToolSource>))
}

#[tokio::test]
async fn a_subagent_asking_for_a_tool_it_was_not_granted_gets_an_error_and_nothing_is_called() {
    let everything = server("everything", "mcp-server-everything", ServerScope::Chat);
    let Some(h) = Harness::start("mcp-rogue", vec![everything]).await else { return };
    let dir = std::env::temp_dir().join(format!("nxw-mcp-rogue-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let rogue = Arc::new(Rogue::default());
    let tool = delegate(&h, rogue.clone(), &dir).await;
    let owner = ChatRef::console("owner").unwrap();
    // The chat may use every tool of the server (the owner's): not granting one is what
    // keeps it out of the task.
    let offered: Vec<String> = McpTools::new(h.mcp.servers().to_vec(), h.mcp.clone())
        .tools(&owner, true)
        .iter()
        .map(|t| t.name().to_owned())
        .collect();
    assert!(offered.iter().any(|n| n == ENV), "{offered:?}");

    let args = json!({"task": "echo", "tools": [ECHO]});
    let outcome = tool.call(args, &ctx(&owner)).await;
    assert!(outcome.is_ok(), "{outcome:?}");
    let sent = rogue.requests.lock().unwrap().remove(0);
    let granted: Vec<&str> = sent.mcp_tools.iter().flatten().map(|t| t.name.as_str()).collect();
    assert_eq!(granted, [ECHO], "told of the granted tool only");

    let answers = rogue.answers.lock().unwrap().clone();
    // Positive control: the granted tool is called, in the server's envelope.
    let McpAnswer::Result(echoed) = &answers[0].1 else { panic!("{answers:?}") };
    assert!(echoed.starts_with("<<<MCP_RESULT server=everything tool=echo>>>"), "{echoed}");
    assert!(echoed.contains("Echo: granted"), "{echoed}");
    // Everything else is refused by name, never called: had the host run whatever name came,
    // the environment tool would have answered (the chat may use it) and another task's
    // call would have echoed.
    for (tool, answer) in &answers[1..] {
        let McpAnswer::Error(refused) = answer else { panic!("{tool} was called: {answer:?}") };
        assert!(refused.contains("was not granted to this task; nothing was called"), "{refused}");
    }
    assert!(matches!(&answers[1].1, McpAnswer::Error(e) if e.contains(ENV)));
    assert_eq!(h.mcp.counters()["everything"].calls, 1, "only the granted call ran");
    // In the delegating chat's own instance (the server is per chat).
    let views = h.mcp.instances().await;
    let running: Vec<&str> =
        views.iter().filter(|v| v.state == "running").map(|v| v.serves.as_str()).collect();
    assert_eq!(running, [owner.to_string()], "{views:?}");

    // A chat the server does not allow cannot grant its tools: refused, named, nothing run.
    let stranger = ToolContext { owner: false, ..ctx(&ChatRef::Telegram(4242)) };
    let refused = tool.call(json!({"task": "echo", "tools": [ECHO]}), &stranger).await;
    let error = refused.expect_err("refused").message().to_owned();
    assert!(
        error.starts_with("mcp__everything__echo is not an MCP tool this chat may use"),
        "{error}"
    );
    assert!(rogue.requests.lock().unwrap().is_empty(), "nothing was sent");
    h.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
