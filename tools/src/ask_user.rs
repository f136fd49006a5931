//! The `ask_user` tool: the agent asks the chat a question and waits for the answer.
//!
//! Why through [`Channel::ask`]: the router sends the question and the bus hands the chat's
//! next non-command message to the waiting question instead of queueing it behind the turn
//! that waits (which would never end). The wait is bounded by the operator
//! (`agent.ask_timeout_secs`, its default and maximum), and the turn's cancellation (`/stop`,
//! the turn's own timeout) ends it at once: a person who does not answer never holds the
//! chat's worker for longer than the operator allows.
//!
//! [`Channel::ask`]: nexbot_agent::channel::Channel::ask

use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};

use nexbot_agent::channel::ChannelError;
use nexbot_agent::tools::{success, ToolContext, ToolError, ToolResult, TypedTool};

/// Longest question, in characters (a Telegram message holds 4096).
pub const MAX_QUESTION_CHARS: usize = 4000;
/// Most options one question offers (buttons), and the longest option, in characters.
pub const MAX_OPTIONS: usize = 8;
pub const MAX_OPTION_CHARS: usize = 64;
/// Time the tool's own limit leaves above the wait, so the wait's clear answer wins.
const MARGIN: Duration = Duration::from_secs(5);

#[derive(Debug)]
pub struct AskUser {
    /// The default and the longest wait.
    wait: Duration,
}

