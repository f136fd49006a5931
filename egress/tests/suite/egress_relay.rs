//! The LLM relay against the scripted OpenAI-compatible server: per-task tokens, the provider
//! key added on the way out (and nowhere else), usage counted per task, budgets enforced,
//! streaming passed through as it arrives, and OpenAI-style errors for every refusal.

use nexbot_tests::egress as egress_support;

use std::sync::{Arc, Mutex};

use egress_support::{start_relay, Started, WAIT};
use nexbot_egress::EgressConfig;
use nexbot_tests::scripted_llm::{ScriptedLlm, Step};
use secrecy::ExposeSecret;
use serde_json::{json, Value};

const KEY: &str = "sk-nxe-PLANTED-provider-key-0123456789";

/// The `max_tokens` the relay adds in these tests (small, so budgets of 1000 fit a call).
const DEFAULT_MAX: u64 = 100;

fn relay_config(base_url: &str) -> EgressConfig {
    let mut config = EgressConfig::default();
    config.relay.provider_base_url = Some(base_url.to_owned());
    config.relay.default_max_tokens = DEFAULT_MAX;
    config
}

async fn chat(started: &Started, token: Option<&str>, body: Value) -> (u16, Value) {
    let url = format!("{}/chat/completions", started.egress.relay_base_url());
    let mut request = reqwest::Client::new().post(url).json(&body).timeout(WAIT);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn ask() -> Value {
    json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
}

#[tokio::test]
async fn a_tasks_calls_go_out_with_the_provider_key_and_are_counted() {
    let llm = ScriptedLlm::start(vec![Step::text("one"), Step::text("two")]).await;
    let started = start_relay(relay_config(&llm.base_url()), Some(KEY)).await;
    let tokens = started.egress.tokens();
    let token = tokens.issue("task-a", 1000).unwrap();

    let (status, body) = chat(&started, Some(token.expose_secret()), ask()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], "one");
    assert_eq!(tokens.usage("task-a").unwrap().used, 15);

    let recorded = llm.chat_requests();
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].header("authorization"), Some(format!("Bearer {KEY}").as_str()));
    assert!(!recorded[0].to_text().contains(token.expose_secret()), "the task token stays home");
    assert_eq!(recorded[0].body["messages"][0]["content"], "hi");

    // The same call sent through the proxy (a client ignoring NO_PROXY) still reaches the relay.
    let via_proxy = started
        .proxy_client()
        .post(format!("{}/chat/completions", started.egress.relay_base_url()))
        .bearer_auth(token.expose_secret())
        .json(&ask())
        .send()
        .await
        .unwrap();
    assert_eq!(via_proxy.status(), 200);
    assert_eq!(tokens.usage("task-a").unwrap().used, 30);

    let lines = started.audit_lines(2).await;
    for line in &lines {
        assert_eq!(line["kind"], "relay");
        assert_eq!(line["task_id"], "task-a");
        assert_eq!(line["verdict"], "allowed");
        assert_eq!(line["tokens"], 15);
        assert_eq!(line["host"], "127.0.0.1");
    }
    let metrics = started.egress.metrics();
    assert_eq!((metrics.relay_calls, metrics.relay_tokens), (2, 30));
}

