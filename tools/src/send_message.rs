//! The `send_message` tool: lets the agent tell the user something before its final answer
//! (progress on a long task), through the same outbound queue as answers. It returns the
//! sent message's id (when the channel numbers messages) so the model can later change it
//! with `manage_message`.

use serde::Deserialize;
use serde_json::{json, Value};

use nexbot_agent::channel::OutboundMessage;
use nexbot_agent::tools::{success, ToolContext, ToolError, ToolResult, TypedTool};

#[derive(Debug)]
pub struct SendMessage;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Args {
    text: String,
}

impl TypedTool for SendMessage {
    type Args = Args;
    const NAME: &'static str = "send_message";
    // Its answer is about what it sent, nothing from outside the chat.
    const READS_OUTSIDE: bool = false;
    const DESCRIPTION: &'static str =
        "Send the user a message now (e.g. progress), before the final answer. Returns its \
         `message_id` (null where the chat has no ids), which `manage_message` can edit or \
         delete.";
    fn schema() -> Value {
        json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
    }
    async fn run(&self, args: Args, ctx: &ToolContext) -> ToolResult {
        if args.text.trim().is_empty() {
            return Err(ToolError::new("text is empty"));
        }
        let message = OutboundMessage::progress(&ctx.chat, args.text);
        tokio::select! {
            () = ctx.cancel.cancelled() => Err(ToolError::new("cancelled")),
            sent = ctx.channel.send(message) => sent
                .map(|id| success(json!({"sent": true, "message_id": id.map(|id| id.0)})))
                .map_err(|e| ToolError::new(e.to_string())),
        }
    }
}
