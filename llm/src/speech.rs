//! Text to speech: an OpenAI-compatible `POST {base}/audio/speech` (OpenAI's, or a local
//! server's), `[llm.speech]` in `config.toml`: the voice a chat's answer is spoken in.
//!
//! Why here: like a transcription it is one more call to a provider, failing the same ways
//! (a 429 with `Retry-After`, a 5xx, a bad key, a timeout); it is made by the same
//! [`Provider`] (no redirects, its key in a sensitive header, errors scrubbed of the key) and
//! retried by the same back-off.

use secrecy::SecretString;
use serde::{Deserialize, Serialize};

use crate::error::{classify, excerpt, ErrorClass, LlmError};
use crate::provider::{Provider, ProviderSpec};

/// The most characters one speech request takes (OpenAI's `input` limit is 4,096).
pub const MAX_INPUT_CHARS: usize = 4096;

/// The largest recording accepted from the endpoint (Telegram takes voice notes up to 1 MB
/// when sent by file id and 50 MB uploaded; a minute of Opus at 32 kbit/s is ~240 KB).
const MAX_AUDIO_BYTES: usize = 20 << 20;

/// `[llm.speech]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpeechSpec {
    /// The OpenAI-compatible base URL (`https://api.openai.com/v1`).
    pub base_url: String,
    /// `gpt-4o-mini-tts`, `tts-1`, or the local server's model name.
    pub model: String,
    /// The voice (`alloy`, `nova`, …: the provider's names).
    #[serde(default = "default_voice")]
    pub voice: String,
    /// The environment variable holding its key (none for a local server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// One attempt's limit, seconds.
    #[serde(default = "default_timeout")]
    pub timeout_secs: u64,
    /// Retries after the first attempt, for retryable failures (429, 5xx, timeouts).
    #[serde(default = "default_retries")]
    pub max_retries: u32,
    /// Characters spoken per voice message (at most [`MAX_INPUT_CHARS`]); a longer answer is
    /// spoken in parts.
    #[serde(default = "default_part_chars")]
    pub max_chars_per_part: usize,
    /// Voice messages per answer at most; what does not fit is left to the text.
    #[serde(default = "default_parts")]
    pub max_parts: usize,
    /// USD per 1M characters spoken; without it the provider is "unpriced" for cost caps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_per_mchar: Option<f64>,
}

fn default_voice() -> String {
    "alloy".into()
}
fn default_timeout() -> u64 {
    60
}
fn default_retries() -> u32 {
    2
}
fn default_part_chars() -> usize {
    MAX_INPUT_CHARS
}
fn default_parts() -> usize {
    3
}

impl SpeechSpec {
    /// What is wrong with it, naming the field under `at` (`llm.speech`).
    pub fn check(&self, at: &str) -> Result<(), String> {
        ProviderSpec::new(&self.base_url, &self.model).check(at)?;
        if self.voice.trim().is_empty() {
            return Err(format!("{at}.voice: is empty (name one of the provider's voices)"));
        }
        if !(1..=600).contains(&self.timeout_secs) {
            return Err(format!("{at}.timeout_secs: {} is not within 1..=600", self.timeout_secs));
        }
        if self.max_retries > 10 {
            return Err(format!("{at}.max_retries: {} is more than 10", self.max_retries));
        }
        if !(100..=MAX_INPUT_CHARS).contains(&self.max_chars_per_part) {
            return Err(format!(
                "{at}.max_chars_per_part: {} is not within 100..={MAX_INPUT_CHARS}",
                self.max_chars_per_part
            ));
        }
        if !(1..=10).contains(&self.max_parts) {
            return Err(format!("{at}.max_parts: {} is not within 1..=10", self.max_parts));
        }
        if self.price_per_mchar.is_some_and(|p| !p.is_finite() || p < 0.0) {
            return Err(format!("{at}.price_per_mchar: must be a number ≥ 0"));
        }
        Ok(())
    }

