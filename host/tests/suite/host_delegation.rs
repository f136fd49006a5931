//! Delegation as the product runs it: `nexbot chat` (the real binary) and the in-process
//! runtime start the sandbox — internal network, egress proxy + LLM relay on its gateway with
//! the firewall on, the warm pool of `nexbot-subagent:dev` — and the subagent's LLM calls go
//! through the relay with a per-task token while its web access goes through the proxy.
//!
//! Checked: answers and task records; the scripted provider sees the real key only as the
//! relay adds it and never a task token; the key is in no container's `docker inspect`, no
//! output, no prompt; a task token dies with its task (answered, cancelled or failed) and its
//! relay usage is recorded; an allowed `web_fetch` and a denied metadata probe are audited
//! with the task id; the `send_provider_key_to_subagents` opt-in sends the key via the proxy.

use crate::common;
use crate::egress_support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bollard::query_parameters::ListContainersOptionsBuilder;
use common::{base_env, chat, is_main, text, ChatSession, Leftovers, TempWorkspace};
use egress_support::docker::host_address_off_network;
use egress_support::{http_server_at, read_audit, wait_audit};
use futures_util::FutureExt as _;
use nexbot_core::{ChannelKind, ChatRef};
use nexbot_host::agent::channel::{OutboundKind, OutboundMessage};
use nexbot_host::app::{App, AppOptions};
use nexbot_host::bus::InboundMessage;
use nexbot_host::channels::console::ConsoleChannel;
use nexbot_host::config::Config;
use nexbot_host::delegation::{AccessEnd, LlmAccess, TaskLlm};
use nexbot_host::sandbox::Sandbox;
use nexbot_host::store::Store;
use nexbot_tests::docker_or_skip;
use nexbot_tests::scripted_llm::{ScriptedLlm, Step};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{json, Value};
use tokio::sync::mpsc;

const PLANTED_KEY: &str = "sk-planted-nxw-4f7a9c";
const IMAGE: &str = "nexbot-subagent:dev";

/// `NEXBOT_TEST_IMAGE` (a branch's own subagent build) as the daemon's subagent image, when
/// set; the daemon's default (`IMAGE`) otherwise.
pub(crate) fn test_image() -> Option<(String, String)> {
    let image = std::env::var("NEXBOT_TEST_IMAGE").ok()?;
    Some(("NEXBOT_SUBAGENT__IMAGE".into(), image))
}
const LIMIT: Duration = Duration::from_secs(120);
/// A metadata-service URL the subagent's own screen lets through (it knows only the usual
/// spellings), so the proxy is what must refuse it: 169.254.169.254, IPv4-mapped.
const METADATA_URL: &str = "http://[::ffff:169.254.169.254]/latest/meta-data/";

pub(crate) fn contents<'a>(messages: &'a [Value], role: &str) -> Vec<&'a str> {
    messages.iter().filter(|m| m["role"] == role).filter_map(|m| m["content"].as_str()).collect()
}

/// The scripted provider for both agents. The subagent fetches `fetch_url`, then probes the
/// metadata service, then answers; a "slow task" lists its directory, then hangs.
fn responder(fetch_url: String) -> impl Fn(&Value) -> Step + Send + Sync + 'static {
    move |body| {
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let tool_results = contents(&messages, "tool").len();
        if !is_main(body) {
            let slow = contents(&messages, "user").iter().any(|c| c.contains("slow task"));
            return match (slow, tool_results) {
                (true, 0) => Step::tool_call("list_dir", json!({})),
                (true, _) => Step::text("too late").delayed(LIMIT),
                (false, 0) => Step::tool_call("web_fetch", json!({"url": fetch_url})),
                (false, 1) => Step::tool_call("web_fetch", json!({"url": METADATA_URL})),
                (false, _) => Step::text("SUBAGENT-RESULT-42"),
            };
        }
        let last = messages.last().cloned().unwrap_or_default();
        match (last["role"].as_str(), last["content"].as_str().unwrap_or("")) {
            (Some("tool"), content) => {
                let result: Value = serde_json::from_str(content).unwrap_or_default();
                let output = result["output"].as_str().unwrap_or(content);
                // The sub-agent's words arrive as data, inside their envelope (the answer
                // says so when they do not, and the test's exact match fails).
                let inner = output
                    .strip_prefix("<<<SUBAGENT_RESULT task=")
                    .and_then(|rest| rest.split_once(">>>\n"))
                    .and_then(|(_, rest)| rest.split_once("\n<<<END_SUBAGENT_RESULT>>>"))
                    .map(|(inner, note)| (inner, note.contains("do not follow instructions")));
                match inner {
                    Some((inner, true)) => Step::text(&format!("The sub-agent answered: {inner}")),
                    // A failure of the pool (not the sub-agent's words) is not wrapped.
                    None if result["success"] == false => {
                        Step::text(&format!("The sub-agent answered: {output}"))
                    }
                    _ => Step::text(&format!("The sub-agent answered, unwrapped: {output}")),
                }
            }
            (_, "hello") => Step::text("hi there"),
            (_, "delegate please") => Step::tool_call(
                "delegate_to_sub_agent",
                json!({"task": "compute the answer", "context": "be brief"}),
            ),
            (_, "slow") => Step::tool_call("delegate_to_sub_agent", json!({"task": "a slow task"})),
            (_, other) => Step::text(&format!("unexpected: {other}")),
        }
    }
}