impl AskUser {
    pub fn new(wait: Duration) -> Self {
        Self { wait: wait.max(Duration::from_secs(1)) }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Args {
    question: String,
    /// Seconds to wait; the seed's `timeout` is the same.
    #[serde(default, alias = "timeout")]
    timeout_secs: Option<u64>,
    /// Choices the user may press (buttons where the chat has them); they may still type.
    #[serde(default)]
    options: Vec<String>,
}

impl TypedTool for AskUser {
    type Args = Args;
    const NAME: &'static str = "ask_user";
    // Its answer is the chat's user's own answer, nothing from outside the chat.
    const READS_OUTSIDE: bool = false;
    const DESCRIPTION: &'static str =
        "Ask the user a question in this chat and wait for the answer (their next message). \
         Use it only when you cannot go on without their decision or information. Returns \
         their answer; fails when they do not answer in time or stop the turn.";
    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "question": {"type": "string", "description": "What to ask, in the user's language."},
            "timeout_secs": {"type": "integer", "minimum": 1,
                "description": "How long to wait for the answer; the operator's limit \
                                (agent.ask_timeout_secs) is both the default and the maximum."},
            "options": {"type": "array", "items": {"type": "string"}, "maxItems": MAX_OPTIONS,
                "description": "Short answers to offer as buttons; the user may still type \
                                another."}},
            "required": ["question"]})
    }
    fn timeout(&self) -> Option<Duration> {
        Some(self.wait + MARGIN)
    }
    async fn run(&self, args: Args, ctx: &ToolContext) -> ToolResult {
        let question = args.question.trim();
        if question.is_empty() {
            return Err(ToolError::new("question is empty"));
        }
        let chars = question.chars().count();
        if chars > MAX_QUESTION_CHARS {
            return Err(ToolError::new(format!(
                "question is {chars} characters; at most {MAX_QUESTION_CHARS} are allowed"
            )));
        }
        let options: Vec<String> = args.options.iter().map(|o| o.trim().to_owned()).collect();
        if options.len() > MAX_OPTIONS {
            return Err(ToolError::new(format!("at most {MAX_OPTIONS} options are allowed")));
        }
        if let Some(bad) = options
            .iter()
            .find(|o| o.is_empty() || o.chars().count() > MAX_OPTION_CHARS || o.contains('\n'))
        {
            return Err(ToolError::new(format!(
                "option {bad:?} is empty, longer than {MAX_OPTION_CHARS} characters or more \
                 than one line"
            )));
        }
        let wait = match args.timeout_secs {
            Some(0) => return Err(ToolError::new("timeout_secs must be at least 1")),
            Some(secs) => Duration::from_secs(secs).min(self.wait),
            None => self.wait,
        };
        tokio::select! {
            () = ctx.cancel.cancelled() => Err(ToolError::new(
                "stopped: the turn was cancelled (/stop or its time limit) while waiting for \
                 the user's answer; the question is no longer open",
            )),
            asked = async {
                match options.is_empty() {
                    true => ctx.channel.ask(&ctx.chat, question, wait).await,
                    false => ctx.channel.ask_choice(&ctx.chat, question, &options, wait).await,
                }
            } => match asked {
                Ok(answer) => Ok(success(json!({"answer": answer}))),
                Err(ChannelError::NoAnswer(wait)) => Err(ToolError::new(format!(
                    "no answer from the user within {}s; the question is closed (their next \
                     message starts a new conversation turn): go on without the answer or \
                     say what you need",
                    wait.as_secs()
                ))),
                Err(e) => Err(ToolError::new(format!("cannot ask the user: {e}"))),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nexbot_agent::tools::Tool;

    #[tokio::test]
    async fn bad_questions_and_timeouts_are_refused_with_what_was_wrong() {
        let tool = AskUser::new(Duration::from_secs(30));
        let ctx = ToolContext::for_tests();
        let cases = [
            (json!({"question": "  "}), "question is empty"),
            (json!({"question": "x".repeat(MAX_QUESTION_CHARS + 1)}), "at most 4000"),
            (json!({"question": "ok?", "timeout_secs": 0}), "at least 1"),
            (json!({"question": "ok?", "timeout_secs": -3}), "invalid arguments for ask_user"),
            (json!({"question": "ok?", "choices": ["a"]}), "unknown field `choices`"),
            (json!({"question": "ok?", "options": ["a", " "]}), "is empty"),
            (json!({"question": "ok?", "options": vec!["a"; 9]}), "at most 8 options"),
            (json!({}), "missing field `question`"),
        ];
        for (args, why) in cases {
            let err = tool.call(args.clone(), &ctx).await.unwrap_err();
            assert!(err.message().contains(why), "{args}: {err}");
        }
        // A valid question reaches the channel (here: none is running, and it says so).
        let err = tool.call(json!({"question": "ok?", "timeout": 5}), &ctx).await.unwrap_err();
        assert!(
            err.message().contains("cannot ask the user") && err.message().contains("cannot ask"),
            "{err}"
        );
    }

    /// A chat whose user never answers, and which says so when the wait is over.
    #[derive(Debug)]
    struct Silent;

    impl nexbot_agent::channel::Channel for Silent {
        fn send(
            &self,
            _: nexbot_agent::channel::OutboundMessage,
        ) -> nexbot_core::BoxFuture<
            '_,
            Result<Option<nexbot_agent::channel::MessageId>, ChannelError>,
        > {
            Box::pin(async { Ok(None) })
        }
        fn ask<'a>(
            &'a self,
            _: &'a nexbot_core::ChatRef,
            _: &'a str,
            wait: Duration,
        ) -> nexbot_core::BoxFuture<'a, Result<String, ChannelError>> {
            Box::pin(async move {
                tokio::time::sleep(wait).await;
                Err(ChannelError::NoAnswer(wait))
            })
        }
    }

    #[tokio::test]
    async fn the_wait_is_capped_and_ends_at_once_when_the_turn_is_stopped() {
        let tool = AskUser::new(Duration::from_secs(1));
        let mut ctx = ToolContext::for_tests();
        ctx.channel = std::sync::Arc::new(Silent);
        // Asked for an hour, waited the operator's 1 s.
        let started = std::time::Instant::now();
        let err = tool.call(json!({"question": "?", "timeout_secs": 3600}), &ctx).await;
        assert!(err.unwrap_err().message().contains("no answer from the user within 1s"));
        assert!(started.elapsed() < Duration::from_secs(5));
        // Stopped while waiting: the wait ends then, with a clear result.
        let tool = AskUser::new(Duration::from_secs(600));
        let cancel = ctx.cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            cancel.cancel();
        });
        let started = std::time::Instant::now();
        let err = tool.call(json!({"question": "?"}), &ctx).await.unwrap_err();
        assert!(err.message().starts_with("stopped"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn the_tools_own_limit_outlasts_the_longest_wait() {
        let tool = AskUser::new(Duration::from_secs(300));
        assert!(TypedTool::timeout(&tool).unwrap() > Duration::from_secs(300));
    }
}
