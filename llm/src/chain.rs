//! The ordered list of providers: retries on one, then fallback to the next, with a circuit
//! breaker per provider so one that keeps failing is not hammered.
//!
//! Per provider: a retryable failure ([`ErrorClass::is_retryable`]) is retried up to
//! `max_retries` times with back-off (a `Retry-After` longer than `max_wait` moves on at once
//! when another provider is left); auth and quota failures move on at once; a bad request or a
//! too-long context ends the call (the caller may fit the context and ask again). After
//! `breaker_failures` failed attempts in a row a provider's breaker opens: it is skipped for
//! `breaker_cooldown`, then one call probes it, and a success closes it. When every breaker is
//! open the providers are still tried once each, in order — a call is never refused untried.
//! The whole call, every attempt and wait included, ends after `total`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::error::{ErrorClass, LlmError};
use crate::provider::Provider;
use crate::retry::backoff;
use crate::wire::{ChatRequest, Completion};

/// Retry, fallback and breaker settings.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Retries on one provider after its first attempt.
    pub max_retries: u32,
    pub initial: Duration,
    /// The longest wait between attempts (a longer `Retry-After` is capped, or skipped).
    pub max_wait: Duration,
    /// The longest a call may take, all attempts and providers included.
    pub total: Duration,
    /// Consecutive failed attempts that open a provider's breaker.
    pub breaker_failures: u32,
    /// How long an open breaker skips its provider before a probe.
    pub breaker_cooldown: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 2,
            initial: Duration::from_millis(500),
            max_wait: Duration::from_secs(20),
            total: Duration::from_secs(300),
            breaker_failures: 5,
            breaker_cooldown: Duration::from_secs(30),
        }
    }
}

/// What a streamed call tells its caller while it runs.
#[derive(Debug, Clone, Copy)]
pub enum StreamEvent<'a> {
    /// More of the answer.
    Text(&'a str),
    /// The text so far is void: another attempt starts (a cut stream, a fallback).
    Restart,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Availability {
    Closed,
    /// The cooldown is over: this call probes.
    Probe,
    Open,
}

#[derive(Debug, Default)]
struct BreakerState {
    failures: u32,
    open_until: Option<Instant>,
}

/// Counters of one provider, for the metrics.
#[derive(Debug, Default)]
pub struct ProviderStats {
    /// Calls this provider answered.
    pub answered: AtomicU64,
    /// Failed attempts, by [`ErrorClass::ALL`] index.
    pub failures: [AtomicU64; ErrorClass::ALL.len()],
    /// Whether its breaker is open (1) or not (0), as of the last attempt.
    pub breaker_open: AtomicU64,
}

/// What the chain did since it was built.
#[derive(Debug, Default)]
pub struct ChainStats {
    pub calls: AtomicU64,
    /// Calls that failed after every retry and fallback.
    pub errors: AtomicU64,
    /// HTTP attempts.
    pub attempts: AtomicU64,
    /// Calls answered by a provider other than the first.
    pub fallbacks: AtomicU64,
    pub prompt_tokens: AtomicU64,
    pub completion_tokens: AtomicU64,
    pub providers: Vec<ProviderStats>,
    /// How the last call ended (`None`: none ended yet), for health.
    last: Mutex<Option<CallOutcome>>,
}

/// How one call through the chain ended, as health reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallOutcome {
    pub at: Instant,
    /// What kept the model from answering; `None` when a provider answered (a refused request
    /// — bad request, context too long — is an answer: the model is there).
    pub problem: Option<String>,
}

impl ChainStats {
    /// How the last call that ended ended (cancelled calls say nothing about the model).
    pub fn last_outcome(&self) -> Option<CallOutcome> {
        self.last.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn ended(&self, problem: Option<String>) {
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(CallOutcome { at: Instant::now(), problem });
    }
}

/// Providers in order of preference, first = primary.
#[derive(Debug)]
pub struct Chain {
    providers: Vec<Provider>,
    breakers: Vec<Mutex<BreakerState>>,
    policy: RetryPolicy,
    stats: Arc<ChainStats>,
}

impl Chain {
    /// `providers` must not be empty.
    pub fn new(providers: Vec<Provider>, policy: RetryPolicy) -> Self {
        assert!(!providers.is_empty(), "a chain needs at least one provider");
        let stats = ChainStats {
            providers: providers.iter().map(|_| ProviderStats::default()).collect(),
            ..ChainStats::default()
        };
        Self {
            breakers: providers.iter().map(|_| Mutex::default()).collect(),
            providers,
            policy,
            stats: Arc::new(stats),
        }
    }