#[tokio::test]
async fn wrong_missing_and_finished_tokens_are_refused_with_openai_errors() {
    let llm = ScriptedLlm::start(vec![Step::text("only once")]).await;
    let started = start_relay(relay_config(&llm.base_url()), Some(KEY)).await;
    let tokens = started.egress.tokens();
    let token = tokens.issue("task-b", 1000).unwrap();
    let other = tokens.issue("task-c", 1000).unwrap();

    let (status, body) = chat(&started, Some(token.expose_secret()), ask()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(tokens.revoke("task-b").unwrap().used, 15);

    let forged = format!("{}x", other.expose_secret());
    for presented in
        [None, Some("nxr_guess"), Some(KEY), Some(forged.as_str()), Some(token.expose_secret())]
    {
        let (status, body) = chat(&started, presented, ask()).await;
        assert_eq!(status, 401, "{presented:?}: {body}");
        assert_eq!(body["error"]["code"], "invalid_api_key");
        assert_eq!(body["error"]["type"], "invalid_request_error");
        assert!(body["error"]["message"].as_str().unwrap().contains("relay token"));
    }
    assert_eq!(llm.chat_requests().len(), 1, "no refused call reached the provider");
    let lines = started.audit_lines(6).await;
    assert!(lines[1..].iter().all(|l| l["verdict"] == "denied"));
    assert_eq!(started.egress.metrics().relay_refused, 5);
}

#[tokio::test]
async fn calls_beyond_the_budget_are_refused() {
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(|_| Step::text("ok"));
    let started = start_relay(relay_config(&llm.base_url()), Some(KEY)).await;
    let tokens = started.egress.tokens();
    // A call's worst case: its prompt estimate plus the max_tokens the relay added.
    let worst = worst_case(&ask(), DEFAULT_MAX);
    // Room for two calls' worst case after one answer's 15 tokens, not for a third.
    let budget = 15 + worst + 14;
    let token = tokens.issue("task-d", budget).unwrap();

    assert_eq!(chat(&started, Some(token.expose_secret()), ask()).await.0, 200);
    assert_eq!(chat(&started, Some(token.expose_secret()), ask()).await.0, 200);
    assert_eq!(tokens.usage("task-d").unwrap().used, 30);
    let (status, body) = chat(&started, Some(token.expose_secret()), ask()).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["type"], "insufficient_quota");
    assert_eq!(body["error"]["code"], "task_budget_exhausted");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains(&format!("cap of {budget} LLM tokens of task task-d")), "{message}");
    assert!(
        message.contains(&format!(
            "30 used, 0 reserved by calls in flight, this call needs up to {worst}"
        )),
        "{message}"
    );
    assert!(message.contains(&format!("max_tokens is {DEFAULT_MAX}")), "{message}");
    assert_eq!(llm.chat_requests().len(), 2);
    let sent = &llm.chat_requests()[0].body;
    assert_eq!(sent["max_tokens"], DEFAULT_MAX, "the relay bounded the call: {sent}");

    // A smaller max_tokens fits what is left; a spent budget is refused before the body.
    let mut small = ask();
    small["max_tokens"] = json!(5);
    assert_eq!(chat(&started, Some(token.expose_secret()), small).await.0, 200);
    tokens.charge("task-d", budget);
    let (status, body) = chat(&started, Some(token.expose_secret()), ask()).await;
    assert_eq!(status, 403, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains(&format!("of its {budget}")));
    assert_eq!(llm.chat_requests().len(), 3);
    let line = &started.audit_lines(5).await[2];
    assert_eq!(
        (line["task_id"].as_str(), line["verdict"].as_str()),
        (Some("task-d"), Some("denied"))
    );
}

/// What the relay reserves for `body` (sent as `reqwest` serialises it): the bytes ÷ 3
/// estimate of the body it forwards, plus its max_tokens (`added` when the body has none).
fn worst_case(body: &Value, added: u64) -> u64 {
    let mut forwarded = body.clone();
    let max = match body.get("max_tokens").and_then(Value::as_u64) {
        Some(max) => max,
        None => {
            forwarded["max_tokens"] = json!(added);
            added
        }
    };
    let bytes = serde_json::to_vec(&forwarded).unwrap().len() as u64;
    bytes.div_ceil(3) + max
}

