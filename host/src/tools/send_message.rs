//! The `send_message` tool: lets the agent tell the user something before its final answer
//! (progress on a long task), through the same outbound queue as answers.

use serde::Deserialize;
use serde_json::{json, Value};

use super::{parse_args, success, Tool, ToolContext, ToolError, ToolResult};
use crate::agent::channel::OutboundMessage;
use crate::BoxFuture;

#[derive(Debug)]
pub struct SendMessage;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    text: String,
}

impl Tool for SendMessage {
    fn name(&self) -> &'static str {
        "send_message"
    }
    fn description(&self) -> &'static str {
        "Send the user a message now (e.g. progress), before the final answer."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
    }
    fn call<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move {
            let args: Args = parse_args(self.name(), args)?;
            if args.text.trim().is_empty() {
                return Err(ToolError::new("text is empty"));
            }
            let message = OutboundMessage::progress(&ctx.chat, args.text);
            tokio::select! {
                () = ctx.cancel.cancelled() => Err(ToolError::new("cancelled")),
                sent = ctx.channel.send(message) => sent
                    .map(|_| success("sent"))
                    .map_err(|e| ToolError::new(e.to_string())),
            }
        })
    }
}