    pub fn providers(&self) -> &[Provider] {
        &self.providers
    }

    pub fn primary(&self) -> &Provider {
        &self.providers[0]
    }

    pub fn stats(&self) -> &Arc<ChainStats> {
        &self.stats
    }

    pub fn policy(&self) -> &RetryPolicy {
        &self.policy
    }

    fn breaker(&self, i: usize) -> std::sync::MutexGuard<'_, BreakerState> {
        self.breakers[i].lock().unwrap_or_else(|p| p.into_inner())
    }

    fn availability(&self, i: usize, now: Instant) -> Availability {
        let mut state = self.breaker(i);
        match state.open_until {
            None => Availability::Closed,
            Some(until) if now >= until => {
                // This call probes; others keep skipping it until the probe ends.
                state.open_until = Some(now + self.policy.breaker_cooldown);
                Availability::Probe
            }
            Some(_) => Availability::Open,
        }
    }

    /// The order to try providers in now, and whether each is a last resort (its breaker is
    /// open: one attempt only). For callers that forward calls themselves (the relay).
    pub fn plan(&self) -> Vec<(usize, bool)> {
        let now = Instant::now();
        let mut ready = Vec::new();
        let mut open = Vec::new();
        for i in 0..self.providers.len() {
            match self.availability(i, now) {
                Availability::Closed | Availability::Probe => ready.push((i, false)),
                Availability::Open => open.push((i, true)),
            }
        }
        ready.extend(open);
        ready
    }

    fn is_open(&self, i: usize) -> bool {
        self.breaker(i).open_until.is_some_and(|until| Instant::now() < until)
    }

