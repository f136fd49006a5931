//! The LLM relay: an OpenAI-compatible endpoint on the proxy's listener that holds the real
//! provider keys so no container ever does.
//!
//! A container calls `POST /v1/chat/completions` (or `GET /v1/models`) on the listener with its
//! task's token. The relay checks the token, reads the call, bounds its worst case (adding
//! `max_tokens` when the call has none, refusing `n` other than 1) and reserves that worst
//! case on the task's budget — a call that would pass the budget is refused before anything
//! is sent. Then it forwards the call along the provider chain (`egress.relay.providers`):
//! the first provider by its breaker's plan gets it with its own key; when it answers with a
//! status whose [`ErrorClass`] moves on (429, 5xx, 401/403, no quota) or cannot be reached,
//! the next one gets it, each at most once, within the relay's timeout. Nothing of a failed
//! attempt reaches the container; once an answer streams back there is no fallback. The
//! answer streams back as it arrives, and when it ends the reservation is settled with the
//! tokens the provider reported (or the bytes ÷ 3 estimate; an error answer costs nothing).
//! Refusals are OpenAI-style error JSON so any client shows them sensibly.
//!
//! A chat call of a task is scanned for the values it holds (bound or not) and every other
//! value of its chat and of the operator that the host watches for it
//! ([`crate::TaskCredentials::grant_watching`]), in every form the task's redactor knows: a
//! subagent may have been given a value over stdin, or picked one up elsewhere, and the model
//! may echo it into its next call. A hit is replaced by its label before the
//! call goes to the provider, and named (never shown) in a warning and the audit line.

use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::StreamExt;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited, StreamBody};
use hyper::body::{Frame, Incoming};
use nexbot_llm::context::estimate_tokens;
use nexbot_llm::provider::Timeouts;
use nexbot_llm::usage::{estimate, UsageTap};
use nexbot_llm::{classify, Chain, ErrorClass, Hold, LlmError, Provider, RetryPolicy};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{json, Map, Value};
use tokio::time::Instant;

use super::audit::{ConnAudit, Direction, Origin, Verdict};
use super::config::{ProviderKeys, RelayConfig};
use super::credentials::TaskSecrets;
use super::meter::{full, BoxError, MeteredBody, ResponseBody};
use super::tokens::{RelayCost, TokenError};
use super::Shared;

/// The most of a provider's error answer read (to classify it, and to pass it on).
const MAX_ERROR_BYTES: usize = 64 << 10;

/// One provider of the chain as the relay calls it.
struct Upstream {
    name: String,
    base: reqwest::Url,
    chat_url: String,
    host: String,
    port: u16,
    /// The model put into calls sent here; `None`: the container's is sent unchanged.
    model: Option<String>,
    /// Its prices (the spec as configured): what a call it answers costs.
    pricing: nexbot_llm::ProviderSpec,
    /// `Bearer <key>`, marked sensitive so no header dump shows it.
    authorization: Option<HeaderValue>,
}

/// The provider side of the relay: where calls go and the keys they carry.
pub(crate) struct Relay {
    client: reqwest::Client,
    /// In the chain's order: `upstreams[i]` is the chain's provider `i`.
    upstreams: Vec<Upstream>,
    /// Breakers and counters; `None` when no provider is configured.
    chain: Option<Chain>,
    config: RelayConfig,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let providers: Vec<_> = self
            .upstreams
            .iter()
            .map(|u| format!("{} {} (key {})", u.name, u.base, u.authorization.is_some()))
            .collect();
        f.debug_struct("Relay").field("providers", &providers).finish_non_exhaustive()
    }
}

/// Why the relay could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum RelaySetupError {
    #[error("the provider key is not usable in an HTTP header (control characters?)")]
    KeyNotAHeader,
    #[error("relay HTTP client: {0}")]
    Client(#[from] reqwest::Error),
    #[error("relay provider {name}: {reason}")]
    Provider { name: String, reason: String },
}