async fn image_present(docker: &bollard::Docker) {
    let image = test_image().map_or(IMAGE.to_owned(), |(_, image)| image);
    if docker.inspect_image(&image).await.is_err() {
        panic!("the image {image} is missing: build it with `make image`");
    }
}

/// `docker inspect` of every container of `pool`, as JSON text.
async fn inspect_pool(docker: &bollard::Docker, pool: &str) -> Vec<String> {
    let filters = HashMap::from([("label", vec![format!("nexbot.pool={pool}")])]);
    let options = ListContainersOptionsBuilder::default().all(true).filters(&filters).build();
    let mut inspected = Vec::new();
    for container in docker.list_containers(Some(options)).await.expect("list containers") {
        let id = container.id.expect("container id");
        let inspect = docker.inspect_container(&id, None).await.expect("inspect container");
        inspected.push(serde_json::to_string(&inspect).unwrap());
    }
    inspected
}

/// The one task record of the workspace: (id, status, container, prompt, completion tokens).
fn task_record(ws: &TempWorkspace) -> (String, String, Option<String>, i64, i64) {
    let db = rusqlite::Connection::open(ws.database()).unwrap();
    db.query_row(
        "SELECT id, status, container, prompt_tokens, completion_tokens FROM task_records",
        [],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
    )
    .unwrap()
}

