//! A minimal client for OpenAI-compatible `/chat/completions` with `tools` and `tool_calls`:
//! the one API every provider and the host's LLM relay speak.
//!
//! Transient failures (connection errors, 429, 5xx) are retried a few times with a short
//! back-off (honouring `Retry-After`); anything else is reported with the status and a short
//! excerpt of the answer. Cancellation and the task's time limit are the caller's business:
//! dropping the future abandons the request.

use std::time::Duration;

use nexbot_protocol::Usage;
use secrecy::ExposeSecret;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::llm::LlmSettings;

/// One LLM call may take this long.
const CALL_TIMEOUT: Duration = Duration::from_secs(180);
const ATTEMPTS: u32 = 3;
/// The longest `Retry-After` honoured; a longer one fails the call instead of stalling.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(20);

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    pub fn new(role: &str, content: impl Into<String>) -> Self {
        Self { role: role.to_owned(), content: Some(content.into()), ..Self::default() }
    }

    pub fn tool(call_id: &str, content: impl Into<String>) -> Self {
        Self { tool_call_id: Some(call_id.to_owned()), ..Self::new("tool", content) }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ToolCall {
    #[serde(default)]
    pub id: String,
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    pub function: FunctionCall,
}

fn function_type() -> String {
    "function".to_owned()
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FunctionCall {
    pub name: String,
    /// JSON text, as the API sends it (may be invalid: the model wrote it).
    #[serde(default)]
    pub arguments: String,
}

/// The assistant's turn and what it cost, when the API says.
#[derive(Debug, Clone)]
pub struct Completion {
    pub message: ChatMessage,
    pub usage: Option<Usage>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LlmError {
    #[error("LLM request failed: {0}")]
    Transport(String),
    #[error("LLM answered HTTP {status}: {excerpt}")]
    Status { status: u16, excerpt: String },
    #[error("LLM answer unreadable: {0}")]
    Malformed(String),
}

impl LlmError {
    fn is_transient(&self) -> bool {
        match self {
            Self::Transport(_) => true,
            Self::Status { status, .. } => *status == 429 || *status >= 500,
            Self::Malformed(_) => false,
        }
    }
}

/// Talks to one endpoint with one model and one bearer.
#[derive(Debug)]
pub struct LlmClient {
    url: String,
    settings: LlmSettings,
}

impl LlmClient {
    pub fn new(settings: LlmSettings) -> Self {
        let base = settings.base_url.trim_end_matches('/');
        let url = if base.ends_with("/chat/completions") {
            base.to_owned()
        } else {
            format!("{base}/chat/completions")
        };
        Self { url, settings }
    }

    pub fn model(&self) -> &str {
        &self.settings.model
    }

    /// One chat completion, retried on transient failures.
    pub async fn complete(
        &self,
        messages: &[ChatMessage],
        tools: &[Value],
    ) -> Result<Completion, LlmError> {
        let mut body = json!({"model": self.settings.model, "messages": messages});
        if !tools.is_empty() {
            body["tools"] = Value::from(tools.to_vec());
            body["tool_choice"] = Value::from("auto");
        }
        let mut attempt = 1;
        loop {
            match self.attempt(&body).await {
                Ok(completion) => return Ok(completion),
                Err((err, retry_after)) if err.is_transient() && attempt < ATTEMPTS => {
                    let wait = retry_after.unwrap_or(Duration::from_secs(u64::from(attempt)));
                    if wait > MAX_RETRY_AFTER {
                        return Err(err);
                    }
                    tracing::warn!(event = "llm", attempt, error = %err, "retrying the LLM call");
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
                Err((err, _)) => return Err(err),
            }
        }
    }

    async fn attempt(&self, body: &Value) -> Result<Completion, (LlmError, Option<Duration>)> {
        let client = crate::net::http_client().map_err(|e| (LlmError::Transport(e), None))?;
        let response = client
            .post(&self.url)
            .bearer_auth(self.settings.bearer.expose_secret())
            .timeout(CALL_TIMEOUT)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| (LlmError::Transport(describe(e)), None))?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let text = response.text().await.map_err(|e| (LlmError::Transport(describe(e)), None))?;
        if !status.is_success() {
            let excerpt: String = text.chars().take(300).collect();
            return Err((LlmError::Status { status: status.as_u16(), excerpt }, retry_after));
        }
        parse_completion(&text).map_err(|e| (e, None))
    }
}

fn describe(err: reqwest::Error) -> String {
    let cause = std::error::Error::source(&err).map(|c| format!(": {c}")).unwrap_or_default();
    format!("{}{cause}", err.without_url())
}

#[derive(Deserialize)]
struct WireCompletion {
    #[serde(default)]
    choices: Vec<WireChoice>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct WireChoice {
    message: ChatMessage,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
}

fn parse_completion(text: &str) -> Result<Completion, LlmError> {
    let wire: WireCompletion =
        serde_json::from_str(text).map_err(|e| LlmError::Malformed(e.to_string()))?;
    let choice = wire
        .choices
        .into_iter()
        .next()
        .ok_or_else(|| LlmError::Malformed("no choices in the answer".to_owned()))?;
    let usage = wire
        .usage
        .map(|u| Usage { prompt_tokens: u.prompt_tokens, completion_tokens: u.completion_tokens });
    Ok(Completion { message: choice.message, usage })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tool_calls_and_usage() {
        let c = parse_completion(
            r#"{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[
                {"id":"c1","type":"function","function":{"name":"list_dir","arguments":"{}"}}]}}],
                "usage":{"prompt_tokens":7,"completion_tokens":3}}"#,
        )
        .unwrap();
        assert_eq!(c.message.tool_calls[0].function.name, "list_dir");
        assert_eq!(c.usage, Some(Usage { prompt_tokens: 7, completion_tokens: 3 }));
    }

    #[test]
    fn bad_answers_are_errors() {
        assert!(matches!(parse_completion("nope"), Err(LlmError::Malformed(_))));
        assert_eq!(
            parse_completion(r#"{"choices":[]}"#).unwrap_err().to_string(),
            "LLM answer unreadable: no choices in the answer"
        );
    }

    #[test]
    fn endpoint_url_is_derived_from_the_base() {
        let s = |base: &str| LlmSettings {
            base_url: base.to_owned(),
            model: "m".into(),
            bearer: "k".to_owned().into(),
        };
        assert_eq!(LlmClient::new(s("http://h/v1/")).url, "http://h/v1/chat/completions");
        assert_eq!(
            LlmClient::new(s("http://h/v1/chat/completions")).url,
            "http://h/v1/chat/completions"
        );
    }
}
