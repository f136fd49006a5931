//! `search_web` end to end: `nexbot chat` with the real pool and egress, the scripted model
//! asking a subagent to search, and a local fake search backend — first a SearXNG-style JSON
//! API, then a Brave-style one whose API key is an operator secret of the vault: the proxy
//! fills it in for the backend's host, and neither the container nor the model ever has it.

use crate::common;
use crate::egress_support;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{base_env, is_main, tool_results, ChatSession, Leftovers, TempWorkspace};
use egress_support::docker::host_address_off_network;
use nexbot_host::store::Store;
use nexbot_host::vault::{SecretScope, Vault};
use nexbot_tests::docker_or_skip;
use nexbot_tests::scripted_llm::{ScriptedLlm, Step};
use secrecy::SecretString;
use serde_json::{json, Value};

const KEY: &str = "brave-PLANTED-operator-key-31c7e9";
const MASTER: &str = "nxs-search-master-key-0123456789ab";
const LIMIT: Duration = Duration::from_secs(120);

/// What the fake backend was asked: (path and query, the key header).
type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// A search backend on the host's outside address answering in `kind`'s format.
async fn backend(kind: &'static str) -> (SocketAddr, Seen) {
    let seen: Seen = Arc::default();
    let record = seen.clone();
    let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
        let record = record.clone();
        async move {
            let target = req.uri().path_and_query().map_or("/", |p| p.as_str()).to_owned();
            let key = req
                .headers()
                .get("x-subscription-token")
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
            record.lock().unwrap().push((target, key));
            let results = json!([
                {"title": "Tokio tutorial", "url": "https://tokio.rs/tokio/tutorial",
                 "content": "Learn async Rust", "description": "Learn <strong>async</strong> Rust"},
                {"title": "Rust book", "url": "https://doc.rust-lang.org/book/",
                 "content": "The book", "description": "The book"}
            ]);
            let body = match kind {
                "brave" => json!({"web": {"results": results}}),
                _ => json!({"results": results}),
            };
            axum::Json(body)
        }
    });
    let listener = tokio::net::TcpListener::bind((host_address_off_network(), 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (addr, seen)
}

fn responder(body: &Value) -> Step {
    if is_main(body) {
        return match tool_results(body) {
            0 => Step::tool_call(
                "delegate_to_sub_agent",
                json!({"task": "search the web for tokio", "tools": ["search_web"]}),
            ),
            _ => Step::text("searched"),
        };
    }
    match tool_results(body) {
        0 => Step::tool_call("search_web", json!({"query": "tokio tutorial", "max_results": 2})),
        _ => Step::text("found it"),
    }
}

/// One chat that searches once; returns what the subagent's model got back from the tool,
/// every request the model received (as text), and the chat's logs.
async fn search_once(
    env: Vec<(String, String)>,
    ws: &TempWorkspace,
) -> (String, Vec<String>, String) {
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(responder);
    let mut env = env;
    env.extend(base_env(&llm.base_url()));
    env.push(("NEXBOT_SUBAGENT__ENABLED".into(), "true".into()));
    env.push(("NEXBOT_LLM__TIMEOUT_SECS".into(), "30".into()));
    env.push(("RUST_LOG".into(), "debug".into()));
    let mut session = ChatSession::start(&ws.config(), &env);
    session.say("search please").await;
    assert_eq!(session.answer(LIMIT).await, "searched");
    let (status, rest, stderr) = session.finish(LIMIT).await;
    assert!(status.success(), "{rest}\n{stderr}");
    let requests = llm.chat_requests();
    let answered = requests
        .iter()
        .find(|r| !is_main(&r.body) && tool_results(&r.body) == 1)
        .expect("the subagent's model got the search results");
    let result = answered.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned();
    (result, requests.iter().map(|r| r.to_text()).collect(), stderr)
}

fn allow(addr: SocketAddr) -> (String, String) {
    let value = format!(r#"[{{ cidr = "{}/32", ports = [{}] }}]"#, addr.ip(), addr.port());
    ("NEXBOT_EGRESS__PROXY__ALLOW_INTERNAL".into(), value)
}

#[tokio::test]
async fn search_web_queries_the_operators_backend_through_the_proxy() {
    let Some(_docker) = docker_or_skip("search_web").await else { return };

    // SearXNG: `q` and `format=json`, results as title, URL, snippet.
    let leftovers = Leftovers::new("search1");
    let (searxng, searxng_seen) = backend("searxng").await;
    let ws = TempWorkspace::init("nxw-search1");
    let mut env = leftovers.env();
    env.push(("NEXBOT_SEARCH__URL".into(), format!("http://{searxng}/search")));
    env.push(allow(searxng));
    let (result, _, _) = search_once(env, &ws).await;
    let seen = searxng_seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen[0].0.starts_with("/search?q=tokio+tutorial&format=json"), "{seen:?}");
    assert!(result.contains("2 results for \"tokio tutorial\""), "{result}");
    assert!(
        result.contains("1. Tokio tutorial") && result.contains("https://tokio.rs/tokio/tutorial")
    );
    assert!(result.contains("Learn async Rust"), "{result}");
    drop(leftovers);

    // Brave: the operator's key, bound to the backend's host, filled in by the proxy.
    let leftovers = Leftovers::new("search2");
    let (brave, brave_seen) = backend("brave").await;
    let ws = TempWorkspace::init("nxw-search2");
    {
        let store = Store::open(&ws.database()).await.unwrap();
        let master = SecretString::from(MASTER.to_owned());
        let vault = Vault::open(store, Some(&master), None).await.unwrap();
        let key = SecretString::from(KEY.to_owned());
        let hosts = [format!("http://{brave}")];
        let places = ["header:x-subscription-token".to_owned()];
        vault.set(&SecretScope::Operator, "BRAVE_KEY", key, &hosts, &places, None).await.unwrap();
    }
    let mut env = leftovers.env();
    env.push(("NEXBOT_MASTER_KEY".into(), MASTER.into()));
    env.push(("NEXBOT_SEARCH__KIND".into(), "brave".into()));
    env.push(("NEXBOT_SEARCH__URL".into(), format!("http://{brave}/res/v1/web/search")));
    env.push(("NEXBOT_SEARCH__API_KEY_SECRET".into(), "BRAVE_KEY".into()));
    env.push(allow(brave));
    let (result, requests, stderr) = search_once(env, &ws).await;
    let seen = brave_seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen[0].0.contains("q=tokio+tutorial&count=2"), "{seen:?}");
    assert_eq!(seen[0].1.as_deref(), Some(KEY), "the proxy filled the key in");
    assert!(
        result.contains("1. Tokio tutorial") && result.contains("Learn async Rust"),
        "{result}"
    );
    for request in &requests {
        assert!(!request.contains(KEY), "the operator's key reached the model: {request}");
    }
    assert!(stderr.contains("DEBUG") && !stderr.contains(KEY), "the key in the logs");
}
