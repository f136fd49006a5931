//! The main agent's way to the model: the provider chain of `nexbot-llm`, the spending caps,
//! and context fitting, behind one call ([`Model::complete`]).
//!
//! Why here and not in the agent loop: a call must (1) fit the conversation into the smallest
//! context window of the chain, (2) reserve its worst case on every cap before it is sent,
//! (3) go through retries, fallback and breakers, (4) on "context too long" fit harder once
//! and ask again, and (5) settle and record what it cost and who answered. The agent loop
//! sees a completion or one [`LlmError`] whose [`LlmError::user_message`] can be shown as is.

use std::sync::Arc;
use std::time::Duration;

use secrecy::SecretString;
use tokio_util::sync::CancellationToken;

use nexbot_core::ChatRef;
use nexbot_llm::chain::ChainStats;
use nexbot_llm::context::{estimate_tokens, fit};
use nexbot_llm::provider::Timeouts;
use nexbot_llm::{Chain, ChatRequest, Provider, RetryPolicy};
pub use nexbot_llm::{
    ChatMessage, Completion, ErrorClass, FunctionCall, Image, LlmError, StreamEvent, ToolCall,
    ToolSpec, Usage,
};

use crate::config::LlmConfig;
use crate::exits::{Exit, Exits};
use crate::spend::Spend;

/// The model as the main agent uses it.
#[derive(Debug)]
pub struct Model {
    chain: Chain,
    spend: Arc<Spend>,
    max_tokens: u32,
    temperature: Option<f32>,
    stream: bool,
    /// The smallest context window of the chain: what every provider can take.
    window: u32,
    exits: Option<Arc<Exits>>,
}

impl Model {
    /// `keys` are the providers' keys in `config.provider_list()` order.
    pub fn new(
        config: &LlmConfig,
        keys: &[Option<SecretString>],
        spend: Arc<Spend>,
    ) -> Result<Self, LlmError> {
        let timeouts = Timeouts {
            connect: Duration::from_secs(config.timeout_secs.min(10)),
            call: Duration::from_secs(config.timeout_secs),
            stall: Duration::from_secs(config.timeout_secs),
        };
        let specs = config.provider_list();
        let window = specs.iter().map(|s| s.context_window()).min().unwrap_or(u32::MAX);
        let providers = specs
            .into_iter()
            .enumerate()
            .map(|(i, spec)| Provider::new(spec, keys.get(i).cloned().flatten(), timeouts))
            .collect::<Result<Vec<_>, _>>()?;
        let policy = RetryPolicy {
            max_retries: config.max_retries,
            initial: Duration::from_millis(config.retry_initial_ms),
            max_wait: Duration::from_secs(config.retry_max_wait_secs),
            total: Duration::from_secs(config.total_timeout_secs),
            breaker_failures: config.breaker_failures,
            breaker_cooldown: Duration::from_secs(config.breaker_cooldown_secs),
        };
        Ok(Self {
            chain: Chain::new(providers, policy),
            spend,
            max_tokens: config.max_tokens(),
            temperature: config.temperature,
            stream: config.stream,
            exits: None,
            window,
        })
    }

    /// Scans every request to the provider at the `llm` exit.
    pub fn with_exits(mut self, exits: Option<Arc<Exits>>) -> Self {
        self.exits = exits;
        self
    }

    pub fn chain(&self) -> &Chain {
        &self.chain
    }

    pub fn stats(&self) -> &Arc<ChainStats> {
        self.chain.stats()
    }

    pub fn spend(&self) -> &Arc<Spend> {
        &self.spend
    }

    /// The primary provider's base URL and model, as the metrics label them.
    pub fn target(&self) -> (&str, &str) {
        let primary = self.chain.primary();
        (primary.spec().base_url.trim_end_matches('/'), &primary.spec().model)
    }

    /// Tokens a prompt may take: the window less the answer's room.
    fn prompt_room(&self) -> u64 {
        u64::from(self.window)
            .saturating_sub(u64::from(self.max_tokens))
            .max(u64::from(self.window) / 2)
    }

    /// The most one answer may hold when it is kept in the history: a quarter of the window.
    pub fn history_room_bytes(&self) -> usize {
        (self.window as usize / 4) * 3
    }

