//! Hooks: small policies that watch the agent loop at fixed points and may steer it, so that
//! limits and guards (`docs/product.md` §4) are added without touching the loop itself.
//!
//! Each event is offered to every hook in registration order; the first result other than
//! `Continue` wins. What each result means at each event:
//!
//! | event | `Block{reason}` | `InjectContext(text)` | `Finish(text)` |
//! |---|---|---|---|
//! | before agent | answer `reason`, no LLM call | system message added | answer `text`, no LLM call |
//! | before iteration | stop, answer `reason` | system message added | stop, answer `text` |
//! | before tool | the tool is not run; the model gets `reason` as its error | appended to the tool's result | stop, answer `text` |
//! | after tool | the model gets `reason` instead of the result | appended to the result | stop, answer `text` |
//! | after agent | the answer becomes `reason` | appended to the answer | the answer becomes `text` |
//! | timeout | (as `Continue`) | appended to the timeout message | answer `text` |

use serde_json::Value;

/// A point in the loop.
#[derive(Debug)]
pub enum HookEvent<'a> {
    BeforeAgent {
        user_message: &'a str,
    },
    BeforeIteration {
        iteration: u32,
    },
    BeforeTool {
        tool: &'a str,
        arguments: &'a Value,
    },
    AfterTool {
        tool: &'a str,
        result: &'a str,
    },
    AfterAgent {
        answer: &'a str,
    },
    /// A tool (`Some(name)`) or the whole turn (`None`) ran out of time.
    Timeout {
        tool: Option<&'a str>,
    },
}

/// What a hook wants to happen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookResult {
    Continue,
    Block { reason: String },
    InjectContext(String),
    Finish(String),
}

/// What hooks may know about the turn.
#[derive(Debug, Clone, Copy)]
pub struct HookContext<'a> {
    pub chat: &'a nexbot_core::ChatRef,
    /// Tokens spent so far in this turn.
    pub tokens: u64,
    pub iteration: u32,
}

pub trait Hook: Send + Sync + std::fmt::Debug {
    fn name(&self) -> &'static str;
    fn handle(&self, event: &HookEvent<'_>, context: &HookContext<'_>) -> HookResult;
}

/// Runs `event` through `hooks`; the first non-`Continue` result wins.
pub fn run_hooks(
    hooks: &[std::sync::Arc<dyn Hook>],
    event: &HookEvent<'_>,
    context: &HookContext<'_>,
) -> HookResult {
    for hook in hooks {
        let result = hook.handle(event, context);
        if result != HookResult::Continue {
            tracing::info!(hook = hook.name(), ?result, "hook steered the agent");
            return result;
        }
    }
    HookResult::Continue
}
