//! The `manage_message` tool: edit or delete a message the bot itself sent in this chat.
//!
//! Why it can reach nothing else: the tool names only a message id, the chat is always the
//! turn's own, and the router refuses any id it did not send in that chat (it remembers the
//! bot's recent message ids per chat). So a model talked into it cannot edit or delete a
//! user's message, or another chat's.

use serde::Deserialize;
use serde_json::{json, Value};

use nexbot_agent::channel::MessageId;
use nexbot_agent::tools::{success, ToolContext, ToolError, ToolResult, TypedTool};

/// The longest text an edit may set (one Telegram message).
pub const MAX_EDIT_CHARS: usize = 4096;

#[derive(Debug)]
pub struct ManageMessage;

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Edit,
    Delete,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Args {
    action: Action,
    message_id: i64,
    #[serde(default)]
    text: Option<String>,
}

impl TypedTool for ManageMessage {
    type Args = Args;
    const NAME: &'static str = "manage_message";
    // Its answer is about the chat's own messages, nothing from outside the chat.
    const READS_OUTSIDE: bool = false;
    const DESCRIPTION: &'static str =
        "Edit (replace the text of) or delete a message you sent earlier in this chat, by the \
         `message_id` that `send_message` or `send_file` returned. Only your own recent \
         messages in this chat can be changed.";
    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "action": {"type": "string", "enum": ["edit", "delete"]},
            "message_id": {"type": "integer"},
            "text": {"type": "string", "description": "The new text (edit only)."}},
            "required": ["action", "message_id"]})
    }
    async fn run(&self, args: Args, ctx: &ToolContext) -> ToolResult {
        if args.message_id <= 0 {
            return Err(ToolError::new(format!(
                "message_id {} is not a message id (ids are positive)",
                args.message_id
            )));
        }
        let id = MessageId(args.message_id);
        let done = match (args.action, args.text) {
            (Action::Edit, None) => return Err(ToolError::new("text is required to edit")),
            (Action::Edit, Some(text)) if text.trim().is_empty() => {
                return Err(ToolError::new("text is empty; to remove the message, delete it"))
            }
            (Action::Edit, Some(text)) => {
                let chars = text.chars().count();
                if chars > MAX_EDIT_CHARS {
                    return Err(ToolError::new(format!(
                        "text is {chars} characters; an edited message holds at most \
                         {MAX_EDIT_CHARS}"
                    )));
                }
                tokio::select! {
                    () = ctx.cancel.cancelled() => return Err(ToolError::new("cancelled")),
                    edited = ctx.channel.edit(&ctx.chat, id, &text) => edited.map(|()| "edited"),
                }
            }
            (Action::Delete, Some(_)) => {
                return Err(ToolError::new("text is only for edit; delete takes message_id alone"))
            }
            (Action::Delete, None) => tokio::select! {
                () = ctx.cancel.cancelled() => return Err(ToolError::new("cancelled")),
                deleted = ctx.channel.delete(&ctx.chat, id) => deleted.map(|()| "deleted"),
            },
        };
        done.map(|what| success(json!({"message_id": id.0, "done": what})))
            .map_err(|e| ToolError::new(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nexbot_agent::tools::Tool;

    #[tokio::test]
    async fn bad_arguments_are_refused_with_what_was_wrong() {
        let ctx = ToolContext::for_tests();
        let long = "x".repeat(MAX_EDIT_CHARS + 1);
        let cases = [
            (json!({"action": "pin", "message_id": 3}), "unknown variant `pin`"),
            (json!({"action": "edit", "message_id": 3}), "text is required to edit"),
            (json!({"action": "edit", "message_id": 3, "text": " "}), "text is empty"),
            (json!({"action": "edit", "message_id": 3, "text": long}), "at most 4096"),
            (json!({"action": "delete", "message_id": 3, "text": "x"}), "text is only for edit"),
            (json!({"action": "delete", "message_id": 0}), "message_id 0 is not a message id"),
            (json!({"action": "delete", "message_id": "3"}), "invalid type: string"),
            (json!({"action": "delete"}), "missing field `message_id`"),
            (json!({"action": "delete", "message_id": 3, "chat": 5}), "unknown field `chat`"),
        ];
        for (args, why) in cases {
            let err = ManageMessage.call(args.clone(), &ctx).await.unwrap_err();
            assert!(err.message().contains(why), "{args}: {err}");
        }
        // Valid: handed to the chat's channel, which says what it cannot do.
        let err = ManageMessage
            .call(json!({"action": "delete", "message_id": 3}), &ctx)
            .await
            .unwrap_err();
        assert!(err.message().contains("cannot delete messages"), "{err}");
    }
}