    /// The cost of speaking `chars` characters in micro-dollars, when priced.
    pub fn cost_micros(&self, chars: usize) -> Option<u64> {
        // USD per 1M chars is exactly micro-dollars per char.
        self.price_per_mchar.map(|price| (price * chars as f64).ceil() as u64)
    }
}

/// The speech endpoint, ready to call.
#[derive(Debug)]
pub struct Speaker {
    spec: SpeechSpec,
    provider: Provider,
}

impl Speaker {
    pub fn new(spec: SpeechSpec, key: Option<SecretString>) -> Result<Self, LlmError> {
        let (url, model, key_env) = (&spec.base_url, &spec.model, spec.api_key_env.clone());
        let provider = Provider::endpoint(url, model, key_env, key, spec.timeout_secs)?;
        Ok(Self { spec, provider })
    }

    pub fn spec(&self) -> &SpeechSpec {
        &self.spec
    }

    /// The provider's name, as usage records and errors show it.
    pub fn name(&self) -> &str {
        self.provider.name()
    }

    /// `text` spoken as Ogg/Opus (what Telegram plays as a voice message), retried with
    /// back-off while the failure is retryable.
    pub async fn speak(&self, text: &str) -> Result<Vec<u8>, LlmError> {
        crate::retry::retried(self.spec.max_retries, "speech", || self.attempt(text)).await
    }

    async fn attempt(&self, text: &str) -> Result<Vec<u8>, LlmError> {
        let body = serde_json::json!({
            "model": self.spec.model,
            "input": text,
            "voice": self.spec.voice,
            "response_format": "opus",
        });
        let url = format!("{}/audio/speech", self.spec.base_url.trim_end_matches('/'));
        let (status, retry_after, audio) =
            self.provider.post_json(&url, &body, MAX_AUDIO_BYTES).await?;
        if !(200..300).contains(&status) {
            let mut err = self.provider.fail(classify(status, &audio), excerpt(&audio));
            err.status = Some(status);
            err.retry_after = retry_after;
            return Err(err);
        }
        // Telegram shows anything but Ogg/Opus as a file, not a voice message.
        if !audio.starts_with(b"OggS") {
            return Err(self.provider.fail(
                ErrorClass::Malformed,
                format!("the speech is not Ogg/Opus audio: {}", excerpt(&audio)),
            ));
        }
        Ok(audio)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> SpeechSpec {
        let spec = serde_json::json!({"base_url": "http://127.0.0.1:9/v1", "model": "tts-1"});
        serde_json::from_value(spec).unwrap()
    }

    #[test]
    fn defaults_check_and_bad_fields_are_named() {
        let s = spec();
        assert_eq!((s.voice.as_str(), s.max_chars_per_part, s.max_parts), ("alloy", 4096, 3));
        assert_eq!(s.check("llm.speech"), Ok(()));
        let bad = SpeechSpec { max_chars_per_part: 5000, ..spec() };
        assert!(bad.check("llm.speech").unwrap_err().contains("llm.speech.max_chars_per_part"));
        let bad = SpeechSpec { max_parts: 0, ..spec() };
        assert!(bad.check("llm.speech").unwrap_err().contains("llm.speech.max_parts"));
        let bad = SpeechSpec { price_per_mchar: Some(-1.0), ..spec() };
        assert!(bad.check("llm.speech").unwrap_err().contains("price_per_mchar"));
        let typo = serde_json::json!({"base_url": "x", "model": "m", "voise": "a"});
        assert!(serde_json::from_value::<SpeechSpec>(typo).is_err());
    }

    #[test]
    fn cost_is_per_character_and_unpriced_is_none() {
        assert_eq!(spec().cost_micros(1000), None);
        let priced = SpeechSpec { price_per_mchar: Some(15.0), ..spec() };
        assert_eq!(priced.cost_micros(1000), Some(15_000));
    }
}
