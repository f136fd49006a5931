//! The agent's sections of `config.toml`: `[agent]`, `[llm]` and `[llm.caps]`. The host's
//! `Config` holds them and checks them with everything else; their types live here, with the
//! code that reads them.

use serde::{Deserialize, Serialize};

/// The LLM provider's API key.
pub const LLM_API_KEY_ENV: &str = "NEXBOT_LLM_API_KEY";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    pub max_iterations: u32,
    pub tool_timeout_secs: u64,
    pub turn_timeout_secs: u64,
    pub context_max_chars: usize,
    pub history_max_messages: usize,
    /// How long `ask_user` waits for the chat's answer: its default and its maximum. A turn
    /// waiting on a person holds the chat's worker, so the wait is bounded by the operator,
    /// not by the model.
    pub ask_timeout_secs: u64,
    /// The risky steps a tool asks the chat's user about before it takes them, with Allow /
    /// Deny buttons (`"send_file"`: a file larger than `confirm_send_file_bytes`;
    /// `"delete"`: any `delete_file`). Empty, the default: nothing asks. The question waits
    /// `egress.approval_timeout_secs`; no answer refuses the step. (A recurring job the model
    /// wants to schedule is always asked about, listed or not.)
    pub confirm: Vec<crate::confirm::ConfirmKind>,
    /// With `"send_file"` in `confirm`: files larger than this many bytes are asked about.
    pub confirm_send_file_bytes: u64,
}

/// `agent.confirm_send_file_bytes` unless set: 10 MB, far above a document or a chart a
/// chat exchanges, well below the 50 MB Telegram takes from a bot.
pub const DEFAULT_CONFIRM_SEND_FILE_BYTES: u64 = 10 * 1024 * 1024;

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            max_iterations: 20,
            tool_timeout_secs: 60,
            turn_timeout_secs: 900,
            context_max_chars: 24_000,
            history_max_messages: 40,
            ask_timeout_secs: 300,
            confirm: Vec::new(),
            confirm_send_file_bytes: DEFAULT_CONFIRM_SEND_FILE_BYTES,
        }
    }
}

/// The model side. Either today's single provider (`base_url`, `model`, key in
/// `NEXBOT_LLM_API_KEY`), or an ordered `[[llm.providers]]` list, the first being primary and
/// the rest fallbacks; the retry, timeout and streaming settings apply to all of them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LlmConfig {
    /// The single provider's base URL (used when `providers` is empty).
    pub base_url: String,
    /// The single provider's model (used when `providers` is empty).
    pub model: String,
    /// One attempt's limit: the whole answer (non-streamed), or the longest silence between
    /// two chunks of a streamed one.
    pub timeout_secs: u64,
    /// Retries on one provider after its first attempt, for retryable failures.
    pub max_retries: u32,
    pub retry_initial_ms: u64,
    /// The longest wait between retries; a provider asking (`Retry-After`) for longer is left
    /// for the next one when there is one.
    pub retry_max_wait_secs: u64,
    /// The completion limit of every call; [`DEFAULT_MAX_TOKENS`] when unset. Budgets reserve
    /// it as a call's worst case.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Stream answers (SSE): the console shows them as they grow, and a stalled stream is
    /// noticed after `timeout_secs`. Turn off for a server that cannot stream.
    pub stream: bool,
    /// The total time one turn may wait for the model — all its calls, with every retry, wait
    /// and fallback.
    pub total_timeout_secs: u64,
    /// Failed attempts in a row after which a provider is skipped (its breaker opens).
    pub breaker_failures: u32,
    /// How long an open breaker skips its provider before one call probes it.
    pub breaker_cooldown_secs: u64,
    /// The single provider's context window in tokens (used when `providers` is empty).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u32>,
    /// The single provider sees images (used when `providers` is empty; each of `providers`
    /// says so with its own `vision`): a photo a user sends reaches it as an image.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub vision: bool,
    /// Providers in order of preference (`[[llm.providers]]`); empty: `base_url`/`model`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub providers: Vec<nexbot_llm::ProviderSpec>,
    /// Spending caps (`[llm.caps]`).
    pub caps: CapsConfig,
    /// Speech to text for voice notes and audio files (`[llm.transcription]`); without it
    /// they are stored, not transcribed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transcription: Option<nexbot_llm::TranscriptionSpec>,
    /// Text to speech for voice answers (`[llm.speech]`); without it every answer is text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speech: Option<nexbot_llm::SpeechSpec>,
    /// Vectors of memories and messages for meaning-based recall (`[llm.embeddings]`);
    /// without it memory is searched by its words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embeddings: Option<nexbot_llm::EmbeddingsSpec>,
}

