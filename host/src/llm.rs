//! The LLM provider: OpenAI-compatible chat completions with tools, over reqwest + rustls.
//!
//! Why its own module: providers fail in many small ways (429 with `Retry-After`, 5xx,
//! timeouts, dropped connections, bodies that are not JSON). All of that is absorbed here with
//! bounded retries, exponential back-off and jitter, so the agent loop sees either a
//! completion or one [`LlmError`] whose [`LlmError::user_message`] can be shown as is. The API
//! key is a `SecretString`, sent only in a sensitive `Authorization` header.

use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{HeaderValue, AUTHORIZATION, RETRY_AFTER};
use reqwest::StatusCode;
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use thiserror::Error;
use tokio_util::sync::CancellationToken;

use crate::config::LlmConfig;

/// One chat message in the OpenAI shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    pub fn system(text: impl Into<String>) -> Self {
        Self::plain("system", text)
    }
    pub fn user(text: impl Into<String>) -> Self {
        Self::plain("user", text)
    }
    pub fn assistant(text: impl Into<String>) -> Self {
        Self::plain("assistant", text)
    }
    pub fn tool(call_id: &str, text: impl Into<String>) -> Self {
        Self { tool_call_id: Some(call_id.to_owned()), ..Self::plain("tool", text) }
    }
    fn plain(role: &str, text: impl Into<String>) -> Self {
        Self { role: role.into(), content: Some(text.into()), tool_calls: None, tool_call_id: None }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    pub function: FunctionCall,
}

fn function_type() -> String {
    "function".into()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    pub name: String,
    /// A JSON document as a string, exactly as the model produced it (may be invalid).
    #[serde(default)]
    pub arguments: String,
}

/// A tool offered to the model.
#[derive(Debug, Clone, Serialize)]
pub struct ToolSpec {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: FunctionSpec,
}

#[derive(Debug, Clone, Serialize)]
pub struct FunctionSpec {
    pub name: &'static str,
    pub description: &'static str,
    pub parameters: Value,
}

/// Tokens used, as the provider reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub struct TokenUsage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
}

impl std::ops::AddAssign for TokenUsage {
    fn add_assign(&mut self, other: Self) {
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
    }
}

/// The assistant's message and what it cost.
#[derive(Debug, Clone)]
pub struct Completion {
    pub message: ChatMessage,
    pub usage: TokenUsage,
}

#[derive(Deserialize)]
struct RawCompletion {
    choices: Vec<RawChoice>,
    #[serde(default)]
    usage: Option<TokenUsage>,
}

#[derive(Deserialize)]
struct RawChoice {
    message: ChatMessage,
}

/// Why no completion came back.
#[derive(Debug, Error)]
pub enum LlmError {
    /// Transient failures outlasted every retry.
    #[error("the language model is unavailable after {attempts} attempts: {last}")]
    Unavailable { attempts: u32, last: String },
    /// The provider refused the request (bad key, bad model, bad request): retrying won't help.
    #[error("the language model provider refused the request (HTTP {status}): {message}")]
    Rejected { status: u16, message: String },
    #[error("the request to the language model was cancelled")]
    Cancelled,
}

impl LlmError {
    /// The text the user sees instead of an answer.
    pub fn user_message(&self) -> String {
        match self {
            Self::Unavailable { .. } => format!(
                "Sorry, I could not reach the language model ({self}). Please try again in a \
                 little while."
            ),
            Self::Rejected { .. } => format!(
                "Sorry, the language model refused the request ({self}). The operator should \
                 check the LLM settings (nexbot doctor)."
            ),
            Self::Cancelled => "Stopped.".into(),
        }
    }
}

/// How one attempt failed.
enum AttemptError {
    Retry { reason: String, retry_after: Option<Duration> },
    Fatal(LlmError),
}

/// A client for one OpenAI-compatible endpoint and model.
pub struct LlmClient {
    http: reqwest::Client,
    url: String,
    model: String,
    key: Option<SecretString>,
    max_retries: u32,
    retry_initial: Duration,
    retry_max_wait: Duration,
    max_tokens: Option<u32>,
    temperature: Option<f32>,
    stats: Arc<LlmStats>,
}

