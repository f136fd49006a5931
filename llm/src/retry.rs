//! Capped exponential back-off with jitter.

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// Wait before retry number `attempt` (1-based): `Retry-After` when the provider sent one,
/// else `initial * 2^(attempt-1)`; capped at `max`, plus up to 20 % jitter (within the cap)
/// so that many clients do not retry in lockstep.
pub fn backoff(
    attempt: u32,
    retry_after: Option<Duration>,
    initial: Duration,
    max: Duration,
) -> Duration {
    let base = retry_after
        .unwrap_or_else(|| initial.saturating_mul(2u32.saturating_pow(attempt.saturating_sub(1))));
    let base = base.min(max);
    let jitter_ms = (base.as_millis() as u64) / 5;
    let jitter = if jitter_ms == 0 { 0 } else { random_u64() % (jitter_ms + 1) };
    (base + Duration::from_millis(jitter)).min(max.max(base))
}

/// A random number without a dependency: std's per-process random hash keys.
fn random_u64() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish()
}

/// Runs `attempt` until it succeeds, fails for good, or has been retried `max_retries` times
/// after retryable failures (429, 5xx, timeouts), waiting [`backoff`] between (1 s doubling to
/// 30 s, or what `Retry-After` asked). `what` names the call in the warning each retry logs.
pub(crate) async fn retried<T, F, Fut>(
    max_retries: u32,
    what: &str,
    mut attempt: F,
) -> Result<T, crate::LlmError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, crate::LlmError>>,
{
    let mut tries = 0;
    loop {
        match attempt().await {
            Err(e) if e.class.is_retryable() && tries < max_retries => {
                tries += 1;
                let wait = backoff(
                    tries,
                    e.retry_after,
                    std::time::Duration::from_secs(1),
                    std::time::Duration::from_secs(30),
                );
                tracing::warn!(attempt = tries, error = %e, ?wait, "{what} failed; retrying");
                tokio::time::sleep(wait).await;
            }
            outcome => return outcome,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_is_capped_and_honours_retry_after() {
        let ms = Duration::from_millis;
        for _ in 0..50 {
            let first = backoff(1, None, ms(100), ms(10_000));
            assert!(first >= ms(100) && first <= ms(120), "{first:?}");
            let third = backoff(3, None, ms(100), ms(10_000));
            assert!(third >= ms(400) && third <= ms(480), "{third:?}");
            let capped = backoff(20, None, ms(100), ms(1_000));
            assert_eq!(capped, ms(1_000));
            let after = backoff(1, Some(Duration::from_secs(2)), ms(100), ms(10_000));
            assert!(after >= ms(2_000) && after <= ms(2_400), "{after:?}");
            let after_capped = backoff(1, Some(Duration::from_secs(3600)), ms(100), ms(5_000));
            assert_eq!(after_capped, ms(5_000));
        }
    }
}
