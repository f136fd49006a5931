//! The relay's provider chain: a call the primary fails (5xx, 429, 401, no quota, or no
//! connection at all) is answered by the next provider, with that provider's key and model,
//! before anything reaches the container; a call the primary refuses as wrong is not sent
//! elsewhere; a primary that keeps failing is skipped; and who answered is in the audit line,
//! the metrics and the task's summary.

use nexbot_tests::egress as egress_support;

use egress_support::{start_with_keys, Started, WAIT};
use nexbot_egress::{EgressConfig, TaskCost};
use nexbot_llm::ProviderSpec;
use nexbot_tests::scripted_llm::{ScriptedLlm, Step};
use secrecy::ExposeSecret;
use serde_json::{json, Value};

const KEY_A: &str = "sk-nxe-PRIMARY-key-0123456789abcdef";
const KEY_B: &str = "sk-nxe-SECONDARY-key-fedcba9876543210";

fn spec(name: &str, base_url: &str, model: &str, env: &str) -> ProviderSpec {
    let mut spec = ProviderSpec::new(base_url, model);
    spec.name = Some(name.into());
    spec.api_key_env = Some(env.into());
    spec
}

fn chain_config(primary: &str, secondary: &str) -> EgressConfig {
    let mut config = EgressConfig::default();
    config.relay.providers = vec![
        spec("alpha", primary, "model-a", "NXE_KEY_A"),
        spec("beta", secondary, "model-b", "NXE_KEY_B"),
    ];
    config.relay.default_max_tokens = 100;
    // What the daemon sets from `subagent.llm_model`: the model a call may name.
    config.relay.models = vec!["sub-model".into()];
    config
}

async fn start_chain(primary: &str, secondary: &str) -> Started {
    start_with_keys(chain_config(primary, secondary), &[("NXE_KEY_A", KEY_A), ("NXE_KEY_B", KEY_B)])
        .await
}

async fn chat(started: &Started, token: &str) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{}/chat/completions", started.egress.relay_base_url()))
        .bearer_auth(token)
        .json(&json!({"model": "sub-model", "messages": [{"role": "user", "content": "hi"}]}))
        .timeout(WAIT)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn host_port(llm: &ScriptedLlm) -> (String, u16) {
    (llm.addr().ip().to_string(), llm.addr().port())
}