/// What the client did since it was built, for the metrics: calls, failed calls (after their
/// retries), HTTP attempts, and the tokens the provider reported.
#[derive(Debug, Default)]
pub struct LlmStats {
    pub calls: AtomicU64,
    pub errors: AtomicU64,
    pub attempts: AtomicU64,
    pub prompt_tokens: AtomicU64,
    pub completion_tokens: AtomicU64,
}

impl fmt::Debug for LlmClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LlmClient")
            .field("url", &self.url)
            .field("model", &self.model)
            .field("key", &self.key.as_ref().map(|_| "[set]"))
            .finish_non_exhaustive()
    }
}

impl LlmClient {
    pub fn new(config: &LlmConfig, key: Option<SecretString>) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(config.timeout_secs))
            .connect_timeout(Duration::from_secs(config.timeout_secs.min(10)))
            .build()?;
        Ok(Self {
            http,
            url: format!("{}/chat/completions", config.base_url.trim_end_matches('/')),
            model: config.model.clone(),
            key,
            max_retries: config.max_retries,
            retry_initial: Duration::from_millis(config.retry_initial_ms),
            retry_max_wait: Duration::from_secs(config.retry_max_wait_secs),
            max_tokens: config.max_tokens,
            temperature: config.temperature,
            stats: Arc::default(),
        })
    }

    /// The provider's base URL and the model, as the metrics label them.
    pub fn target(&self) -> (&str, &str) {
        (self.url.trim_end_matches("/chat/completions"), &self.model)
    }

    pub fn stats(&self) -> &Arc<LlmStats> {
        &self.stats
    }

    /// One completion, with retries; `cancel` stops both the request and the waits.
    pub async fn complete(
        &self,
        messages: &[ChatMessage],
        tools: &[ToolSpec],
        cancel: &CancellationToken,
    ) -> Result<Completion, LlmError> {
        let mut body = serde_json::json!({"model": self.model, "messages": messages});
        if !tools.is_empty() {
            body["tools"] = serde_json::to_value(tools).unwrap_or_default();
            body["tool_choice"] = "auto".into();
        }
        if let Some(max) = self.max_tokens {
            body["max_tokens"] = max.into();
        }
        if let Some(t) = self.temperature {
            body["temperature"] = t.into();
        }
        self.stats.calls.fetch_add(1, Ordering::Relaxed);
        let result = self.complete_body(&body, cancel).await;
        match &result {
            Ok(completion) => {
                let usage = completion.usage;
                self.stats.prompt_tokens.fetch_add(usage.prompt_tokens, Ordering::Relaxed);
                self.stats.completion_tokens.fetch_add(usage.completion_tokens, Ordering::Relaxed);
            }
            Err(LlmError::Cancelled) => {}
            Err(_) => {
                self.stats.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        result
    }

    async fn complete_body(
        &self,
        body: &Value,
        cancel: &CancellationToken,
    ) -> Result<Completion, LlmError> {
        let attempts = self.max_retries + 1;
        let mut attempt = 0;
        loop {
            self.stats.attempts.fetch_add(1, Ordering::Relaxed);
            attempt += 1;
            let outcome = tokio::select! {
                () = cancel.cancelled() => return Err(LlmError::Cancelled),
                outcome = self.attempt(body) => outcome,
            };
            let (reason, retry_after) = match outcome {
                Ok(completion) => return Ok(completion),
                Err(AttemptError::Fatal(err)) => return Err(err),
                Err(AttemptError::Retry { reason, retry_after }) => (reason, retry_after),
            };
            if attempt >= attempts {
                return Err(LlmError::Unavailable { attempts, last: reason });
            }
            let wait = backoff(attempt, retry_after, self.retry_initial, self.retry_max_wait);
            tracing::warn!(attempt, wait_ms = wait.as_millis() as u64, %reason, "LLM call failed, retrying");
            tokio::select! {
                () = cancel.cancelled() => return Err(LlmError::Cancelled),
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    async fn attempt(&self, body: &Value) -> Result<Completion, AttemptError> {
        let mut request = self.http.post(&self.url).json(body);
        if let Some(key) = &self.key {
            if let Ok(mut value) = HeaderValue::from_str(&format!("Bearer {}", key.expose_secret()))
            {
                value.set_sensitive(true);
                request = request.header(AUTHORIZATION, value);
            }
        }
        let response = request.send().await.map_err(|e| AttemptError::Retry {
            reason: describe_transport_error(e),
            retry_after: None,
        })?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let bytes = response.bytes().await.map_err(|e| AttemptError::Retry {
            reason: describe_transport_error(e),
            retry_after: None,
        })?;
        if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
            return Err(AttemptError::Retry {
                reason: format!("HTTP {}{}", status.as_u16(), provider_message(&bytes)),
                retry_after,
            });
        }
        if !status.is_success() {
            return Err(AttemptError::Fatal(LlmError::Rejected {
                status: status.as_u16(),
                message: provider_message(&bytes).trim_start_matches(": ").to_owned(),
            }));
        }
        let raw: RawCompletion =
            serde_json::from_slice(&bytes).map_err(|e| AttemptError::Retry {
                reason: format!("malformed JSON from the provider: {e}"),
                retry_after: None,
            })?;
        let Some(choice) = raw.choices.into_iter().next() else {
            return Err(AttemptError::Retry {
                reason: "malformed reply from the provider: no choices".into(),
                retry_after: None,
            });
        };
        Ok(Completion { message: choice.message, usage: raw.usage.unwrap_or_default() })
    }
}

/// `: <error.message>` from an OpenAI-style error body, short; empty when there is none.
fn provider_message(bytes: &[u8]) -> String {
    let Ok(value) = serde_json::from_slice::<Value>(bytes) else { return String::new() };
    let message = value["error"]["message"].as_str().or_else(|| value["error"].as_str());
    match message {
        Some(m) => format!(": {}", m.chars().take(300).collect::<String>()),
        None => String::new(),
    }
}

fn describe_transport_error(e: reqwest::Error) -> String {
    if e.is_timeout() {
        "the request timed out".into()
    } else if e.is_connect() {
        "cannot connect to the provider".into()
    } else {
        format!("transport error: {}", e.without_url())
    }
}

/// Wait before retry number `attempt` (1-based): `Retry-After` when the provider sent one,
/// else `initial * 2^(attempt-1)`; capped at `max`, plus up to 20 % jitter (within the cap)
/// so that many clients do not retry in lockstep.
pub fn backoff(
    attempt: u32,
    retry_after: Option<Duration>,
    initial: Duration,
    max: Duration,
) -> Duration {
    let base = retry_after
        .unwrap_or_else(|| initial.saturating_mul(2u32.saturating_pow(attempt.saturating_sub(1))));
    let base = base.min(max);
    let jitter_ms = (base.as_millis() as u64) / 5;
    let jitter = if jitter_ms == 0 { 0 } else { random_u64() % (jitter_ms + 1) };
    (base + Duration::from_millis(jitter)).min(max.max(base))
}

/// A random number without a dependency: std's per-process random hash keys.
fn random_u64() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_is_capped_and_honours_retry_after() {
        let ms = Duration::from_millis;
        for _ in 0..50 {
            let first = backoff(1, None, ms(100), ms(10_000));
            assert!(first >= ms(100) && first <= ms(120), "{first:?}");
            let third = backoff(3, None, ms(100), ms(10_000));
            assert!(third >= ms(400) && third <= ms(480), "{third:?}");
            let capped = backoff(20, None, ms(100), ms(1_000));
            assert!(capped <= ms(1_000), "{capped:?}");
            assert!(capped >= ms(1_000), "{capped:?}");
            let after = backoff(1, Some(Duration::from_secs(2)), ms(100), ms(10_000));
            assert!(after >= ms(2_000) && after <= ms(2_400), "{after:?}");
            let after_capped = backoff(1, Some(Duration::from_secs(3600)), ms(100), ms(5_000));
            assert_eq!(after_capped, ms(5_000));
        }
    }

    #[test]
    fn debug_hides_the_key() {
        let client =
            LlmClient::new(&LlmConfig::default(), Some(SecretString::from("sk-planted-dbg")))
                .unwrap();
        let debug = format!("{client:?}");
        assert!(!debug.contains("sk-planted-dbg") && debug.contains("[set]"), "{debug}");
    }

    #[test]
    fn provider_error_message_is_extracted_and_short() {
        let long = "x".repeat(1_000);
        let body = serde_json::json!({"error": {"message": long}}).to_string();
        assert_eq!(provider_message(body.as_bytes()).len(), 302);
        assert_eq!(provider_message(b"<html>"), "");
    }
}
