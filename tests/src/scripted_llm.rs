//! A scripted OpenAI-compatible `/chat/completions` server: the one stand-in the tests may use,
//! because no model can be downloaded here. It is a test fixture, never product behaviour.
//!
//! A test queues [`Step`]s (a completion, a tool call, an HTTP error, a delay, a malformed body);
//! each incoming request takes the next step, or asks the optional responder once the queue is
//! empty. Every request is recorded (path, headers, JSON body) so tests can assert what the
//! product sent — for example that a secret never reached the model — together with how long
//! the server took to answer it, so a benchmark can tell the model's own time (scripted delays
//! included) from what the product adds around it.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

/// What the server does with one request.
#[derive(Debug, Clone)]
pub enum Step {
    /// 200 with this chat-completion JSON body.
    Reply(Value),
    /// Any status, extra headers and a raw body (e.g. 429 with `Retry-After`).
    Status { code: u16, headers: Vec<(String, String)>, body: String },
    /// 200 with a body that is not valid JSON.
    Malformed(String),
    /// Waits, then does the inner step.
    Delay(Duration, Box<Step>),
    /// This completion, cut off halfway: streamed, the chunks stop before the finish reason
    /// and `[DONE]`; otherwise the JSON body ends in the middle.
    Truncated(Value),
}

impl Step {
    /// A final assistant answer.
    pub fn text(content: &str) -> Self {
        Self::Reply(completion(json!({"role": "assistant", "content": content}), "stop"))
    }

    /// One tool call; `arguments` is serialized to the string form the API uses.
    pub fn tool_call(name: &str, arguments: Value) -> Self {
        Self::tool_calls(&[(name, arguments)])
    }

    /// Several tool calls in one assistant turn.
    pub fn tool_calls(calls: &[(&str, Value)]) -> Self {
        let calls: Vec<Value> = calls
            .iter()
            .enumerate()
            .map(|(i, (name, args))| {
                json!({
                    "id": format!("call_{i}_{}", uuid_like()),
                    "type": "function",
                    "function": {"name": name, "arguments": args.to_string()},
                })
            })
            .collect();
        Self::Reply(completion(
            json!({"role": "assistant", "content": null, "tool_calls": calls}),
            "tool_calls",
        ))
    }

    /// A tool call whose `arguments` string is given verbatim (e.g. invalid JSON).
    pub fn raw_tool_call(name: &str, arguments: &str) -> Self {
        Self::Reply(completion(
            json!({"role": "assistant", "content": null, "tool_calls": [{
                "id": format!("call_raw_{}", uuid_like()), "type": "function",
                "function": {"name": name, "arguments": arguments},
            }]}),
            "tool_calls",
        ))
    }

    pub fn status(code: u16, body: &str) -> Self {
        Self::Status { code, headers: Vec::new(), body: body.to_owned() }
    }

    pub fn delayed(self, delay: Duration) -> Self {
        Self::Delay(delay, Box::new(self))
    }
}

fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!("{:08x}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// A chat-completion body around one message, with a fixed, plausible usage.
pub fn completion(message: Value, finish_reason: &str) -> Value {
    json!({
        "id": format!("chatcmpl-{}", uuid_like()),
        "object": "chat.completion",
        "created": 0,
        "model": "scripted",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    })
}

/// A completion body as an OpenAI stream: the content in two deltas, each tool call as a
/// delta with its index, then (when `complete`) the finish reason, the usage and `[DONE]`.
/// Incomplete, the stream stops after the first half of the content.
pub fn sse_chunks(body: &Value, complete: bool) -> String {
    let choice = &body["choices"][0];
    let message = &choice["message"];
    let chunk = |delta: Value, finish: Value| {
        let c = json!({"object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], "usage": null});
        format!("data: {c}\n\n")
    };
    let mut out = chunk(json!({"role": "assistant"}), Value::Null);
    if let Some(content) = message["content"].as_str() {
        let mut mid = content.len() / 2;
        while !content.is_char_boundary(mid) {
            mid -= 1;
        }
        out.push_str(&chunk(json!({"content": &content[..mid]}), Value::Null));
        if !complete {
            return out;
        }
        out.push_str(&chunk(json!({"content": &content[mid..]}), Value::Null));
    } else if !complete {
        return out;
    }
    if let Some(calls) = message["tool_calls"].as_array() {
        for (i, call) in calls.iter().enumerate() {
            let mut call = call.clone();
            call["index"] = i.into();
            out.push_str(&chunk(json!({"tool_calls": [call]}), Value::Null));
        }
    }
    out.push_str(&chunk(json!({}), choice["finish_reason"].clone()));
    if !body["usage"].is_null() {
        let usage =
            json!({"object": "chat.completion.chunk", "choices": [], "usage": body["usage"]});
        out.push_str(&format!("data: {usage}\n\n"));
    }
    out.push_str("data: [DONE]\n\n");
    out
}

/// One request the server received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    /// The body as JSON, or `Value::String` of the raw text when it was not JSON.
    pub body: Value,
    /// The server's own time for this request: from its handler being called (headers parsed)
    /// until the response was ready, reading the body and any scripted delay included.
    /// `None` while the request is still being answered.
    pub handling: Option<Duration>,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The whole request as text: handy for "this value appears nowhere" assertions.
    pub fn to_text(&self) -> String {
        format!("{} {} {:?} {}", self.method, self.path, self.headers, self.body)
    }
}

/// Decides the step for a request once the queue is empty.
pub type Responder = Arc<dyn Fn(&Value) -> Step + Send + Sync>;

/// The vector `/embeddings` answers for a text; `None` answers 503 (the endpoint down).
pub type Embedding = Arc<dyn Fn(&str) -> Option<Vec<f32>> + Send + Sync>;

struct Shared {
    queue: Mutex<VecDeque<Step>>,
    /// Answers of `/audio/transcriptions`, in order: (status, body).
    transcriptions: Mutex<VecDeque<(u16, String)>>,
    /// Answers of `/audio/speech`, in order: (status, body); once empty, a real Ogg/Opus
    /// recording ([`crate::ogg::silent_opus`]).
    speech: Mutex<VecDeque<(u16, Vec<u8>)>>,
    responder: Mutex<Option<Responder>>,
    /// How `/embeddings` answers; unset: 500.
    embedding: Mutex<Option<Embedding>>,
    recorded: Mutex<Vec<Recorded>>,
}

/// Whether a chat-completion request body is the main agent's: it offers the delegation tool,
/// a subagent's does not.
pub fn is_main(body: &Value) -> bool {
    body["tools"]
        .as_array()
        .is_some_and(|tools| tools.iter().any(|t| t["function"]["name"] == "delegate_to_sub_agent"))
}

/// How many tool results a chat-completion request's conversation holds (which step of a
/// script this is).
pub fn tool_results(body: &Value) -> usize {
    body["messages"].as_array().map_or(0, |m| m.iter().filter(|m| m["role"] == "tool").count())
}

/// The text of the last user message of a chat-completion request body (empty if none);
/// tool answers' pictures, sent as a user message, are not the user's.
pub fn last_user(body: &Value) -> String {
    body["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user" && !is_tool_pictures(m)))
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// Whether `message` (JSON, as sent) carries tool answers' pictures
/// ([`nexbot_llm::wire::ChatMessage::tool_pictures`]): its text, alone or the first part.
pub fn is_tool_pictures(message: &Value) -> bool {
    let content = &message["content"];
    let text = content.as_str().or_else(|| content[0]["text"].as_str()).unwrap_or_default();
    message["role"] == "user" && text.starts_with(nexbot_llm::wire::TOOL_PICTURES)
}

/// The running server; stops when dropped.
pub struct ScriptedLlm {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: CancellationToken,
}

impl std::fmt::Debug for ScriptedLlm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedLlm").field("addr", &self.addr).finish()
    }
}

impl ScriptedLlm {
    /// Starts on `127.0.0.1` with a random port.
    pub async fn start(steps: Vec<Step>) -> Self {
        Self::start_on(SocketAddr::from(([127, 0, 0, 1], 0)), steps).await
    }

    /// Starts on `bind` (port 0 for a random port): use a Docker network's gateway address or
    /// `0.0.0.0` when containers must reach it.
    pub async fn start_on(bind: SocketAddr, steps: Vec<Step>) -> Self {
        let listener = tokio::net::TcpListener::bind(bind).await.expect("bind scripted LLM");
        Self::start_listening(listener, steps)
    }

