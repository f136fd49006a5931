//! Warm-up at start: what every task's first steps would otherwise build on the first task of
//! the container's life, built before the container answers its first ping.
//!
//! Why: the pool's blank containers exist so that a new chat's first task starts at once. A
//! fresh process builds its regular expressions (the sanitizer's, the command screen's, the
//! secret placeholders') and its first HTTP client lazily, which made the first task of a
//! container several milliseconds slower than the next. Building them here moves that cost
//! into the container's start, which nobody waits for. Nothing here holds task state: the
//! lazies are pure functions of constants, and the client built is dropped.

use std::time::Instant;

use tracing::debug;

use nexbot_protocol::SecretMap;
use secrecy::SecretString;

use crate::llm::LlmSettings;
use crate::secrets::{SecretStore, SECRET_TTL};
use crate::{sanitizer, tools};

/// Builds the lazily built state a task uses; `false` when the LLM client could not be built
/// (then the task builds it, and says why it could not).
pub fn prepare() -> bool {
    let started = Instant::now();
    let _ = sanitizer::neutralize("warm-up");
    let _ = sanitizer::wrap_external("warm-up", "warm-up");
    let _ = tools::command::screen("true");
    let _ = SecretStore::new(SecretMap::default(), SECRET_TTL).substitute("$WARM_UP");
    let settings = LlmSettings {
        base_url: "http://127.0.0.1/v1".into(),
        model: "warm-up".into(),
        bearer: SecretString::from("warm-up"),
        context_window: None,
    };
    let client = settings.chain();
    debug!(
        event = "init",
        took_us = started.elapsed().as_micros() as u64,
        client = client.is_ok(),
        "warmed up"
    );
    client.is_ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn prepares_what_a_first_task_builds() {
        assert!(super::prepare(), "the LLM client of a first task builds");
    }
}
