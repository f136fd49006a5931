//! Hooks: small policies that watch the agent loop at fixed points and may steer it, so that
//! limits and guards (`docs/product.md` §4) are added without touching the loop itself. The
//! events, results and "first non-continue wins" are `nexbot_core::hooks`, the one contract the
//! subagent's task loop uses too; what a host hook may know is [`HookContext`].
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

pub use nexbot_core::hooks::{HookEvent, HookResult};

/// What hooks may know about the turn.
#[derive(Debug, Clone, Copy)]
pub struct HookContext<'a> {
    pub chat: &'a nexbot_core::ChatRef,
    /// Tokens spent so far in this turn.
    pub tokens: u64,
    pub iteration: u32,
}

/// A hook of the main agent: the shared contract's shape over the host's [`HookContext`].
/// A trait of the host's own (not `nexbot_core::hooks::Hook<HookContext<'a>>` itself) so that
/// a hook is written once for every turn's lifetime, as `impl Hook for MyPolicy`; `dyn Hook`
/// is the shared trait for [`nexbot_core::hooks::first_steer`].
pub trait Hook: Send + Sync + std::fmt::Debug {
    fn name(&self) -> &'static str;
    fn handle(&self, event: &HookEvent<'_>, context: &HookContext<'_>) -> HookResult;
}

impl<'a> nexbot_core::hooks::Hook<HookContext<'a>> for dyn Hook {
    fn name(&self) -> &'static str {
        Hook::name(self)
    }
    fn handle(&self, event: &HookEvent<'_>, context: &HookContext<'a>) -> HookResult {
        Hook::handle(self, event, context)
    }
}

/// Runs `event` through `hooks`; the first non-`Continue` result wins.
pub fn run_hooks(
    hooks: &[std::sync::Arc<dyn Hook>],
    event: &HookEvent<'_>,
    context: &HookContext<'_>,
) -> HookResult {
    match nexbot_core::hooks::first_steer(hooks.iter().map(|h| &**h), event, context) {
        Some(steer) => {
            tracing::info!(hook = steer.hook, result = ?steer.result, "hook steered the agent");
            steer.result
        }
        None => HookResult::Continue,
    }
}
