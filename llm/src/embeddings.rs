//! Text embeddings (`[llm.embeddings]`): an OpenAI-compatible `/embeddings` endpoint turns a
//! memory's text, and a message, into vectors whose closeness says "about the same thing" even
//! without a shared word. Off by default: a chat's memory is searched by its words (FTS5)
//! alone until the operator names an endpoint.

use secrecy::SecretString;
use serde::{Deserialize, Serialize};

use crate::error::{classify, excerpt, ErrorClass, LlmError};
use crate::provider::{Provider, ProviderSpec};

/// Longest answer read (a 3,072-float vector as JSON is ~60 KB).
const MAX_ANSWER_BYTES: usize = 4 << 20;
/// Characters of text sent (a memory entry, or a message's beginning).
const MAX_INPUT_CHARS: usize = 8_000;

/// `[llm.embeddings]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbeddingsSpec {
    /// The OpenAI-compatible base URL (`https://api.openai.com/v1`, a local server's).
    pub base_url: String,
    /// `text-embedding-3-small`, or the local server's model name.
    pub model: String,
    /// The environment variable holding its key (none for a local server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// One attempt's limit, seconds: a turn waits for its message's vector this long at most.
    #[serde(default = "default_timeout")]
    pub timeout_secs: u64,
    /// Retries after the first attempt, for retryable failures (429, 5xx, timeouts).
    #[serde(default = "default_retries")]
    pub max_retries: u32,
}

fn default_timeout() -> u64 {
    10
}
fn default_retries() -> u32 {
    1
}

impl EmbeddingsSpec {
    /// What is wrong with it, naming the field under `at` (`llm.embeddings`).
    pub fn check(&self, at: &str) -> Result<(), String> {
        ProviderSpec::new(&self.base_url, &self.model).check(at)?;
        if !(1..=120).contains(&self.timeout_secs) {
            return Err(format!("{at}.timeout_secs: {} is not within 1..=120", self.timeout_secs));
        }
        if self.max_retries > 5 {
            return Err(format!("{at}.max_retries: {} is more than 5", self.max_retries));
        }
        Ok(())
    }
}

/// The embeddings endpoint, ready to call.
#[derive(Debug)]
pub struct Embedder {
    spec: EmbeddingsSpec,
    provider: Provider,
}

#[derive(Deserialize)]
struct Answer {
    data: Vec<Item>,
}

#[derive(Deserialize)]
struct Item {
    embedding: Vec<f32>,
}

impl Embedder {
    pub fn new(spec: EmbeddingsSpec, key: Option<SecretString>) -> Result<Self, LlmError> {
        let (url, model, key_env) = (&spec.base_url, &spec.model, spec.api_key_env.clone());
        let provider = Provider::endpoint(url, model, key_env, key, spec.timeout_secs)?;
        Ok(Self { spec, provider })
    }

    /// The model's name: vectors of different models are not compared.
    pub fn model(&self) -> &str {
        &self.spec.model
    }

    /// `text`'s vector, retried with back-off while the failure is retryable.
    pub async fn embed(&self, text: &str) -> Result<Vec<f32>, LlmError> {
        let input: String = text.chars().take(MAX_INPUT_CHARS).collect();
        crate::retry::retried(self.spec.max_retries, "embeddings", || self.attempt(&input)).await
    }

    async fn attempt(&self, input: &str) -> Result<Vec<f32>, LlmError> {
        let body = serde_json::json!({"model": self.spec.model, "input": [input]});
        let url = format!("{}/embeddings", self.spec.base_url.trim_end_matches('/'));
        let (status, retry_after, answer) =
            self.provider.post_json(&url, &body, MAX_ANSWER_BYTES).await?;
        if !(200..300).contains(&status) {
            let mut err = self.provider.fail(classify(status, &answer), excerpt(&answer));
            err.status = Some(status);
            err.retry_after = retry_after;
            return Err(err);
        }
        let malformed = |why: String| self.provider.fail(ErrorClass::Malformed, why);
        let parsed: Answer = serde_json::from_slice(&answer).map_err(|e| {
            malformed(format!("not an embeddings answer ({e}): {}", excerpt(&answer)))
        })?;
        let vector = parsed.data.into_iter().next().map(|i| i.embedding).unwrap_or_default();
        if vector.is_empty() || vector.iter().any(|x| !x.is_finite()) {
            return Err(malformed("the embedding is empty or not finite".to_owned()));
        }
        Ok(vector)
    }
}

/// The cosine of two vectors (0 when their lengths differ or one is zero).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return 0.0;
    }
    let (mut dot, mut na, mut nb) = (0.0f32, 0.0f32, 0.0f32);
    for (x, y) in a.iter().zip(b) {
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    if na == 0.0 || nb == 0.0 {
        return 0.0;
    }
    dot / (na.sqrt() * nb.sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_is_checked_and_vectors_compare() {
        let spec: EmbeddingsSpec = serde_json::from_value(
            serde_json::json!({"base_url": "http://127.0.0.1:9/v1", "model": "e"}),
        )
        .unwrap();
        assert_eq!((spec.timeout_secs, spec.max_retries), (10, 1));
        assert_eq!(spec.check("llm.embeddings"), Ok(()));
        let bad = EmbeddingsSpec { timeout_secs: 0, ..spec.clone() };
        assert!(bad.check("llm.embeddings").unwrap_err().contains("llm.embeddings.timeout_secs"));
        assert!((cosine(&[1.0, 0.0], &[2.0, 0.0]) - 1.0).abs() < 1e-6);
        assert_eq!(cosine(&[1.0, 0.0], &[0.0, 3.0]), 0.0);
        assert_eq!(cosine(&[1.0], &[1.0, 0.0]), 0.0);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 0.0]), 0.0);
    }
}
