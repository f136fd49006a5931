//! The real [`SubagentRunner`]: tasks run on the warm container pool of `nexbot-docker`.
//!
//! A thin adapter: the pool's [`Pool::run_task`] names the container that served the task,
//! which the task record wants. The pool itself is started with the egress listener in
//! `sandbox.rs`.

use std::sync::Arc;

use nexbot_core::ChatRef;
use nexbot_docker::{Pool, PoolConfig, PoolError, Room, TaskIo};
use nexbot_protocol::{McpCalls, Request, Response};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::deadlines::TaskLimits;
use crate::delegation::{BoxFuture, SubagentError, SubagentOutcome, SubagentRunner};

/// The pool's settings derived from `[subagent]` and `[sandbox]`'s runtime; its queue wait from the deadlines
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
        max_containers_per_room: s.max_containers_per_chat,
        room_idle_secs: s.chat_idle_secs,
        runtime: config.sandbox.runtime.clone(),
        ..PoolConfig::default()
    };
    pool.queue_timeout_secs = crate::deadlines::queue_wait(&task_limits(config)).as_secs();
    if !config.skills.allow_hashes.is_empty() {
        // The subagent's read_skill applies the same allowances (it knows no config).
        pool.env.insert("NEXBOT_SKILLS_ALLOW".into(), config.skills.allow_hashes.join(","));
    }
    pool
}

/// The numbers a delegated task's deadlines are planned with (`crate::deadlines`): the
/// configured turn and task timeouts, and the graces of the pool [`pool_config`] builds.
pub fn task_limits(config: &Config) -> TaskLimits {
    let pool = PoolConfig::default();
    TaskLimits {
        turn_timeout_secs: config.agent.turn_timeout_secs,
        task_timeout_secs: config.subagent.task_timeout_secs,
        hard_limit_grace_secs: pool.hard_limit_grace_secs,
        cancel_grace_ms: pool.cancel_grace_ms,
    }
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
        chat: &ChatRef,
        request: Request,
        cancel: CancellationToken,
        progress: Option<mpsc::Sender<Response>>,
        mcp: Option<Arc<dyn McpCalls>>,
        files: Vec<nexbot_protocol::TaskFile>,
    ) -> BoxFuture<'_, Result<SubagentOutcome, SubagentError>> {
        // The chat's room: its one text form is the key, so every producer of a chat's tasks
        // (its turns, its scheduled jobs, its heartbeat checks, `use_cli`) lands in one room.
        let room = Room::new(chat.to_string());
        Box::pin(async move {
            self.pool
                .run_task_with(request, &room, cancel, TaskIo { progress, mcp, files })
                .await
                .map(|run| SubagentOutcome {
                    response: run.response,
                    container: Some(run.container_id),
                    files: run.files,
                })
                .map_err(|e| SubagentError {
                    killed_by_operator: matches!(e, PoolError::KilledByOperator { .. }),
                    container: match &e {
                        PoolError::KilledByOperator { container, .. }
                        | PoolError::ContainerFailed { container, .. } => Some(container.clone()),
                        _ => None,
                    },
                    message: e.to_string(),
                })
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::deadlines::TaskDeadlines;

    /// The deadlines are planned with the very graces and queue wait the pool is given.
    #[test]
    fn the_deadlines_are_the_pools() {
        let dir = std::env::temp_dir();
        let env = vec![("NEXBOT_AGENT__TURN_TIMEOUT_SECS".to_owned(), "400".to_owned())];
        for env in [Vec::new(), env] {
            let config = Config::from_parts("", &dir.join("config.toml"), &dir, env).unwrap();
            let pool = pool_config(&config);
            let d = TaskDeadlines::plan(&task_limits(&config), None);
            assert_eq!(d.queue_wait, Duration::from_secs(pool.queue_timeout_secs));
            assert_eq!(d.hard - d.soft, Duration::from_secs(pool.hard_limit_grace_secs));
            assert_eq!(d.cancel_grace, Duration::from_millis(pool.cancel_grace_ms));
            assert_eq!(d.soft, Duration::from_secs(config.subagent.task_timeout_secs));
        }
    }
}