impl Relay {
    /// `config` is validated already (so the base URLs parse).
    pub(crate) fn new(config: &RelayConfig, keys: &ProviderKeys) -> Result<Self, RelaySetupError> {
        let client = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(10))
            // A redirect could carry the key to a host the operator never named.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent("nexbot-relay")
            .build()?;
        let timeouts = Timeouts {
            connect: std::time::Duration::from_secs(10),
            call: config.timeout(),
            stall: config.timeout(),
        };
        let mut upstreams = Vec::new();
        let mut providers = Vec::new();
        for provider in config.chain() {
            let spec = provider.spec;
            let name = spec.display_name();
            let invalid = |reason: String| RelaySetupError::Provider { name: name.clone(), reason };
            let base = reqwest::Url::parse(&spec.base_url)
                .map_err(|e| invalid(format!("base_url is not a URL: {e}")))?;
            let key = spec.api_key_env.as_deref().and_then(|env| keys.get(env)).cloned();
            if key.is_none() && provider.sets_model {
                if let Some(env) = &spec.api_key_env {
                    tracing::warn!(
                        provider = %name,
                        env = %env,
                        "LLM relay: no key in the provider's variable; its calls carry none"
                    );
                }
            }
            let authorization = match &key {
                Some(key) => {
                    let mut value =
                        HeaderValue::from_str(&format!("Bearer {}", key.expose_secret()))
                            .map_err(|_| RelaySetupError::KeyNotAHeader)?;
                    value.set_sensitive(true);
                    Some(value)
                }
                None => None,
            };
            let chain_provider = Provider::new(spec.clone(), key, timeouts)
                .map_err(|e: LlmError| invalid(e.message))?;
            upstreams.push(Upstream {
                name,
                host: base.host_str().unwrap_or_default().to_owned(),
                port: base.port_or_known_default().unwrap_or(0),
                chat_url: chain_provider.url().to_owned(),
                base,
                model: provider.sets_model.then(|| spec.model.clone()),
                pricing: spec.clone(),
                authorization,
            });
            providers.push(chain_provider);
        }
        // One attempt per provider: the subagent's own client retries the whole call.
        let policy =
            RetryPolicy { max_retries: 0, total: config.timeout(), ..RetryPolicy::default() };
        let chain = (!providers.is_empty()).then(|| Chain::new(providers, policy));
        Ok(Self { client, upstreams, chain, config: config.clone() })
    }

    fn endpoint(base: &reqwest::Url, path: &str) -> String {
        format!("{}/{path}", base.as_str().trim_end_matches('/'))
    }
}

/// An OpenAI-style error response.
fn openai_error(
    status: StatusCode,
    kind: &str,
    code: &str,
    message: String,
) -> Response<ResponseBody> {
    let body = json!({"error": {"message": message, "type": kind, "param": null, "code": code}});
    let mut response = Response::new(full(body.to_string()));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn refuse(
    audit: &ConnAudit,
    verdict: Verdict,
    status: StatusCode,
    (kind, code): (&str, &str),
    message: String,
) -> Response<ResponseBody> {
    audit.verdict(verdict, format!("{code}: {message}"));
    openai_error(status, kind, code, format!("nexbot relay: {message}"))
}

/// 403, not 429, for a budget: it will not come back, and clients retry a 429.
fn refuse_budget(audit: &ConnAudit, message: String) -> Response<ResponseBody> {
    refuse(
        audit,
        Verdict::Denied,
        StatusCode::FORBIDDEN,
        ("insufficient_quota", "task_budget_exhausted"),
        message,
    )
}

/// A missing, unknown or expired task token.
fn refuse_token(audit: &ConnAudit, message: String) -> Response<ResponseBody> {
    let kind = ("invalid_request_error", "invalid_api_key");
    refuse(audit, Verdict::Denied, StatusCode::UNAUTHORIZED, kind, message)
}

fn bearer(request: &Request<Incoming>) -> Option<SecretString> {
    let value = request.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| SecretString::from(token.trim().to_owned()))
}

enum Route {
    Chat,
    Models,
}

