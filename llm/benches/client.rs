//! `cargo bench -p nexbot-llm --bench client`: what the LLM client itself costs per call.
//!
//! Against a local HTTP server on loopback (its own thread and runtime, answering with bytes
//! prepared in advance: a realistic completion, or the same answer as an OpenAI-style stream of
//! one token per event, each event its own HTTP chunk), per call, interleaved:
//! - the obvious alternative: a bare `reqwest` POST of the same, already serialized, JSON body,
//!   reading the answer's bytes and parsing nothing (plain, and streamed);
//! - `Provider::attempt`, non-streamed and streamed (SSE), and `Chain::complete` non-streamed;
//!
//! and the client's own overhead = attempt − bare POST of the same request, at p50 and p99
//! (differences of the percentiles). The overhead includes building and serializing the request
//! body, which the bare POST is handed ready-made. Then the parts alone, in microseconds: the
//! request body, `wire::parse_completion`, the SSE decoder + `stream::Accumulator` over the
//! streamed answer, the relay's `usage::UsageTap` over it, and `budget` reservations settled.
//!
//! Prints figures (the headline ones go to the `make bench` summary); asserts nothing about
//! speed, only that every call got the whole answer.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::header::CONTENT_TYPE;
use axum::response::Response;
use axum::routing::post;
use axum::serve::ListenerExt;
use axum::Router;
use nexbot_llm::budget::{Allowance, Holds};
use nexbot_llm::provider::Timeouts;
use nexbot_llm::stream::{Accumulator, SseDecoder};
use nexbot_llm::usage::UsageTap;
use nexbot_llm::wire::parse_completion;
use nexbot_llm::{Chain, ChatMessage, ChatRequest, Provider, ProviderSpec, RetryPolicy, ToolSpec};
use nexbot_tests::bench::{load_average, record, Figure, Stats};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

const CALLS: usize = 2000;
const WARMUP: usize = 200;
/// Bare POST plain and streamed, attempt plain and streamed, chain plain.
const WAYS: usize = 5;
/// Samples of the parts measured alone.
const PART_ROUNDS: usize = 20_000;
/// Budget operations are timed in batches: one alone is close to the clock's own cost.
const BATCH: usize = 100;

/// The answer: about 1.2 kB of text, 240 tokens of five characters.
fn answer_text() -> String {
    let sentence = "The quick brown fox jumps over the lazy dog while the model explains it. ";
    sentence.repeat(16)
}

/// A completion as OpenAI sends it (ids, fingerprint, logprobs, usage details included).
fn completion_body(text: &str) -> Value {
    json!({
        "id": "chatcmpl-9xQbench0123456789abcdef",
        "object": "chat.completion",
        "created": 1_732_000_000,
        "model": "gpt-4o-mini-2024-07-18",
        "system_fingerprint": "fp_0123456789",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": text, "refusal": null},
            "logprobs": null,
            "finish_reason": "stop"
        }],
        "usage": {
            "prompt_tokens": 1843, "completion_tokens": 240, "total_tokens": 2083,
            "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0}
        }
    })
}

/// A tool-call completion, for the parse figure.
fn tool_call_body() -> Value {
    json!({
        "id": "chatcmpl-9xQbench0123456789abcdef", "object": "chat.completion",
        "created": 1_732_000_000, "model": "gpt-4o-mini-2024-07-18",
        "choices": [{"index": 0, "logprobs": null, "finish_reason": "tool_calls",
            "message": {"role": "assistant", "content": null, "tool_calls": [{
                "id": "call_abc123", "type": "function",
                "function": {"name": "write_file",
                    "arguments": "{\"path\":\"notes/today.md\",\"content\":\"buy milk, eggs and bread\"}"}
            }]}}],
        "usage": {"prompt_tokens": 1843, "completion_tokens": 31, "total_tokens": 1874}
    })
}

