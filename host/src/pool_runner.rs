//! The real [`SubagentRunner`]: tasks run on the warm container pool of `nexbot-docker`, and
//! subagents reach the LLM with a per-task token instead of the API key.
//!
//! Why tokens: no API key may enter a container. Each delegation gets a fresh random token
//! (revoked when the task ends) for the host's LLM relay, which swaps it for the real key.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use nexbot_docker::{Pool, PoolConfig};
use nexbot_protocol::Request;
use secrecy::SecretString;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::subagent::{BoxFuture, SubagentError, SubagentOutcome, SubagentRunner};

/// Issues the per-task LLM credential a subagent presents to the relay.
pub trait TaskTokens: Send + Sync + std::fmt::Debug {
    fn issue(&self, task_id: &str) -> Result<SecretString, String>;
    fn revoke(&self, task_id: &str);
}

/// Random 256-bit tokens. Until the host's LLM relay (egress) is wired in, nothing checks
/// them: a subagent then reaches only an endpoint that needs no key (a local model, a test
/// server). The relay's own token registry replaces this, and its `revoke` matters there.
#[derive(Debug, Default)]
pub struct RandomTaskTokens;

impl TaskTokens for RandomTaskTokens {
    fn issue(&self, _task_id: &str) -> Result<SecretString, String> {
        let token =
            format!("nxt-{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple());
        Ok(SecretString::from(token))
    }
    fn revoke(&self, _task_id: &str) {}
}

/// The pool's settings derived from `[subagent]`.
pub fn pool_config(config: &Config) -> PoolConfig {
    let s = &config.subagent;
    PoolConfig {
        name: s.pool_name.clone(),
        image: s.image.clone(),
        size: s.pool_size,
        network: s.network.clone(),
        default_task_timeout_secs: s.task_timeout_secs,
        ..PoolConfig::default()
    }
}

/// Starts the pool for `config` (Docker must be reachable and the image present).
pub async fn start_pool(config: &Config) -> anyhow::Result<Arc<Pool>> {
    let docker = bollard::Docker::connect_with_local_defaults()
        .context("cannot connect to Docker (set subagent.enabled = false to run without it)")?;
    let pool = Pool::start(docker, pool_config(config)).await.with_context(|| {
        "cannot start the subagent pool; `nexbot doctor` says what is missing, or set \
         subagent.enabled = false"
    })?;
    Ok(Arc::new(pool))
}

/// Drains and removes the pool's containers once nothing else holds it.
pub async fn stop_pool(pool: Arc<Pool>) {
    let mut pool = pool;
    for _ in 0..50 {
        match Arc::try_unwrap(pool) {
            Ok(owned) => {
                if let Err(e) = owned.shutdown().await {
                    tracing::warn!(error = %e, "pool shutdown was not clean");
                }
                return;
            }
            Err(shared) => pool = shared,
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tracing::warn!("the pool is still in use; its containers are reaped at the next start");
}

#[derive(Debug)]
pub struct PoolRunner {
    pool: Arc<Pool>,
}

impl PoolRunner {
    pub fn new(pool: Arc<Pool>) -> Self {
        Self { pool }
    }
}

impl SubagentRunner for PoolRunner {
    fn execute(
        &self,
        request: Request,
        cancel: CancellationToken,
    ) -> BoxFuture<'_, Result<SubagentOutcome, SubagentError>> {
        Box::pin(async move {
            let id = request.id.clone();
            let run = self.pool.execute(request, cancel);
            tokio::pin!(run);
            // The pool's answer does not name the container; its snapshot does while the
            // task runs, so look there until found.
            let mut container = None;
            let mut tick = tokio::time::interval(Duration::from_millis(50));
            loop {
                tokio::select! {
                    biased;
                    result = &mut run => {
                        return result
                            .map(|response| SubagentOutcome { response, container })
                            .map_err(|e| SubagentError(e.to_string()));
                    }
                    _ = tick.tick(), if container.is_none() => {
                        container = self
                            .pool
                            .snapshot()
                            .into_iter()
                            .find(|s| s.current_task.as_deref() == Some(id.as_str()))
                            .and_then(|s| s.container_id.or(s.container));
                    }
                }
            }
        })
    }
}