/// A chat call read, checked and bounded, ready to be sent to any provider of the chain.
struct ChatCall {
    body: Map<String, Value>,
    /// The container's `model`, as it sent it.
    model: Option<Value>,
    /// The body as first serialised (with the container's model).
    payload: Bytes,
    /// The completion tokens the call may produce at most.
    max_tokens: u64,
}

impl ChatCall {
    /// The body for provider `i` of the chain: the primary gets the call's model (one of
    /// `relay.models`, forced by [`chat_call`]) or, with no such list, its own; a fallback
    /// gets its own.
    fn payload_for(&mut self, i: usize, upstream: &Upstream, listed: bool) -> Bytes {
        let model = match &upstream.model {
            Some(own) if i != 0 || !listed => Some(Value::String(own.clone())),
            _ => self.model.clone(),
        };
        if model == self.model {
            return self.payload.clone();
        }
        if let Some(model) = model {
            self.body.insert("model".into(), model);
        }
        serde_json::to_vec(&self.body).map(Bytes::from).unwrap_or_default()
    }
}

/// Serves one origin-form request on the listener. `running`: for a pool container, the task
/// it runs now (`Some(None)`: none); `None` for a source that is not a pool container.
pub(crate) async fn handle(
    req: Request<Incoming>,
    origin: Origin,
    running: Option<Option<String>>,
    shared: Arc<Shared>,
) -> Response<ResponseBody> {
    let relay = &shared.relay;
    let (host, port) =
        relay.upstreams.first().map(|u| (u.host.clone(), u.port)).unwrap_or_default();
    let audit = ConnAudit::new(shared.audit.clone(), "relay", origin, host, port);
    let route = match (req.method(), req.uri().path()) {
        (&Method::POST, "/v1/chat/completions") => Route::Chat,
        (&Method::GET, "/v1/models") => Route::Models,
        (method, path) => {
            let message = format!(
                "{method} {path} is not served here; the relay serves POST /v1/chat/completions \
                 and GET /v1/models, and proxy requests need an absolute URL or CONNECT"
            );
            return refuse(
                &audit,
                Verdict::Denied,
                StatusCode::NOT_FOUND,
                ("invalid_request_error", "unknown_url"),
                message,
            );
        }
    };
    let Some(chain) = &relay.chain else {
        let message = "no provider is configured (egress.relay.providers or \
                       egress.relay.provider_base_url)"
            .to_owned();
        return refuse(
            &audit,
            Verdict::Error,
            StatusCode::SERVICE_UNAVAILABLE,
            ("server_error", "relay_not_configured"),
            message,
        );
    };
    let authorized = match bearer(&req) {
        Some(token) => shared.tokens.authorize(&token),
        None => Err(TokenError::Invalid),
    };
    let task_id = match authorized {
        Ok(task_id) => task_id,
        Err(err @ TokenError::BudgetExhausted { .. }) => {
            if let TokenError::BudgetExhausted { task_id, .. } = &err {
                audit.task(task_id.clone());
            }
            return refuse_budget(&audit, err.to_string());
        }
        Err(err) => {
            return refuse_token(&audit, err.to_string());
        }
    };
    audit.task(task_id.clone());
    // A token is good only from the container running its task, and only while it does: a
    // process left over from the task (or a token carried to another container) gets nothing.
    if let (Some(running), Some(container)) = (&running, &audit.origin().container) {
        let refusal = match running {
            None => Some(format!(
                "idle_container: container {container} runs no task; the token of task \
                 {task_id} is not good there"
            )),
            Some(running) if *running != task_id => Some(format!(
                "task_mismatch: the token is task {task_id}'s, but container {container} runs \
                 task {running}"
            )),
            Some(_) => None,
        };
        if let Some(message) = refusal {
            let kind = ("invalid_request_error", "task_mismatch");
            return refuse(&audit, Verdict::Denied, StatusCode::FORBIDDEN, kind, message);
        }
    }
    let (mut call, hold) = match route {
        Route::Models => (None, None),
        Route::Chat => {
            let secrets = shared.credentials.for_task(&task_id);
            let scan = secrets.as_deref().map(|s| (task_id.as_str(), s));
            let call = match chat_call(req, relay, &audit, scan).await {
                Ok(call) => call,
                Err(response) => return response,
            };
            let prompt = estimate_tokens(call.payload.len());
            let worst = prompt.saturating_add(call.max_tokens);
            match shared.tokens.reserve(&task_id, worst) {
                Ok(hold) => (Some(call), Some(hold)),
                Err(TokenError::WouldExceed(exceeded)) => {
                    let message = format!(
                        "{exceeded}: the prompt is estimated at {prompt} tokens (request bytes \
                         ÷ 3) and max_tokens is {}",
                        call.max_tokens
                    );
                    return refuse_budget(&audit, message);
                }
                Err(err) => {
                    return refuse_token(&audit, err.to_string());
                }
            }
        }
    };
    let meter = Meter {
        tap: UsageTap::new(false),
        hold,
        cost: shared.tokens.cost_of(&task_id),
        pricing: None,
        answered: None,
        request_bytes: audit.counted(Direction::Up),
        audit: audit.clone(),
    };
    forward(&shared, chain, call.as_mut(), meter, audit).await
}