/// The same answer as an OpenAI stream: one event per token (five characters), the finish
/// reason, the usage, `[DONE]`. Each event is one item (one HTTP chunk when served).
fn sse_events(text: &str) -> Vec<Bytes> {
    let chunk = |delta: Value, finish: Value, usage: Value| {
        let choices = if delta.is_null() {
            json!([])
        } else {
            json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}])
        };
        let event = json!({
            "id": "chatcmpl-9xQbench0123456789abcdef", "object": "chat.completion.chunk",
            "created": 1_732_000_000, "model": "gpt-4o-mini-2024-07-18",
            "system_fingerprint": "fp_0123456789", "choices": choices, "usage": usage,
        });
        Bytes::from(format!("data: {event}\n\n"))
    };
    let mut events =
        vec![chunk(json!({"role": "assistant", "content": ""}), Value::Null, Value::Null)];
    let chars: Vec<char> = text.chars().collect();
    for token in chars.chunks(5) {
        let token: String = token.iter().collect();
        events.push(chunk(json!({"content": token}), Value::Null, Value::Null));
    }
    events.push(chunk(json!({}), json!("stop"), Value::Null));
    let usage = json!({"prompt_tokens": 1843, "completion_tokens": 240, "total_tokens": 2083});
    events.push(chunk(Value::Null, Value::Null, usage));
    events.push(Bytes::from_static(b"data: [DONE]\n\n"));
    events
}

/// The conversation sent: a system prompt of about 6 kB and a few turns.
fn conversation() -> Vec<ChatMessage> {
    let mut messages = vec![ChatMessage::system("You are Nexbot. ".repeat(400))];
    for i in 0..6 {
        messages.push(ChatMessage::user(format!("question {i}: what about the fox?")));
        messages.push(ChatMessage::assistant(format!("answer {i}: it jumps over the dog.")));
    }
    messages.push(ChatMessage::user("and now the whole story, please"));
    messages
}

fn tools() -> Vec<ToolSpec> {
    ["read_file", "write_file", "list_dir", "memory"]
        .iter()
        .map(|name| {
            ToolSpec::function(
                name,
                "Does what its name says, inside the workspace.",
                json!({"type": "object", "properties": {"path": {"type": "string"}},
                    "required": ["path"]}),
            )
        })
        .collect()
}

/// Serves `plain` for a non-streamed request and `events` (one HTTP chunk each) for a
/// streamed one, on its own thread and runtime; returns the base URL.
fn serve(plain: Bytes, events: Arc<Vec<Bytes>>) -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async move {
            let handler = move |body: Bytes| {
                let (plain, events) = (plain.clone(), events.clone());
                async move {
                    let streamed = memchr::memmem::find(&body, b"\"stream\":true").is_some();
                    let (kind, body) = if streamed {
                        let items = (0..events.len())
                            .map(move |i| Ok::<_, std::convert::Infallible>(events[i].clone()));
                        ("text/event-stream", Body::from_stream(futures_util::stream::iter(items)))
                    } else {
                        ("application/json", Body::from(plain))
                    };
                    Response::builder().header(CONTENT_TYPE, kind).body(body).unwrap()
                }
            };
            let app = Router::new().route("/v1/chat/completions", post(handler));
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            // Each event goes out when it is written, as a provider's stream does: with Nagle's
            // algorithm on, every stream here stalled ~40 ms on a delayed ACK.
            let listener = listener.tap_io(|tcp| {
                let _ = tcp.set_nodelay(true);
            });
            axum::serve(listener, app).await.unwrap();
        });
    });
    format!("http://{}/v1", rx.recv().unwrap())
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// p50 and p99 of `samples`, in microseconds.
fn p50_p99(samples: &[Duration]) -> (f64, f64) {
    let stats = Stats::of(samples.to_vec());
    (us(stats.p50), us(stats.p99))
}

fn print_us(name: &str, samples: &[Duration]) {
    let stats = Stats::of(samples.to_vec());
    println!(
        "  {name:<58} n={:<6} p50={:>9.2}  p99={:>9.2}  max={:>9.2} µs",
        stats.n,
        us(stats.p50),
        us(stats.p99),
        us(stats.max)
    );
}

/// Times `f` alone, `PART_ROUNDS` times.
fn part(mut f: impl FnMut()) -> Vec<Duration> {
    for _ in 0..PART_ROUNDS / 10 {
        f();
    }
    (0..PART_ROUNDS)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect()
}

