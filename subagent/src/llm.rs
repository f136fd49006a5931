//! Where the LLM settings of a task come from.
//!
//! The seed initialises the LLM lazily, on the first request that carries `llm_api_key`, and
//! keeps it for later requests. On top of that a request may name the endpoint and model
//! (`llm_base_url`, `llm_model`, falling back to `NEXBOT_LLM_BASE_URL` / `NEXBOT_LLM_MODEL`)
//! and carry a per-task `llm_token` for the host's relay, used as the bearer instead of a key.
//!
//! A task reaches its model through `nexbot-llm`: a [`Chain`] of the one provider these
//! settings name, with the retry policy below.

use std::time::Duration;

use nexbot_llm::provider::{Timeouts, DEFAULT_CONTEXT_WINDOW};
use nexbot_llm::{Chain, LlmError, Provider, ProviderSpec, RetryPolicy};
use secrecy::SecretString;

use nexbot_protocol::Request;

pub const BASE_URL_ENV: &str = "NEXBOT_LLM_BASE_URL";
pub const MODEL_ENV: &str = "NEXBOT_LLM_MODEL";

/// One attempt at an LLM call may take this long.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(180);
/// Attempts per call: transient failures (connection, timeout, 429, 5xx, a malformed answer)
/// are retried.
pub const ATTEMPTS: u32 = 3;
/// The longest wait between attempts; a longer `Retry-After` is cut to it.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(20);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// What one task uses to reach its LLM.
#[derive(Debug, Clone)]
pub struct LlmSettings {
    pub base_url: String,
    pub model: String,
    /// `llm_token` when the request has one, else the remembered `llm_api_key`.
    pub bearer: SecretString,
    /// The request's `llm_context_window` (0 or absent: not known).
    pub context_window: Option<u32>,
}

impl LlmSettings {
    /// The model's context window: the request's, else `nexbot-llm`'s default.
    pub fn context_window(&self) -> u32 {
        self.context_window.filter(|w| *w > 0).unwrap_or(DEFAULT_CONTEXT_WINDOW)
    }

    /// The client for these settings: one provider, bearer and all; it lives as long as the
    /// task, so no connection of it outlives the task.
    pub fn chain(&self) -> Result<Chain, LlmError> {
        let mut spec = ProviderSpec::new(&self.base_url, &self.model);
        spec.context_window = Some(self.context_window());
        let timeouts =
            Timeouts { connect: CONNECT_TIMEOUT, call: CALL_TIMEOUT, stall: CALL_TIMEOUT };
        let mut provider = Provider::new(spec, Some(self.bearer.clone()), timeouts)?;
        // Calls that go through the egress proxy (a provider called directly, with the
        // opt-in key) carry the task's credential like every other request of the task.
        if let Some(proxy) = crate::net::task_proxy() {
            provider = provider.with_proxy(proxy)?;
        }
        Ok(Chain::new(vec![provider], retry_policy()))
    }
}

/// [`ATTEMPTS`] attempts, 1 s then 2 s apart unless the provider asks for longer (up to
/// [`MAX_RETRY_AFTER`]); the breaker never skips the only provider there is.
pub fn retry_policy() -> RetryPolicy {
    RetryPolicy {
        max_retries: ATTEMPTS - 1,
        initial: Duration::from_secs(1),
        max_wait: MAX_RETRY_AFTER,
        total: CALL_TIMEOUT * ATTEMPTS + MAX_RETRY_AFTER * (ATTEMPTS - 1),
        breaker_failures: u32::MAX,
        breaker_cooldown: Duration::ZERO,
    }
}

/// The settings remembered across requests (the seed's lazy initialisation).
#[derive(Debug, Default)]
pub struct LlmState {
    api_key: Option<SecretString>,
    base_url: Option<String>,
    model: Option<String>,
}

/// Why a task cannot reach an LLM; the text is what the host is told.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LlmConfigError {
    #[error("LLM not initialized: send llm_api_key")]
    NoCredential,
    #[error("LLM not initialized: send llm_base_url or set {BASE_URL_ENV}")]
    NoBaseUrl,
    #[error("LLM not initialized: send llm_model or set {MODEL_ENV}")]
    NoModel,
}