/// The last answer a provider gave that moved the call on, kept in case no later provider
/// does better: the container then gets it as it was.
struct Answered {
    i: usize,
    /// Its place in the list of failed attempts (`None`: it did not fail).
    noted: Option<usize>,
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

/// Sends the call along the chain; returns the first answer that does not move on (or the
/// last one, or why no provider answered).
async fn forward(
    shared: &Shared,
    chain: &Chain,
    mut call: Option<&mut ChatCall>,
    mut meter: Meter,
    audit: Arc<ConnAudit>,
) -> Response<ResponseBody> {
    let relay = &shared.relay;
    let deadline = Instant::now() + relay.config.timeout();
    let plan = chain.plan();
    let task_end = audit.task_cut();
    let mut failed: Vec<String> = Vec::new();
    let mut answered: Option<Answered> = None;
    let mut unreachable: Option<(bool, String)> = None;
    for &(i, _) in &plan {
        let upstream = &relay.upstreams[i];
        let Some(remaining) =
            deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero())
        else {
            break;
        };
        let mut request = match call.as_deref_mut() {
            Some(call) => relay
                .client
                .post(&upstream.chat_url)
                .header(header::CONTENT_TYPE, "application/json")
                .body(call.payload_for(i, upstream, !relay.config.models.is_empty())),
            None => relay.client.get(Relay::endpoint(&upstream.base, "models")),
        };
        request = request.timeout(remaining);
        if let Some(authorization) = &upstream.authorization {
            request = request.header(header::AUTHORIZATION, authorization.clone());
        }
        let sent = match &task_end {
            Some(end) => tokio::select! {
                sent = request.send() => Some(sent),
                () = end.cancelled() => None,
            },
            None => Some(request.send().await),
        };
        let Some(sent) = sent else {
            // The task ended while its call was out: cut it (the meter charges the whole
            // reservation, which the task's end counted already).
            let message = "the task has ended; its call was cut".to_owned();
            return refuse(
                &audit,
                Verdict::Error,
                StatusCode::FORBIDDEN,
                ("invalid_request_error", "task_ended"),
                message,
            );
        };
        let response = match sent {
            Ok(response) => response,
            Err(err) => {
                let timeout = err.is_timeout();
                let class = if timeout { ErrorClass::Timeout } else { ErrorClass::Transport };
                chain.record(i, Err(class));
                let what = if timeout { "no answer in time" } else { "cannot be reached" };
                let err = err.without_url().to_string();
                tracing::warn!(provider = %upstream.name, error = %err, "LLM relay: provider {what}");
                failed.push(format!("{}: {what}", upstream.name));
                unreachable = Some((timeout, err));
                continue;
            }
        };
        let status = response.status();
        if status.is_success() {
            chain.record(i, Ok(()));
            chain.record_answer(i, None);
            meter.answered = Some(true);
            return answer(upstream, i, status, response, failed, meter, audit);
        }
        let headers = response.headers().clone();
        let body = read_error_body(response, deadline).await;
        let class = classify(status.as_u16(), &body);
        if !(class.is_retryable() || class.skips_provider()) {
            // The call itself is wrong (bad request, too long): the provider is fine, and
            // another one would say the same.
            let answer = Answered { i, noted: None, status, headers, body };
            return buffered(shared, upstream, answer, failed, meter, audit);
        }
        chain.record(i, Err(class));
        tracing::warn!(provider = %upstream.name, class = %class, status = status.as_u16(), "LLM relay: provider failed; trying the next one if any");
        let noted = Some(failed.len());
        failed.push(format!("{}: {class} (HTTP {})", upstream.name, status.as_u16()));
        answered = Some(Answered { i, noted, status, headers, body });
    }
    if let Some(last) = answered {
        // Every provider failed; the last HTTP answer says best what to do (e.g. Retry-After).
        if let Some(noted) = last.noted {
            failed.remove(noted);
        }
        let upstream = &relay.upstreams[last.i];
        return buffered(shared, upstream, last, failed, meter, audit);
    }
    if let Some(hold) = meter.hold.take() {
        hold.release();
    }
    let (status, code, detail) = match unreachable {
        Some((false, err)) => (StatusCode::BAD_GATEWAY, "provider_unreachable", err),
        Some((true, err)) => (StatusCode::GATEWAY_TIMEOUT, "provider_timeout", err),
        None => (
            StatusCode::GATEWAY_TIMEOUT,
            "provider_timeout",
            format!("no answer within {}s", relay.config.timeout_secs),
        ),
    };
    let message = match failed.len() {
        0 | 1 => format!("the provider could not be reached: {detail}"),
        _ => format!("no provider could be reached ({})", failed.join("; ")),
    };
    refuse(&audit, Verdict::Error, status, ("server_error", code), message)
}

