//! The approvals (`nexbot-approvals`) wired into the daemon: re-exported under their old path,
//! the chat commands a question's buttons press (`/egress`, `/approve`, the owner's
//! `/questions`) in the command registry, the delegation's [`TaskQuestions`] seam, and the MCP
//! servers' ([`McpQuestions`]).
//!
//! Why here: the command registry and the delegation tool are the host's; what a press means
//! and who may make it are the approvals' ([`Approvals::answer_in_chat`],
//! [`Approvals::digest`]).

use std::sync::Arc;

use nexbot_core::ChatRef;

use crate::commands::{ChatCommand, CommandContext, CommandReply};
use crate::delegation::TaskQuestions;
use crate::BoxFuture;

pub use nexbot_approvals::*;

/// The `/questions` command's word.
pub const QUESTIONS_COMMAND: &str = "questions";

/// `/egress <id> once|task|chat|deny`: the egress questions' buttons (or typed); it answers
/// any question, as it did before there were other kinds.
#[derive(Debug)]
pub struct EgressCommand(pub Arc<Approvals>);

impl ChatCommand for EgressCommand {
    fn name(&self) -> &'static str {
        COMMAND
    }

    fn summary(&self) -> &'static str {
        "answer an egress question: /egress <id> once|task|chat|deny (its buttons do it)"
    }

    fn run<'a>(&'a self, ctx: CommandContext<'a>) -> BoxFuture<'a, String> {
        Box::pin(async move { self.0.answer_in_chat(ctx.chat, ctx.user, ctx.args, COMMAND) })
    }
}

/// `/approve <id> allow|task|deny`: the other questions' buttons (a `--confirm` secret's
/// use, `agent.confirm`'s steps), or typed.
#[derive(Debug)]
pub struct ApproveCommand(pub Arc<Approvals>);

impl ChatCommand for ApproveCommand {
    fn name(&self) -> &'static str {
        CONFIRM_COMMAND
    }

    fn summary(&self) -> &'static str {
        "answer a confirmation: /approve <id> allow|task|deny (its buttons do it)"
    }

    fn run<'a>(&'a self, ctx: CommandContext<'a>) -> BoxFuture<'a, String> {
        Box::pin(
            async move { self.0.answer_in_chat(ctx.chat, ctx.user, ctx.args, CONFIRM_COMMAND) },
        )
    }
}

/// `/questions`: the owner's digest of every chat's waiting questions, each with its buttons,
/// in the owner's private chat (or the console); see [`Approvals::digest`].
#[derive(Debug)]
pub struct QuestionsCommand(pub Arc<Approvals>);

impl ChatCommand for QuestionsCommand {
    fn name(&self) -> &'static str {
        QUESTIONS_COMMAND
    }

    fn summary(&self) -> &'static str {
        "the owner's digest of every chat's waiting questions, with their buttons"
    }

    fn run<'a>(&'a self, ctx: CommandContext<'a>) -> BoxFuture<'a, String> {
        Box::pin(async move { self.0.digest(ctx.chat, ctx.user).0 })
    }

    fn reply<'a>(&'a self, ctx: CommandContext<'a>) -> BoxFuture<'a, CommandReply> {
        Box::pin(async move {
            let (text, buttons) = self.0.digest(ctx.chat, ctx.user);
            CommandReply { text, buttons }
        })
    }
}

/// The approvals as the delegation's [`TaskQuestions`] seam.
pub fn task_questions(approvals: Arc<Approvals>) -> Arc<dyn TaskQuestions> {
    Arc::new(TaskQuestionsOf(approvals))
}

/// A wrapper: the trait is `nexbot-delegation`'s and the type `nexbot-approvals`', so the
/// host that wires them implements it.
#[derive(Debug)]
struct TaskQuestionsOf(Arc<Approvals>);

impl TaskQuestions for TaskQuestionsOf {
    fn task_started(
        &self,
        task_id: &str,
        chat: &ChatRef,
        task: &str,
        unattended: bool,
        user: Option<i64>,
    ) {
        self.0.start_task(task_id, chat, task, unattended);
        self.0.started_by(task_id, user);
    }

    fn task_ended(&self, task_id: &str) {
        self.0.end_task(task_id);
    }

    fn grant(&self, task_id: &str, destinations: &[nexbot_skill::Destination]) -> bool {
        self.0.grant_for_task(task_id, destinations)
    }

    fn receipt_lines<'a>(&'a self, task_id: &'a str) -> BoxFuture<'a, Vec<String>> {
        Box::pin(self.0.asked_lines(task_id))
    }
}

/// The MCP servers' side of the questions ([`crate::mcp::ServerQuestions`]): a chat's server
/// instance is asked about like a task of its chat, attended, by no member but the owner.
/// Why a wrapper: the servers' crate knows no delegation, so it names only what it calls.
#[derive(Debug)]
pub struct McpQuestions(pub Arc<dyn TaskQuestions>);

impl crate::mcp::ServerQuestions for McpQuestions {
    fn server_started(&self, identity: &str, chat: &ChatRef, what: &str) {
        self.0.task_started(identity, chat, what, false, None);
    }

    fn server_ended(&self, identity: &str) {
        self.0.task_ended(identity);
    }
}