#[tokio::test]
async fn concurrent_calls_at_the_edge_of_the_budget_pass_only_as_far_as_it_holds() {
    let llm = ScriptedLlm::start(vec![]).await;
    // Slow answers: the calls are in flight together.
    llm.set_responder(|_| Step::text("slow").delayed(std::time::Duration::from_millis(1500)));
    let started = start_relay(relay_config(&llm.base_url()), Some(KEY)).await;
    let tokens = started.egress.tokens();
    let mut body = ask();
    body["max_tokens"] = json!(300);
    let worst = worst_case(&body, DEFAULT_MAX);
    // Exactly three worst cases: the third fits to the token, the fourth does not.
    let token = tokens.issue("task-edge", 3 * worst).unwrap();
    let calls = (0..4).map(|_| chat(&started, Some(token.expose_secret()), body.clone()));
    let answers = futures_util::future::join_all(calls).await;
    let passed = answers.iter().filter(|(status, _)| *status == 200).count();
    let refused: Vec<&Value> =
        answers.iter().filter(|(status, _)| *status == 403).map(|(_, body)| body).collect();
    assert_eq!((passed, refused.len()), (3, 1), "{answers:?}");
    assert_eq!(refused[0]["error"]["code"], "task_budget_exhausted");
    let message = refused[0]["error"]["message"].as_str().unwrap();
    assert!(message.contains(&format!("{} reserved by calls in flight", 3 * worst)), "{message}");
    assert_eq!(llm.chat_requests().len(), 3, "the refused call was never sent upstream");
    assert_eq!(tokens.usage("task-edge").unwrap().used, 45, "settled at what was reported");
    assert_eq!(tokens.reserved("task-edge"), Some(0));
}

#[tokio::test]
async fn a_call_in_flight_when_its_task_ends_is_charged_its_reservation() {
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(|_| Step::text("late").delayed(std::time::Duration::from_secs(3)));
    let started = start_relay(relay_config(&llm.base_url()), Some(KEY)).await;
    let token = started.egress.issue_token("t-1").unwrap();
    let worst = worst_case(&ask(), DEFAULT_MAX);
    let call = tokio::spawn({
        let url = format!("{}/chat/completions", started.egress.relay_base_url());
        let token = token.expose_secret().to_owned();
        async move {
            reqwest::Client::new()
                .post(url)
                .bearer_auth(token)
                .json(&ask())
                .timeout(WAIT)
                .send()
                .await
        }
    });
    let deadline = tokio::time::Instant::now() + WAIT;
    while llm.chat_requests().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "the call never reached the provider");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let ended = std::time::Instant::now();
    let finished = started.egress.finish_task("t-1");
    assert_eq!(finished.usage.map(|u| u.used), Some(worst), "the call in flight is charged");
    // The call is cut with its task, not left waiting for the provider.
    let response = call.await.unwrap().unwrap();
    assert!(ended.elapsed() < std::time::Duration::from_secs(2), "cut at once");
    assert_eq!(response.status(), 403);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "task_ended", "{body}");
    let line = &started.audit_lines(1).await[0];
    assert_eq!(line["tokens"], worst, "{line}");
}

#[tokio::test]
async fn n_other_than_one_and_bad_max_tokens_are_refused_unsent() {
    let llm = ScriptedLlm::start(vec![Step::text("one")]).await;
    let started = start_relay(relay_config(&llm.base_url()), Some(KEY)).await;
    let token = started.egress.tokens().issue("task-n", 100_000).unwrap();
    let mut body = ask();
    body["n"] = json!(3);
    let (status, answer) = chat(&started, Some(token.expose_secret()), body).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["code"], "unsupported_parameter");
    assert!(answer["error"]["message"].as_str().unwrap().contains("n must be 1"));
    let mut body = ask();
    body["max_completion_tokens"] = json!("lots");
    let (status, answer) = chat(&started, Some(token.expose_secret()), body).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["code"], "invalid_max_tokens");
    assert!(llm.chat_requests().is_empty());
    let mut body = ask();
    body["n"] = json!(1);
    body["max_completion_tokens"] = json!(50);
    assert_eq!(chat(&started, Some(token.expose_secret()), body).await.0, 200);
    let sent = &llm.chat_requests()[0].body;
    assert_eq!(sent["max_completion_tokens"], 50);
    assert!(sent.get("max_tokens").is_none(), "a given bound is not doubled: {sent}");
}