/// Reads an error answer up to [`MAX_ERROR_BYTES`] (the rest is left out) or the deadline.
async fn read_error_body(mut response: reqwest::Response, deadline: Instant) -> Bytes {
    let mut body = Vec::new();
    while body.len() < MAX_ERROR_BYTES {
        match tokio::time::timeout_at(deadline, response.chunk()).await {
            Ok(Ok(Some(chunk))) => {
                let room = MAX_ERROR_BYTES - body.len();
                body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            _ => break,
        }
    }
    Bytes::from(body)
}

/// Reads and checks the container's request: a JSON object, `n` of 1, `max_tokens` bounded
/// (added when missing); asks for streamed usage when configured. With `secrets` (the task's
/// id and credentials) every value found in it is replaced by its label first.
async fn chat_call(
    req: Request<Incoming>,
    relay: &Relay,
    audit: &ConnAudit,
    secrets: Option<(&str, &TaskSecrets)>,
) -> Result<ChatCall, Response<ResponseBody>> {
    let limit = relay.config.max_request_bytes;
    let read = tokio::time::timeout(
        relay.config.timeout(),
        Limited::new(req.into_body(), limit).collect(),
    );
    let bad = |verdict, code, message: String| {
        let status = match code {
            "request_too_large" => StatusCode::PAYLOAD_TOO_LARGE,
            "body_timeout" => StatusCode::REQUEST_TIMEOUT,
            _ => StatusCode::BAD_REQUEST,
        };
        let code = if code == "body_timeout" { "bad_body" } else { code };
        refuse(audit, verdict, status, ("invalid_request_error", code), message)
    };
    let bytes = match read.await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(err)) if err.is::<http_body_util::LengthLimitError>() => {
            let message = format!("request body is larger than {limit} bytes");
            return Err(bad(Verdict::Denied, "request_too_large", message));
        }
        Ok(Err(err)) => {
            let message = format!("request body could not be read: {err}");
            return Err(bad(Verdict::Error, "bad_body", message));
        }
        Err(_) => {
            let message = "request body was not received in time".to_owned();
            return Err(bad(Verdict::Error, "body_timeout", message));
        }
    };
    let mut body = match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(map)) => map,
        _ => {
            let message = "request body must be a JSON object".to_owned();
            return Err(bad(Verdict::Denied, "bad_body", message));
        }
    };
    if let Some((task_id, secrets)) = secrets {
        let mut found = BTreeSet::new();
        let mut whole = Value::Object(std::mem::take(&mut body));
        scrub_value(&mut whole, secrets, &mut found);
        if let Value::Object(map) = whole {
            body = map;
        }
        if !found.is_empty() {
            let names: Vec<String> = found.into_iter().collect();
            tracing::warn!(
                task_id,
                secrets = ?names,
                path = "relay",
                "egress: a task's LLM call carried secret values; they were redacted before it \
                 went to the provider"
            );
            audit.mention_secrets(names);
        }
    }
    let changed = plain_call(&mut body, &relay.config.models);
    if !changed.is_empty() {
        tracing::info!(
            fields = %changed.join(", "),
            "LLM relay: a task's call was reduced to a plain chat request (fields dropped, model set)"
        );
    }
    match body.get("n") {
        None | Some(Value::Null) => {}
        Some(n) if n.as_u64() == Some(1) => {}
        Some(_) => {
            let message = "n must be 1: the relay bounds a call's cost by one answer; ask for \
                           more answers with more calls"
                .to_owned();
            return Err(bad(Verdict::Denied, "unsupported_parameter", message));
        }
    }
    let max_tokens = match bound_max_tokens(&mut body, relay.config.default_max_tokens) {
        Ok(max) => max,
        Err(message) => return Err(bad(Verdict::Denied, "invalid_max_tokens", message)),
    };
    let streaming = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    if streaming && relay.config.request_stream_usage {
        let options = body.entry("stream_options").or_insert_with(|| json!({}));
        if let Some(options) = options.as_object_mut() {
            options.insert("include_usage".into(), Value::Bool(true));
        }
    }
    let payload = Bytes::from(serde_json::to_vec(&body).unwrap_or_default());
    audit.count(Direction::Up, payload.len());
    Ok(ChatCall { model: body.get("model").cloned(), body, payload, max_tokens })
}

