//! Speech to text: an OpenAI-compatible `POST {base}/audio/transcriptions` (OpenAI's, or a
//! local whisper server's), `[llm.transcription]` in `config.toml`.
//!
//! Why here: a transcription is one more call to a provider, and it fails the same ways (a
//! 429 with `Retry-After`, a 5xx, a bad key, a timeout). It is made by the same [`Provider`]
//! (its client without redirects, its key in a sensitive header, its errors classified from
//! the raw answer and scrubbed of the key) and retried by the same back-off.

use secrecy::SecretString;
use serde::{Deserialize, Serialize};

use crate::error::{classify, excerpt, ErrorClass, LlmError};
use crate::provider::{Provider, ProviderSpec};

/// `[llm.transcription]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TranscriptionSpec {
    /// The OpenAI-compatible base URL (`https://api.openai.com/v1`, `http://127.0.0.1:8000/v1`).
    pub base_url: String,
    /// `whisper-1`, or the local server's model name.
    pub model: String,
    /// The environment variable holding its key (none for a local server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// One attempt's limit, seconds.
    #[serde(default = "default_timeout")]
    pub timeout_secs: u64,
    /// Retries after the first attempt, for retryable failures (429, 5xx, timeouts).
    #[serde(default = "default_retries")]
    pub max_retries: u32,
    /// The largest recording sent, bytes (OpenAI takes 25 MB).
    #[serde(default = "default_max_bytes")]
    pub max_bytes: u64,
    /// The longest recording sent, seconds (as the channel says).
    #[serde(default = "default_max_duration")]
    pub max_duration_secs: u32,
}

fn default_timeout() -> u64 {
    120
}
fn default_retries() -> u32 {
    2
}
fn default_max_bytes() -> u64 {
    25 * 1024 * 1024
}
fn default_max_duration() -> u32 {
    600
}

impl TranscriptionSpec {
    /// What is wrong with it, naming the field under `at` (`llm.transcription`).
    pub fn check(&self, at: &str) -> Result<(), String> {
        ProviderSpec::new(&self.base_url, &self.model).check(at)?;
        if !(1..=3600).contains(&self.timeout_secs) {
            return Err(format!("{at}.timeout_secs: {} is not within 1..=3600", self.timeout_secs));
        }
        if self.max_retries > 10 {
            return Err(format!("{at}.max_retries: {} is more than 10", self.max_retries));
        }
        if self.max_bytes == 0 || self.max_duration_secs == 0 {
            return Err(format!("{at}: max_bytes and max_duration_secs must be at least 1"));
        }
        Ok(())
    }
}

/// A recording that is not sent, and why (for the user).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TooLong {
    #[error("it is {secs} s long; I transcribe up to {max} s")]
    Duration { secs: u32, max: u32 },
    #[error("it is {bytes} bytes; I transcribe up to {max} bytes")]
    Size { bytes: u64, max: u64 },
}

/// The transcription endpoint, ready to call.
#[derive(Debug)]
pub struct Transcriber {
    spec: TranscriptionSpec,
    provider: Provider,
}

/// What the endpoint answers (`response_format=json`).
#[derive(Deserialize)]
struct Transcript {
    text: String,
}

impl Transcriber {
    pub fn new(spec: TranscriptionSpec, key: Option<SecretString>) -> Result<Self, LlmError> {
        let (url, model, key_env) = (&spec.base_url, &spec.model, spec.api_key_env.clone());
        let provider = Provider::endpoint(url, model, key_env, key, spec.timeout_secs)?;
        Ok(Self { spec, provider })
    }

    /// Whether a recording of `bytes` and `duration_secs` may be sent.
    pub fn admits(&self, bytes: u64, duration_secs: Option<u32>) -> Result<(), TooLong> {
        if let Some(secs) = duration_secs.filter(|s| *s > self.spec.max_duration_secs) {
            return Err(TooLong::Duration { secs, max: self.spec.max_duration_secs });
        }
        if bytes > self.spec.max_bytes {
            return Err(TooLong::Size { bytes, max: self.spec.max_bytes });
        }
        Ok(())
    }

    /// The text of `audio` (`file_name` and `mime` tell the server its format), retried with
    /// back-off while the failure is retryable.
    pub async fn transcribe(
        &self,
        audio: &[u8],
        file_name: &str,
        mime: &str,
    ) -> Result<String, LlmError> {
        let attempt = || self.attempt(audio, file_name, mime);
        crate::retry::retried(self.spec.max_retries, "transcription", attempt).await
    }

    async fn attempt(&self, audio: &[u8], file_name: &str, mime: &str) -> Result<String, LlmError> {
        let part = reqwest::multipart::Part::bytes(audio.to_vec())
            .file_name(file_name.to_owned())
            .mime_str(mime)
            .or_else(|_| {
                reqwest::multipart::Part::bytes(audio.to_vec())
                    .file_name(file_name.to_owned())
                    .mime_str("application/octet-stream")
            })
            .map_err(|e| self.provider.fail(ErrorClass::BadRequest, e.to_string()))?;
        let form = reqwest::multipart::Form::new()
            .text("model", self.spec.model.clone())
            .text("response_format", "json")
            .part("file", part);
        let url = format!("{}/audio/transcriptions", self.spec.base_url.trim_end_matches('/'));
        let (status, retry_after, body) = self.provider.post_form(&url, form).await?;
        if !(200..300).contains(&status) {
            let mut err = self.provider.fail(classify(status, &body), excerpt(&body));
            err.status = Some(status);
            err.retry_after = retry_after;
            return Err(err);
        }
        serde_json::from_slice::<Transcript>(&body).map(|t| t.text.trim().to_owned()).map_err(|e| {
            self.provider.fail(
                ErrorClass::Malformed,
                format!("the transcription is not the expected JSON ({e}): {}", excerpt(&body)),
            )
        })
    }
}
