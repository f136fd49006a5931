//! One OpenAI-compatible endpoint: its settings, and one attempt at a call.

use std::fmt;
use std::time::{Duration, SystemTime};

use futures_util::StreamExt;
use reqwest::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

use crate::error::{classify, excerpt, parse_retry_after, ErrorClass, LlmError};
use crate::stream::{Accumulator, SseDecoder};
use crate::wire::{parse_completion, ChatRequest, Completion};

/// Context window assumed for a provider that does not state one: small enough for most
/// models served today, local ones included.
pub const DEFAULT_CONTEXT_WINDOW: u32 = 32_768;
/// The largest non-streamed answer read; a larger one is malformed.
const MAX_ANSWER_BYTES: usize = 32 << 20;
/// The largest error body read for classification.
const MAX_ERROR_BYTES: usize = 64 << 10;

/// A provider as configured (`[[llm.providers]]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderSpec {
    /// Shown in logs, metrics, task records and the fallback notice; defaults to the base
    /// URL's host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The OpenAI-compatible base URL (ending in `/v1` or the provider's equivalent).
    pub base_url: String,
    pub model: String,
    /// The environment variable holding this provider's key (none for local servers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// USD per 1M prompt tokens; without both prices the model is "unpriced" for cost caps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_price_per_mtok: Option<f64>,
    /// USD per 1M completion tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_price_per_mtok: Option<f64>,
    /// The model's context window in tokens ([`DEFAULT_CONTEXT_WINDOW`] when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u32>,
    /// The model sees images: a photo a user sends reaches it as an image part.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub vision: bool,
}

impl ProviderSpec {
    pub fn new(base_url: &str, model: &str) -> Self {
        Self {
            name: None,
            base_url: base_url.to_owned(),
            model: model.to_owned(),
            api_key_env: None,
            input_price_per_mtok: None,
            output_price_per_mtok: None,
            context_window: None,
            vision: false,
        }
    }

    /// The configured name, else the base URL's host, else the URL.
    pub fn display_name(&self) -> String {
        if let Some(name) = self.name.as_deref().filter(|n| !n.trim().is_empty()) {
            return name.to_owned();
        }
        reqwest::Url::parse(&self.base_url)
            .ok()
            .and_then(|u| u.host_str().map(str::to_owned))
            .unwrap_or_else(|| self.base_url.clone())
    }

    pub fn context_window(&self) -> u32 {
        self.context_window.unwrap_or(DEFAULT_CONTEXT_WINDOW)
    }

    /// Both prices, when the model is priced.
    pub fn prices(&self) -> Option<(f64, f64)> {
        Some((self.input_price_per_mtok?, self.output_price_per_mtok?))
    }

    /// The cost of `prompt` + `completion` tokens in micro-dollars, when priced.
    pub fn cost_micros(&self, prompt: u64, completion: u64) -> Option<u64> {
        let (input, output) = self.prices()?;
        // USD per 1M tokens is micro-dollars per token.
        Some((prompt as f64 * input + completion as f64 * output).ceil() as u64)
    }

    /// What is wrong with the settings, if anything: `field` names the place in the config.
    pub fn check(&self, field: &str) -> Result<(), String> {
        let url = reqwest::Url::parse(&self.base_url)
            .map_err(|e| format!("{field}.base_url {:?} is not a URL: {e}", self.base_url))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!("{field}.base_url must be http:// or https://"));
        }
        if self.model.trim().is_empty() {
            return Err(format!("{field}.model is empty"));
        }
        for (name, price) in
            [("input", self.input_price_per_mtok), ("output", self.output_price_per_mtok)]
        {
            if price.is_some_and(|p| !p.is_finite() || p < 0.0) {
                return Err(format!("{field}.{name}_price_per_mtok must be a number ≥ 0"));
            }
        }
        if self.context_window == Some(0) {
            return Err(format!("{field}.context_window must be > 0"));
        }
        Ok(())
    }
}

/// How long an attempt may take.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub connect: Duration,
    /// A non-streamed call, from request to the whole answer.
    pub call: Duration,
    /// A streamed call: the longest silence between two chunks (a stall is a timeout).
    pub stall: Duration,
}