/// The completion limit when `llm.max_tokens` is unset.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

impl Default for LlmConfig {
    fn default() -> Self {
        Self {
            base_url: "https://api.z.ai/api/paas/v4".into(),
            model: "glm-4.7-flash".into(),
            timeout_secs: 120,
            max_retries: 3,
            retry_initial_ms: 1_000,
            retry_max_wait_secs: 30,
            max_tokens: None,
            temperature: None,
            stream: true,
            total_timeout_secs: 300,
            breaker_failures: 5,
            breaker_cooldown_secs: 30,
            context_window: None,
            vision: false,
            providers: Vec::new(),
            caps: CapsConfig::default(),
            transcription: None,
            speech: None,
            embeddings: None,
        }
    }
}

impl LlmConfig {
    /// The providers in order: `providers`, or the single `base_url`/`model` one.
    pub fn provider_list(&self) -> Vec<nexbot_llm::ProviderSpec> {
        if !self.providers.is_empty() {
            return self.providers.clone();
        }
        let mut single = nexbot_llm::ProviderSpec::new(&self.base_url, &self.model);
        single.api_key_env = Some(LLM_API_KEY_ENV.to_owned());
        single.context_window = self.context_window;
        single.vision = self.vision;
        vec![single]
    }

    /// Whether the primary provider sees images (photos are then shown to the model).
    pub fn sees_images(&self) -> bool {
        self.provider_list().first().is_some_and(|p| p.vision)
    }

    /// The primary provider's base URL and model.
    pub fn primary(&self) -> (String, String) {
        let first = self.provider_list().swap_remove(0);
        (first.base_url, first.model)
    }

    pub fn max_tokens(&self) -> u32 {
        self.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS)
    }
}

/// Spending caps; 0 means no cap. Days and months are those of `time_zone`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CapsConfig {
    /// LLM tokens per day, all chats and delegated tasks together.
    pub tokens_per_day: u64,
    /// LLM tokens per day for one chat (its delegated tasks included).
    pub chat_tokens_per_day: u64,
    /// USD per day, from the providers' prices.
    pub cost_per_day_usd: f64,
    /// USD per calendar month.
    pub cost_per_month_usd: f64,
    /// Under a cost cap, a call to a provider without prices: `"refuse"` (the default) or
    /// `"allow"` (its tokens are still counted and shown as unpriced, never as $0).
    pub unpriced: Unpriced,
    /// IANA time zone the days and months are counted in, e.g. `"Europe/Berlin"`.
    pub time_zone: String,
}

impl Default for CapsConfig {
    fn default() -> Self {
        Self {
            tokens_per_day: 0,
            chat_tokens_per_day: 0,
            cost_per_day_usd: 0.0,
            cost_per_month_usd: 0.0,
            unpriced: Unpriced::Refuse,
            time_zone: "UTC".into(),
        }
    }
}

impl CapsConfig {
    /// Whether any cost cap is set.
    pub fn has_cost_cap(&self) -> bool {
        self.cost_per_day_usd > 0.0 || self.cost_per_month_usd > 0.0
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Unpriced {
    Refuse,
    Allow,
}

/// `[memory]`: each chat's long-term memory (entries with where they came from).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MemoryConfig {
    /// Entries recalled into each turn's prompt (those that best match the message); 0: none
    /// (the model can still `recall`).
    pub recall: usize,
    /// Entries one chat keeps; past it, the least recently used goes.
    pub max_entries: u64,
    /// Characters one entry may have.
    pub max_entry_chars: usize,
    /// Entries neither stored nor recalled for this many days are deleted; 0 keeps them.
    pub prune_unused_days: u32,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        Self { recall: 5, max_entries: 10_000, max_entry_chars: 1_000, prune_unused_days: 365 }
    }
}

impl MemoryConfig {
    pub fn limits(&self) -> nexbot_store::MemoryLimits {
        nexbot_store::MemoryLimits {
            max_entries: self.max_entries,
            max_chars: self.max_entry_chars,
        }
    }

    /// What is wrong with these settings, in the operator's words.
    /// Each as (key, reason).
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if self.max_entries == 0 {
            out.push(("memory.max_entries", "must be at least 1".to_owned()));
        }
        if !(20..=100_000).contains(&self.max_entry_chars) {
            out.push(("memory.max_entry_chars", "must be between 20 and 100000".to_owned()));
        }
        if self.recall > 50 {
            out.push((
                "memory.recall",
                "may be at most 50 (each recalled entry is in the prompt)".to_owned(),
            ));
        }
        out
    }
}