/// The fields of a plain function-calling chat request: everything else a container sends
/// (provider-side tools, web search options, plugins, `user`, vendor extensions) is dropped,
/// so a task cannot make the provider fetch, search or run anything on its own, or bill
/// features the operator never chose.
const CHAT_FIELDS: &[&str] = &[
    "model",
    "messages",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "stream",
    "stream_options",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "response_format",
    "n",
];

/// Keeps only [`CHAT_FIELDS`] and function tools in `body`, and one of `models` as its model
/// (the first when it names another); returns what was dropped or changed, by name.
fn plain_call(body: &mut Map<String, Value>, models: &[String]) -> Vec<String> {
    let mut changed: Vec<String> =
        body.keys().filter(|k| !CHAT_FIELDS.contains(&k.as_str())).cloned().collect();
    body.retain(|key, _| CHAT_FIELDS.contains(&key.as_str()));
    if let Some(Value::Array(tools)) = body.get_mut("tools") {
        let before = tools.len();
        tools.retain(|tool| tool.get("type").and_then(Value::as_str) == Some("function"));
        if tools.len() < before {
            changed.push(format!("tools ({} not of type function)", before - tools.len()));
        }
    }
    if let Some(first) = models.first() {
        let asked = body.get("model").and_then(Value::as_str);
        if !asked.is_some_and(|m| models.iter().any(|allowed| allowed == m)) {
            changed.push("model".to_owned());
            body.insert("model".into(), Value::String(first.clone()));
        }
    }
    changed
}

