//! The seam between the main agent and whatever runs subagent tasks.
//!
//! Why a trait: delegation logic (task records, secrets by name, cancellation, turning a
//! response or report into text for the model) must not care how containers are supervised.
//! The daemon plugs in the warm Docker pool (`nexbot-docker`); nothing else implements it.

use std::future::Future;
use std::pin::Pin;

use nexbot_protocol::{Request, Response};
use thiserror::Error;
use tokio_util::sync::CancellationToken;

/// A boxed future, as the object-safe traits of this crate return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A subagent's final answer and, when known, the container that produced it.
#[derive(Debug, Clone)]
pub struct SubagentOutcome {
    pub response: Response,
    pub container: Option<String>,
}

/// Why a task could not be run or finished (pool busy, container died, …).
#[derive(Debug, Error)]
#[error("{0}")]
pub struct SubagentError(pub String);

/// Runs one `execute` request to completion. When `cancel` fires, the runner must send the
/// subagent a `cancel` for the task and return what it answered.
pub trait SubagentRunner: Send + Sync + std::fmt::Debug {
    fn execute(
        &self,
        request: Request,
        cancel: CancellationToken,
    ) -> BoxFuture<'_, Result<SubagentOutcome, SubagentError>>;
}
