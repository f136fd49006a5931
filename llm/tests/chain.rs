//! The client against real HTTP servers (the scripted OpenAI-compatible fixture): every way a
//! primary provider fails ends with the secondary's answer, within bounds; breakers open and
//! close; streams that are cut are retried.

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use nexbot_llm::provider::Timeouts;
use nexbot_llm::{
    Chain, ChatMessage, ChatRequest, Completion, ErrorClass, LlmError, Provider, ProviderSpec,
    RetryPolicy, StreamEvent,
};
use nexbot_tests::scripted_llm::{ScriptedLlm, Step};
use secrecy::SecretString;
use tokio_util::sync::CancellationToken;

const CALL_TIMEOUT: Duration = Duration::from_millis(800);

fn policy() -> RetryPolicy {
    RetryPolicy {
        max_retries: 1,
        initial: Duration::from_millis(10),
        max_wait: Duration::from_secs(3),
        total: Duration::from_secs(20),
        breaker_failures: 100,
        breaker_cooldown: Duration::from_secs(1),
    }
}

fn provider(name: &str, llm: &ScriptedLlm, key: &str) -> Provider {
    let mut spec = ProviderSpec::new(&llm.base_url(), &format!("model-{name}"));
    spec.name = Some(name.to_owned());
    let timeouts = Timeouts { connect: CALL_TIMEOUT, call: CALL_TIMEOUT, stall: CALL_TIMEOUT };
    Provider::new(spec, Some(SecretString::from(key.to_owned())), timeouts).unwrap()
}

fn chain(servers: &[(&str, &ScriptedLlm)], policy: RetryPolicy) -> Chain {
    let providers =
        servers.iter().map(|(name, llm)| provider(name, llm, &format!("sk-{name}-key"))).collect();
    Chain::new(providers, policy)
}

async fn ask(chain: &Chain, stream: bool) -> Result<Completion, LlmError> {
    let messages = [ChatMessage::user("hello")];
    let mut request = ChatRequest::new(&messages, &[]);
    request.stream = stream;
    request.max_tokens = Some(100);
    chain.complete(&request, &CancellationToken::new(), &|_| {}).await
}

fn status(code: u16, headers: &[(&str, &str)], body: &str) -> Step {
    Step::Status {
        code,
        headers: headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        body: body.to_owned(),
    }
}