    /// Records an attempt's outcome on provider `i` (its breaker and counters).
    pub fn record(&self, i: usize, outcome: Result<(), ErrorClass>) {
        self.stats.attempts.fetch_add(1, Ordering::Relaxed);
        let stats = &self.stats.providers[i];
        let mut state = self.breaker(i);
        match outcome {
            Ok(()) => {
                if state.open_until.is_some() {
                    tracing::info!(
                        provider = self.providers[i].name(),
                        "LLM provider is back: breaker closed"
                    );
                }
                *state = BreakerState::default();
                stats.breaker_open.store(0, Ordering::Relaxed);
            }
            Err(class) => {
                if let Some(k) = ErrorClass::ALL.iter().position(|c| *c == class) {
                    stats.failures[k].fetch_add(1, Ordering::Relaxed);
                }
                if class == ErrorClass::Cancelled {
                    return;
                }
                state.failures += 1;
                if state.failures >= self.policy.breaker_failures {
                    if state.open_until.is_none() {
                        tracing::warn!(
                            provider = self.providers[i].name(),
                            failures = state.failures,
                            cooldown_secs = self.policy.breaker_cooldown.as_secs(),
                            "LLM provider keeps failing: breaker open"
                        );
                    }
                    state.open_until = Some(Instant::now() + self.policy.breaker_cooldown);
                    stats.breaker_open.store(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Records a call that succeeded on provider `i` with `usage`.
    pub fn record_answer(&self, i: usize, usage: Option<crate::Usage>) {
        self.stats.calls.fetch_add(1, Ordering::Relaxed);
        self.stats.providers[i].answered.fetch_add(1, Ordering::Relaxed);
        if i > 0 {
            self.stats.fallbacks.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(u) = usage {
            self.stats.prompt_tokens.fetch_add(u.prompt_tokens, Ordering::Relaxed);
            self.stats.completion_tokens.fetch_add(u.completion_tokens, Ordering::Relaxed);
        }
    }

    /// One completion: retries, fallback, breakers; `cancel` stops the request and the waits.
    /// The whole call takes at most the policy's `total`.
    pub async fn complete(
        &self,
        request: &ChatRequest<'_>,
        cancel: &CancellationToken,
        on_event: &(dyn Fn(StreamEvent<'_>) + Send + Sync),
    ) -> Result<Completion, LlmError> {
        self.complete_within(request, cancel, on_event, self.policy.total).await
    }

    /// [`Chain::complete`] within `total` (e.g. what is left of a turn's time for the model).
    pub async fn complete_within(
        &self,
        request: &ChatRequest<'_>,
        cancel: &CancellationToken,
        on_event: &(dyn Fn(StreamEvent<'_>) + Send + Sync),
        total: Duration,
    ) -> Result<Completion, LlmError> {
        let started = Instant::now();
        let plan = self.plan();
        let mut last: Option<LlmError> = None;
        let mut attempts_made = 0u32;
        let streamed = std::sync::atomic::AtomicBool::new(false);
        let on_text = |text: &str| {
            streamed.store(true, Ordering::Relaxed);
            on_event(StreamEvent::Text(text));
        };
        for (position, &(i, last_resort)) in plan.iter().enumerate() {
            let provider = &self.providers[i];
            let more_providers = position + 1 < plan.len();
            if let Some(previous) = &last {
                tracing::warn!(
                    from = previous.provider, to = provider.name(), reason = %previous.class,
                    "LLM fallback to the next provider"
                );
            }
            let attempts = if last_resort { 1 } else { self.policy.max_retries + 1 };
            for attempt in 1..=attempts {
                let Some(remaining) = total.checked_sub(started.elapsed()) else {
                    return Err(self.fail(last, started, attempts_made));
                };
                attempts_made += 1;
                if streamed.swap(false, Ordering::Relaxed) {
                    on_event(StreamEvent::Restart);
                }
                let outcome = tokio::select! {
                    () = cancel.cancelled() => return Err(LlmError::cancelled()),
                    outcome = tokio::time::timeout(remaining, provider.attempt(request, &on_text)) => outcome,
                };
                let err = match outcome {
                    Ok(Ok(mut completion)) => {
                        self.record(i, Ok(()));
                        self.record_answer(i, completion.usage);
                        self.stats.ended(None);
                        completion.fallback = i != 0;
                        return Ok(completion);
                    }
                    Ok(Err(err)) => err,
                    Err(_) => {
                        self.stats.errors.fetch_add(1, Ordering::Relaxed);
                        let err = LlmError::new(
                            ErrorClass::Timeout,
                            provider.name(),
                            format!(
                                "no answer within the {:.1}s left for the model \
                                 (llm.total_timeout_secs)",
                                total.as_secs_f64()
                            ),
                        );
                        self.stats.ended(Some(err.to_string()));
                        return Err(err);
                    }
                };
                self.record(i, Err(err.class));
                tracing::warn!(provider = provider.name(), attempt, class = %err.class, error = %err, "LLM attempt failed");
                let class = err.class;
                let retry_after = err.retry_after;
                last = Some(err);
                if !class.is_retryable() {
                    if class.skips_provider() {
                        break;
                    }
                    self.stats.errors.fetch_add(1, Ordering::Relaxed);
                    if class != ErrorClass::Cancelled {
                        self.stats.ended(None);
                    }
                    return Err(last.take().expect("just set"));
                }
                if attempt == attempts || self.is_open(i) {
                    break;
                }
                if retry_after.is_some_and(|wait| wait > self.policy.max_wait) && more_providers {
                    break;
                }
                let wait = backoff(attempt, retry_after, self.policy.initial, self.policy.max_wait)
                    .min(total.saturating_sub(started.elapsed()));
                tokio::select! {
                    () = cancel.cancelled() => return Err(LlmError::cancelled()),
                    () = tokio::time::sleep(wait) => {}
                }
            }
        }
        Err(self.fail(last, started, attempts_made))
    }

    fn fail(&self, last: Option<LlmError>, started: Instant, attempts: u32) -> LlmError {
        let err = self.failed(last, started, attempts);
        self.stats.ended(Some(err.to_string()));
        err
    }

    fn failed(&self, last: Option<LlmError>, started: Instant, attempts: u32) -> LlmError {
        self.stats.errors.fetch_add(1, Ordering::Relaxed);
        let tried = self.providers.len();
        match last {
            Some(mut err) => {
                let providers = if tried > 1 {
                    format!(", all {tried} providers failed")
                } else {
                    String::new()
                };
                let plural = if attempts == 1 { "" } else { "s" };
                err.message =
                    format!("{} (after {attempts} attempt{plural}{providers})", err.message);
                err
            }
            None => LlmError::new(
                ErrorClass::Timeout,
                self.primary().name(),
                format!("no answer within {}s", started.elapsed().as_secs()),
            ),
        }
    }
}
