//! Why a call failed, decided from the raw status and body before any text is made of them.
//!
//! Peers that turn a provider's 429 into friendly text first and classify second end up with
//! fallbacks that never fire. Here [`classify`] looks at the status and the body's error
//! object (`message`, `type`, `code`), and everything downstream — retry, fallback, the
//! breaker, the user's message — reads the [`ErrorClass`].

use std::fmt;
use std::time::{Duration, SystemTime};

use serde_json::Value;

/// What kind of failure it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// 429 (not about credit): retried after `Retry-After`, then the next provider.
    RateLimit,
    /// No credit or quota left (402, or a 403/429 saying so): the next provider at once.
    QuotaExhausted,
    /// 5xx, 529: retried, then the next provider.
    Overloaded,
    /// The provider did not answer (or stopped streaming) in time: retried.
    Timeout,
    /// The prompt does not fit the model: the caller fits harder, once.
    ContextTooLong,
    /// Any other 4xx: the request itself is wrong; retrying will not help.
    BadRequest,
    /// 401/403: the key is wrong for this provider: the next provider at once.
    Auth,
    /// Connection refused, reset, DNS: retried.
    Transport,
    /// An answer that is not the format: retried.
    Malformed,
    /// A stream that ended without its end marker: retried.
    Truncated,
    /// A budget cap refused the call before it was sent.
    Budget,
    /// The caller stopped the call.
    Cancelled,
}

impl ErrorClass {
    /// Worth another attempt on the same provider.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            Self::RateLimit
                | Self::Overloaded
                | Self::Timeout
                | Self::Transport
                | Self::Malformed
                | Self::Truncated
        )
    }

    /// Move on to the next provider without retrying this one.
    pub fn skips_provider(self) -> bool {
        matches!(self, Self::Auth | Self::QuotaExhausted)
    }

    /// The label metrics and logs use.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RateLimit => "rate_limit",
            Self::QuotaExhausted => "quota_exhausted",
            Self::Overloaded => "overloaded",
            Self::Timeout => "timeout",
            Self::ContextTooLong => "context_too_long",
            Self::BadRequest => "bad_request",
            Self::Auth => "auth",
            Self::Transport => "transport",
            Self::Malformed => "malformed",
            Self::Truncated => "truncated",
            Self::Budget => "budget",
            Self::Cancelled => "cancelled",
        }
    }

    pub const ALL: [ErrorClass; 12] = [
        Self::RateLimit,
        Self::QuotaExhausted,
        Self::Overloaded,
        Self::Timeout,
        Self::ContextTooLong,
        Self::BadRequest,
        Self::Auth,
        Self::Transport,
        Self::Malformed,
        Self::Truncated,
        Self::Budget,
        Self::Cancelled,
    ];
}

impl fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed call: its class, who failed, and a short description. Never holds a key: the
/// provider's body excerpt has the provider's own key replaced before it gets here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{provider}: {class}{}: {message}", status.map(|s| format!(" (HTTP {s})")).unwrap_or_default())]
pub struct LlmError {
    pub class: ErrorClass,
    /// The provider's configured name ("" before any provider was reached).
    pub provider: String,
    pub status: Option<u16>,
    pub message: String,
    /// What the provider asked for, when it did.
    pub retry_after: Option<Duration>,
}

impl LlmError {
    pub fn new(class: ErrorClass, provider: &str, message: impl Into<String>) -> Self {
        Self {
            class,
            provider: provider.to_owned(),
            status: None,
            message: message.into(),
            retry_after: None,
        }
    }

    pub fn cancelled() -> Self {
        Self::new(ErrorClass::Cancelled, "", "the request was cancelled")
    }

    /// The text the user sees instead of an answer: short, says what to do.
    pub fn user_message(&self) -> String {
        match self.class {
            ErrorClass::Cancelled => "Stopped.".into(),
            ErrorClass::Budget => format!("I cannot answer right now: {}.", self.message),
            ErrorClass::Auth | ErrorClass::BadRequest => format!(
                "Sorry, the language model refused the request ({self}). The operator should \
                 check the LLM settings (nexbot doctor)."
            ),
            ErrorClass::QuotaExhausted => format!(
                "Sorry, the language model account has no quota left ({self}). The operator \
                 should top it up or add a fallback provider."
            ),
            ErrorClass::ContextTooLong => format!(
                "Sorry, this conversation no longer fits the model even after trimming it \
                 ({self}). Send /new to start a fresh one."
            ),
            _ => format!(
                "Sorry, I could not reach the language model ({self}). Please try again in a \
                 little while."
            ),
        }
    }
}