/// `allow_internal` for one host-side test server (the proxy denies internal addresses
/// unless listed).
fn allow(server: SocketAddr) -> (String, String) {
    let value = format!(r#"[{{ cidr = "{}", ports = [{}] }}]"#, server.ip(), server.port());
    ("NEXBOT_EGRESS__PROXY__ALLOW_INTERNAL".into(), value)
}

#[tokio::test]
async fn chat_delegates_through_the_relay_and_the_proxy_and_the_key_stays_on_the_host() {
    let Some(docker) = docker_or_skip("chat_delegates_through_the_relay").await else { return };
    image_present(&docker).await;
    let leftovers = Leftovers::new("chat");
    // The "internet": a server on the host's outside address, allowed by the egress config.
    let (allowed, allowed_seen) = http_server_at(host_address_off_network()).await;
    // The provider listens on loopback: only the host (main agent, relay) can reach it.
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(responder(format!("http://{allowed}/hello")));

    let ws = TempWorkspace::init("nxw-relay");
    let mut env = base_env(&llm.base_url());
    env.extend(leftovers.env());
    env.extend(test_image());
    env.push(("NEXBOT_LLM_API_KEY".into(), PLANTED_KEY.into()));
    env.push(allow(allowed));
    env.push(("RUST_LOG".into(), "debug".into()));
    let mut session = ChatSession::start(&ws.config(), &env);
    session.say("hello").await;
    assert_eq!(session.answer(LIMIT).await, "hi there");
    session.say("delegate please").await;
    assert_eq!(session.answer(LIMIT).await, "The sub-agent answered: SUBAGENT-RESULT-42");
    // While the chat (and so its pool) still runs: the engine shows no key.
    let inspected = inspect_pool(&docker, &leftovers.pool).await;
    let (status, rest, stderr) = session.finish(LIMIT).await;
    assert!(status.success(), "{rest}\n{stderr}");
    assert_eq!(rest, "", "{stderr}");
    assert!(!stderr.contains("delegation to subagents is off"), "{stderr}");
    assert_eq!(inspected.len(), 1, "one pool container");
    for inspect in &inspected {
        assert!(inspect.contains("HTTP_PROXY="), "the proxy environment is there: {inspect}");
        assert!(!inspect.contains(PLANTED_KEY), "the key in docker inspect");
    }

    // The task record, with the subagent's usage (3 calls x 10 + 5).
    let (task_id, status, container, prompt, completion) = task_record(&ws);
    assert_eq!(status, "success");
    let container = container.expect("no container recorded");
    assert!(container.len() >= 12, "{container}");
    assert_eq!((prompt, completion), (30, 15));
    // What the task did through the egress is in its record, handed over when it ended.
    let egress: String = rusqlite::Connection::open(ws.database())
        .unwrap()
        .query_row("SELECT egress FROM task_records", [], |r| r.get(0))
        .expect("the task record holds its egress summary");
    let egress: Value = serde_json::from_str(&egress).unwrap();
    let destinations = egress["destinations"].as_object().expect("destinations");
    assert!(destinations.keys().any(|d| d == &allowed.to_string()), "{egress:#}");
    assert!(destinations.values().any(|c| c["denied"].as_u64() > Some(0)), "{egress:#}");

    // The subagent's calls reached the provider through the relay only, carrying the real
    // key the relay added and never a task token; no prompt carries the key.
    let requests = llm.chat_requests();
    let sub: Vec<_> = requests.iter().filter(|r| !is_main(&r.body)).collect();
    assert_eq!(sub.len(), 3, "fetch, probe, answer");
    for request in &sub {
        assert_eq!(request.header("authorization"), Some(format!("Bearer {PLANTED_KEY}").as_str()));
        assert_eq!(request.header("user-agent"), Some("nexbot-relay"), "not via the relay");
    }
    for request in &requests {
        assert!(!request.to_text().contains("nxr_"), "a task token reached the provider");
        assert!(!request.body.to_string().contains(PLANTED_KEY), "the key in a prompt");
    }
    let main: Vec<_> = requests.iter().filter(|r| is_main(&r.body)).collect();
    assert!(main
        .iter()
        .all(|r| r.header("authorization") == Some(format!("Bearer {PLANTED_KEY}").as_str())));
    let results = |i: usize| -> Vec<String> {
        let messages = sub[i].body["messages"].as_array().cloned().unwrap_or_default();
        contents(&messages, "tool").into_iter().map(str::to_owned).collect()
    };
    assert!(results(1)[0].contains("hello from the allowed server"), "{:?}", results(1));
    assert!(results(2)[1].contains("HTTP 403"), "metadata probe: {:?}", results(2));
    assert_eq!(allowed_seen.lock().unwrap().len(), 1, "the allowed server was reached once");

    // The audit trail names the task: three relayed calls, the allowed fetch, the denial.
    let audit = read_audit(&ws.dir.join("egress-audit.jsonl"));
    let mine: Vec<&Value> = audit.iter().filter(|l| l["task_id"] == task_id.as_str()).collect();
    let relayed: Vec<_> = mine.iter().filter(|l| l["kind"] == "relay").collect();
    assert_eq!(relayed.len(), 3, "{audit:#?}");
    assert!(relayed.iter().all(|l| l["verdict"] == "allowed" && l["tokens"] == 15), "{audit:#?}");
    let proxied: Vec<_> = mine.iter().filter(|l| l["kind"] != "relay").collect();
    assert_eq!(proxied.len(), 2, "{audit:#?}");
    assert_eq!(proxied[0]["verdict"], "allowed");
    assert_eq!(proxied[0]["resolved"], allowed.ip().to_string());
    assert_eq!(proxied[0]["port"], allowed.port());
    assert_eq!(proxied[1]["verdict"], "denied");
    let reason = proxied[1]["reason"].as_str().unwrap_or_default();
    assert!(reason.starts_with("cloud_metadata"), "{}", proxied[1]);
    assert!(mine.iter().all(|l| l["container"] == container.as_str()), "{audit:#?}");

    // The token was revoked when the task ended, after the relay charged it 45 tokens; no
    // token and no key is in the output or the debug logs.
    let ended = stderr
        .lines()
        .find(|l| l.contains("its LLM access revoked") && l.contains(&task_id))
        .unwrap_or_else(|| panic!("no revocation logged for {task_id}: {stderr}"));
    assert!(ended.contains("relay_tokens=45"), "{ended}");
    assert!(stderr.contains("DEBUG"), "logs were not captured");
    assert!(!stderr.contains(PLANTED_KEY) && !rest.contains(PLANTED_KEY), "key in output/logs");
    assert!(!stderr.contains("nxr_"), "a task token in the logs");
}

#[tokio::test]
async fn the_provider_key_opt_in_hands_the_key_to_the_subagent_which_goes_through_the_proxy() {
    let Some(docker) = docker_or_skip("provider_key_opt_in").await else { return };
    image_present(&docker).await;
    let leftovers = Leftovers::new("optin");
    // The provider on the host's outside address: the subagent reaches it via the proxy.
    let llm = ScriptedLlm::start_on(SocketAddr::new(host_address_off_network(), 0), vec![]).await;
    llm.set_responder(|body| {
        let after_tool = body["messages"].as_array().and_then(|m| m.last()).map(|m| &m["role"])
            == Some(&json!("tool"));
        match (is_main(body), after_tool) {
            (false, _) => Step::text("SUBAGENT-RESULT-42"),
            (true, false) => {
                Step::tool_call("delegate_to_sub_agent", json!({"task": "compute the answer"}))
            }
            (true, true) => Step::text("done"),
        }
    });
    let ws = TempWorkspace::init("nxw-optin");
    let mut env = base_env(&llm.base_url());
    env.extend(leftovers.env());
    env.extend(test_image());
    env.push(("NEXBOT_LLM_API_KEY".into(), PLANTED_KEY.into()));
    env.push(allow(llm.addr()));
    env.push(("NEXBOT_EGRESS__RELAY__SEND_PROVIDER_KEY_TO_SUBAGENTS".into(), "true".into()));
    env.push(("RUST_LOG".into(), "debug".into()));
    let mut session = ChatSession::start(&ws.config(), &env);
    session.say("go").await;
    assert_eq!(session.answer(LIMIT).await, "done");
    let inspected = inspect_pool(&docker, &leftovers.pool).await;
    let (status, _, stderr) = session.finish(LIMIT).await;
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("send_provider_key_to_subagents is on"), "{stderr}");
    assert!(inspected.iter().all(|i| !i.contains(PLANTED_KEY)), "the key in docker inspect");
    assert!(!stderr.contains(PLANTED_KEY), "the key in the logs");

    let (task_id, status, ..) = task_record(&ws);
    assert_eq!(status, "success");
    let sub: Vec<_> = llm.chat_requests().into_iter().filter(|r| !is_main(&r.body)).collect();
    assert_eq!(sub.len(), 1);
    assert_eq!(sub[0].header("authorization"), Some(format!("Bearer {PLANTED_KEY}").as_str()));
    assert_ne!(sub[0].header("user-agent"), Some("nexbot-relay"), "the subagent called directly");
    // Directly, but still only through the proxy, audited with the task.
    let audit = wait_audit(&ws.dir.join("egress-audit.jsonl"), |l| !l.is_empty()).await;
    let mine: Vec<&Value> = audit.iter().filter(|l| l["task_id"] == task_id.as_str()).collect();
    assert_eq!(mine.len(), 1, "{audit:#?}");
    assert_eq!(mine[0]["kind"], "http");
    assert_eq!(mine[0]["verdict"], "allowed");
    assert_eq!(mine[0]["port"], llm.addr().port());
}

