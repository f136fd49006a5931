//! The client against a third-party mock: LLMock from PyPI (`nexbot_tests::llmock`), started
//! as a child process on a free loopback port and broken with its own fault switches. Every
//! answer and every failure here is LLMock's, not ours: its completions, tool calls and SSE
//! chunks, its 429 with `Retry-After`, its cut, dropped, corrupted and stalled streams — and,
//! where it applies, its own verdict on how the client coped.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use nexbot_llm::provider::Timeouts;
use nexbot_llm::{
    Chain, ChatMessage, ChatRequest, Completion, ErrorClass, LlmError, Provider, ProviderSpec,
    RetryPolicy, StreamEvent, ToolSpec, Usage,
};
use nexbot_tests::llmock::Llmock;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

/// What the tests ask; LLMock (`--response-style echo`) answers `Hello! You said: <prompt>`.
const PROMPT: &str = "hello llmock";
const ANSWER: &str = "Hello! You said: hello llmock";

fn timeouts(stall: Duration) -> Timeouts {
    Timeouts { connect: Duration::from_secs(5), call: Duration::from_secs(20), stall }
}

fn provider(name: &str, llmock: &Llmock, stall: Duration) -> Provider {
    let mut spec = ProviderSpec::new(&llmock.base_url(), "mock-model");
    spec.name = Some(name.to_owned());
    Provider::new(spec, None, timeouts(stall)).unwrap()
}

fn policy(max_retries: u32) -> RetryPolicy {
    RetryPolicy {
        max_retries,
        initial: Duration::from_millis(20),
        max_wait: Duration::from_secs(3),
        total: Duration::from_secs(30),
        breaker_failures: 100,
        breaker_cooldown: Duration::from_secs(1),
    }
}

fn messages() -> [ChatMessage; 1] {
    [ChatMessage::user(PROMPT)]
}

fn request<'a>(
    messages: &'a [ChatMessage],
    tools: &'a [ToolSpec],
    stream: bool,
) -> ChatRequest<'a> {
    let mut request = ChatRequest::new(messages, tools);
    request.stream = stream;
    request.max_tokens = Some(200);
    request
}

/// One attempt; the streamed text pieces come back next to the result.
async fn attempt(
    provider: &Provider,
    request: &ChatRequest<'_>,
) -> (Result<Completion, LlmError>, Vec<String>) {
    let pieces = Mutex::new(Vec::new());
    let on_text = |t: &str| pieces.lock().unwrap().push(t.to_owned());
    let result = provider.attempt(request, &on_text).await;
    (result, pieces.into_inner().unwrap())
}

/// A call through `chain`; the stream events come back as text, a restart as `<restart>`.
async fn complete(
    chain: &Chain,
    request: &ChatRequest<'_>,
) -> (Result<Completion, LlmError>, Vec<String>) {
    let events = Mutex::new(Vec::new());
    let on_event = |e: StreamEvent<'_>| {
        events.lock().unwrap().push(match e {
            StreamEvent::Text(t) => t.to_owned(),
            StreamEvent::Restart => "<restart>".to_owned(),
        })
    };
    let result = chain.complete(request, &CancellationToken::new(), &on_event).await;
    (result, events.into_inner().unwrap())
}

fn weather_tool() -> ToolSpec {
    ToolSpec::function(
        "get_weather",
        "Get the current weather for a city",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    )
}

/// `started_at` of each request minus `ended_at` of the one before, in seconds.
fn gaps(requests: &[Value]) -> Vec<f64> {
    requests
        .windows(2)
        .map(|w| w[1]["started_at"].as_f64().unwrap() - w[0]["ended_at"].as_f64().unwrap())
        .collect()
}

fn field<'a>(requests: &'a [Value], name: &str) -> Vec<&'a Value> {
    requests.iter().map(|r| &r[name]).collect()
}