#[tokio::test]
async fn every_primary_failure_is_answered_by_the_secondary() {
    // First in the list: the date is taken now, at one-second resolution.
    let date = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(3));
    // (what, the primary's steps, stream, primary requests expected, at least this long)
    let cases: Vec<(&str, Vec<Step>, bool, usize, Duration)> = vec![
        (
            "429 Retry-After date",
            vec![status(429, &[("Retry-After", &date)], "{}"), status(429, &[], "{}")],
            false,
            2,
            Duration::from_secs(1),
        ),
        (
            "429 Retry-After seconds",
            vec![status(429, &[("Retry-After", "1")], "{}"), status(429, &[], "{}")],
            false,
            2,
            Duration::from_secs(1),
        ),
        (
            "500",
            vec![Step::status(500, "{}"), Step::status(502, "<html>")],
            false,
            2,
            Duration::ZERO,
        ),
        (
            "slow past the timeout",
            vec![
                Step::text("late").delayed(Duration::from_secs(3)),
                Step::text("late").delayed(Duration::from_secs(3)),
            ],
            false,
            2,
            CALL_TIMEOUT * 2,
        ),
        (
            "malformed JSON",
            vec![Step::Malformed("{not json".into()), Step::Malformed("".into())],
            false,
            2,
            Duration::ZERO,
        ),
        (
            "truncated stream",
            vec![Step::Truncated(text_body("cut")), Step::Truncated(text_body("cut"))],
            true,
            2,
            Duration::ZERO,
        ),
        (
            "quota exhausted 403",
            vec![Step::status(
                403,
                r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota"}}"#,
            )],
            false,
            1,
            Duration::ZERO,
        ),
        (
            "auth 401",
            vec![Step::status(401, r#"{"error":{"message":"invalid api key"}}"#)],
            false,
            1,
            Duration::ZERO,
        ),
    ];
    for (what, steps, stream, expected, at_least) in cases {
        let primary = ScriptedLlm::start(steps).await;
        let secondary = ScriptedLlm::start(vec![Step::text("from the secondary")]).await;
        let chain = chain(&[("primary", &primary), ("secondary", &secondary)], policy());
        let started = Instant::now();
        let answer = ask(&chain, stream).await.unwrap_or_else(|e| panic!("{what}: {e}"));
        let took = started.elapsed();
        assert_eq!(answer.message.content.as_deref(), Some("from the secondary"), "{what}");
        assert!(answer.fallback && answer.provider == "secondary", "{what}: {answer:?}");
        assert_eq!(primary.chat_requests().len(), expected, "{what}: primary requests");
        assert!(took >= at_least, "{what}: took {took:?}, expected ≥ {at_least:?}");
        assert!(took < Duration::from_secs(8), "{what}: took {took:?}");
        // Each provider got its own key and model, never the other's.
        let secondary_request = &secondary.chat_requests()[0];
        assert_eq!(secondary_request.header("authorization"), Some("Bearer sk-secondary-key"));
        assert_eq!(secondary_request.body["model"], "model-secondary");
        assert!(!secondary_request.to_text().contains("sk-primary-key"));
    }
}

fn text_body(content: &str) -> serde_json::Value {
    nexbot_tests::scripted_llm::completion(
        serde_json::json!({"role": "assistant", "content": content}),
        "stop",
    )
}

#[tokio::test]
async fn a_retry_after_longer_than_the_cap_moves_on_at_once() {
    let primary = ScriptedLlm::start(vec![status(429, &[("Retry-After", "3600")], "{}")]).await;
    let secondary = ScriptedLlm::start(vec![Step::text("now")]).await;
    let chain = chain(&[("primary", &primary), ("secondary", &secondary)], policy());
    let started = Instant::now();
    assert_eq!(ask(&chain, false).await.unwrap().provider, "secondary");
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(primary.chat_requests().len(), 1);
}

#[tokio::test]
async fn the_breaker_opens_after_n_failures_and_closes_after_the_probe() {
    let primary = ScriptedLlm::start(vec![Step::status(500, "{}"), Step::status(500, "{}")]).await;
    let secondary = ScriptedLlm::start(vec![]).await;
    secondary.set_responder(|_| Step::text("secondary"));
    let policy = RetryPolicy { breaker_failures: 2, ..policy() };
    let chain = chain(&[("primary", &primary), ("secondary", &secondary)], policy);
    // Two failed attempts open the primary's breaker; the secondary answers.
    assert_eq!(ask(&chain, false).await.unwrap().provider, "secondary");
    assert_eq!(primary.chat_requests().len(), 2);
    // While open, the primary is not asked at all.
    for _ in 0..3 {
        assert_eq!(ask(&chain, false).await.unwrap().provider, "secondary");
    }
    assert_eq!(primary.chat_requests().len(), 2);
    let stats = &chain.stats().providers[0];
    assert_eq!(stats.breaker_open.load(std::sync::atomic::Ordering::Relaxed), 1);
    // After the cooldown one call probes it; it answers, and the breaker closes.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    primary.push(Step::text("primary is back"));
    let probe = ask(&chain, false).await.unwrap();
    assert_eq!((probe.provider.as_str(), probe.fallback), ("primary", false));
    primary.push(Step::text("primary again"));
    assert_eq!(ask(&chain, false).await.unwrap().provider, "primary");
    assert_eq!(stats.breaker_open.load(std::sync::atomic::Ordering::Relaxed), 0);
    assert_eq!(chain.stats().fallbacks.load(std::sync::atomic::Ordering::Relaxed), 4);
}

#[tokio::test]
async fn a_failed_probe_keeps_the_breaker_open_and_all_open_still_tries_each_once() {
    let primary = ScriptedLlm::start(vec![]).await;
    primary.set_responder(|_| Step::status(503, "{}"));
    let policy = RetryPolicy { breaker_failures: 1, ..policy() };
    let only = chain(&[("primary", &primary)], policy);
    // The failure that opens the breaker ends the retries on that provider.
    let err = ask(&only, false).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::Overloaded);
    assert!(err.message.contains("after 1 attempt)"), "{err}");
    // Open: a call still tries it once (never refused untried), not max_retries + 1 times.
    let before = primary.chat_requests().len();
    assert!(ask(&only, false).await.is_err());
    assert_eq!(primary.chat_requests().len(), before + 1);
}