#[tokio::test]
async fn provider_errors_pass_through_uncharged_and_an_unreachable_provider_is_a_502() {
    let llm = ScriptedLlm::start(vec![
        Step::Status {
            code: 429,
            headers: vec![("Retry-After".into(), "7".into()), ("Set-Cookie".into(), "s=1".into())],
            body: r#"{"error":{"message":"slow down"}}"#.into(),
        },
        Step::Malformed("{not json".into()),
    ])
    .await;
    let started = start_relay(relay_config(&llm.base_url()), Some(KEY)).await;
    let tokens = started.egress.tokens();
    let token = tokens.issue("task-e", 1000).unwrap();
    let url = format!("{}/chat/completions", started.egress.relay_base_url());
    let response = reqwest::Client::new()
        .post(&url)
        .bearer_auth(token.expose_secret())
        .json(&ask())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "7");
    assert!(response.headers().get("set-cookie").is_none());
    assert_eq!(tokens.usage("task-e").unwrap().used, 0, "errors are not charged");

    // 200 without usage: charged by estimate, so a provider omitting usage cannot lift budgets.
    let (status, _) = chat(&started, Some(token.expose_secret()), ask()).await;
    assert_eq!(status, 200);
    assert!(tokens.usage("task-e").unwrap().used > 0);

    let down = start_relay(relay_config("http://127.0.0.1:9/v1"), Some(KEY)).await;
    let token = down.egress.tokens().issue("task-f", 1000).unwrap();
    let (status, body) = chat(&down, Some(token.expose_secret()), ask()).await;
    assert_eq!(status, 502, "{body}");
    assert_eq!(body["error"]["code"], "provider_unreachable");
    assert_eq!(down.audit_lines(1).await[0]["verdict"], "error");
}

#[tokio::test]
async fn bad_bodies_unknown_paths_and_a_missing_provider_get_clear_errors() {
    let llm = ScriptedLlm::start(vec![]).await;
    let mut config = relay_config(&llm.base_url());
    config.relay.max_request_bytes = 1024;
    let started = start_relay(config, Some(KEY)).await;
    let token = started.egress.tokens().issue("task-g", 1000).unwrap();
    let client = reqwest::Client::new();
    let base = started.egress.relay_base_url();

    let send = |body: String| {
        client
            .post(format!("{base}/chat/completions"))
            .bearer_auth(token.expose_secret())
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let response = send("x".repeat(5000)).await.unwrap();
    assert_eq!(response.status(), 413);
    let response = send("[1, 2]".into()).await.unwrap();
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains("JSON object"));
    let response = client.get(format!("{base}/files")).send().await.unwrap();
    assert_eq!(response.status(), 404);
    assert_eq!(llm.requests().len(), 0);

    let unconfigured = start_relay(EgressConfig::default(), None).await;
    let token = unconfigured.egress.tokens().issue("task-h", 1000).unwrap();
    let (status, body) = chat(&unconfigured, Some(token.expose_secret()), ask()).await;
    assert_eq!(status, 503);
    assert_eq!(body["error"]["code"], "relay_not_configured");
}

#[tokio::test]
async fn models_are_listed_for_a_valid_token_only() {
    let llm = ScriptedLlm::start(vec![]).await;
    let started = start_relay(relay_config(&llm.base_url()), Some(KEY)).await;
    let token = started.egress.tokens().issue("task-i", 1000).unwrap();
    let url = format!("{}/models", started.egress.relay_base_url());
    let client = reqwest::Client::new();
    let listed: Value = client
        .get(&url)
        .bearer_auth(token.expose_secret())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["data"][0]["id"], "scripted");
    assert_eq!(client.get(&url).send().await.unwrap().status(), 401);
    let recorded = llm.requests();
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].path, "/v1/models");
    assert_eq!(recorded[0].header("authorization"), Some(format!("Bearer {KEY}").as_str()));
}

/// A provider that streams SSE chunk by chunk under the test's control, so the test can prove
/// the relay hands each chunk on before the provider sends the next.
async fn gated_sse_provider() -> (String, tokio::sync::mpsc::Sender<String>, Arc<Mutex<Vec<Value>>>)
{
    use axum::body::Body;
    use futures_util::StreamExt;
    let (tx, rx) = tokio::sync::mpsc::channel::<String>(4);
    let rx = Arc::new(Mutex::new(Some(rx)));
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let seen = bodies.clone();
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
            let rx = rx.lock().unwrap().take().expect("one streamed call");
            seen.lock().unwrap().push(body);
            async move {
                let chunks = tokio_stream_from(rx).map(Ok::<_, std::convert::Infallible>);
                ([("content-type", "text/event-stream")], Body::from_stream(chunks))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}/v1"), tx, bodies)
}

