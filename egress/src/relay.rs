//! The LLM relay: an OpenAI-compatible endpoint on the proxy's listener that holds the real
//! provider key so no container ever does.
//!
//! A container calls `POST /v1/chat/completions` (or `GET /v1/models`) on the listener with its
//! task's token. The relay checks the token and the task's budget, swaps the token for the
//! provider key, forwards the call, streams the answer back as it arrives, and charges the
//! task the tokens the provider reports. Refusals are OpenAI-style error JSON so any client
//! shows them sensibly.

use std::sync::Arc;

use futures_util::StreamExt;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited, StreamBody};
use hyper::body::{Frame, Incoming};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{json, Value};

use super::audit::{ConnAudit, Direction, Origin, Verdict};
use super::config::RelayConfig;
use super::meter::{full, BoxError, MeteredBody, ResponseBody};
use super::tokens::{TaskTokens, TokenError};
use super::usage::{estimate, UsageTap};
use super::Shared;

/// The provider side of the relay: where calls go and the key they carry.
pub(crate) struct Relay {
    client: reqwest::Client,
    base: Option<reqwest::Url>,
    /// `Bearer <key>`, marked sensitive so no header dump shows it.
    authorization: Option<HeaderValue>,
    config: RelayConfig,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay")
            .field("base", &self.base.as_ref().map(|u| u.as_str()))
            .field("has_key", &self.authorization.is_some())
            .finish_non_exhaustive()
    }
}

/// Why the relay could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum RelaySetupError {
    #[error("the provider key is not usable in an HTTP header (control characters?)")]
    KeyNotAHeader,
    #[error("relay HTTP client: {0}")]
    Client(#[from] reqwest::Error),
}

impl Relay {
    /// `config` is validated already (so the base URL parses).
    pub(crate) fn new(
        config: &RelayConfig,
        key: Option<SecretString>,
    ) -> Result<Self, RelaySetupError> {
        let authorization = match key {
            Some(key) => {
                let mut value = HeaderValue::from_str(&format!("Bearer {}", key.expose_secret()))
                    .map_err(|_| RelaySetupError::KeyNotAHeader)?;
                value.set_sensitive(true);
                Some(value)
            }
            None => None,
        };
        let client = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(10))
            // A redirect could carry the key to a host the operator never named.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent("nexbot-relay")
            .build()?;
        let base = config.provider_base_url.as_deref().and_then(|u| reqwest::Url::parse(u).ok());
        Ok(Self { client, base, authorization, config: config.clone() })
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

fn bearer(request: &Request<Incoming>) -> Option<SecretString> {
    let value = request.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| SecretString::from(token.trim().to_owned()))
}

enum Route {
    Chat,
    Models,
}

/// Serves one origin-form request on the listener.
pub(crate) async fn handle(
    req: Request<Incoming>,
    origin: Origin,
    shared: Arc<Shared>,
) -> Response<ResponseBody> {
    let relay = &shared.relay;
    let (host, port) = relay
        .base
        .as_ref()
        .map(|b| {
            (b.host_str().unwrap_or_default().to_owned(), b.port_or_known_default().unwrap_or(0))
        })
        .unwrap_or_default();
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
    let Some(base) = relay.base.clone() else {
        let message = "no provider is configured (egress.relay.provider_base_url)".to_owned();
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
            // 403, not 429: the budget will not come back, and clients retry a 429.
            return refuse(
                &audit,
                Verdict::Denied,
                StatusCode::FORBIDDEN,
                ("insufficient_quota", "task_budget_exhausted"),
                err.to_string(),
            );
        }
        Err(err) => {
            return refuse(
                &audit,
                Verdict::Denied,
                StatusCode::UNAUTHORIZED,
                ("invalid_request_error", "invalid_api_key"),
                err.to_string(),
            );
        }
    };
    audit.task(task_id.clone());
    let upstream = match route {
        Route::Models => relay.client.get(Relay::endpoint(&base, "models")),
        Route::Chat => match chat_body(req, relay, &audit).await {
            Ok(payload) => relay
                .client
                .post(Relay::endpoint(&base, "chat/completions"))
                .header(header::CONTENT_TYPE, "application/json")
                .body(payload),
            Err(response) => return response,
        },
    };
    let mut upstream = upstream.timeout(relay.config.timeout());
    if let Some(authorization) = &relay.authorization {
        upstream = upstream.header(header::AUTHORIZATION, authorization.clone());
    }
    let response = match upstream.send().await {
        Ok(response) => response,
        Err(err) => {
            let (status, code) = if err.is_timeout() {
                (StatusCode::GATEWAY_TIMEOUT, "provider_timeout")
            } else {
                (StatusCode::BAD_GATEWAY, "provider_unreachable")
            };
            let message = format!("the provider could not be reached: {}", err.without_url());
            return refuse(&audit, Verdict::Error, status, ("server_error", code), message);
        }
    };
    audit.verdict(Verdict::Allowed, format!("status {}", response.status().as_u16()));
    let charge = matches!(route, Route::Chat).then(|| Charge {
        tokens: shared.tokens.clone(),
        task_id,
        success: response.status().is_success(),
        request_bytes: audit.counted(Direction::Up),
    });
    relay_response(response, audit, charge)
}