#[tokio::test]
async fn plain_and_streamed_answers_and_usage_parse() {
    let Some(llmock) =
        Llmock::start_or_skip("plain_and_streamed_answers_and_usage_parse", &[]).await
    else {
        return;
    };
    let provider = provider("llmock", &llmock, Duration::from_secs(5));
    let messages = messages();

    let (plain, pieces) = attempt(&provider, &request(&messages, &[], false)).await;
    let plain = plain.unwrap();
    assert!(pieces.is_empty(), "a plain answer is not streamed: {pieces:?}");
    assert_eq!(plain.message.role, "assistant");
    assert_eq!(plain.message.content.as_deref(), Some(ANSWER));
    assert!(plain.message.tool_calls.is_empty());
    assert_eq!(plain.finish_reason.as_deref(), Some("stop"));
    assert_eq!(plain.provider, "llmock");
    // LLMock counts a quarter token per character: 12 and 29 characters.
    assert_eq!(plain.usage, Some(Usage { prompt_tokens: 3, completion_tokens: 7 }));

    let (streamed, pieces) = attempt(&provider, &request(&messages, &[], true)).await;
    let streamed = streamed.unwrap();
    assert_eq!(streamed.message.content.as_deref(), Some(ANSWER));
    // LLMock streams word by word; every piece reached the caller as it came.
    assert!(pieces.len() >= 4, "{pieces:?}");
    assert_eq!(pieces.concat(), ANSWER);
    assert_eq!(streamed.finish_reason.as_deref(), Some("stop"));
    // The usage chunk came because the client asked for it (stream_options.include_usage).
    assert_eq!(streamed.usage, plain.usage);

    let requests = llmock.requests().await;
    assert_eq!(requests.len(), 2);
    assert_eq!(field(&requests, "stream"), [&json!(false), &json!(true)]);
    assert_eq!(requests[1]["body"]["stream_options"]["include_usage"], true);
    assert_eq!(requests[0]["body"]["model"], "mock-model");
    assert_eq!(requests[0]["body"]["max_tokens"], 200);
}