#[tokio::test]
async fn a_failing_primary_is_replaced_by_the_secondary_with_its_own_key_and_model() {
    let primary = ScriptedLlm::start(vec![
        Step::status(500, r#"{"error":{"message":"internal error"}}"#),
        Step::Status {
            code: 429,
            headers: vec![("Retry-After".into(), "30".into())],
            body: r#"{"error":{"message":"rate limited, slow down"}}"#.into(),
        },
        Step::status(401, r#"{"error":{"message":"invalid api key"}}"#),
        Step::status(429, r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota"}}"#),
    ])
    .await;
    let secondary = ScriptedLlm::start(vec![]).await;
    secondary.set_responder(|_| Step::text("from the secondary"));
    let started = start_chain(&primary.base_url(), &secondary.base_url()).await;
    let tokens = started.egress.tokens();
    let token = tokens.issue("t-1", 100_000).unwrap();

    for failure in ["500", "429", "401", "quota"] {
        let (status, body) = chat(&started, token.expose_secret()).await;
        assert_eq!(status, 200, "primary {failure}: {body}");
        assert_eq!(body["choices"][0]["message"]["content"], "from the secondary", "{failure}");
    }
    let tried = primary.chat_requests();
    assert_eq!(tried.len(), 4, "one attempt per call at the primary");
    for request in &tried {
        assert_eq!(request.header("authorization"), Some(format!("Bearer {KEY_A}").as_str()));
        assert_eq!(request.body["model"], "sub-model", "the primary gets the container's model");
    }
    let answered = secondary.chat_requests();
    assert_eq!(answered.len(), 4);
    for request in &answered {
        assert_eq!(request.header("authorization"), Some(format!("Bearer {KEY_B}").as_str()));
        assert_eq!(request.body["model"], "model-b", "a fallback gets its own model");
        assert_eq!(request.body["messages"][0]["content"], "hi");
        assert!(!request.to_text().contains(KEY_A), "the primary's key stays with the primary");
    }
    assert_eq!(tokens.usage("t-1").unwrap().used, 60, "only the answers are charged");

    let lines = started.audit_lines(4).await;
    let (host, port) = host_port(&secondary);
    for line in &lines {
        assert_eq!(line["provider"], "beta", "{line}");
        assert_eq!(line["fallback"], true);
        assert_eq!(
            (line["host"].as_str(), line["port"].as_u64()),
            (Some(host.as_str()), Some(u64::from(port)))
        );
        assert!(line["reason"].as_str().unwrap().contains("after alpha: "), "{line}");
    }
    assert!(lines[0]["reason"].as_str().unwrap().contains("overloaded (HTTP 500)"));
    assert!(lines[2]["reason"].as_str().unwrap().contains("auth (HTTP 401)"));
    assert_eq!(started.egress.metrics().relay_fallbacks, 4);
    let summary = started.egress.finish_task("t-1").egress;
    assert_eq!(summary.llm_providers.get("beta"), Some(&4), "{summary:#?}");
    assert_eq!(summary.llm_fallbacks, 4);
    assert_eq!(summary.destinations[&format!("{host}:{port}")].allowed, 4);
}

#[tokio::test]
async fn an_unreachable_primary_is_replaced_by_the_secondary() {
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let secondary = ScriptedLlm::start(vec![Step::text("reached")]).await;
    let started = start_chain(&format!("http://{closed}/v1"), &secondary.base_url()).await;
    let token = started.egress.tokens().issue("t-1", 100_000).unwrap();
    let (status, body) = chat(&started, token.expose_secret()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], "reached");
    let request = &secondary.chat_requests()[0];
    assert_eq!(request.header("authorization"), Some(format!("Bearer {KEY_B}").as_str()));
    assert_eq!(request.body["model"], "model-b");
    let line = &started.audit_lines(1).await[0];
    assert_eq!(line["provider"], "beta");
    assert!(line["reason"].as_str().unwrap().contains("alpha: cannot be reached"), "{line}");
}

#[tokio::test]
async fn a_wrong_request_is_not_retried_elsewhere_and_when_all_fail_the_last_answer_counts() {
    let primary = ScriptedLlm::start(vec![
        Step::status(400, r#"{"error":{"message":"unknown parameter: frobnicate"}}"#),
        Step::status(503, r#"{"error":{"message":"primary down"}}"#),
    ])
    .await;
    let secondary = ScriptedLlm::start(vec![Step::Status {
        code: 429,
        headers: vec![("Retry-After".into(), "9".into())],
        body: r#"{"error":{"message":"secondary busy"}}"#.into(),
    }])
    .await;
    let started = start_chain(&primary.base_url(), &secondary.base_url()).await;
    let tokens = started.egress.tokens();
    let token = tokens.issue("t-1", 100_000).unwrap();

    let (status, body) = chat(&started, token.expose_secret()).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["message"], "unknown parameter: frobnicate");
    assert!(
        secondary.chat_requests().is_empty(),
        "a bad request is the caller's, not the provider's"
    );

    let response = reqwest::Client::new()
        .post(format!("{}/chat/completions", started.egress.relay_base_url()))
        .bearer_auth(token.expose_secret())
        .json(&json!({"model": "m", "messages": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429, "the last provider's answer");
    assert_eq!(response.headers()["retry-after"], "9");
    assert_eq!(response.json::<Value>().await.unwrap()["error"]["message"], "secondary busy");
    assert_eq!(tokens.usage("t-1").unwrap().used, 0, "errors are not charged");
    assert_eq!(tokens.reserved("t-1"), Some(0));
}

#[tokio::test]
async fn a_primary_that_keeps_failing_is_skipped_until_its_breaker_cools_down() {
    let primary = ScriptedLlm::start(vec![]).await;
    primary.set_responder(|_| Step::status(502, r#"{"error":{"message":"bad gateway"}}"#));
    let secondary = ScriptedLlm::start(vec![]).await;
    secondary.set_responder(|_| Step::text("steady"));
    let started = start_chain(&primary.base_url(), &secondary.base_url()).await;
    let token = started.egress.tokens().issue("t-1", 1_000_000).unwrap();
    for _ in 0..7 {
        let (status, body) = chat(&started, token.expose_secret()).await;
        assert_eq!(
            (status, body["choices"][0]["message"]["content"].as_str()),
            (200, Some("steady"))
        );
    }
    // Five failures in a row open the primary's breaker: the sixth and seventh calls go to
    // the secondary first, and the primary is not asked again.
    assert_eq!(primary.chat_requests().len(), 5);
    assert_eq!(secondary.chat_requests().len(), 7);
    let lines = started.audit_lines(7).await;
    assert!(lines.iter().all(|l| l["provider"] == "beta"));
    let fallbacks =
        lines.iter().filter(|l| l["reason"].as_str().unwrap().contains("after alpha")).count();
    assert_eq!(fallbacks, 5, "the last two never tried the primary");
}

#[tokio::test]
async fn when_the_fallback_is_unreachable_the_primarys_own_answer_goes_back() {
    let primary = ScriptedLlm::start(vec![Step::Status {
        code: 503,
        headers: vec![("Retry-After".into(), "4".into())],
        body: r#"{"error":{"message":"primary overloaded"}}"#.into(),
    }])
    .await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let started = start_chain(&primary.base_url(), &format!("http://{closed}/v1")).await;
    let token = started.egress.tokens().issue("t-1", 100_000).unwrap();
    let (status, body) = chat(&started, token.expose_secret()).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["message"], "primary overloaded");
    let line = &started.audit_lines(1).await[0];
    assert_eq!(line["provider"], "alpha");
    assert!(line.get("fallback").is_none(), "{line}");
    assert_eq!(line["reason"], "status 503 from alpha after beta: cannot be reached");
    assert_eq!(line["tokens"], 0);
}

/// A task's relayed calls are priced by the provider that answered each (its own prices, the
/// usage it reported), so the daemon's cost caps count delegated work in money; a provider
/// without prices is counted as unpriced.
#[tokio::test]
async fn a_tasks_calls_are_priced_by_the_provider_that_answered() {
    let primary = ScriptedLlm::start(vec![Step::text("one"), Step::status(503, "{}")]).await;
    let secondary = ScriptedLlm::start(vec![Step::text("two")]).await;
    let mut config = chain_config(&primary.base_url(), &secondary.base_url());
    // $2 / $10 per million prompt / completion tokens on the primary; none on the secondary.
    config.relay.providers[0].input_price_per_mtok = Some(2.0);
    config.relay.providers[0].output_price_per_mtok = Some(10.0);
    let started = start_with_keys(config, &[("NXE_KEY_A", KEY_A), ("NXE_KEY_B", KEY_B)]).await;
    let tokens = started.egress.tokens();
    let token = tokens.issue("t-1", 10_000).unwrap();
    let (status, body) = chat(&started, token.expose_secret()).await;
    assert_eq!(status, 200, "{body}");
    // The fixture reports 10 prompt + 5 completion tokens: 10 × 2 + 5 × 10 = 70 µ$.
    let (status, _) = chat(&started, token.expose_secret()).await;
    assert_eq!(status, 200, "the unpriced secondary answered the second call");
    let finished = tokens.finish("t-1");
    assert_eq!(finished.usage.unwrap().used, 30);
    assert_eq!(finished.cost, Some(TaskCost { micros: 70, unpriced_calls: 1 }));
}