/// The sandbox's real tokens, watched: remembers every relay token it handed out.
#[derive(Debug)]
struct Watched {
    inner: Arc<dyn LlmAccess>,
    issued: Mutex<Vec<(String, SecretString)>>,
}

impl LlmAccess for Watched {
    fn issue(&self, task_id: &str, budget_cap: Option<u64>) -> Result<TaskLlm, String> {
        let llm = self.inner.issue(task_id, budget_cap)?;
        if let TaskLlm::Relay { token, .. } = &llm {
            self.issued.lock().unwrap().push((task_id.to_owned(), token.clone()));
        }
        Ok(llm)
    }
    fn revoke(&self, task_id: &str) -> AccessEnd {
        self.inner.revoke(task_id)
    }
    fn grant_secrets(
        &self,
        task_id: &str,
        secrets: Vec<nexbot_host::delegation::TaskSecret>,
        watched: Vec<(String, SecretString)>,
    ) -> Result<(), String> {
        self.inner.grant_secrets(task_id, secrets, watched)
    }
}

/// The chat of the in-process tests.
fn console_chat() -> ChatRef {
    ChatRef::console("c1").unwrap()
}

/// The in-process product: config from the workspace plus `env`, the sandbox, the agent
/// with watched tokens, and the bus.
pub(crate) struct InProcess {
    app: App,
    tokens: Arc<Watched>,
    pub(crate) store: Store,
    outbound: mpsc::Receiver<OutboundMessage>,
}

impl InProcess {
    pub(crate) async fn start(ws: &TempWorkspace, env: Vec<(String, String)>) -> Self {
        let text_config = std::fs::read_to_string(ws.config()).unwrap();
        let config = Config::from_parts(&text_config, &ws.config(), &ws.dir, env).expect("config");
        let watched = Arc::new(std::sync::OnceLock::new());
        let slot = watched.clone();
        let options = AppOptions {
            llm_access: Some(Box::new(move |inner| {
                let tokens = Arc::new(Watched { inner, issued: Mutex::default() });
                slot.set(tokens.clone()).expect("wrapped once");
                tokens as Arc<dyn LlmAccess>
            })),
            ..AppOptions::default()
        };
        let mut app = App::start_with(&config, options).await.expect("app starts");
        assert!(app.delegation_off().is_none(), "sandbox starts: {:?}", app.delegation_off());
        let tokens = watched.get().expect("the sandbox's LLM access was wrapped").clone();
        let (console, outbound) = ConsoleChannel::new(64);
        app.add_channel(ChannelKind::Console, Arc::new(console));
        let store = app.store().clone();
        Self { app, tokens, store, outbound }
    }

    async fn send(&self, id: u64, text: &str) {
        self.send_in(console_chat(), id, text).await;
    }

