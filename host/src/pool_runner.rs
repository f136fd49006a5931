//! The real [`SubagentRunner`]: tasks run on the warm container pool of `nexbot-docker`.
//!
//! Why a wrapper: the pool's answer does not say which container served the task, and the
//! task record wants it. The pool itself is started with the egress listener in `sandbox.rs`.

use std::sync::Arc;
use std::time::Duration;

use nexbot_docker::{Pool, PoolConfig};
use nexbot_protocol::{Request, Response};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::delegation::{BoxFuture, SubagentError, SubagentOutcome, SubagentRunner};

/// The pool's settings derived from `[subagent]`; its queue wait from the deadlines
/// (`crate::deadlines`).
pub fn pool_config(config: &Config) -> PoolConfig {
    let s = &config.subagent;
    let mut pool = PoolConfig {
        name: s.pool_name.clone(),
        image: s.image.clone(),
        size: s.pool_size,
        network: s.network.clone(),
        default_task_timeout_secs: s.task_timeout_secs,
        skills_dir: s.skills_dir.clone(),
        ..PoolConfig::default()
    };
    pool.queue_timeout_secs = crate::deadlines::queue_wait(config, &pool).as_secs();
    pool
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
        progress: Option<mpsc::Sender<Response>>,
    ) -> BoxFuture<'_, Result<SubagentOutcome, SubagentError>> {
        Box::pin(async move {
            let id = request.id.clone();
            let run = self.pool.execute_with_progress(request, cancel, progress);
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