/// Reads and checks the container's request; asks for streamed usage when configured.
async fn chat_body(
    req: Request<Incoming>,
    relay: &Relay,
    audit: &ConnAudit,
) -> Result<Vec<u8>, Response<ResponseBody>> {
    let limit = relay.config.max_request_bytes;
    let read = tokio::time::timeout(
        relay.config.timeout(),
        Limited::new(req.into_body(), limit).collect(),
    );
    let bytes = match read.await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(err)) if err.is::<http_body_util::LengthLimitError>() => {
            let message = format!("request body is larger than {limit} bytes");
            return Err(refuse(
                audit,
                Verdict::Denied,
                StatusCode::PAYLOAD_TOO_LARGE,
                ("invalid_request_error", "request_too_large"),
                message,
            ));
        }
        Ok(Err(err)) => {
            let message = format!("request body could not be read: {err}");
            return Err(refuse(
                audit,
                Verdict::Error,
                StatusCode::BAD_REQUEST,
                ("invalid_request_error", "bad_body"),
                message,
            ));
        }
        Err(_) => {
            let message = "request body was not received in time".to_owned();
            return Err(refuse(
                audit,
                Verdict::Error,
                StatusCode::REQUEST_TIMEOUT,
                ("invalid_request_error", "bad_body"),
                message,
            ));
        }
    };
    let mut body = match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(map)) => map,
        _ => {
            let message = "request body must be a JSON object".to_owned();
            return Err(refuse(
                audit,
                Verdict::Denied,
                StatusCode::BAD_REQUEST,
                ("invalid_request_error", "bad_body"),
                message,
            ));
        }
    };
    let streaming = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    if streaming && relay.config.request_stream_usage {
        let options = body.entry("stream_options").or_insert_with(|| json!({}));
        if let Some(options) = options.as_object_mut() {
            options.insert("include_usage".into(), Value::Bool(true));
        }
    }
    let payload = serde_json::to_vec(&body).unwrap_or_default();
    audit.count(Direction::Up, payload.len());
    Ok(payload)
}

/// Response headers worth passing back; everything else (cookies, provider internals) stays.
fn forwarded(name: &header::HeaderName) -> bool {
    let name = name.as_str();
    matches!(name, "content-type" | "cache-control" | "retry-after" | "x-request-id")
        || name.starts_with("x-ratelimit-")
}

fn relay_response(
    response: reqwest::Response,
    audit: Arc<ConnAudit>,
    charge: Option<Charge>,
) -> Response<ResponseBody> {
    let mut out = Response::new(full(""));
    *out.status_mut() = response.status();
    for (name, value) in response.headers() {
        if forwarded(name) {
            out.headers_mut().append(name.clone(), value.clone());
        }
    }
    let sse = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    // The meter lives in the stream, so it charges the task when the body ends or is dropped
    // (the client went away); the metered body counts the bytes and holds the audit guard.
    let mut meter = Meter { tap: UsageTap::new(sse), charge, audit: audit.clone() };
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

/// Who pays for a chat call, and whether it is billable (providers do not bill errors).
struct Charge {
    tokens: Arc<TaskTokens>,
    task_id: String,
    success: bool,
    request_bytes: u64,
}

/// Watches the response bytes; charges the task when the body ends or the client goes away.
struct Meter {
    tap: UsageTap,
    charge: Option<Charge>,
    audit: Arc<ConnAudit>,
}

impl Drop for Meter {
    fn drop(&mut self) {
        let Some(charge) = &self.charge else { return };
        let tokens = match (charge.success, self.tap.finish()) {
            (false, _) => 0,
            (true, Some(reported)) => reported,
            (true, None) => estimate(charge.request_bytes, self.tap.bytes()),
        };
        charge.tokens.charge(&charge.task_id, tokens);
        self.audit.tokens(tokens);
    }
}
