//! The hook contract both agent loops use — the host's main agent and the subagent's task loop
//! (the seed's `HookEvent`/`HookResult`): small policies that watch a loop at fixed points and
//! may steer it, so limits and guards are added without touching the loop itself.
//!
//! Why here: it is the lowest crate both loops link (the subagent reaches it through
//! `nexbot-llm` already, so it costs the static image nothing), and one contract means a policy
//! written for one loop reads the same events and answers with the same results in the other.
//! What a loop lets a hook know differs (the host's turn has a chat, a task has a todo list and
//! a search count), so the context is the loop's own type: [`Hook`] is generic over it.
//!
//! Each event is offered to every hook in registration order; the first result other than
//! [`HookResult::Continue`] wins ([`first_steer`]). What each result does at each event is the
//! loop's to say (the host's table is in `host/src/agent/hooks.rs`, the subagent's in
//! `subagent/src/hooks.rs`).

use std::fmt;

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
    /// A tool (`Some(name)`) or the whole turn or task (`None`) ran out of time.
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

/// A policy at the loop's hook points; `C` is what the loop lets it know.
pub trait Hook<C: ?Sized>: Send + Sync + fmt::Debug {
    fn name(&self) -> &'static str;
    fn handle(&self, event: &HookEvent<'_>, context: &C) -> HookResult;
}

/// The result that steers the loop, and the hook that gave it (for the loop's log line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Steer {
    pub hook: &'static str,
    pub result: HookResult,
}

/// Runs `event` through `hooks` in order; the first result other than `Continue` wins and the
/// hooks after it are not asked. `None`: every hook said `Continue`.
pub fn first_steer<'h, C, H>(
    hooks: impl IntoIterator<Item = &'h H>,
    event: &HookEvent<'_>,
    context: &C,
) -> Option<Steer>
where
    C: ?Sized,
    H: Hook<C> + ?Sized + 'h,
{
    hooks.into_iter().find_map(|hook| match hook.handle(event, context) {
        HookResult::Continue => None,
        result => Some(Steer { hook: hook.name(), result }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// Answers `result` and counts how often it was asked.
    #[derive(Debug)]
    struct Fixed(&'static str, HookResult, AtomicU32);

    impl Hook<u32> for Fixed {
        fn name(&self) -> &'static str {
            self.0
        }
        fn handle(&self, _: &HookEvent<'_>, _: &u32) -> HookResult {
            self.2.fetch_add(1, Ordering::Relaxed);
            self.1.clone()
        }
    }

    fn fixed(name: &'static str, result: HookResult) -> Fixed {
        Fixed(name, result, AtomicU32::new(0))
    }

    #[test]
    fn the_first_result_other_than_continue_wins_and_later_hooks_are_not_asked() {
        let hooks = [
            fixed("quiet", HookResult::Continue),
            fixed("inject", HookResult::InjectContext("note".into())),
            fixed("block", HookResult::Block { reason: "no".into() }),
        ];
        let event = HookEvent::BeforeIteration { iteration: 1 };
        let steer = first_steer(&hooks, &event, &0).expect("a hook steers");
        assert_eq!(
            steer,
            Steer { hook: "inject", result: HookResult::InjectContext("note".into()) }
        );
        let asked: Vec<u32> = hooks.iter().map(|h| h.2.load(Ordering::Relaxed)).collect();
        assert_eq!(asked, [1, 1, 0], "the hook after the winner is not asked");
    }

    #[test]
    fn all_continue_is_none_and_order_decides_between_two_steering_hooks() {
        let quiet = [fixed("a", HookResult::Continue), fixed("b", HookResult::Continue)];
        assert_eq!(first_steer(&quiet, &HookEvent::AfterAgent { answer: "x" }, &0), None);
        let no: [Fixed; 0] = [];
        assert_eq!(first_steer(&no, &HookEvent::Timeout { tool: None }, &0), None);
        let finish = || fixed("finish", HookResult::Finish("done".into()));
        let block = || fixed("block", HookResult::Block { reason: "no".into() });
        let event = HookEvent::Timeout { tool: None };
        assert_eq!(first_steer(&[finish(), block()], &event, &0).unwrap().hook, "finish");
        assert_eq!(first_steer(&[block(), finish()], &event, &0).unwrap().hook, "block");
    }

    #[test]
    fn boxed_hooks_of_a_context_with_a_lifetime_work() {
        #[derive(Debug)]
        struct Ctx<'a>(&'a str);
        #[derive(Debug)]
        struct Echo;
        impl<'a> Hook<Ctx<'a>> for Echo {
            fn name(&self) -> &'static str {
                "echo"
            }
            fn handle(&self, _: &HookEvent<'_>, context: &Ctx<'a>) -> HookResult {
                HookResult::Finish(context.0.to_owned())
            }
        }
        let hooks: Vec<std::sync::Arc<dyn for<'a> Hook<Ctx<'a>>>> = vec![std::sync::Arc::new(Echo)];
        let text = String::from("from the context");
        let steer = first_steer(
            hooks.iter().map(|h| &**h),
            &HookEvent::Timeout { tool: None },
            &Ctx(&text),
        );
        assert_eq!(steer.unwrap().result, HookResult::Finish(text));
    }
}
