//! The `memory` tool: the agent's long-term memory is the workspace's MEMORY.md, which is also
//! the last part of the system prompt. Appending (never rewriting) keeps what the user asked
//! to remember safe from a model that summarizes badly.

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::{json, Value};

use super::{success, ToolContext, ToolError, ToolResult, TypedTool};

/// Longest single note.
const MAX_NOTE_CHARS: usize = 4_000;

#[derive(Debug)]
pub struct Memory {
    path: PathBuf,
    /// Serializes appends so two chats never interleave a note.
    lock: tokio::sync::Mutex<()>,
}

impl Memory {
    pub fn new(path: PathBuf) -> Self {
        Self { path, lock: tokio::sync::Mutex::new(()) }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "lowercase", tag = "action")]
pub enum MemoryArgs {
    Read,
    Append { text: String },
}

impl TypedTool for Memory {
    type Args = MemoryArgs;
    const NAME: &'static str = "memory";
    const DESCRIPTION: &'static str =
        "Long-term memory (MEMORY.md). action=read returns it; action=append adds `text` as a \
         new note at the end.";
    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "action": {"type": "string", "enum": ["read", "append"]},
            "text": {"type": "string"}}, "required": ["action"]})
    }
    async fn run(&self, args: MemoryArgs, _: &ToolContext) -> ToolResult {
        let _guard = self.lock.lock().await;
        let current = match tokio::fs::read_to_string(&self.path).await {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(ToolError::new(format!("reading MEMORY.md: {e}"))),
        };
        match args {
            MemoryArgs::Read => Ok(success(current)),
            MemoryArgs::Append { text } => {
                let text = text.trim();
                if text.is_empty() {
                    return Err(ToolError::new("text is empty"));
                }
                if text.chars().count() > MAX_NOTE_CHARS {
                    return Err(ToolError::new(format!(
                        "a note may have at most {MAX_NOTE_CHARS} characters"
                    )));
                }
                let mut updated = current;
                if !updated.is_empty() && !updated.ends_with('\n') {
                    updated.push('\n');
                }
                updated.push_str(&format!("- {text}\n"));
                tokio::fs::write(&self.path, updated)
                    .await
                    .map_err(|e| ToolError::new(format!("writing MEMORY.md: {e}")))?;
                Ok(success("noted"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::Tool;

    #[tokio::test]
    async fn append_then_read() {
        let dir = std::env::temp_dir().join(format!("nxh-mem-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("MEMORY.md"), "# Memory").unwrap();
        let tool = Memory::new(dir.join("MEMORY.md"));
        let ctx = ToolContext::for_tests();
        tool.call(json!({"action": "append", "text": "likes tea"}), &ctx).await.unwrap();
        let out = tool.call(json!({"action": "read"}), &ctx).await.unwrap();
        assert_eq!(out, success("# Memory\n- likes tea\n"));
        let err = tool.call(json!({"action": "forget"}), &ctx).await.unwrap_err();
        assert!(err.0.contains("invalid arguments for memory"), "{err}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