impl LlmState {
    /// The settings `req` would run with: request fields first, then what earlier requests
    /// set, then the environment. Nothing is remembered until [`LlmState::remember`].
    pub fn resolve(&self, req: &Request) -> Result<LlmSettings, LlmConfigError> {
        let bearer = req
            .llm_token
            .clone()
            .or_else(|| req.llm_api_key.clone())
            .or_else(|| self.api_key.clone())
            .ok_or(LlmConfigError::NoCredential)?;
        let pick = |field: &Option<String>, kept: &Option<String>, env: &str| {
            non_empty(field.clone())
                .or_else(|| kept.clone())
                .or_else(|| non_empty(std::env::var(env).ok()))
        };
        let base_url = pick(&req.llm_base_url, &self.base_url, BASE_URL_ENV)
            .ok_or(LlmConfigError::NoBaseUrl)?;
        let model = pick(&req.llm_model, &self.model, MODEL_ENV).ok_or(LlmConfigError::NoModel)?;
        Ok(LlmSettings { base_url, model, bearer, context_window: req.llm_context_window })
    }

    /// Keeps the key, endpoint and model a request sent, for the requests after it.
    pub fn remember(&mut self, req: &Request) {
        if let Some(key) = &req.llm_api_key {
            self.api_key = Some(key.clone());
        }
        if let Some(url) = non_empty(req.llm_base_url.clone()) {
            self.base_url = Some(url);
        }
        if let Some(model) = non_empty(req.llm_model.clone()) {
            self.model = Some(model);
        }
    }

    /// The remembered API key, so the output can be scrubbed of it.
    pub fn api_key(&self) -> Option<&SecretString> {
        self.api_key.as_ref()
    }
}

fn non_empty(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use secrecy::ExposeSecret;

    fn req(json: &str) -> Request {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn no_key_means_not_initialized() {
        let state = LlmState::default();
        let err = state.resolve(&req(r#"{"type":"execute","id":"a","task":"t"}"#)).unwrap_err();
        assert_eq!(err.to_string(), "LLM not initialized: send llm_api_key");
    }

    #[test]
    fn key_is_remembered_and_token_wins_as_bearer() {
        let mut state = LlmState::default();
        let first = req(r#"{"type":"execute","id":"a","task":"t","llm_api_key":"k1",
                "llm_base_url":"http://x/v1","llm_model":"m"}"#);
        assert_eq!(state.resolve(&first).unwrap().bearer.expose_secret(), "k1");
        state.remember(&first);
        let later = req(r#"{"type":"execute","id":"b","task":"t"}"#);
        let s = state.resolve(&later).unwrap();
        assert_eq!((s.base_url.as_str(), s.model.as_str()), ("http://x/v1", "m"));
        let with_token = req(r#"{"type":"execute","id":"c","task":"t","llm_token":"tok"}"#);
        assert_eq!(state.resolve(&with_token).unwrap().bearer.expose_secret(), "tok");
    }

    #[test]
    fn the_context_window_comes_from_the_request_and_is_not_remembered() {
        let mut state = LlmState::default();
        let first = req(r#"{"type":"execute","id":"a","task":"t","llm_api_key":"k1",
                "llm_base_url":"http://x/v1","llm_model":"m","llm_context_window":8192}"#);
        assert_eq!(state.resolve(&first).unwrap().context_window(), 8192);
        state.remember(&first);
        let later = req(r#"{"type":"execute","id":"b","task":"t"}"#);
        assert_eq!(state.resolve(&later).unwrap().context_window(), DEFAULT_CONTEXT_WINDOW);
        let zero = req(r#"{"type":"execute","id":"c","task":"t","llm_context_window":0}"#);
        assert_eq!(state.resolve(&zero).unwrap().context_window(), DEFAULT_CONTEXT_WINDOW);
    }

    #[test]
    fn the_chain_is_one_provider_at_the_settings_endpoint() {
        let settings = LlmSettings {
            base_url: "http://relay:3128/v1/".into(),
            model: "m".into(),
            bearer: SecretString::from("tok-123456"),
            context_window: None,
        };
        let chain = settings.chain().unwrap();
        assert_eq!(chain.providers().len(), 1);
        assert_eq!(chain.primary().url(), "http://relay:3128/v1/chat/completions");
        assert_eq!(chain.primary().spec().model, "m");
        assert_eq!(chain.policy().max_retries + 1, ATTEMPTS);
        assert_eq!(chain.policy().max_wait, MAX_RETRY_AFTER);
        let bad = LlmSettings { bearer: SecretString::from("tok\nsplit"), ..settings };
        assert_eq!(bad.chain().unwrap_err().class, nexbot_llm::ErrorClass::Auth);
    }
}
