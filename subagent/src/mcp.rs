//! The MCP tools a task was granted (`execute.mcp_tools`), called through the host: the model is
//! offered them like its own; a call becomes an `mcp_call` line, and the task waits for the
//! host's `mcp_result` with that call's id (`docs/protocol.md#mcp-tools`). Only the granted
//! tools are known here; the servers, and every other chat's, stay on the host.

use std::collections::HashMap;
use std::sync::Mutex;

use nexbot_llm::ToolSpec;
use nexbot_protocol::{McpAnswer, McpToolSpec};
use tokio::sync::oneshot;

/// The calls of the running task waiting for the host's answer, by call id. The stdin reader
/// delivers each `mcp_result` here; the task takes its answer (or gives up at its deadline or
/// cancel, and forgets the call).
#[derive(Debug, Default)]
pub struct Waiting {
    calls: Mutex<HashMap<String, oneshot::Sender<McpAnswer>>>,
}

impl Waiting {
    fn calls(&self) -> std::sync::MutexGuard<'_, HashMap<String, oneshot::Sender<McpAnswer>>> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts waiting for the answer to `call_id`.
    pub fn register(&self, call_id: &str) -> oneshot::Receiver<McpAnswer> {
        let (tx, rx) = oneshot::channel();
        self.calls().insert(call_id.to_owned(), tx);
        rx
    }

    /// Hands `answer` to whoever waits for `call_id`; `false` when nobody does (a late answer
    /// to a call the task gave up on, or one it never made).
    pub fn answer(&self, call_id: &str, answer: McpAnswer) -> bool {
        match self.calls().remove(call_id) {
            Some(tx) => tx.send(answer).is_ok(),
            None => false,
        }
    }

    /// Stops waiting for `call_id` (answered, or the task stopped waiting).
    pub fn forget(&self, call_id: &str) {
        self.calls().remove(call_id);
    }
}

/// The spec the model is offered for a granted tool.
pub fn spec(tool: &McpToolSpec) -> ToolSpec {
    ToolSpec::function(&tool.name, &tool.description, tool.input_schema.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_answer_reaches_its_call_once_and_a_stray_one_reaches_nobody() {
        let waiting = Waiting::default();
        let first = waiting.register("c1");
        let second = waiting.register("c2");
        assert!(!waiting.answer("c9", McpAnswer::Result("stray".into())));
        assert!(waiting.answer("c2", McpAnswer::Error("no".into())));
        assert!(!waiting.answer("c2", McpAnswer::Error("twice".into())), "answered once");
        assert_eq!(second.await.unwrap(), McpAnswer::Error("no".into()));
        waiting.forget("c1");
        assert!(first.await.is_err(), "a forgotten call gets nothing");
        assert!(!waiting.answer("c1", McpAnswer::Result("late".into())));
    }
}