    /// Starts on a listener the caller made (one inside another network namespace, say).
    pub fn start_listening(listener: tokio::net::TcpListener, steps: Vec<Step>) -> Self {
        let shared = Arc::new(Shared {
            queue: Mutex::new(steps.into()),
            transcriptions: Mutex::new(VecDeque::new()),
            speech: Mutex::new(VecDeque::new()),
            responder: Mutex::new(None),
            embedding: Mutex::new(None),
            recorded: Mutex::new(Vec::new()),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/chat/completions", post(chat))
            .route("/v1/audio/transcriptions", post(transcription))
            .route("/v1/audio/speech", post(speech))
            .route("/v1/embeddings", post(embeddings))
            .route("/v1/models", get(models))
            .route("/models", get(models))
            .with_state(shared.clone());
        let addr = listener.local_addr().expect("local addr");
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move { stopped.cancelled().await })
                .await;
        });
        Self { addr, shared, stop }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The OpenAI-style base URL, ending in `/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Base URL with another host (e.g. the gateway IP containers use) but this port.
    pub fn base_url_for_host(&self, host: &str) -> String {
        format!("http://{host}:{}/v1", self.addr.port())
    }

    pub fn push(&self, step: Step) {
        self.shared.queue.lock().unwrap().push_back(step);
    }

    /// Used for every request once the queued steps are used up. Without one, an exhausted
    /// script answers 500 so a test notices the extra call.
    pub fn set_responder(&self, responder: impl Fn(&Value) -> Step + Send + Sync + 'static) {
        *self.shared.responder.lock().unwrap() = Some(Arc::new(responder));
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.recorded.lock().unwrap().clone()
    }

    /// Only the chat-completion requests.
    pub fn chat_requests(&self) -> Vec<Recorded> {
        self.requests().into_iter().filter(|r| r.path.ends_with("/chat/completions")).collect()
    }

    /// [`Recorded::handling`] of each chat-completion request, in arrival order: cheaper than
    /// [`ScriptedLlm::chat_requests`] when only the timing is wanted.
    pub fn chat_handling_times(&self) -> Vec<Option<Duration>> {
        let recorded = self.shared.recorded.lock().unwrap();
        recorded
            .iter()
            .filter(|r| r.path.ends_with("/chat/completions"))
            .map(|r| r.handling)
            .collect()
    }

    /// The next answer of `/audio/transcriptions` (OpenAI's speech to text): `status` and
    /// `body`; [`transcript`] makes a successful one. Without one queued it answers 500.
    pub fn push_transcription(&self, status: u16, body: &str) {
        self.shared.transcriptions.lock().unwrap().push_back((status, body.to_owned()));
    }

    /// Only the transcription requests (their multipart body as lossy text).
    pub fn transcription_requests(&self) -> Vec<Recorded> {
        self.requests().into_iter().filter(|r| r.path.ends_with("/audio/transcriptions")).collect()
    }

    /// The next answer of `/audio/speech` (text to speech): `status` and `body`. Without one
    /// queued it answers 200 with a second of silence as Ogg/Opus.
    pub fn push_speech(&self, status: u16, body: &[u8]) {
        self.shared.speech.lock().unwrap().push_back((status, body.to_vec()));
    }

    /// How `/embeddings` answers each input text from now on (`None` from it: a 503).
    pub fn set_embedding(&self, f: impl Fn(&str) -> Option<Vec<f32>> + Send + Sync + 'static) {
        *self.shared.embedding.lock().unwrap() = Some(Arc::new(f));
    }

    /// Only the embeddings requests (their JSON bodies).
    pub fn embeddings_requests(&self) -> Vec<Recorded> {
        self.requests().into_iter().filter(|r| r.path.ends_with("/embeddings")).collect()
    }

    /// Only the speech requests (their JSON bodies).
    pub fn speech_requests(&self) -> Vec<Recorded> {
        self.requests().into_iter().filter(|r| r.path.ends_with("/audio/speech")).collect()
    }

    pub fn remaining_steps(&self) -> usize {
        self.shared.queue.lock().unwrap().len()
    }
}

impl Drop for ScriptedLlm {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Records a request and returns its index, for [`finish`] to fill in its handling time.
fn record(shared: &Shared, method: &str, path: &str, headers: &HeaderMap, body: Value) -> usize {
    let headers = headers
        .iter()
        .map(|(k, v)| (k.to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
        .collect();
    let mut recorded = shared.recorded.lock().unwrap();
    recorded.push(Recorded {
        method: method.to_owned(),
        path: path.to_owned(),
        headers,
        body,
        handling: None,
    });
    recorded.len() - 1
}

fn finish(shared: &Shared, index: usize, started: Instant) {
    if let Some(entry) = shared.recorded.lock().unwrap().get_mut(index) {
        entry.handling = Some(started.elapsed());
    }
}

async fn models(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let started = Instant::now();
    let index = record(&shared, "GET", request.uri().path(), request.headers(), Value::Null);
    let response =
        axum::Json(json!({"object": "list", "data": [{"id": "scripted", "object": "model"}]}))
            .into_response();
    finish(&shared, index, started);
    response
}

/// A successful transcription's body (`response_format=json`).
pub fn transcript(text: &str) -> String {
    json!({ "text": text }).to_string()
}

async fn transcription(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let started = Instant::now();
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, 64 * 1024 * 1024).await.unwrap_or_default();
    let text = Value::String(String::from_utf8_lossy(&bytes).into_owned());
    let index = record(&shared, parts.method.as_str(), parts.uri.path(), &parts.headers, text);
    let next = shared.transcriptions.lock().unwrap().pop_front();
    let (status, body) =
        next.unwrap_or((500, r#"{"error":{"message":"no transcription scripted"}}"#.into()));
    let status = axum::http::StatusCode::from_u16(status)
        .unwrap_or(axum::http::StatusCode::INTERNAL_SERVER_ERROR);
    let response = (status, [("content-type", "application/json")], body).into_response();
    finish(&shared, index, started);
    response
}

async fn speech(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let started = Instant::now();
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, 64 * 1024 * 1024).await.unwrap_or_default();
    let json: Value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    let index = record(&shared, parts.method.as_str(), parts.uri.path(), &parts.headers, json);
    let next = shared.speech.lock().unwrap().pop_front();
    let (status, body) = next.unwrap_or_else(|| (200, crate::ogg::silent_opus(50)));
    let status = axum::http::StatusCode::from_u16(status)
        .unwrap_or(axum::http::StatusCode::INTERNAL_SERVER_ERROR);
    let kind = if status.is_success() { "audio/ogg" } else { "application/json" };
    let response = (status, [("content-type", kind)], body).into_response();
    finish(&shared, index, started);
    response
}

/// OpenAI's `/embeddings`: one vector per input text, from [`ScriptedLlm::set_embedding`].
async fn embeddings(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let started = Instant::now();
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, 64 * 1024 * 1024).await.unwrap_or_default();
    let json: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let index =
        record(&shared, parts.method.as_str(), parts.uri.path(), &parts.headers, json.clone());
    let inputs: Vec<String> = match &json["input"] {
        Value::String(one) => vec![one.clone()],
        Value::Array(many) => many.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect(),
        _ => Vec::new(),
    };
    let embedding = shared.embedding.lock().unwrap().clone();
    let vectors: Option<Vec<Vec<f32>>> = match embedding {
        Some(f) => inputs.iter().map(|t| f(t)).collect(),
        None => None,
    };
    let (status, body) = match vectors {
        Some(vectors) => {
            let data: Vec<Value> = vectors
                .into_iter()
                .enumerate()
                .map(
                    |(i, v)| serde_json::json!({"object": "embedding", "index": i, "embedding": v}),
                )
                .collect();
            (200, serde_json::json!({"object": "list", "data": data, "model": json["model"]}))
        }
        None => (503, serde_json::json!({"error": {"message": "embeddings are down"}})),
    };
    let status = axum::http::StatusCode::from_u16(status)
        .unwrap_or(axum::http::StatusCode::INTERNAL_SERVER_ERROR);
    let response =
        (status, [("content-type", "application/json")], body.to_string()).into_response();
    finish(&shared, index, started);
    response
}

async fn chat(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let started = Instant::now();
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, 64 * 1024 * 1024).await.unwrap_or_default();
    let json: Value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    let index =
        record(&shared, parts.method.as_str(), parts.uri.path(), &parts.headers, json.clone());
    let next = shared.queue.lock().unwrap().pop_front();
    let step = match next {
        Some(step) => step,
        None => match shared.responder.lock().unwrap().clone() {
            Some(responder) => responder(&json),
            None => Step::status(500, r#"{"error":{"message":"scripted LLM: script exhausted"}}"#),
        },
    };
    let streaming = json.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let response = play(step, streaming).await;
    finish(&shared, index, started);
    response
}

async fn play(mut step: Step, streaming: bool) -> Response {
    loop {
        match step {
            Step::Delay(delay, inner) => {
                tokio::time::sleep(delay).await;
                step = *inner;
            }
            Step::Reply(body) if streaming => {
                let sse = sse_chunks(&body, true);
                return ([("content-type", "text/event-stream")], sse).into_response();
            }
            Step::Truncated(body) if streaming => {
                let sse = sse_chunks(&body, false);
                return ([("content-type", "text/event-stream")], sse).into_response();
            }
            Step::Truncated(body) => {
                let text = body.to_string();
                let half = text[..text.len() / 2].to_owned();
                return ([("content-type", "application/json")], half).into_response();
            }
            Step::Reply(body) => return axum::Json(body).into_response(),
            Step::Malformed(text) => {
                return ([("content-type", "application/json")], text).into_response()
            }
            Step::Status { code, headers, body } => {
                let mut response = Response::new(Body::from(body));
                *response.status_mut() =
                    StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                response
                    .headers_mut()
                    .insert("content-type", HeaderValue::from_static("application/json"));
                for (k, v) in headers {
                    if let (Ok(k), Ok(v)) =
                        (HeaderName::try_from(k.as_str()), HeaderValue::try_from(v.as_str()))
                    {
                        response.headers_mut().insert(k, v);
                    }
                }
                return response;
            }
        }
    }
}