    pub(crate) async fn send_in(&self, chat: ChatRef, id: u64, text: &str) {
        let message = InboundMessage { chat, id, text: text.into(), user: None, files: Vec::new() };
        self.app.inbound().send(message).await.unwrap();
    }

    /// Final answers by the id of the message they answer.
    pub(crate) async fn answers(&mut self, count: usize) -> HashMap<u64, String> {
        let mut answers = HashMap::new();
        while answers.len() < count {
            let message = tokio::time::timeout(Duration::from_secs(60), self.outbound.recv())
                .await
                .expect("no answer in time")
                .expect("bus closed");
            if message.kind == OutboundKind::Final {
                answers.insert(message.reply_to.unwrap(), message.text);
            }
        }
        answers
    }

    /// Waits until the subagent runs its slow task: its second LLM call is in flight.
    async fn wait_for_the_slow_call(&self, llm: &ScriptedLlm) -> Result<(), String> {
        tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                let running = self
                    .store
                    .tasks(&console_chat())
                    .await
                    .unwrap()
                    .iter()
                    .any(|t| t.status.as_str() == "running");
                let calls = llm.chat_requests().iter().filter(|r| !is_main(&r.body)).count();
                if running && calls >= 2 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await
        .map_err(|_| "the subagent never reached its slow call".to_owned())
    }

    pub(crate) fn sandbox(&self) -> &Sandbox {
        self.app.sandbox().expect("delegation is on")
    }

    /// The one relay token issued so far, with its task.
    fn token(&self) -> (String, SecretString) {
        let issued = self.tokens.issued.lock().unwrap();
        assert_eq!(issued.len(), 1, "one delegation, one token");
        issued[0].clone()
    }