fn tokio_stream_from(
    mut rx: tokio::sync::mpsc::Receiver<String>,
) -> impl futures_util::Stream<Item = String> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[tokio::test]
async fn streamed_answers_pass_through_chunk_by_chunk_and_are_counted() {
    let (base, provider, bodies) = gated_sse_provider().await;
    let started = start_relay(relay_config(&base), Some(KEY)).await;
    let tokens = started.egress.tokens();
    let token = tokens.issue("task-s", 1000).unwrap();

    let mut body = ask();
    body["stream"] = json!(true);
    let mut response = reqwest::Client::new()
        .post(format!("{}/chat/completions", started.egress.relay_base_url()))
        .bearer_auth(token.expose_secret())
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");

    let first = "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n".to_owned();
    provider.send(first.clone()).await.unwrap();
    // The provider has not sent anything else yet: this chunk can only arrive if the relay
    // streams instead of buffering.
    let got =
        tokio::time::timeout(WAIT, response.chunk()).await.expect("first chunk streamed").unwrap();
    assert_eq!(got.as_deref(), Some(first.as_bytes()));

    let last = "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":20,\"completion_tokens\":3,\"total_tokens\":23}}\n\ndata: [DONE]\n\n";
    provider.send(last.to_owned()).await.unwrap();
    drop(provider);
    let mut rest = Vec::new();
    while let Some(chunk) = tokio::time::timeout(WAIT, response.chunk()).await.unwrap().unwrap() {
        rest.extend_from_slice(&chunk);
    }
    assert_eq!(String::from_utf8(rest).unwrap(), last);

    let line = &started.audit_lines(1).await[0];
    assert_eq!(line["tokens"], 23);
    assert_eq!(tokens.usage("task-s").unwrap().used, 23);
    let sent = bodies.lock().unwrap()[0].clone();
    assert_eq!(sent["stream_options"]["include_usage"], true, "usage asked for: {sent}");
}

/// A task's call reaches the provider as a plain function-calling chat request with the model
/// the operator chose: another model (say the provider's most expensive) is replaced, and
/// provider-side tools, web search options, plugins, `user` and vendor extensions are
/// dropped, so a task cannot make the provider search, fetch or bill features on its own.
/// Before, the container's body went out as it was.
#[tokio::test]
async fn a_call_goes_out_as_a_plain_chat_request_with_the_operators_model() {
    let llm = ScriptedLlm::start(vec![Step::text("one"), Step::text("two")]).await;
    let mut config = relay_config(&llm.base_url());
    config.relay.models = vec!["sub-model".into(), "sub-model-mini".into()];
    let started = start_relay(config, Some(KEY)).await;
    let token = started.egress.tokens().issue("task-a", 10_000).unwrap();
    let function = json!({"type": "function", "function": {"name": "f", "parameters": {}}});
    let call = json!({
        "model": "gpt-5-pro-most-expensive",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [function, {"type": "web_search_preview"}, {"type": "code_interpreter"}],
        "web_search_options": {"search_context_size": "high"},
        "plugins": [{"id": "web"}],
        "user": "someone",
        "extra_body": {"x": 1},
        "temperature": 0.2
    });
    let (status, body) = chat(&started, Some(token.expose_secret()), call).await;
    assert_eq!(status, 200, "{body}");
    let (status, _) = chat(
        &started,
        Some(token.expose_secret()),
        json!({"model": "sub-model-mini", "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(status, 200);
    let recorded = llm.chat_requests();
    let sent = recorded[0].body.as_object().unwrap();
    assert_eq!(sent["model"], "sub-model", "the first allowed model, not the container's");
    for dropped in ["web_search_options", "plugins", "user", "extra_body"] {
        assert!(!sent.contains_key(dropped), "{dropped} went out: {sent:?}");
    }
    assert_eq!(sent["tools"], json!([function]), "only function tools");
    assert_eq!(sent["temperature"], 0.2);
    assert_eq!(recorded[1].body["model"], "sub-model-mini", "an allowed model stays");
}
