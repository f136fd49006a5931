//! The real [`SubagentRunner`]: tasks run on the warm container pool of `nexbot-docker`.
//!
//! A thin adapter: the pool's [`Pool::run_task`] names the container that served the task,
//! which the task record wants. The pool itself is started with the egress listener in
//! `sandbox.rs`.

use std::sync::Arc;

use nexbot_core::ChatRef;
use nexbot_docker::{Pool, PoolError, Room, TaskIo};
use nexbot_protocol::{McpCalls, Request, Response};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::delegation::{BoxFuture, SubagentError, SubagentOutcome, SubagentRunner};

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
