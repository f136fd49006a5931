//! The task loop's hooks, as the seeds register them on every sub-agent's runner: a
//! completion check, the safety hook, a search budget and a timeout report, in that order
//! ([`TASK_HOOKS`]). The events, results and "first non-continue wins" are
//! `nexbot_core::hooks`, the contract the host's main agent uses too; what a task hook may
//! know is [`TaskView`]. The hooks keep no state of their own: what they decide by (the
//! iteration, the todo list, the searches made) is the loop's, so one static list serves
//! every task and offering an event allocates nothing.
//!
//! What each result does at each event of the task loop (`agent.rs`):
//!
//! | event | `Block{reason}` | `InjectContext(text)` | `Finish(text)` |
//! |---|---|---|---|
//! | before agent | the task ends with the error `reason`, no LLM call | a user message added | answer `text`, no LLM call |
//! | before iteration | the task ends with the error `reason` (and its report) | a user message added | answer `text` |
//! | before tool | the tool is not run; the model gets `Error: reason` | appended to the tool's result | answer `text` |
//! | after tool | the model gets `Error: reason` instead of the result | appended to the result | answer `text` |
//! | after agent | the task ends with the error `reason` | the answer is not taken yet: `text` goes to the model as a user message and the loop goes on | the answer becomes `text` |
//! | timeout of a tool (`Some(name)`, the tool's own limit) | (as `Continue`) | appended to the tool's error | answer `text` |
//! | timeout of the task (`None`, its soft limit) | (as `Continue`) | appended to the timeout's error | the timeout's error is `text` |
//!
//! After agent differs from the host's table (which appends to the answer) on purpose: the
//! completion check asks the model once more, and only a loop that goes on can ask.

use nexbot_protocol::{Todo, BLOCKED_TOOLS};
use serde_json::Value;
use tracing::warn;

pub use nexbot_core::hooks::{first_steer, Hook, HookEvent, HookResult, Steer};

/// The most iterations (model calls) one task may make.
pub const MAX_ITERATIONS: u32 = 60;
/// The most tokens of context one task may hold.
pub const MAX_CONTEXT_TOKENS: u64 = 64_000;

/// What a task hook may know: the loop's own figures at the moment of the event.
#[derive(Debug, Clone, Copy)]
pub struct TaskView<'a> {
    /// The iteration under way (at `BeforeIteration`, the one about to start).
    pub iteration: u32,
    /// Tokens of context the conversation holds.
    pub tokens: u64,
    /// The task's todo list (`update_todos`) as it stands.
    pub todos: &'a [Todo],
    /// Search and fetch calls made so far ([`counts_against_budget`]).
    pub searches: u32,
    /// The task's search budget (`execute.search_budget`).
    pub search_budget: u32,
    /// Final answers (messages without tool calls) the model gave, this one included.
    pub final_answers: u32,
    /// The task's soft time limit.
    pub timeout_secs: u64,
}

/// A hook of the task loop, for any borrow of the loop's figures.
pub type TaskHook = dyn for<'a> Hook<TaskView<'a>>;

/// Every task's hooks, in the seeds' order; an event goes to them in this order and the first
/// result other than `Continue` wins.
pub static TASK_HOOKS: [&TaskHook; 4] = [&CompletionCheck, &Safety, &SearchBudget, &TimeoutReport];

/// Whether a todo item is still to do: anything not marked done (or cancelled).
pub fn is_open(todo: &Todo) -> bool {
    !matches!(todo.status.as_str(), "done" | "completed" | "cancelled" | "canceled")
}

/// The todo items still open.
pub fn open_todos(todos: &[Todo]) -> Vec<Todo> {
    todos.iter().filter(|t| is_open(t)).cloned().collect()
}

/// A final answer while the todo list still has open items gets one more turn, naming them;
/// the model's next final answer is taken whatever the list says (the response's
/// `open_todos` then names what stayed open). Not on the last iteration, which has no next.
#[derive(Debug)]
pub struct CompletionCheck;