    /// The dearest price of the chain for `prompt` + `completion` tokens; `None` when a
    /// provider has no prices.
    fn worst_cost(&self, prompt: u64, completion: u64) -> Option<u64> {
        self.chain
            .providers()
            .iter()
            .map(|p| p.spec().cost_micros(prompt, completion))
            .try_fold(0, |max: u64, cost| cost.map(|c| max.max(c)))
    }

    /// How long one turn may wait for the model, all its calls together
    /// (`llm.total_timeout_secs`).
    pub fn turn_wait(&self) -> Duration {
        self.chain.policy().total
    }

    /// One completion for `chat`. `messages` are fitted to the window in place (so later
    /// iterations start from the fitted list); `on_event` sees a streamed answer grow; the
    /// call (retries, waits, fallbacks) takes at most `wait_left`.
    pub async fn complete(
        &self,
        chat: &ChatRef,
        messages: &mut Vec<ChatMessage>,
        tools: &[ToolSpec],
        cancel: &CancellationToken,
        on_event: &(dyn Fn(StreamEvent<'_>) + Send + Sync),
        wait_left: Duration,
    ) -> Result<Completion, LlmError> {
        if wait_left.is_zero() {
            return Err(LlmError::new(
                ErrorClass::Timeout,
                self.chain.primary().name(),
                format!(
                    "this turn waited {}s for the model, all it may (llm.total_timeout_secs)",
                    self.turn_wait().as_secs()
                ),
            ));
        }
        let tool_tokens = estimate_tokens(serde_json::to_vec(tools).map_or(0, |v| v.len()));
        let mut room = self.prompt_room().saturating_sub(tool_tokens);
        let mut fitted_harder = false;
        if let Some(exits) = &self.exits {
            for message in messages.iter_mut() {
                if let Some(content) = message.content.as_mut() {
                    exits.scan_string(Exit::Llm, Some(chat), content);
                }
                for call in &mut message.tool_calls {
                    exits.scan_string(Exit::Llm, Some(chat), &mut call.function.arguments);
                }
            }
        }
        loop {
            let fitted = fit(messages, room);
            if fitted.dropped > 0 || fitted.cut > 0 {
                tracing::info!(%chat, dropped = fitted.dropped, cut = fitted.cut, tokens = fitted.tokens, "context fitted to the model's window");
            }
            let mut request = ChatRequest::new(messages, tools);
            request.max_tokens = Some(self.max_tokens);
            request.temperature = self.temperature;
            request.stream = self.stream;
            let prompt = estimate_tokens(request.prompt_bytes());
            let worst = prompt + u64::from(self.max_tokens);
            let reservation = self
                .spend
                .reserve(chat, worst, self.worst_cost(prompt, u64::from(self.max_tokens)))
                .await
                .map_err(|reason| LlmError::new(ErrorClass::Budget, "caps", reason))?;
            match self.chain.complete_within(&request, cancel, on_event, wait_left).await {
                Ok(mut completion) => {
                    let usage = completion.usage.unwrap_or(Usage {
                        prompt_tokens: prompt,
                        completion_tokens: estimate_tokens(nexbot_llm::context::message_bytes(
                            &completion.message,
                        )),
                    });
                    let spec = self
                        .chain
                        .providers()
                        .iter()
                        .find(|p| p.name() == completion.provider)
                        .map(|p| {
                            p.spec().cost_micros(usage.prompt_tokens, usage.completion_tokens)
                        });
                    self.spend
                        .settle(reservation, &completion.provider, usage, spec.flatten())
                        .await;
                    // What was charged, reported or estimated.
                    completion.usage = Some(usage);
                    return Ok(completion);
                }
                Err(e) if e.class == ErrorClass::ContextTooLong && !fitted_harder => {
                    reservation.release();
                    tracing::warn!(%chat, error = %e, "the provider says the context is too long: fitting harder");
                    fitted_harder = true;
                    // The provider's window is smaller than configured: halve what was sent.
                    room = fitted.tokens.min(room) / 2;
                }
                Err(e) => {
                    // Providers do not bill failed calls; a cancelled one may have been.
                    if e.class == ErrorClass::Cancelled {
                        drop(reservation);
                    } else {
                        reservation.release();
                    }
                    return Err(e);
                }
            }
        }
    }
}
