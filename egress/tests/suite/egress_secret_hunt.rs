//! The provider key and task tokens are hunted for in everything the egress listener emits:
//! every `tracing` event (captured at TRACE, including hyper's and reqwest's), the audit file,
//! the answers containers get, and `Debug` output. The capture is the process-wide subscriber
//! (the only one this test binary installs), so it also hunts through whatever the other
//! tests of the binary emit while it runs.

use nexbot_tests::egress as egress_support;

use egress_support::{start_relay, start_with_keys, Started, WAIT};
use nexbot_egress::EgressConfig;
use nexbot_llm::ProviderSpec;
use nexbot_tests::scripted_llm::{ScriptedLlm, Step};
use secrecy::ExposeSecret;
use serde_json::{json, Value};

const KEY: &str = "sk-nxe-PLANTED-provider-key-0123456789";
/// The keys of a two-provider chain.
const KEY_A: &str = "sk-nxe-PLANTED-primary-key-abcdef0123";
const KEY_B: &str = "sk-nxe-PLANTED-fallback-key-456789abcd";

fn relay_config(base_url: &str) -> EgressConfig {
    let mut config = EgressConfig::default();
    config.relay.provider_base_url = Some(base_url.to_owned());
    // Small, so the task's budget of 1000 fits a call's worst case.
    config.relay.default_max_tokens = 100;
    config
}

async fn chat(started: &Started, token: Option<&str>, body: Value) -> Value {
    let url = format!("{}/chat/completions", started.egress.relay_base_url());
    let mut request = reqwest::Client::new().post(url).json(&body).timeout(WAIT);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.unwrap().json().await.unwrap_or(Value::Null)
}

fn ask() -> Value {
    json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
}

#[tokio::test]
async fn the_provider_key_appears_in_no_log_audit_line_answer_or_debug_output() {
    let capture = nexbot_tests::LogCapture::default();
    let subscriber = capture.subscriber();
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let llm = ScriptedLlm::start(vec![Step::text("fine"), Step::status(500, "{}")]).await;
    let started = start_relay(relay_config(&llm.base_url()), Some(KEY)).await;
    let token = started.egress.tokens().issue("task-k", 1000).unwrap();
    let mut answers = Vec::new();
    for presented in [Some(token.expose_secret()), Some(token.expose_secret()), Some("bad"), None] {
        answers.push(chat(&started, presented, ask()).await.to_string());
    }
    let mut streamed = ask();
    streamed["stream"] = json!(true);
    answers.push(chat(&started, Some(token.expose_secret()), streamed).await.to_string());
    started.audit_lines(5).await;

    // A chain whose providers echo their keys in their error answers: the primary's 401
    // moves the call on, and the fallback's 500 (the last answer) goes back to the container.
    let primary = ScriptedLlm::start(vec![Step::status(
        401,
        &format!(r#"{{"error":{{"message":"invalid key {KEY_A}"}}}}"#),
    )])
    .await;
    let fallback = ScriptedLlm::start(vec![Step::status(
        500,
        &format!(r#"{{"error":{{"message":"failed for {KEY_B}"}}}}"#),
    )])
    .await;
    let mut config = EgressConfig::default();
    let mut a = ProviderSpec::new(&primary.base_url(), "model-a");
    a.api_key_env = Some("NXE_HUNT_A".into());
    let mut b = ProviderSpec::new(&fallback.base_url(), "model-b");
    b.api_key_env = Some("NXE_HUNT_B".into());
    config.relay.providers = vec![a, b];
    let chained = start_with_keys(config, &[("NXE_HUNT_A", KEY_A), ("NXE_HUNT_B", KEY_B)]).await;
    // The task's egress credential goes through the proxy's admission (allowed, then, once
    // the task ended, refused) and is hunted for like the token.
    let credential = chained.run_task("task-chain");
    let proxy = chained.egress.local_addr();
    assert_eq!(egress_support::connect(proxy, "10.9.9.9:80").await.0, 403, "denied, admitted");
    let chain_token = chained.egress.tokens().issue("task-chain", 1_000_000).unwrap();
    let echoed = chat(&chained, Some(chain_token.expose_secret()), ask()).await;
    assert!(
        echoed["error"]["message"].as_str().unwrap().starts_with("failed for [REDACTED"),
        "{echoed}"
    );
    answers.push(echoed.to_string());
    chained.audit_lines(1).await;
    assert_eq!(
        fallback.chat_requests()[0].header("authorization"),
        Some(format!("Bearer {KEY_B}").as_str())
    );

    chained.egress.finish_task("task-chain");
    let (code, _) =
        egress_support::connect_with(proxy, "10.9.9.9:80", Some(credential.expose_secret())).await;
    assert_eq!(code, 407, "an ended task's credential");
    chained.audit_lines(3).await;

    let logs = capture.text();
    assert!(logs.contains("nexbot::egress::audit"), "the capture works: {logs}");
    let audit = std::fs::read_to_string(started.egress.audit_path()).unwrap()
        + &std::fs::read_to_string(chained.egress.audit_path()).unwrap();
    let debug = format!("{:?} {:?}", started.egress, chained.egress);
    for (place, text) in
        [("logs", &logs), ("audit", &audit), ("debug", &debug), ("answers", &answers.join("\n"))]
    {
        assert!(!text.contains(KEY), "the provider key leaked into {place}");
        assert!(!text.contains(KEY_A) && !text.contains(KEY_B), "a chain key leaked into {place}");
        assert!(!text.contains("PLANTED"), "part of the provider key leaked into {place}");
        assert!(!text.contains(token.expose_secret()), "the task token leaked into {place}");
        assert!(
            !text.contains(&credential.expose_secret()[4..]),
            "the egress credential leaked into {place}"
        );
    }
    assert_eq!(llm.chat_requests().len(), 3);
}