// A bench's main reads as its measurement, top to bottom; split only by count it would not
// read better (test and bench code only: product functions stay under the limit).
#[tokio::main(flavor = "current_thread")]
#[allow(clippy::too_many_lines)]
async fn main() {
    let text = answer_text();
    let plain = Bytes::from(completion_body(&text).to_string());
    let events = Arc::new(sse_events(&text));
    let sse_bytes: usize = events.iter().map(Bytes::len).sum();
    let base_url = serve(plain.clone(), events.clone());

    let messages = conversation();
    let tools = tools();
    let mut request = ChatRequest::new(&messages, &tools);
    request.max_tokens = Some(1024);
    let mut streamed = request;
    streamed.stream = true;
    let model = "gpt-4o-mini";
    let plain_body = Bytes::from(serde_json::to_vec(&request.body(model)).unwrap());
    let stream_body = Bytes::from(serde_json::to_vec(&streamed.body(model)).unwrap());

    let timeouts = Timeouts {
        connect: Duration::from_secs(5),
        call: Duration::from_secs(30),
        stall: Duration::from_secs(30),
    };
    let spec = ProviderSpec::new(&base_url, model);
    let provider = Provider::new(spec.clone(), None, timeouts).unwrap();
    let chain =
        Chain::new(vec![Provider::new(spec, None, timeouts).unwrap()], RetryPolicy::default());
    let bare = reqwest::Client::builder()
        .connect_timeout(timeouts.connect)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let url = provider.url().to_owned();
    let cancel = CancellationToken::new();

    println!(
        "LLM client per call, loopback server on its own thread: request {} B ({} messages, {} \
         tools); answer {} B plain, {} B as {} SSE events; {CALLS} calls each, interleaved, \
         after {WARMUP} warm-up rounds; load average {}",
        plain_body.len(),
        messages.len(),
        tools.len(),
        plain.len(),
        sse_bytes,
        events.len(),
        load_average()
    );

    // One call of way `way`, checked, timed.
    let call = |way: usize| {
        let (bare, url, provider, chain, cancel) = (&bare, &url, &provider, &chain, &cancel);
        let (plain_body, stream_body, request, streamed) =
            (&plain_body, &stream_body, &request, &streamed);
        let (text, plain_len) = (&text, plain.len());
        async move {
            let post = |body: &Bytes| {
                bare.post(url).header("content-type", "application/json").body(body.clone()).send()
            };
            let start = Instant::now();
            match way {
                0 => {
                    let bytes = post(plain_body).await.unwrap().bytes().await.unwrap();
                    assert_eq!(bytes.len(), plain_len);
                }
                1 => {
                    let bytes = post(stream_body).await.unwrap().bytes().await.unwrap();
                    assert_eq!(bytes.len(), sse_bytes);
                }
                2 => {
                    let answer = provider.attempt(request, &|_| {}).await.unwrap();
                    assert_eq!(answer.message.content_str().len(), text.len());
                }
                3 => {
                    let answer = provider
                        .attempt(streamed, &|t| {
                            black_box(t);
                        })
                        .await
                        .unwrap();
                    assert_eq!(answer.message.content_str(), text);
                    assert_eq!(answer.usage.map(|u| u.completion_tokens), Some(240));
                }
                _ => {
                    let answer = chain.complete(request, cancel, &|_| {}).await.unwrap();
                    assert_eq!(answer.usage.map(|u| u.prompt_tokens), Some(1843));
                }
            }
            start.elapsed()
        }
    };
    // Rounds of one call each way; each round starts one way later, so that no way always
    // follows the same other (what ran just before moves the next call's time noticeably).
    let mut samples: [Vec<Duration>; WAYS] = Default::default();
    for round in 0..WARMUP + CALLS {
        for k in 0..WAYS {
            let way = (round + k) % WAYS;
            let took = call(way).await;
            if round >= WARMUP {
                samples[way].push(took);
            }
        }
    }
    let [bare_plain, bare_stream, attempt_plain, attempt_stream, chain_plain] = samples;
    println!("\nper call, end to end on loopback:");
    print_us("(a) bare reqwest POST, plain answer's bytes", &bare_plain);
    print_us("(a') bare reqwest POST, streamed answer's bytes", &bare_stream);
    print_us("(b) Provider::attempt, non-streamed", &attempt_plain);
    print_us("(c) Provider::attempt, streamed (SSE)", &attempt_stream);
    print_us("    Chain::complete, non-streamed", &chain_plain);
    let (a50, a99) = p50_p99(&bare_plain);
    let (s50, s99) = p50_p99(&bare_stream);
    let (b50, b99) = p50_p99(&attempt_plain);
    let (c50, c99) = p50_p99(&attempt_stream);
    let (k50, k99) = p50_p99(&chain_plain);
    println!("client overhead (difference of percentiles):");
    println!("  non-streamed (b) − (a):  p50 {:>8.2} µs   p99 {:>8.2} µs", b50 - a50, b99 - a99);
    println!("  streamed     (c) − (a'): p50 {:>8.2} µs   p99 {:>8.2} µs", c50 - s50, c99 - s99);
    println!("  streamed     (c) − (a):  p50 {:>8.2} µs   p99 {:>8.2} µs", c50 - a50, c99 - a99);
    println!("  Chain::complete − (a):   p50 {:>8.2} µs   p99 {:>8.2} µs", k50 - a50, k99 - a99);

    // The parts alone.
    let tool_body = tool_call_body().to_string();
    let build = part(|| {
        black_box(serde_json::to_vec(&request.body(model)).unwrap());
    });
    let parse = part(|| {
        black_box(parse_completion(black_box(&plain), "bench").unwrap());
    });
    let parse_tool = part(|| {
        black_box(parse_completion(black_box(tool_body.as_bytes()), "bench").unwrap());
    });
    let accumulate = part(|| {
        let mut decoder = SseDecoder::default();
        let mut acc = Accumulator::default();
        for event in events.iter() {
            decoder
                .feed(
                    event,
                    |data| {
                        black_box(acc.push(data, "bench")?);
                        Ok(())
                    },
                    "bench",
                )
                .unwrap();
        }
        decoder.finish(|data| acc.push(data, "bench").map(|_| ())).unwrap();
        black_box(acc.finish("bench").unwrap());
    });
    let tap = part(|| {
        let mut tap = UsageTap::new(true);
        for event in events.iter() {
            tap.feed(event);
        }
        assert_eq!(tap.finish(), Some(2083));
    });
    let one = Allowance::new(Some(u64::MAX), "tokens today");
    let reserve_one = part(|| {
        for _ in 0..BATCH {
            one.try_reserve(black_box(3_000)).unwrap().settle(black_box(2_083));
        }
    });
    // What the host reserves per call: tokens per day and per chat, cost per day and month.
    let caps: Vec<Arc<Allowance>> =
        ["tokens today", "tokens today in this chat", "USD today", "USD this month"]
            .iter()
            .map(|what| Allowance::new(Some(u64::MAX), *what))
            .collect();
    let reserve_four = part(|| {
        for _ in 0..BATCH {
            let holds = Holds::reserve(caps.iter().map(|c| (c.clone(), black_box(3_000)))).unwrap();
            holds.settle(|i| black_box(2_083 + i as u64));
        }
    });
    let per_op = |samples: Vec<Duration>| -> Vec<Duration> {
        samples.into_iter().map(|d| d / BATCH as u32).collect()
    };
    let (reserve_one, reserve_four) = (per_op(reserve_one), per_op(reserve_four));
    println!("\nthe parts alone ({PART_ROUNDS} samples each):");
    print_us("request body built and serialized", &build);
    print_us(&format!("parse_completion, plain answer ({} B)", plain.len()), &parse);
    print_us(&format!("parse_completion, tool call ({} B)", tool_body.len()), &parse_tool);
    print_us(&format!("SSE decode + accumulate, {} events", events.len()), &accumulate);
    print_us("relay UsageTap over the same stream", &tap);
    print_us("Allowance::try_reserve + settle (per op, batches of 100)", &reserve_one);
    print_us("Holds::reserve on 4 caps + settle (per op, batches of 100)", &reserve_four);

    let (parse50, parse99) = p50_p99(&parse);
    let (acc50, acc99) = p50_p99(&accumulate);
    let (hold50, hold99) = p50_p99(&reserve_four);
    record(Figure::reference(
        "LLM client overhead per call, non-streamed, p50 / p99",
        &format!("{:.0} / {:.0} µs", b50 - a50, b99 - a99),
        &format!("(Provider::attempt − bare reqwest POST; bare p50 {a50:.0} µs)"),
    ));
    record(Figure::reference(
        &format!("LLM client overhead per call, streamed ({} events), p50 / p99", events.len()),
        &format!("{:.0} / {:.0} µs", c50 - s50, c99 - s99),
        &format!("(attempt − bare POST reading the same SSE; bare p50 {s50:.0} µs)"),
    ));
    record(Figure::reference(
        "  parse alone: plain answer / whole SSE stream, p50",
        &format!("{parse50:.1} / {acc50:.0} µs"),
        &format!("(p99 {parse99:.1} / {acc99:.0} µs)"),
    ));
    record(Figure::reference(
        "  accounting alone: reserve + settle on 4 caps, p50",
        &format!("{hold50:.3} µs"),
        &format!("(p99 {hold99:.3} µs)"),
    ));
}