impl<'a> Hook<TaskView<'a>> for CompletionCheck {
    fn name(&self) -> &'static str {
        "completion_check"
    }
    fn handle(&self, event: &HookEvent<'_>, view: &TaskView<'a>) -> HookResult {
        if !matches!(event, HookEvent::AfterAgent { .. })
            || view.final_answers != 1
            || view.iteration >= MAX_ITERATIONS
        {
            return HookResult::Continue;
        }
        let open: Vec<String> = view
            .todos
            .iter()
            .filter(|t| is_open(t))
            .map(|t| format!("- {} ({})", t.content, t.status))
            .collect();
        if open.is_empty() {
            return HookResult::Continue;
        }
        HookResult::InjectContext(format!(
            "Your todo list still has open items:\n{}\nFinish them now, or mark them done with \
             update_todos if they are; if they cannot be done, answer and say why. Your next \
             answer without tool calls is final.",
            open.join("\n")
        ))
    }
}

/// The sub-agent limits of `docs/protocol-limits.md#limits`: 60 iterations, 64,000 tokens of
/// context, blocked tools refused.
#[derive(Debug)]
pub struct Safety;

impl<'a> Hook<TaskView<'a>> for Safety {
    fn name(&self) -> &'static str {
        "safety"
    }
    fn handle(&self, event: &HookEvent<'_>, view: &TaskView<'a>) -> HookResult {
        match event {
            HookEvent::BeforeIteration { iteration } if *iteration > MAX_ITERATIONS => {
                HookResult::Block {
                    reason: format!("Sub-agent iteration limit reached ({MAX_ITERATIONS})"),
                }
            }
            HookEvent::BeforeIteration { .. } if view.tokens >= MAX_CONTEXT_TOKENS => {
                HookResult::Block {
                    reason: format!("Sub-agent token limit reached ({MAX_CONTEXT_TOKENS})"),
                }
            }
            HookEvent::BeforeTool { tool, .. } if BLOCKED_TOOLS.contains(tool) => {
                warn!(event = "tool", tool = *tool, "blocked tool refused");
                HookResult::Block { reason: format!("Tool '{tool}' is blocked for sub-agents") }
            }
            _ => HookResult::Continue,
        }
    }
}

/// At most `search_budget` search and fetch calls a task ([`counts_against_budget`]); the
/// next is refused with words that tell the model to answer with what it has.
#[derive(Debug)]
pub struct SearchBudget;

impl<'a> Hook<TaskView<'a>> for SearchBudget {
    fn name(&self) -> &'static str {
        "search_budget"
    }
    fn handle(&self, event: &HookEvent<'_>, view: &TaskView<'a>) -> HookResult {
        match event {
            HookEvent::BeforeTool { tool, arguments }
                if view.searches >= view.search_budget
                    && counts_against_budget(tool, arguments) =>
            {
                warn!(
                    event = "tool",
                    tool = *tool,
                    budget = view.search_budget,
                    "search budget spent"
                );
                HookResult::Block {
                    reason: format!(
                        "the search budget of this task is spent ({} searches and fetches); \
                         do not search or fetch again: answer now with what you have, and say \
                         what is still unknown",
                        view.search_budget
                    ),
                }
            }
            _ => HookResult::Continue,
        }
    }
}

/// When the soft time limit passes, words the `timeout` response's error; the loop sends it
/// with the partial-results report (`docs/protocol-files.md#reports`: status, task id, error, note,
/// timeout, tokens, todos, recent messages).
#[derive(Debug)]
pub struct TimeoutReport;

impl<'a> Hook<TaskView<'a>> for TimeoutReport {
    fn name(&self) -> &'static str {
        "timeout_report"
    }
    fn handle(&self, event: &HookEvent<'_>, view: &TaskView<'a>) -> HookResult {
        match event {
            HookEvent::Timeout { tool: None } => {
                HookResult::Finish(timeout_error(view.timeout_secs))
            }
            _ => HookResult::Continue,
        }
    }
}

/// The error of a task that passed its soft time limit of `secs` seconds.
pub fn timeout_error(secs: u64) -> String {
    format!("soft timeout: the task did not finish within {secs} s")
}

/// Whether a call of `tool` with `arguments` is a search or a fetch the budget counts:
/// `search_web`, `web_fetch` (and its alias `fetch_page`), and a `run_command` whose command
/// line has the word `curl` or `wget` — how a skill's script fetches (the bundled skills fetch
/// with `web_fetch`, so they are counted as that). `http_request` is not counted: it calls
/// APIs (`http-api`, `site-status`), which a search budget should not starve. The word test is
/// plain: a command that only mentions `curl` counts too.
pub fn counts_against_budget(tool: &str, arguments: &Value) -> bool {
    match tool {
        "search_web" | "web_fetch" | "fetch_page" => true,
        "run_command" => arguments["command"].as_str().is_some_and(runs_a_fetcher),
        _ => false,
    }
}

