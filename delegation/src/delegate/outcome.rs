//! What a task's end says: the tool's result for the model (the sub-agent's words in their
//! untrusted envelope, the todos it left open, the tools it did not have, a failure's report),
//! the receipt's destinations, the record's egress summary, and the end's log line.
//!
//! Why apart from the delegation's run: the run prepares and sends the task; this reads what
//! came back, and is where the model's view of a sub-agent's words is decided.

use std::time::Duration;

use nexbot_protocol::{ResponseBody, Todo};

use crate::decoy_traps::Armed;
use crate::{SubagentError, SubagentOutcome};
use nexbot_agent::tools::{success, ToolContext, ToolError, ToolOutput, ToolResult};
use nexbot_egress::TaskSummary;
use nexbot_store::{TaskEnd, TaskStatus};

use super::Delegate;

/// What a task's answer (or its absence) says: the tool's result, and what the receipt needs.
pub(super) struct Read {
    pub(super) answer: ToolResult,
    /// Granted tools the subagent does not offer (it ran without them).
    pub(super) dropped: Vec<String>,
    /// The operator killed the task's container.
    pub(super) killed: bool,
    /// The searches the task made, as it reported them.
    pub(super) searches: Option<u32>,
}

impl Delegate {
    /// Reads the task's `outcome` (`None`: no answer within `limit`) into the tool's result,
    /// filling in the record's `end`. `direct`: a direct call's output goes to the user as is.
    pub(super) async fn read_outcome(
        &self,
        outcome: Option<Result<SubagentOutcome, SubagentError>>,
        limit: Duration,
        direct: bool,
        id: &str,
        ctx: &ToolContext,
        end: &mut TaskEnd,
    ) -> Read {
        let mut dropped = Vec::new();
        let mut killed = false;
        let mut searches = None;
        let answer = match outcome {
            None => {
                end.status = TaskStatus::Timeout;
                end.error = Some(format!("no answer within {}s", limit.as_secs()));
                Err(ToolError::new(format!(
                    "the sub-agent did not answer within {}s",
                    limit.as_secs()
                )))
            }
            Some(Err(e)) => {
                killed = e.killed_by_operator;
                end.container = e.container.clone();
                end.status = if killed {
                    TaskStatus::Killed
                } else if ctx.cancel.is_cancelled() {
                    TaskStatus::Cancelled
                } else {
                    TaskStatus::Error
                };
                end.error = Some(e.to_string());
                Err(ToolError::new(format!("the sub-agent could not run the task: {e}")))
            }
            Some(Ok(outcome)) => {
                end.container = outcome.container;
                let returned = self.keep_returned(outcome.files, &ctx.chat).await;
                dropped = outcome.response.dropped_tools;
                if !dropped.is_empty() {
                    tracing::warn!(
                        task_id = %id,
                        dropped_tools = %dropped.join(","),
                        "the subagent does not offer tools the task was granted; it ran without them"
                    );
                }
                match outcome.response.body {
                    ResponseBody::Success { result, usage, searches: made, open_todos, .. } => {
                        searches = made;
                        end.status = TaskStatus::Success;
                        end.usage = usage.unwrap_or_default();
                        // A direct call's output goes to the user, not to a model: no
                        // envelope (the subagent sanitized and redacted it).
                        if direct {
                            Ok(success(result))
                        } else {
                            let answer = success(untrusted(id, &result));
                            let answer = match returned.is_empty() {
                                true => answer,
                                false => answer.with(
                                    "returned_files",
                                    format!(
                                        "in this chat's folder: {}; send one to the user with \
                                             send_file",
                                        returned.join(", ")
                                    ),
                                ),
                            };
                            Ok(mention_open_todos(answer, id, &open_todos))
                        }
                    }
                    ResponseBody::Error { error, report } => {
                        searches = report.as_ref().and_then(|r| r.searches);
                        unfinished(end, ctx, id, TaskStatus::Error, error, report)
                    }
                    ResponseBody::Timeout { error, report } => {
                        searches = report.as_ref().and_then(|r| r.searches);
                        unfinished(end, ctx, id, TaskStatus::Timeout, error, report)
                    }
                    other => {
                        end.status = TaskStatus::Error;
                        end.error = Some(format!("unexpected answer: {other:?}"));
                        Err(ToolError::new("the sub-agent gave an unexpected answer"))
                    }
                }
            }
        };
        Read { answer, dropped, killed, searches }
    }
}