/// A client for one provider.
pub struct Provider {
    spec: ProviderSpec,
    name: String,
    url: String,
    /// `Bearer <key>`, marked sensitive so no header dump shows it.
    authorization: Option<HeaderValue>,
    key: Option<SecretString>,
    http: reqwest::Client,
    timeouts: Timeouts,
}

impl fmt::Debug for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Provider")
            .field("name", &self.name)
            .field("url", &self.url)
            .field("model", &self.spec.model)
            .field("key", &self.key.as_ref().map(|_| "[set]"))
            .finish_non_exhaustive()
    }
}

impl Provider {
    /// The HTTP client: with `proxy`, only that proxy (none from the environment).
    fn client(
        name: &str,
        timeouts: Timeouts,
        proxy: Option<reqwest::Proxy>,
    ) -> Result<reqwest::Client, LlmError> {
        let mut builder = reqwest::Client::builder()
            .connect_timeout(timeouts.connect)
            // A redirect could carry the key to a host the operator never named.
            .redirect(reqwest::redirect::Policy::none());
        if let Some(proxy) = proxy {
            builder = builder.proxy(proxy);
        }
        builder.build().map_err(|e| LlmError::new(ErrorClass::Transport, name, e.to_string()))
    }

    /// The same provider calling through `proxy` instead of the environment's: a sandboxed
    /// caller whose proxy wants its task's credential (the subagent) sets it here.
    pub fn with_proxy(mut self, proxy: reqwest::Proxy) -> Result<Self, LlmError> {
        self.http = Self::client(&self.name, self.timeouts, Some(proxy))?;
        Ok(self)
    }