#[tokio::test]
async fn tool_calls_plain_streamed_scripted_and_broken() {
    let Some(llmock) =
        Llmock::start_or_skip("tool_calls_plain_streamed_scripted_and_broken", &[]).await
    else {
        return;
    };
    let provider = provider("llmock", &llmock, Duration::from_secs(5));
    let tools = [weather_tool()];
    let asked = [ChatMessage::user("What is the weather in Paris?")];

    // Offered a tool, LLMock calls it with arguments made from the tool's schema.
    let plain = attempt(&provider, &request(&asked, &tools, false)).await.0.unwrap();
    assert_eq!(plain.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(plain.message.content, None);
    let call = &plain.message.tool_calls[0];
    assert_eq!((call.kind.as_str(), call.function.name.as_str()), ("function", "get_weather"));
    assert!(call.id.starts_with("call_") && call.id.len() > 5, "{}", call.id);
    let arguments: Value = serde_json::from_str(&call.function.arguments).unwrap();
    assert_eq!(arguments, json!({"city": "mock-city"}));

    // Streamed, the arguments come in 12-character fragments and are put back together.
    let streamed = attempt(&provider, &request(&asked, &tools, true)).await.0.unwrap();
    assert_eq!(streamed.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(streamed.message.tool_calls.len(), 1);
    let streamed_call = &streamed.message.tool_calls[0];
    assert_eq!(streamed_call.function.name, "get_weather");
    assert_eq!(streamed_call.function.arguments, call.function.arguments);
    assert!(streamed_call.id.starts_with("call_"), "{}", streamed_call.id);

    // The tool's result goes back; LLMock then answers in text, having read both turns.
    let mut turn = asked.to_vec();
    turn.push(plain.message.clone());
    turn.push(ChatMessage::tool(&call.id, "21C and sunny"));
    let answer = attempt(&provider, &request(&turn, &tools, false)).await.0.unwrap();
    assert!(answer.message.tool_calls.is_empty(), "{answer:?}");
    assert_eq!(
        answer.message.content.as_deref(),
        Some("Hello! You said: What is the weather in Paris? 21C and sunny")
    );
    let sent = &llmock.requests().await[2]["body"]["messages"];
    assert_eq!(sent[1]["tool_calls"][0]["id"], call.id.as_str());
    assert_eq!(sent[1]["tool_calls"][0]["function"]["name"], "get_weather");
    assert_eq!(sent[2]["tool_call_id"], call.id.as_str());

    // A scripted call, and a broken one: arguments cut in half are kept as sent (the agent
    // reports them to the model), not refused as a malformed answer.
    llmock
        .scenario(json!([{"type": "reply",
            "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}]))
        .await;
    let scripted = attempt(&provider, &request(&asked, &tools, true)).await.0.unwrap();
    let arguments: Value =
        serde_json::from_str(&scripted.message.tool_calls[0].function.arguments).unwrap();
    assert_eq!(arguments, json!({"city": "Paris"}));
    llmock.scenario(json!([{"type": "tool_fault", "kind": "malformed_arguments"}])).await;
    let broken = attempt(&provider, &request(&asked, &tools, true)).await.0.unwrap();
    let cut = &broken.message.tool_calls[0].function.arguments;
    assert!(serde_json::from_str::<Value>(cut).is_err(), "{cut}");
    assert!(call.function.arguments.starts_with(cut.as_str()) && !cut.is_empty(), "{cut}");
}

#[tokio::test]
async fn a_rate_limit_with_retry_after_is_waited_out_then_answered() {
    let Some(llmock) =
        Llmock::start_or_skip("a_rate_limit_with_retry_after_is_waited_out_then_answered", &[])
            .await
    else {
        return;
    };
    llmock.scenario(json!([{"type": "fail", "status": 429, "retry_after": 1, "times": 2}])).await;
    let chain = Chain::new(vec![provider("llmock", &llmock, Duration::from_secs(5))], policy(2));
    let messages = messages();
    let started = Instant::now();
    let answer = complete(&chain, &request(&messages, &[], false)).await.0.unwrap();
    assert_eq!(answer.message.content.as_deref(), Some(ANSWER));
    assert!(!answer.fallback);
    assert!(started.elapsed() >= Duration::from_secs(2), "{:?}", started.elapsed());

    let requests = llmock.requests().await;
    assert_eq!(field(&requests, "status"), [&json!(429), &json!(429), &json!(200)]);
    assert_eq!(field(&requests, "retry_after"), [&json!(1.0), &json!(1.0), &Value::Null]);
    // Measured by LLMock: each retry came at least the asked second after the 429.
    for gap in gaps(&requests) {
        assert!(gap >= 1.0, "retried {gap:.3}s after a 429 with Retry-After: 1");
    }
    assert_eq!(llmock.findings().await, Vec::<String>::new(), "{}", llmock.verdict().await);
}

#[tokio::test]
async fn llmock_failures_fall_back_to_a_second_llmock_or_end_the_call() {
    let (Some(primary), Some(secondary)) = tokio::join!(
        Llmock::start_or_skip("llmock_failures_fall_back (primary)", &[]),
        Llmock::start_or_skip("llmock_failures_fall_back (secondary)", &[]),
    ) else {
        return;
    };
    let chain = Chain::new(
        vec![
            provider("primary", &primary, Duration::from_secs(5)),
            provider("secondary", &secondary, Duration::from_secs(5)),
        ],
        policy(1),
    );
    let messages = messages();
    // (what, LLMock's behaviour on the primary, attempts on it, the outcome: Ok = the
    // secondary answered, Err = the call ended with this class and no fallback)
    let cases: Vec<(&str, Value, usize, Result<(), ErrorClass>)> = vec![
        (
            "429 asking for longer than the wait cap",
            json!({"type": "fail", "status": 429, "retry_after": 30, "times": null}),
            1,
            Ok(()),
        ),
        ("503 outage", json!({"type": "fail", "status": 503, "times": null}), 2, Ok(())),
        (
            "429 quota exhausted",
            json!({"type": "fail", "status": 429, "code": "insufficient_quota",
                "message": "You exceeded your current quota, please check your plan and billing details."}),
            1,
            Ok(()),
        ),
        ("401", json!({"type": "fail", "status": 401}), 1, Ok(())),
        (
            "context overflow",
            json!({"type": "fail", "status": 400, "code": "context_length_exceeded",
                "message": "This model's maximum context length was exceeded."}),
            1,
            Err(ErrorClass::ContextTooLong),
        ),
        ("400", json!({"type": "fail", "status": 400}), 1, Err(ErrorClass::BadRequest)),
    ];
    for (what, behaviour, attempts, outcome) in cases {
        primary.reset().await;
        secondary.reset().await;
        primary.scenario(json!([behaviour])).await;
        let started = Instant::now();
        let result = complete(&chain, &request(&messages, &[], false)).await.0;
        let took = started.elapsed();
        match outcome {
            Ok(()) => {
                let answer = result.unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(answer.message.content.as_deref(), Some(ANSWER), "{what}");
                assert!(answer.fallback && answer.provider == "secondary", "{what}: {answer:?}");
                assert_eq!(secondary.requests().await.len(), 1, "{what}");
            }
            Err(class) => {
                let err = result.expect_err(what);
                assert_eq!(err.class, class, "{what}: {err}");
                assert!(secondary.requests().await.is_empty(), "{what}: fell back");
            }
        }
        assert_eq!(primary.requests().await.len(), attempts, "{what}: attempts on the primary");
        assert!(took < Duration::from_secs(6), "{what}: took {took:?}");
        // LLMock's own verdict: no Retry-After ignored, no 4xx retried, no storm.
        let verdict = primary.verdict().await;
        assert_eq!(verdict["passed"], true, "{what}: {verdict}");
    }
}

#[tokio::test]
async fn a_stream_cut_short_is_never_the_answer() {
    let Some(llmock) = Llmock::start_or_skip("a_stream_cut_short_is_never_the_answer", &[]).await
    else {
        return;
    };
    let provider_ = provider("llmock", &llmock, Duration::from_secs(5));
    let messages = messages();
    let streamed = request(&messages, &[], true);

    // LLMock ends the stream cleanly after 3 chunks: no finish reason, no [DONE].
    llmock.scenario(json!([{"type": "stream_fault", "kind": "truncate", "after_chunks": 3}])).await;
    let (result, pieces) = attempt(&provider_, &streamed).await;
    let err = result.expect_err("a cut stream is not an answer");
    assert_eq!(err.class, ErrorClass::Truncated, "{err}");
    let partial = pieces.concat();
    assert!(!partial.is_empty() && partial.len() < ANSWER.len(), "{partial:?}");
    assert!(ANSWER.starts_with(&partial), "{partial:?}");
    let requests = llmock.requests().await;
    assert_eq!(requests[0]["fault"], "stream:truncate@3");
    assert_eq!(requests[0]["status"], 200);

    // Through the chain: retried, the caller told to drop what it showed, the whole answer.
    llmock.reset().await;
    llmock.scenario(json!([{"type": "stream_fault", "kind": "truncate", "after_chunks": 3}])).await;
    let chain = Chain::new(vec![provider("llmock", &llmock, Duration::from_secs(5))], policy(2));
    let (answer, events) = complete(&chain, &streamed).await;
    assert_eq!(answer.unwrap().message.content.as_deref(), Some(ANSWER));
    let restart = events.iter().position(|e| e == "<restart>").expect("a restart event");
    assert_eq!(events[..restart].concat(), partial);
    assert_eq!(events[restart + 1..].concat(), ANSWER);
    let requests = llmock.requests().await;
    assert_eq!(field(&requests, "completed"), [&json!(false), &json!(true)]);
    // LLMock's verdict would say `truncated_stream_accepted` had the cut answer been kept.
    assert_eq!(llmock.findings().await, Vec::<String>::new(), "{}", llmock.verdict().await);
}

#[tokio::test]
async fn dropped_corrupted_and_stalled_streams_fail_the_attempt_and_are_retried() {
    // Paced like slow generation (200 ms between chunks), so that LLMock sees the client hang
    // up mid-stream: unpaced, the whole stream is written before the client has read the
    // corrupted chunk, and LLMock takes the attempt for a completed one (at 50 ms a busy CI
    // machine may have let it write the rest first, too).
    let paced = ["--stream-chunk-delay-ms", "200"];
    let Some(llmock) = Llmock::start_or_skip("dropped_corrupted_and_stalled_streams", &paced).await
    else {
        return;
    };
    let stall = Duration::from_millis(700);
    let messages = messages();
    let streamed = request(&messages, &[], true);
    // (LLMock's fault, the class one attempt ends with)
    let cases = [
        (json!({"kind": "disconnect", "after_chunks": 2}), ErrorClass::Truncated),
        (json!({"kind": "malformed", "after_chunks": 2}), ErrorClass::Malformed),
        (json!({"kind": "stall", "after_chunks": 2, "stall_seconds": 3}), ErrorClass::Timeout),
    ];
    for (fault, class) in cases {
        let kind = fault["kind"].as_str().unwrap().to_owned();
        let mut behaviour = fault.clone();
        behaviour["type"] = "stream_fault".into();

        llmock.reset().await;
        llmock.scenario(json!([behaviour.clone()])).await;
        let provider_ = provider("llmock", &llmock, stall);
        let (result, pieces) = attempt(&provider_, &streamed).await;
        let err = result.expect_err(&kind);
        assert_eq!(err.class, class, "{kind}: {err}");
        assert!(ANSWER.starts_with(&pieces.concat()), "{kind}: {pieces:?}");
        assert!(pieces.concat().len() < ANSWER.len(), "{kind}: {pieces:?}");
        let requests = llmock.requests().await;
        assert_eq!(requests[0]["fault"], format!("stream:{kind}@2"), "{kind}");

        llmock.reset().await;
        llmock.scenario(json!([behaviour])).await;
        // The product's first back-off (500 ms), not the 20 ms of the other tests: LLMock
        // takes a retry for a separate call when it starts before LLMock saw the first attempt
        // end, which it sees at its next paced write; with 20 ms a busy CI machine gave the
        // retry that head start, and LLMock reported `malformed_chunk_ignored`.
        let backoff = RetryPolicy { initial: RetryPolicy::default().initial, ..policy(2) };
        let chain = Chain::new(vec![provider("llmock", &llmock, stall)], backoff);
        let (answer, events) = complete(&chain, &streamed).await;
        let answer = answer.unwrap_or_else(|e| panic!("{kind}: {e}"));
        assert_eq!(answer.message.content.as_deref(), Some(ANSWER), "{kind}");
        let restart = events.iter().position(|e| e == "<restart>").expect("a restart event");
        assert_eq!(events[restart + 1..].concat(), ANSWER, "{kind}");
        let requests = llmock.requests().await;
        assert_eq!(requests.len(), 2, "{kind}: {requests:?}");
        assert_eq!(requests[1]["fault"], Value::Null, "{kind}");
        // No `malformed_chunk_ignored`, `no_read_timeout` or `gave_up` from LLMock. (Its
        // requests in the message: whether it saw the first attempt end before the retry.)
        assert_eq!(
            llmock.findings().await,
            Vec::<String>::new(),
            "{kind}: {} {requests:?}",
            llmock.verdict().await
        );
    }
}