/// Whether `command` has `curl` or `wget` as a word (a path to one included).
fn runs_a_fetcher(command: &str) -> bool {
    command
        .split(|c: char| c.is_whitespace() || ";|&()`'\"$<>".contains(c))
        .map(|word| word.rsplit('/').next().unwrap_or(word))
        .any(|word| word == "curl" || word == "wget")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn view(todos: &[Todo]) -> TaskView<'_> {
        TaskView {
            iteration: 2,
            tokens: 100,
            todos,
            searches: 0,
            search_budget: 2,
            final_answers: 1,
            timeout_secs: 30,
        }
    }

    fn todo(content: &str, status: &str) -> Todo {
        Todo { content: content.into(), status: status.into() }
    }

    #[test]
    fn the_hooks_are_the_seeds_four_in_the_seeds_order() {
        let names: Vec<_> = TASK_HOOKS.iter().map(|h| h.name()).collect();
        assert_eq!(names, ["completion_check", "safety", "search_budget", "timeout_report"]);
    }

    #[test]
    fn searches_fetches_and_fetching_commands_count_other_tools_do_not() {
        assert!(counts_against_budget("search_web", &json!({"query": "x"})));
        assert!(counts_against_budget("web_fetch", &json!({"url": "x"})));
        assert!(counts_against_budget("fetch_page", &json!({"url": "x"})));
        for command in [
            "curl -s https://example.org",
            "set -e; /usr/bin/wget -qO- http://x",
            "echo $(curl x)",
            "a && curl x | jq .",
        ] {
            assert!(
                counts_against_budget("run_command", &json!({ "command": command })),
                "{command}"
            );
        }
        for command in ["ls -la", "echo curly", "cat wget.log", "curlx"] {
            assert!(
                !counts_against_budget("run_command", &json!({ "command": command })),
                "{command}"
            );
        }
        assert!(!counts_against_budget("http_request", &json!({"url": "x"})));
        assert!(!counts_against_budget("run_command", &Value::Null));
    }

    #[test]
    fn the_completion_check_asks_once_naming_the_open_items() {
        let todos = [todo("fetch", "done"), todo("summarize", "pending"), todo("x", "cancelled")];
        let answer = HookEvent::AfterAgent { answer: "done" };
        let HookResult::InjectContext(text) = CompletionCheck.handle(&answer, &view(&todos)) else {
            panic!("an open item gets one more turn")
        };
        assert!(text.contains("- summarize (pending)") && !text.contains("fetch ("), "{text}");
        let second = TaskView { final_answers: 2, ..view(&todos) };
        assert_eq!(CompletionCheck.handle(&answer, &second), HookResult::Continue);
        let last = TaskView { iteration: MAX_ITERATIONS, ..view(&todos) };
        assert_eq!(CompletionCheck.handle(&answer, &last), HookResult::Continue);
        assert_eq!(CompletionCheck.handle(&answer, &view(&todos[..1])), HookResult::Continue);
    }

    #[test]
    fn each_hook_answers_its_own_events_and_the_rest_continue() {
        // No two of the four steer the same event, so their order decides nothing today; the
        // rule itself (first non-continue wins) is `nexbot_core::hooks`' tests.
        let spent = TaskView { searches: 2, ..view(&[]) };
        let event = HookEvent::BeforeTool { tool: "web_fetch", arguments: &Value::Null };
        let steer = first_steer(TASK_HOOKS.iter().copied(), &event, &spent).unwrap();
        assert_eq!(steer.hook, "search_budget");
        let blocked =
            HookEvent::BeforeTool { tool: "delegate_to_sub_agent", arguments: &Value::Null };
        let steer = first_steer(TASK_HOOKS.iter().copied(), &blocked, &spent).unwrap();
        assert_eq!(steer.hook, "safety");
        assert_eq!(
            steer.result,
            HookResult::Block {
                reason: "Tool 'delegate_to_sub_agent' is blocked for sub-agents".into()
            }
        );
        let fresh = HookEvent::BeforeTool { tool: "web_fetch", arguments: &Value::Null };
        assert_eq!(first_steer(TASK_HOOKS.iter().copied(), &fresh, &view(&[])), None);
    }
}