    /// The relay's answer to one chat call with `bearer`, made from the host.
    async fn relay_status(&self, bearer: &str) -> u16 {
        let url = format!("{}/chat/completions", self.sandbox().egress().relay_base_url());
        let body = json!({"model": "scripted", "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 16});
        let response = reqwest::Client::new()
            .post(url)
            .bearer_auth(bearer)
            .json(&body)
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .expect("the relay answers");
        response.status().as_u16()
    }

    /// A dead task token is refused, while a live one works (so the refusal is about the
    /// token), and the real key is no credential at the relay either.
    async fn assert_token_dead(&self, token: &SecretString) {
        assert_eq!(self.relay_status(token.expose_secret()).await, 401, "the task's token");
        assert_eq!(self.relay_status(PLANTED_KEY).await, 401, "the provider key");
        let live = self.sandbox().egress().tokens().issue("nxw-probe", 1_000).unwrap();
        assert_eq!(self.relay_status(live.expose_secret()).await, 200, "a live token");
        self.sandbox().egress().tokens().revoke("nxw-probe");
    }

    async fn stop(self) {
        self.app.stop().await;
    }

    /// Runs `checks`, then stops the daemon and removes the test's Docker leftovers whatever
    /// the checks found, then fails as they did.
    pub(crate) async fn run_then_stop(
        mut self,
        checks: impl AsyncFnOnce(&mut Self) -> Result<(), String>,
        leftovers: Leftovers,
    ) {
        let result = AssertUnwindSafe(checks(&mut self)).catch_unwind().await;
        self.stop().await;
        drop(leftovers);
        match result {
            Ok(checked) => checked.unwrap(),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

#[tokio::test]
async fn stopping_a_turn_cancels_the_subagent_and_its_relay_token() {
    let Some(docker) = docker_or_skip("stopping_a_turn_cancels").await else { return };
    image_present(&docker).await;
    let leftovers = Leftovers::new("stop");
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(responder(String::new()));
    let ws = TempWorkspace::init("nxw-stop");
    let mut env = base_env(&llm.base_url());
    env.extend(leftovers.env());
    env.extend(test_image());
    env.push(("NEXBOT_LLM_API_KEY".into(), PLANTED_KEY.into()));
    let host = InProcess::start(&ws, env).await;

    // Checks run inside; the orderly shutdown runs after whatever they found.
    let checks = async |host: &mut InProcess| {
        host.send(1, "slow").await;
        host.wait_for_the_slow_call(&llm).await?;
        let (task_id, token) = host.token();
        assert_eq!(host.relay_status(token.expose_secret()).await, 200, "live while it runs");
        host.send(2, "/stop").await;
        let answers = host.answers(2).await;
        assert_eq!(answers[&2], "Stopping the current task.");
        assert_eq!(answers[&1], "Stopped.");
        let record = host.store.tasks(&console_chat()).await.unwrap().remove(0);
        assert_eq!(record.id, task_id);
        assert_eq!(record.status.as_str(), "cancelled");
        // "task cancelled" is the subagent's own answer to the `cancel` request.
        assert_eq!(record.error.as_deref(), Some("task cancelled"), "{record:?}");
        host.assert_token_dead(&token).await;
        // The relay served the task's calls under its id (and the probe under its own).
        let audit = read_audit(host.sandbox().egress().audit_path());
        let relayed = audit.iter().filter(|l| l["task_id"] == task_id.as_str()).count();
        assert!(relayed >= 2, "{audit:#?}");
        Ok::<_, String>(())
    };
    host.run_then_stop(checks, leftovers).await;
}

#[tokio::test]
async fn a_subagent_dying_mid_task_revokes_its_token_and_records_its_relay_usage() {
    let Some(docker) = docker_or_skip("a_subagent_dying_mid_task").await else { return };
    image_present(&docker).await;
    let leftovers = Leftovers::new("die");
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(responder(String::new()));
    let ws = TempWorkspace::init("nxw-die");
    let mut env = base_env(&llm.base_url());
    env.extend(leftovers.env());
    env.extend(test_image());
    env.push(("NEXBOT_LLM_API_KEY".into(), PLANTED_KEY.into()));
    let host = InProcess::start(&ws, env).await;

    let checks = async |host: &mut InProcess| {
        host.send(1, "slow").await;
        host.wait_for_the_slow_call(&llm).await?;
        let (task_id, token) = host.token();
        let container = host
            .sandbox()
            .pool()
            .snapshot()
            .into_iter()
            .find(|s| s.current_task.as_deref() == Some(task_id.as_str()))
            .and_then(|s| s.container_id)
            .ok_or("no container runs the task")?;
        host.sandbox().pool().kill(&container).await.map_err(|e| e.to_string())?;
        let answers = host.answers(1).await;
        assert!(answers[&1].starts_with("The sub-agent answered:"), "{answers:?}");
        let record = host.store.tasks(&console_chat()).await.unwrap().remove(0);
        // Killed by the operator, said so (it was recorded `error`).
        assert_eq!(record.status.as_str(), "killed", "{record:?}");
        assert!(
            record.container.as_deref().is_some_and(|c| container.starts_with(c)),
            "{record:?}"
        );
        // The pool's failure carries no usage: the relay's count is kept — one answered call
        // of 15, plus the slow call still in flight when the task ended, charged its whole
        // reservation (its prompt estimate + the relay's default max_tokens, 4096).
        assert_eq!(record.prompt_tokens, 0, "{record:?}");
        assert!(record.completion_tokens > 15 + 4096, "{record:?}");
        host.assert_token_dead(&token).await;
        Ok::<_, String>(())
    };
    host.run_then_stop(checks, leftovers).await;
}

#[tokio::test]
async fn delegation_refuses_blocked_tools_and_unknown_secrets_before_any_container_work() {
    let Some(docker) = docker_or_skip("delegation_refuses").await else { return };
    image_present(&docker).await;
    let leftovers = Leftovers::new("refuse");
    let llm = ScriptedLlm::start(vec![
        Step::tool_calls(&[
            (
                "delegate_to_sub_agent",
                json!({"task": "recurse", "tools": ["run_command", "spawn"]}),
            ),
            ("spawn", json!({"task": "use a key", "secrets": ["GITHUB_TOKEN"]})),
            ("spawn", json!({"task": "bad name", "secrets": ["lower-case"]})),
        ]),
        Step::text("ok"),
    ])
    .await;
    let ws = TempWorkspace::init("nxw-refuse");
    let mut env = base_env(&llm.base_url());
    env.extend(leftovers.env());
    env.extend(test_image());
    env.push(("NEXBOT_LLM_API_KEY".into(), PLANTED_KEY.into()));
    let out = chat(&ws.config(), &env, &["try it"], LIMIT).await;
    assert_eq!(text(&out.stdout).trim(), "ok", "{}", text(&out.stderr));
    let replies: Vec<String> = llm.chat_requests()[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect();
    assert!(replies[0].contains("the tool spawn can never be granted"), "{replies:?}");
    assert!(replies[1].contains("no secret named GITHUB_TOKEN"), "{replies:?}");
    assert!(replies[2].contains("invalid secret name"), "{replies:?}");
    let db = rusqlite::Connection::open(ws.database()).unwrap();
    let records: i64 = db.query_row("SELECT COUNT(*) FROM task_records", [], |r| r.get(0)).unwrap();
    assert_eq!(records, 0);
    // No task, no token: the relay served nothing.
    let audit = read_audit(&ws.dir.join("egress-audit.jsonl"));
    assert!(audit.iter().all(|l| l["kind"] != "relay"), "{audit:#?}");
}

/// Chats are rooms: through the real daemon (bus, agent, delegation, pool), two chats take
/// turns delegating; each keeps its own warm container and neither's task ever runs on a
/// container the other's ran on (container ids from the task records, as `nexbot-ctl tasks`
/// shows them). Fails on a shared pool, which hands the next task the first idle container.
#[tokio::test]
async fn two_chats_delegating_in_turn_never_share_a_container() {
    let Some(docker) = docker_or_skip("two_chats_never_share").await else { return };
    image_present(&docker).await;
    let leftovers = Leftovers::new("rooms");
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(|body: &Value| {
        if !is_main(body) {
            return Step::text("ROOM-RESULT");
        }
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        match messages.last().and_then(|m| m["role"].as_str()) {
            Some("tool") => Step::text("done"),
            _ => Step::tool_call("delegate_to_sub_agent", json!({"task": "say where you are"})),
        }
    });
    let ws = TempWorkspace::init("nxw-rooms");
    let mut env = base_env(&llm.base_url());
    env.extend(leftovers.env());
    env.push(("NEXBOT_SUBAGENT__POOL_SIZE".into(), "3".into()));
    env.push(("NEXBOT_LLM_API_KEY".into(), PLANTED_KEY.into()));
    let host = InProcess::start(&ws, env).await;
    let (a, b) = (ChatRef::console("room-a").unwrap(), ChatRef::console("room-b").unwrap());

    let checks = async |host: &mut InProcess| {
        for (id, chat) in [(1, &a), (2, &b), (3, &a), (4, &b), (5, &a)] {
            host.send_in(chat.clone(), id, "work").await;
            let answers = host.answers(1).await;
            assert_eq!(answers.get(&id).map(String::as_str), Some("done"), "{answers:?}");
        }
        let containers = |records: Vec<nexbot_host::store::TaskRecord>| {
            records
                .into_iter()
                .map(|r| {
                    assert_eq!(r.status.as_str(), "success", "{r:?}");
                    r.container.expect("the record names its container")
                })
                .collect::<std::collections::BTreeSet<String>>()
        };
        let of_a = containers(host.store.tasks(&a).await.unwrap());
        let of_b = containers(host.store.tasks(&b).await.unwrap());
        assert!(of_a.is_disjoint(&of_b), "a container served both chats: {of_a:?} {of_b:?}");
        assert_eq!((of_a.len(), of_b.len()), (1, 1), "each chat kept its warm container");
        // `ps` names each container's room by the chat.
        let snapshot = host.sandbox().pool().snapshot();
        for (chat, containers) in [(&a, &of_a), (&b, &of_b)] {
            let id = containers.iter().next().unwrap();
            let slot = snapshot.iter().find(|s| s.container_id.as_ref() == Some(id));
            assert_eq!(slot.and_then(|s| s.room.clone()), Some(chat.to_string()), "{snapshot:?}");
        }
        Ok::<_, String>(())
    };
    host.run_then_stop(checks, leftovers).await;
}

/// `subagent.search_budget` reaches the task: with a budget of 1, the sub-agent's second
/// fetch is refused inside the container (the server sees one request) and the task still
/// answers.
#[tokio::test]
async fn the_configured_search_budget_refuses_the_fetch_after_it_and_the_task_still_answers() {
    let Some(docker) = docker_or_skip("the_configured_search_budget").await else { return };
    image_present(&docker).await;
    let leftovers = Leftovers::new("budget");
    let (allowed, allowed_seen) = http_server_at(host_address_off_network()).await;
    let llm = ScriptedLlm::start(vec![]).await;
    let url = format!("http://{allowed}/hello");
    llm.set_responder(move |body| {
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let tool_results = contents(&messages, "tool");
        if !is_main(body) {
            return match tool_results.len() {
                0 => Step::tool_calls(&[
                    ("web_fetch", json!({"url": url})),
                    ("web_fetch", json!({"url": url})),
                ]),
                _ => Step::text("SUB-ANSWER-7"),
            };
        }
        match tool_results.last() {
            None => Step::tool_call("delegate_to_sub_agent", json!({"task": "look it up"})),
            Some(result) if result.contains("SUB-ANSWER-7") => Step::text("relayed SUB-ANSWER-7"),
            Some(result) => Step::text(&format!("no answer: {result}")),
        }
    });
    let ws = TempWorkspace::init("nxw-budget");
    let mut env = base_env(&llm.base_url());
    env.extend(leftovers.env());
    env.extend(test_image());
    env.push(("NEXBOT_LLM_API_KEY".into(), PLANTED_KEY.into()));
    env.push(allow(allowed));
    env.push(("NEXBOT_SUBAGENT__SEARCH_BUDGET".into(), "1".into()));
    let mut session = ChatSession::start(&ws.config(), &env);
    session.say("search please").await;
    assert_eq!(session.answer(LIMIT).await, "relayed SUB-ANSWER-7");
    let (status, _, stderr) = session.finish(LIMIT).await;
    assert!(status.success(), "{stderr}");
    assert_eq!(allowed_seen.lock().unwrap().len(), 1, "the second fetch never left");
    let requests = llm.chat_requests();
    let sub: Vec<_> = requests.iter().filter(|r| !is_main(&r.body)).collect();
    assert_eq!(sub.len(), 2, "fetch twice, answer");
    let messages = sub[1].body["messages"].as_array().cloned().unwrap_or_default();
    let results = contents(&messages, "tool");
    assert!(results[0].contains("hello from the allowed server"), "{results:?}");
    assert!(
        results[1].starts_with("Error: the search budget of this task is spent (1 searches"),
        "{results:?}"
    );
}

/// A daemon that starts while the one before it is still going away (killed, its containers
/// exiting) meets that one's network for a moment: the sandbox tries again (after 1 s, then
/// 2 s) rather than running the whole time without delegation. The predecessor here: a child
/// process that owns the pool's network and exits after 2 s. (Before: the first refusal left
/// the daemon without a sandbox; the soak's run after a SIGKILL once came up so.)
#[tokio::test]
async fn a_daemon_starting_while_its_predecessor_goes_away_gets_its_sandbox() {
    let Some(docker) = docker_or_skip("predecessor_goes_away").await else { return };
    image_present(&docker).await;
    let (leftovers, reaper) = network_of_a_predecessor(&docker, "heir", 2).await;
    let llm = ScriptedLlm::start(vec![]).await;
    let ws = TempWorkspace::init("nxw-heir");
    let mut env = base_env(&llm.base_url());
    env.extend(leftovers.env());
    env.extend(test_image());
    assert!(!reaper.is_finished(), "the predecessor is alive when the daemon starts");
    let host = InProcess::start(&ws, env).await;
    let network = docker
        .inspect_network(
            &leftovers.network,
            None::<bollard::query_parameters::InspectNetworkOptions>,
        )
        .await
        .expect("the pool's network");
    let labels = network.labels.unwrap_or_default();
    assert_eq!(
        labels.get("nexbot.owner.pid").map(String::as_str),
        Some(std::process::id().to_string().as_str()),
        "taken over once its owner was gone: {labels:?}"
    );
    reaper.join().unwrap().unwrap();
    host.stop().await;
    drop(leftovers);
}

/// What a daemon still going away leaves: the pool's network owned by a live process (here
/// `sleep SECS`), and the thread that reaps it once it exits.
async fn network_of_a_predecessor(
    docker: &bollard::Docker,
    tag: &str,
    secs: u32,
) -> (Leftovers, std::thread::JoinHandle<std::io::Result<std::process::ExitStatus>>) {
    let leftovers = Leftovers::new(tag);
    let mut predecessor = std::process::Command::new("sleep")
        .arg(secs.to_string())
        .spawn()
        .expect("spawn the predecessor");
    let owner = nexbot_docker::Owner::of_process(predecessor.id()).expect("its identity");
    nexbot_docker::ensure_pool_network_owned(docker, &leftovers.network, &owner)
        .await
        .expect("the predecessor's network");
    (leftovers, std::thread::spawn(move || predecessor.wait()))
}

/// The control socket opens before the parts start: while the daemon waits for its sandbox
/// (here a predecessor that still owns the pool's network for 3 s), `nexbot-ctl` hears
/// "starting" (exit 4) rather than "not running" (exit 3), then the real answer.
#[tokio::test]
async fn a_starting_daemon_says_so_on_its_control_socket() {
    let Some(docker) = docker_or_skip("starting_daemon").await else { return };
    image_present(&docker).await;
    let (leftovers, reaper) = network_of_a_predecessor(&docker, "starting", 3).await;
    let llm = ScriptedLlm::start(vec![]).await;
    let ws = TempWorkspace::init("nxw-starting");
    let mut env = base_env(&llm.base_url());
    env.extend(leftovers.env());
    env.extend(test_image());
    let daemon = nexbot_tests::daemon::Daemon::spawn(common::NEXBOT, &ws.config(), env);
    let mut seen = Vec::new();
    let start = std::time::Instant::now();
    loop {
        let ran = common::ctl(&ws, &["health"], "").await;
        if seen.last().map(|(code, _)| code) != Some(&ran.code) {
            seen.push((ran.code, ran.stderr.clone()));
        }
        if ran.code == Some(0) {
            break;
        }
        assert!(start.elapsed() < LIMIT, "never healthy: {seen:?}\n{}", daemon.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let starting = seen.iter().find(|(code, _)| *code == Some(4));
    let (_, said) = starting.unwrap_or_else(|| panic!("never \"starting\": {seen:?}"));
    assert!(said.contains("daemon is starting"), "{said}");
    // Once the socket answered, it never said "not running" again.
    let first = seen.iter().position(|(code, _)| *code == Some(4)).unwrap();
    assert!(seen[first..].iter().all(|(code, _)| *code != Some(3)), "{seen:?}");
    assert!(daemon.log().contains("trying again"), "the start did wait: {}", daemon.log());
    reaper.join().unwrap().unwrap();
    daemon.stop(LIMIT).await;
    drop(leftovers);
}