/// Replaces every secret value in the strings (keys included) and numbers of `value` with its
/// label, adding the names found to `found`. Walking the parsed call keeps it valid JSON
/// whatever a label replaces.
fn scrub_value(value: &mut Value, secrets: &TaskSecrets, found: &mut BTreeSet<String>) {
    match value {
        Value::String(text) => {
            let (clean, names) = secrets.scrub(text);
            if !names.is_empty() {
                *text = clean;
                found.extend(names);
            }
        }
        Value::Number(number) => {
            let (clean, names) = secrets.scrub(&number.to_string());
            if !names.is_empty() {
                *value = Value::String(clean);
                found.extend(names);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|item| scrub_value(item, secrets, found)),
        Value::Object(map) => {
            for (key, mut item) in std::mem::take(map) {
                scrub_value(&mut item, secrets, found);
                let (key, names) = secrets.scrub(&key);
                found.extend(names);
                map.insert(key, item);
            }
        }
        Value::Null | Value::Bool(_) => {}
    }
}

/// The most completion tokens the call may produce: the larger of `max_tokens` and
/// `max_completion_tokens`, or `default` (then added as `max_tokens`) when it gives neither.
fn bound_max_tokens(body: &mut Map<String, Value>, default: u64) -> Result<u64, String> {
    let mut max: Option<u64> = None;
    for key in ["max_tokens", "max_completion_tokens"] {
        match body.get(key) {
            None => {}
            Some(Value::Null) => {
                body.remove(key);
            }
            Some(value) => match value.as_u64().filter(|n| *n > 0) {
                Some(n) => max = Some(max.map_or(n, |m| m.max(n))),
                None => return Err(format!("{key} must be a whole number greater than 0")),
            },
        }
    }
    Ok(match max {
        Some(max) => max,
        None => {
            body.insert("max_tokens".into(), default.into());
            default
        }
    })
}

/// Response headers worth passing back; everything else (cookies, provider internals) stays.
fn forwarded(name: &header::HeaderName) -> bool {
    let name = name.as_str();
    matches!(name, "content-type" | "cache-control" | "retry-after" | "x-request-id")
        || name.starts_with("x-ratelimit-")
}

/// Records who answered, and how, before the answer goes back.
fn answered_by(
    upstream: &Upstream,
    i: usize,
    status: StatusCode,
    failed: &[String],
    audit: &ConnAudit,
) {
    audit.redirect(upstream.host.clone(), upstream.port);
    audit.provider(&upstream.name, i != 0);
    let mut reason = format!("status {} from {}", status.as_u16(), upstream.name);
    if !failed.is_empty() {
        reason.push_str(&format!(" after {}", failed.join("; ")));
    }
    audit.verdict(Verdict::Allowed, reason);
}

fn head(status: StatusCode, headers: &HeaderMap) -> Response<ResponseBody> {
    let mut out = Response::new(full(""));
    *out.status_mut() = status;
    for (name, value) in headers {
        if forwarded(name) {
            out.headers_mut().append(name.clone(), value.clone());
        }
    }
    out
}

/// A successful answer, streamed back as it arrives.
fn answer(
    upstream: &Upstream,
    i: usize,
    status: StatusCode,
    response: reqwest::Response,
    failed: Vec<String>,
    mut meter: Meter,
    audit: Arc<ConnAudit>,
) -> Response<ResponseBody> {
    answered_by(upstream, i, status, &failed, &audit);
    let mut out = head(status, response.headers());
    let sse = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    meter.tap = UsageTap::new(sse);
    meter.pricing = Some(upstream.pricing.clone());
    // The meter lives in the stream, so it settles the task's reservation when the body ends
    // or is dropped (the client went away); the metered body counts the bytes and holds the
    // audit guard.
    let stream = Box::pin(response.bytes_stream()).map(move |chunk| match chunk {
        Ok(chunk) => {
            meter.tap.feed(&chunk);
            Ok(Frame::data(chunk))
        }
        Err(err) => {
            let err = err.without_url();
            meter.audit.reason(format!("provider stream failed: {err}"));
            Err(BoxError::from(err))
        }
    });
    let body = MeteredBody::new(StreamBody::new(stream), audit, Direction::Down, u64::MAX, None);
    *out.body_mut() = body.boxed_unsync();
    out
}

/// An error answer read already, passed back as it was (not billed) — but with any provider
/// key it echoes replaced.
fn buffered(
    shared: &Shared,
    upstream: &Upstream,
    answer: Answered,
    failed: Vec<String>,
    mut meter: Meter,
    audit: Arc<ConnAudit>,
) -> Response<ResponseBody> {
    meter.answered = Some(false);
    answered_by(upstream, answer.i, answer.status, &failed, &audit);
    let mut out = head(answer.status, &answer.headers);
    let chunk = match std::str::from_utf8(&answer.body) {
        Ok(text) => Bytes::from(shared.audit.scrub(text)),
        Err(_) => answer.body,
    };
    let stream = futures_util::stream::once(async move {
        let _settles_when_sent = meter;
        Ok::<_, BoxError>(Frame::data(chunk))
    });
    let body =
        MeteredBody::new(StreamBody::new(Box::pin(stream)), audit, Direction::Down, u64::MAX, None);
    *out.body_mut() = body.boxed_unsync();
    out
}

/// Watches the answer's bytes; settles the task's reservation when the body ends or the
/// client goes away: with the tokens the provider reported, else the bytes ÷ 3 estimate, and
/// nothing for an error answer (providers do not bill those). A call abandoned before any
/// answer is charged its whole reservation.
struct Meter {
    tap: UsageTap,
    /// The chat call's reservation (none for `GET /v1/models`).
    hold: Option<Hold>,
    /// Where the task's calls add what they cost, and the prices of the provider answering.
    cost: Option<Arc<RelayCost>>,
    pricing: Option<nexbot_llm::ProviderSpec>,
    /// Whether the container gets a provider's answer, and a successful one; `None` while
    /// the call is out (dropped then: the client went away or the task ended, and the
    /// provider may bill the call anyway).
    answered: Option<bool>,
    request_bytes: u64,
    audit: Arc<ConnAudit>,
}

impl Meter {
    /// Adds what the call cost in money: its reported prompt and completion tokens at the
    /// answering provider's prices; tokens without a split (estimated, abandoned mid-answer,
    /// a total only) at the output price, the higher bound. A call dropped before any
    /// provider answered is not priced (which one would bill it is unknown); its tokens still
    /// count.
    fn price(&self, tokens: u64) {
        let (Some(cost), Some(pricing)) = (&self.cost, &self.pricing) else { return };
        if tokens == 0 {
            return;
        }
        let micros = match self.tap.split() {
            Some((prompt, completion)) if prompt + completion == tokens => {
                pricing.cost_micros(prompt, completion)
            }
            _ => pricing.cost_micros(0, tokens),
        };
        cost.add(micros);
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        let Some(hold) = self.hold.take() else { return };
        let tokens = match (self.answered, self.tap.finish()) {
            (None, _) => {
                // Abandoned in flight: the hold charges its whole reservation.
                let amount = hold.amount();
                drop(hold);
                self.audit.tokens(amount);
                self.price(amount);
                return;
            }
            (Some(false), _) => 0,
            (Some(true), Some(reported)) => reported,
            (Some(true), None) => estimate(self.request_bytes, self.tap.bytes()),
        };
        hold.settle(tokens);
        self.audit.tokens(tokens);
        self.price(tokens);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_tokens_is_bounded_and_added_when_missing() {
        let mut body = json!({"model": "m"}).as_object().unwrap().clone();
        assert_eq!(bound_max_tokens(&mut body, 4096), Ok(4096));
        assert_eq!(body["max_tokens"], 4096);
        let mut body =
            json!({"max_tokens": 10, "max_completion_tokens": 30}).as_object().unwrap().clone();
        assert_eq!(bound_max_tokens(&mut body, 4096), Ok(30));
        assert_eq!(body["max_tokens"], 10, "a given bound is left as it is");
        let mut body = json!({"max_completion_tokens": 7}).as_object().unwrap().clone();
        assert_eq!(bound_max_tokens(&mut body, 4096), Ok(7));
        assert!(!body.contains_key("max_tokens"));
        let mut body = json!({"max_tokens": null}).as_object().unwrap().clone();
        assert_eq!(bound_max_tokens(&mut body, 5), Ok(5));
        assert_eq!(body["max_tokens"], 5);
        for bad in [json!(0), json!(-1), json!(1.5), json!("100")] {
            let mut body = json!({ "max_tokens": bad }).as_object().unwrap().clone();
            assert!(bound_max_tokens(&mut body, 5).unwrap_err().contains("max_tokens"), "{bad}");
        }
    }
}