impl Read {
    /// When the task's decoy `trap` was sprung, its end is the stop: cancelled, and its
    /// caller reads only [`STOPPED`](crate::decoy_traps::STOPPED), whatever came back after
    /// the trip (the proxy's refusal read as a success by the task's model, a cancel, the
    /// kill), never what the task said.
    pub(super) fn stop_if_tripped(&mut self, trap: Option<&Armed>, end: &mut TaskEnd) {
        if !trap.is_some_and(Armed::sprung) {
            return;
        }
        let stopped = crate::decoy_traps::STOPPED;
        end.status = TaskStatus::Cancelled;
        end.error = Some(stopped.to_owned());
        self.answer =
            Err(ToolError::new(format!("the sub-agent could not run the task: {stopped}")));
    }
}

/// The answer for the model, telling it which granted tools the sub-agent did not have (the
/// answer's `dropped_tools`: a subagent image older than this host's list of tools).
pub(super) fn mention_dropped(answer: ToolResult, dropped: &[String]) -> ToolResult {
    if dropped.is_empty() {
        return answer;
    }
    let note = format!(
        "The sub-agent does not offer {}, so the task ran without {}.",
        dropped.join(", "),
        if dropped.len() == 1 { "it" } else { "them" }
    );
    match answer {
        Ok(output) => Ok(output.with("dropped_tools", dropped).with("note", note)),
        Err(error) => Err(error.with("dropped_tools", dropped).with("note", note)),
    }
}

/// The answer for the model, naming the todo items the sub-agent left open (the answer's
/// `open_todos`, after its completion check asked once more): its words, so in the envelope.
fn mention_open_todos(answer: ToolOutput, task_id: &str, open: &[Todo]) -> ToolOutput {
    if open.is_empty() {
        return answer;
    }
    let items: Vec<String> =
        open.iter().map(|t| format!("- {} ({})", t.content, t.status)).collect();
    answer.with("open_todos", untrusted(task_id, &items.join("\n")))
}

/// The destinations of an egress task summary (`destinations`: `host:port` → counts) it
/// reached, and those it was refused.
pub(super) fn destinations(summary: &TaskSummary) -> (Vec<String>, Vec<String>) {
    let (mut contacted, mut denied) = (Vec::new(), Vec::new());
    for (destination, counts) in &summary.destinations {
        if counts.allowed > 0 {
            contacted.push(destination.clone());
        }
        if counts.denied > 0 {
            denied.push(destination.clone());
        }
    }
    (contacted, denied)
}

/// The egress summary as the task record stores it (JSON text: the SQL edge).
pub(super) fn record_json(summary: &TaskSummary) -> String {
    serde_json::to_string(summary).unwrap_or_default()
}

/// The log line of a task's end; a failure's reason is in the log, not only in the record.
pub(super) fn log_end(id: &str, end: &TaskEnd, relay_tokens: Option<u64>) {
    match &end.error {
        // The reason is in the log, not only in the task record.
        Some(error) => tracing::warn!(
            task_id = %id,
            status = %end.status,
            duration_ms = end.duration_ms,
            relay_tokens = relay_tokens.unwrap_or(0),
            %error,
            "subagent task failed; its LLM access is revoked"
        ),
        None => tracing::info!(
            task_id = %id,
            status = %end.status,
            duration_ms = end.duration_ms,
            relay_tokens = relay_tokens.unwrap_or(0),
            "subagent task ended and its LLM access revoked"
        ),
    }
}

/// Records a task that ended without a result and gives the model its error and report.
fn unfinished(
    end: &mut TaskEnd,
    ctx: &ToolContext,
    task_id: &str,
    status: TaskStatus,
    error: String,
    report: Option<nexbot_protocol::Report>,
) -> ToolResult {
    end.status = if ctx.cancel.is_cancelled() { TaskStatus::Cancelled } else { status };
    // A report gives only a total; it is kept as completion tokens.
    end.usage.completion_tokens = report.as_ref().map_or(0, |r| r.tokens);
    end.error = Some(error.clone());
    // The report's todos and recent messages are the sub-agent's words: data, like a result.
    let report =
        report.map(|r| untrusted(task_id, &serde_json::to_string_pretty(&r).unwrap_or_default()));
    Err(ToolError::new(error).with("report", report))
}

/// A sub-agent's words as the main agent's model sees them: inside markers, with a note that
/// they are data and not instructions (`nexbot_core::text::data_envelope`). The sub-agent read
/// untrusted pages and ran commands, so its answer may carry an injection.
pub fn untrusted(task_id: &str, text: &str) -> String {
    nexbot_core::text::data_envelope(
        "SUBAGENT_RESULT",
        &format!("task={task_id}"),
        "a sandboxed sub-agent that handled untrusted content",
        text,
    )
}