    pub fn new(
        spec: ProviderSpec,
        key: Option<SecretString>,
        timeouts: Timeouts,
    ) -> Result<Self, LlmError> {
        let name = spec.display_name();
        let authorization = match &key {
            Some(key) => {
                let mut value = HeaderValue::from_str(&format!("Bearer {}", key.expose_secret()))
                    .map_err(|_| {
                    LlmError::new(
                        ErrorClass::Auth,
                        &name,
                        "the API key is not usable in an HTTP header (control characters?)",
                    )
                })?;
                value.set_sensitive(true);
                Some(value)
            }
            None => None,
        };
        let http = Self::client(&name, timeouts, None)?;
        let base = spec.base_url.trim_end_matches('/');
        let url = if base.ends_with("/chat/completions") {
            base.to_owned()
        } else {
            format!("{base}/chat/completions")
        };
        Ok(Self { spec, name, url, authorization, key, http, timeouts })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn spec(&self) -> &ProviderSpec {
        &self.spec
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// The provider's key replaced in `text` (an error body may echo it).
    fn scrub(&self, text: String) -> String {
        match &self.key {
            Some(key) if key.expose_secret().len() >= 4 => {
                text.replace(key.expose_secret(), "[provider key]")
            }
            _ => text,
        }
    }

    fn error(&self, class: ErrorClass, message: impl Into<String>) -> LlmError {
        LlmError::new(class, &self.name, self.scrub(message.into()))
    }

    fn transport_error(&self, e: &reqwest::Error) -> LlmError {
        if e.is_timeout() {
            return self.error(ErrorClass::Timeout, "the request timed out");
        }
        let cause = std::error::Error::source(e).map(|c| format!(": {c}")).unwrap_or_default();
        let what = if e.is_connect() { "cannot connect" } else { "transport error" };
        self.error(ErrorClass::Transport, format!("{what}{cause}"))
    }

    /// One attempt, no retries. Streamed text is passed to `on_text` as it arrives.
    pub async fn attempt(
        &self,
        request: &ChatRequest<'_>,
        on_text: &(dyn Fn(&str) + Send + Sync),
    ) -> Result<Completion, LlmError> {
        let body = request.body_for(&self.spec.model, self.spec.vision);
        let mut http = self
            .http
            .post(&self.url)
            .header(CONTENT_TYPE, "application/json")
            .body(serde_json::to_vec(&body).unwrap_or_default());
        if !request.stream {
            http = http.timeout(self.timeouts.call);
        }
        if let Some(authorization) = &self.authorization {
            http = http.header(AUTHORIZATION, authorization.clone());
        }
        let response = match tokio::time::timeout(self.timeouts.call, http.send()).await {
            Ok(Ok(response)) => response,
            Ok(Err(e)) => return Err(self.transport_error(&e)),
            Err(_) => {
                let secs = self.timeouts.call.as_secs();
                return Err(self.error(
                    ErrorClass::Timeout,
                    format!("the request timed out (no answer within {secs}s)"),
                ));
            }
        };
        let status = response.status();
        let retry_after = asked_wait(&response);
        let sse = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if !status.is_success() {
            let body = self.read_limited(response, MAX_ERROR_BYTES).await.unwrap_or_default();
            let mut err = self.error(classify(status.as_u16(), &body), excerpt(&body));
            err.status = Some(status.as_u16());
            err.retry_after = retry_after;
            return Err(err);
        }
        if sse {
            return self.read_stream(response, on_text).await;
        }
        let body = self.read_limited(response, MAX_ANSWER_BYTES).await?;
        parse_completion(&body, &self.name).map_err(|e| self.error(e.class, e.message))
    }

    /// A provider for one audio endpoint (`[llm.transcription]`, `[llm.speech]`): one model
    /// at `base_url`, its key from `api_key_env`, each call within `timeout_secs`.
    pub(crate) fn endpoint(
        base_url: &str,
        model: &str,
        api_key_env: Option<String>,
        key: Option<SecretString>,
        timeout_secs: u64,
    ) -> Result<Self, LlmError> {
        let mut spec = ProviderSpec::new(base_url, model);
        spec.api_key_env = api_key_env;
        let timeout = Duration::from_secs(timeout_secs);
        let timeouts = Timeouts { connect: Duration::from_secs(10), call: timeout, stall: timeout };
        Self::new(spec, key, timeouts)
    }

    /// An error of this provider, its key scrubbed from the message.
    pub(crate) fn fail(&self, class: ErrorClass, message: impl Into<String>) -> LlmError {
        self.error(class, message)
    }

    /// Posts a multipart `form` to `url` with the key, in one attempt within the call's
    /// limit: the status, the wait a `Retry-After` asks for, and the body (at most
    /// [`MAX_ANSWER_BYTES`]), whatever the status.
    pub(crate) async fn post_form(
        &self,
        url: &str,
        form: reqwest::multipart::Form,
    ) -> Result<(u16, Option<Duration>, Vec<u8>), LlmError> {
        self.post(self.http.post(url).multipart(form), MAX_ANSWER_BYTES).await
    }

    /// Posts JSON `body` to `url` as [`Self::post_form`] does a form, reading at most `limit`
    /// bytes of the answer (speech answers with audio, not JSON).
    pub(crate) async fn post_json(
        &self,
        url: &str,
        body: &serde_json::Value,
        limit: usize,
    ) -> Result<(u16, Option<Duration>, Vec<u8>), LlmError> {
        let request = self
            .http
            .post(url)
            .header(CONTENT_TYPE, "application/json")
            .body(serde_json::to_vec(body).unwrap_or_default());
        self.post(request, limit).await
    }

    async fn post(
        &self,
        request: reqwest::RequestBuilder,
        limit: usize,
    ) -> Result<(u16, Option<Duration>, Vec<u8>), LlmError> {
        let mut request = request.timeout(self.timeouts.call);
        if let Some(authorization) = &self.authorization {
            request = request.header(AUTHORIZATION, authorization.clone());
        }
        let response = request.send().await.map_err(|e| self.transport_error(&e))?;
        let status = response.status().as_u16();
        let retry_after = asked_wait(&response);
        let body = self.read_limited(response, limit).await?;
        Ok((status, retry_after, body))
    }

    /// The models the provider lists (`GET {base}/models`), with its key: the cheap probe
    /// `nexbot doctor` and the daemon's health use.
    pub async fn list_models(&self) -> Result<Vec<String>, LlmError> {
        let url = format!("{}/models", self.url.trim_end_matches("/chat/completions"));
        let mut request =
            self.http.get(&url).timeout(self.timeouts.call.min(Duration::from_secs(10)));
        if let Some(authorization) = &self.authorization {
            request = request.header(AUTHORIZATION, authorization.clone());
        }
        let response = request.send().await.map_err(|e| self.transport_error(&e))?;
        let status = response.status();
        let body = self.read_limited(response, MAX_ERROR_BYTES * 16).await?;
        if !status.is_success() {
            let mut err = self.error(classify(status.as_u16(), &body), excerpt(&body));
            err.status = Some(status.as_u16());
            return Err(err);
        }
        let value: serde_json::Value = serde_json::from_slice(&body).map_err(|e| {
            self.error(ErrorClass::Malformed, format!("the model list is not JSON: {e}"))
        })?;
        Ok(value["data"]
            .as_array()
            .map(|models| {
                models.iter().filter_map(|m| m["id"].as_str().map(str::to_owned)).collect()
            })
            .unwrap_or_default())
    }

    async fn read_limited(
        &self,
        mut response: reqwest::Response,
        limit: usize,
    ) -> Result<Vec<u8>, LlmError> {
        let mut body = Vec::new();
        loop {
            let chunk = tokio::time::timeout(self.timeouts.stall, response.chunk()).await;
            match chunk {
                Ok(Ok(Some(chunk))) => {
                    if body.len() + chunk.len() > limit {
                        return Err(self.error(
                            ErrorClass::Malformed,
                            format!("the answer is larger than {limit} bytes"),
                        ));
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok(Ok(None)) => return Ok(body),
                Ok(Err(e)) => return Err(self.transport_error(&e)),
                Err(_) => {
                    return Err(self.error(ErrorClass::Timeout, "the request timed out mid-answer"))
                }
            }
        }
    }

    async fn read_stream(
        &self,
        response: reqwest::Response,
        on_text: &(dyn Fn(&str) + Send + Sync),
    ) -> Result<Completion, LlmError> {
        let mut stream = response.bytes_stream();
        let mut decoder = SseDecoder::default();
        let mut acc = Accumulator::default();
        let name = self.name.as_str();
        loop {
            let next = tokio::time::timeout(self.timeouts.stall, stream.next()).await;
            let chunk = match next {
                Ok(Some(Ok(chunk))) => chunk,
                Ok(Some(Err(e))) => {
                    let mut err = self.transport_error(&e);
                    if err.class == ErrorClass::Transport {
                        // A connection dropped mid-answer is a cut stream.
                        err.class = ErrorClass::Truncated;
                    }
                    return Err(err);
                }
                Ok(None) => break,
                Err(_) => {
                    return Err(self.error(
                        ErrorClass::Timeout,
                        format!(
                            "the stream timed out (nothing for {}s)",
                            self.timeouts.stall.as_secs()
                        ),
                    ))
                }
            };
            decoder.feed(
                &chunk,
                |data| {
                    if let Some(text) = acc.push(data, name)? {
                        on_text(&text);
                    }
                    Ok(())
                },
                name,
            )?;
        }
        decoder.finish(|data| {
            if let Some(text) = acc.push(data, name)? {
                on_text(&text);
            }
            Ok(())
        })?;
        acc.finish(name)
    }
}

/// The wait `response`'s `Retry-After` asks for (seconds or an HTTP date), for chat calls and
/// transcriptions alike.
fn asked_wait(response: &reqwest::Response) -> Option<Duration> {
    response
        .headers()
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| parse_retry_after(v, SystemTime::now()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_names_prices_and_checks() {
        let mut spec = ProviderSpec::new("http://localhost:11434/v1", "qwen");
        assert_eq!(spec.display_name(), "localhost");
        assert_eq!(spec.cost_micros(1, 1), None);
        spec.input_price_per_mtok = Some(0.5);
        spec.output_price_per_mtok = Some(1.5);
        assert_eq!(spec.cost_micros(1_000_000, 1_000_000), Some(2_000_000));
        assert!(spec.check("llm.providers[0]").is_ok());
        spec.base_url = "ftp://x".into();
        assert!(spec.check("p").unwrap_err().contains("p.base_url"));
    }

    #[test]
    fn debug_hides_the_key() {
        let timeouts = Timeouts {
            connect: Duration::from_secs(1),
            call: Duration::from_secs(1),
            stall: Duration::from_secs(1),
        };
        let p = Provider::new(
            ProviderSpec::new("http://h/v1/", "m"),
            Some(SecretString::from("sk-planted-dbg")),
            timeouts,
        )
        .unwrap();
        let debug = format!("{p:?}");
        assert!(!debug.contains("sk-planted-dbg") && debug.contains("[set]"), "{debug}");
        assert_eq!(p.url(), "http://h/v1/chat/completions");
        assert_eq!(p.scrub("echo sk-planted-dbg".into()), "echo [provider key]");
    }
}
