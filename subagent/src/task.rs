//! One task: what it was asked, how it is stopped, and how it ends in exactly one final
//! response.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use nexbot_protocol::{Redactor, SecretMap};
use tokio_util::sync::CancellationToken;

use crate::llm::LlmSettings;

/// Soft limit when the request names none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// Everything a task needs, taken from its `execute` request.
#[derive(Debug)]
pub struct TaskSpec {
    pub id: String,
    pub correlation_id: Option<String>,
    pub task: String,
    pub context: Option<String>,
    pub tools: Vec<&'static str>,
    pub timeout: Duration,
    /// Dropped (so zeroized) when the task ends, whatever its outcome.
    pub secrets: SecretMap,
    pub llm: LlmSettings,
    /// Scrubs the task's secrets and LLM credentials from everything it emits.
    pub redactor: Arc<Redactor>,
}

/// Stops a running task; the reason ends up in its final response.
#[derive(Debug, Clone, Default)]
pub struct Cancel {
    token: CancellationToken,
    reason: Arc<OnceLock<String>>,
}

impl Cancel {
    /// Asks the task to stop. The first reason given wins.
    pub fn cancel(&self, reason: impl Into<String>) {
        let _ = self.reason.set(reason.into());
        self.token.cancel();
    }

    /// Resolves once the task was asked to stop.
    pub async fn cancelled(&self) {
        self.token.cancelled().await
    }

    /// The text for the final response of a cancelled task.
    pub fn reason(&self) -> String {
        self.reason.get().cloned().unwrap_or_else(|| "task cancelled".to_owned())
    }
}