/// Classifies an HTTP failure from its status and raw body.
pub fn classify(status: u16, body: &[u8]) -> ErrorClass {
    let text = error_text(body);
    let has = |needles: &[&str]| needles.iter().any(|n| text.contains(n));
    if has(&[
        "context_length",
        "context length",
        "context window",
        "maximum context",
        "too many tokens",
        "prompt is too long",
        "reduce the length",
        "string_above_max_length",
    ]) || status == 413
    {
        return ErrorClass::ContextTooLong;
    }
    let quota = has(&[
        "insufficient_quota",
        "quota",
        "billing",
        "credit",
        "payment required",
        "insufficient balance",
        "insufficient_balance",
    ]);
    match status {
        402 => ErrorClass::QuotaExhausted,
        429 | 403 if quota => ErrorClass::QuotaExhausted,
        401 | 403 => ErrorClass::Auth,
        429 => ErrorClass::RateLimit,
        408 | 504 => ErrorClass::Timeout,
        500..=599 => ErrorClass::Overloaded,
        400..=499 => ErrorClass::BadRequest,
        // A 2xx carrying an error object (see `parse_completion`).
        _ if quota => ErrorClass::QuotaExhausted,
        _ if has(&["rate limit", "rate_limit", "too many requests"]) => ErrorClass::RateLimit,
        _ if has(&["overloaded", "unavailable"]) => ErrorClass::Overloaded,
        _ => ErrorClass::Malformed,
    }
}

/// The lowercased `error` object's message, type and code, or the raw body's start.
fn error_text(body: &[u8]) -> String {
    let Ok(value) = serde_json::from_slice::<Value>(body) else {
        return String::from_utf8_lossy(&body[..body.len().min(2048)]).to_lowercase();
    };
    let error = value.get("error").unwrap_or(&value);
    let mut text = String::new();
    for key in ["message", "type", "code", "status"] {
        if let Some(v) = error.get(key) {
            text.push_str(&v.to_string());
            text.push(' ');
        }
    }
    if let Some(s) = error.as_str() {
        text.push_str(s);
    }
    if text.is_empty() {
        text = value.to_string();
    }
    text.to_lowercase()
}

/// A short, printable excerpt of a provider's error body: its `error.message` when it has one.
pub fn excerpt(body: &[u8]) -> String {
    let text = match serde_json::from_slice::<Value>(body) {
        Ok(value) => {
            let error = value.get("error").unwrap_or(&value);
            error
                .get("message")
                .and_then(Value::as_str)
                .or_else(|| error.as_str())
                .map(str::to_owned)
                .unwrap_or_else(|| value.to_string())
        }
        Err(_) => String::from_utf8_lossy(body).into_owned(),
    };
    nexbot_core::text::excerpt(&text)
}

/// `Retry-After` as delay-seconds (fractions accepted) or an HTTP date, relative to `now`.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(1e9)));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_from_status_and_body() {
        let c = |status, body: &str| classify(status, body.as_bytes());
        assert_eq!(c(429, r#"{"error":{"message":"slow down"}}"#), ErrorClass::RateLimit);
        assert_eq!(
            c(
                429,
                r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota"}}"#
            ),
            ErrorClass::QuotaExhausted
        );
        assert_eq!(
            c(403, r#"{"error":{"message":"quota exhausted"}}"#),
            ErrorClass::QuotaExhausted
        );
        assert_eq!(c(402, ""), ErrorClass::QuotaExhausted);
        assert_eq!(c(401, r#"{"error":"bad key"}"#), ErrorClass::Auth);
        assert_eq!(c(403, "forbidden"), ErrorClass::Auth);
        assert_eq!(c(500, "<html>"), ErrorClass::Overloaded);
        assert_eq!(c(529, ""), ErrorClass::Overloaded);
        assert_eq!(c(504, ""), ErrorClass::Timeout);
        assert_eq!(
            c(
                400,
                r#"{"error":{"message":"This model's maximum context length is 8192 tokens","code":"context_length_exceeded"}}"#
            ),
            ErrorClass::ContextTooLong
        );
        assert_eq!(c(413, ""), ErrorClass::ContextTooLong);
        assert_eq!(c(404, r#"{"error":{"message":"model not found"}}"#), ErrorClass::BadRequest);
    }

    #[test]
    fn retry_after_both_forms() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(parse_retry_after("2", now), Some(Duration::from_secs(2)));
        assert_eq!(parse_retry_after(" 0.5 ", now), Some(Duration::from_millis(500)));
        let later = httpdate::fmt_http_date(now + Duration::from_secs(7));
        assert_eq!(parse_retry_after(&later, now), Some(Duration::from_secs(7)));
        let earlier = httpdate::fmt_http_date(now - Duration::from_secs(7));
        assert_eq!(parse_retry_after(&earlier, now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-1", now), None);
    }

    #[test]
    fn excerpts_are_short_and_printable() {
        let long = "x".repeat(1_000);
        let body = serde_json::json!({"error": {"message": long}}).to_string();
        let cut = excerpt(body.as_bytes());
        assert!(cut.starts_with(&"x".repeat(300)) && cut.ends_with("bytes in all]"), "{cut}");
        assert!(cut.len() < 340, "{cut}");
        assert_eq!(excerpt(b"a\x1b[2Jb"), "a[2Jb");
        let e = LlmError { status: Some(429), ..LlmError::new(ErrorClass::RateLimit, "p", "m") };
        assert_eq!(e.to_string(), "p: rate_limit (HTTP 429): m");
    }
}
