//! The `send_message` tool: lets the agent tell the user something before its final answer
//! (progress on a long task), through the same outbound queue as answers.

use serde::Deserialize;
use serde_json::{json, Value};

use super::{parse_args, success, Tool, ToolContext, ToolError, ToolResult};
use crate::bus::OutboundMessage;
use crate::subagent::BoxFuture;

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
            let message = OutboundMessage::progress(&ctx.chat_id, args.text);
            tokio::select! {
                () = ctx.cancel.cancelled() => Err(ToolError::new("cancelled")),
                sent = ctx.outbound.send(message) => sent
                    .map(|()| success("sent"))
                    .map_err(|_| ToolError::new("the channel is closed")),
            }
        })
    }
}