#[tokio::test]
async fn a_cut_stream_is_retried_and_the_caller_told_to_restart() {
    let llm = ScriptedLlm::start(vec![
        Step::Truncated(text_body("first half then nothing")),
        Step::text("the whole answer"),
    ])
    .await;
    let chain = chain(&[("only", &llm)], policy());
    let events = Mutex::new(Vec::new());
    let messages = [ChatMessage::user("hi")];
    let mut request = ChatRequest::new(&messages, &[]);
    request.stream = true;
    let on_event = |e: StreamEvent<'_>| {
        events.lock().unwrap().push(match e {
            StreamEvent::Text(t) => t.to_owned(),
            StreamEvent::Restart => "<restart>".to_owned(),
        })
    };
    let answer = chain.complete(&request, &CancellationToken::new(), &on_event).await.unwrap();
    assert_eq!(answer.message.content.as_deref(), Some("the whole answer"));
    assert_eq!(llm.chat_requests().len(), 2);
    let events = events.into_inner().unwrap();
    let restart = events.iter().position(|e| e == "<restart>").expect("a restart event");
    assert_eq!(events[restart + 1..].concat(), "the whole answer");
    assert!(llm.chat_requests()[0].body["stream"].as_bool().unwrap());
}

#[tokio::test]
async fn bad_requests_and_too_long_contexts_end_the_call_without_fallback() {
    for (body, class) in [
        (r#"{"error":{"message":"bad field"}}"#, ErrorClass::BadRequest),
        (
            r#"{"error":{"message":"maximum context length is 8192 tokens","code":"context_length_exceeded"}}"#,
            ErrorClass::ContextTooLong,
        ),
    ] {
        let primary = ScriptedLlm::start(vec![Step::status(400, body)]).await;
        let secondary = ScriptedLlm::start(vec![Step::text("unused")]).await;
        let chain = chain(&[("primary", &primary), ("secondary", &secondary)], policy());
        let err = ask(&chain, false).await.unwrap_err();
        assert_eq!(err.class, class, "{err}");
        assert_eq!(secondary.chat_requests().len(), 0);
    }
}

#[tokio::test]
async fn errors_never_carry_the_key_even_when_the_provider_echoes_it() {
    let llm = ScriptedLlm::start(vec![Step::status(
        401,
        r#"{"error":{"message":"Incorrect API key provided: sk-only-key"}}"#,
    )])
    .await;
    let chain = chain(&[("only", &llm)], policy());
    let err = ask(&chain, false).await.unwrap_err();
    let shown = format!("{err} {err:?} {}", err.user_message());
    assert!(!shown.contains("sk-only-key") && shown.contains("[provider key]"), "{shown}");
}

#[tokio::test]
async fn the_total_limit_bounds_every_retry_and_wait() {
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(|_| Step::text("late").delayed(Duration::from_secs(5)));
    let policy = RetryPolicy { max_retries: 10, total: Duration::from_millis(1_500), ..policy() };
    let chain = chain(&[("only", &llm)], policy);
    let started = Instant::now();
    let err = ask(&chain, false).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::Timeout);
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
}
