//! The `send_file` tool (alias `send_file_to_user`, the protocol's name): sends a file of the
//! workspace to the chat — a document in Telegram; the console prints where the file is.
//!
//! Why the file tools' confinement: the path is the model's, so it is untrusted input. It is
//! resolved by the same [`Confinement`] as `read_file` (relative, no `..`, symlinks resolved
//! and kept inside, the daemon's files refused) and the owner's personal notes go only to the
//! owner's chat. Sending a file is reading it out of the host, so whatever `read_file` may not
//! show, this may not send. The size is checked before any upload (Telegram takes at most
//! 50 MB from a bot), so a too-large file fails at once with a clear error.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};

use super::files::Confinement;
use super::{success, ToolContext, ToolError, ToolResult, TypedTool};
use crate::agent::channel::OutboundFile;

/// The largest file sent: what the Telegram Bot API accepts from a bot.
pub const MAX_SEND_BYTES: u64 = 50 * 1024 * 1024;
/// The longest caption (Telegram's limit for media captions).
pub const MAX_CAPTION_CHARS: usize = 1024;
/// An upload of the largest file over a slow link still fits.
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(300);

#[derive(Debug)]
pub struct SendFile {
    confinement: Arc<Confinement>,
    max_bytes: u64,
}

impl SendFile {
    pub fn new(confinement: Arc<Confinement>) -> Self {
        Self { confinement, max_bytes: MAX_SEND_BYTES }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Args {
    path: String,
    #[serde(default)]
    caption: Option<String>,
}

impl SendFile {
    /// The checked file to send, and its size.
    async fn checked(&self, raw: String, owner: bool) -> Result<(PathBuf, u64), ToolError> {
        let confinement = self.confinement.clone();
        let max = self.max_bytes;
        tokio::task::spawn_blocking(move || {
            let path = confinement.existing(&raw)?;
            confinement.check_personal(&raw, &path, owner)?;
            let meta =
                std::fs::metadata(&path).map_err(|e| ToolError::new(format!("{raw}: {e}")))?;
            if meta.is_dir() {
                return Err(ToolError::new(format!("{raw}: is a directory; send a file")));
            }
            if !meta.is_file() {
                return Err(ToolError::new(format!("{raw}: not a regular file")));
            }
            if meta.len() == 0 {
                return Err(ToolError::new(format!("{raw}: the file is empty; nothing to send")));
            }
            if meta.len() > max {
                return Err(ToolError::new(format!(
                    "{raw}: the file is {} bytes; files sent to the chat may be at most {max} \
                     bytes ({} MB)",
                    meta.len(),
                    max / (1024 * 1024)
                )));
            }
            Ok((path, meta.len()))
        })
        .await
        .map_err(|e| ToolError::new(format!("tool failed: {e}")))?
    }
}

impl TypedTool for SendFile {
    type Args = Args;
    const NAME: &'static str = "send_file";
    const DESCRIPTION: &'static str =
        "Send a file of the workspace to the user in this chat (a document in Telegram), with \
         an optional caption. `path` is relative to the workspace; at most 50 MB. Returns the \
         sent message's `message_id`.";
    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "path": {"type": "string"},
            "caption": {"type": "string", "description": "Shown with the file (at most 1024 characters)."}},
            "required": ["path"]})
    }
    fn timeout(&self) -> Option<Duration> {
        Some(UPLOAD_TIMEOUT)
    }
    async fn run(&self, args: Args, ctx: &ToolContext) -> ToolResult {
        let caption = args.caption.map(|c| c.trim().to_owned()).filter(|c| !c.is_empty());
        if let Some(caption) = &caption {
            let chars = caption.chars().count();
            if chars > MAX_CAPTION_CHARS {
                return Err(ToolError::new(format!(
                    "caption is {chars} characters; at most {MAX_CAPTION_CHARS} are allowed"
                )));
            }
        }
        let raw = args.path.clone();
        let (path, bytes) = self.checked(args.path, ctx.owner).await?;
        let file = OutboundFile { chat: ctx.chat.clone(), path, caption };
        tokio::select! {
            () = ctx.cancel.cancelled() => Err(ToolError::new("cancelled")),
            sent = ctx.channel.send_file(file) => match sent {
                Ok(id) => Ok(success(json!({
                    "sent": raw, "bytes": bytes, "message_id": id.map(|id| id.0),
                }))),
                Err(e) => Err(ToolError::new(format!("{raw}: not sent: {e}"))),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::Tool;

    struct Fixture {
        dir: PathBuf,
        tool: SendFile,
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn fixture(max_bytes: u64) -> Fixture {
        let dir = std::env::temp_dir().join(format!("nxh-sendfile-{}", uuid::Uuid::new_v4()));
        let ws = dir.join("ws");
        std::fs::create_dir_all(ws.join("sub")).unwrap();
        std::fs::write(ws.join("report.txt"), "the report").unwrap();
        std::fs::write(ws.join("big.bin"), vec![0u8; 64]).unwrap();
        std::fs::write(ws.join("empty.txt"), "").unwrap();
        std::fs::write(ws.join("nexbot.db"), "database").unwrap();
        std::fs::write(ws.join("USER.md"), "the owner's facts").unwrap();
        std::fs::write(dir.join("outside.txt"), "outside").unwrap();
        std::os::unix::fs::symlink(dir.join("outside.txt"), ws.join("escape")).unwrap();
        let confinement = Confinement::new(&ws, &[ws.join("nexbot.db")], &[]).unwrap();
        Fixture { dir, tool: SendFile { confinement: Arc::new(confinement), max_bytes } }
    }

    #[tokio::test]
    async fn files_are_confined_like_the_file_tools_and_bounded() {
        let f = fixture(32);
        let ctx = ToolContext::for_tests();
        let mut stranger = ToolContext::for_tests();
        stranger.owner = false;
        let cases = [
            (json!({"path": "missing.txt"}), &ctx, "missing.txt: no such file or directory"),
            (json!({"path": "nexbot.db"}), &ctx, "belongs to the daemon"),
            (json!({"path": "../outside.txt"}), &ctx, "`..` is refused"),
            (json!({"path": "/etc/passwd"}), &ctx, "absolute paths are refused"),
            (json!({"path": "escape"}), &ctx, "outside the workspace"),
            (json!({"path": "USER.md"}), &stranger, "owner's personal notes"),
            (json!({"path": "sub"}), &ctx, "is a directory"),
            (json!({"path": "empty.txt"}), &ctx, "the file is empty"),
            (json!({"path": "big.bin"}), &ctx, "the file is 64 bytes; files sent to the chat"),
            (
                json!({"path": "report.txt", "caption": "c".repeat(MAX_CAPTION_CHARS + 1)}),
                &ctx,
                "caption is 1025 characters",
            ),
            (json!({"path": "report.txt", "to": "x"}), &ctx, "unknown field `to`"),
            (json!({"caption": "x"}), &ctx, "missing field `path`"),
        ];
        for (args, ctx, why) in cases {
            let err = f.tool.call(args.clone(), ctx).await.unwrap_err();
            assert!(err.0.contains(why), "{args}: {err}");
        }
        // A good file reaches the channel (none runs here, and that is said with the path).
        let err = f.tool.call(json!({"path": "report.txt"}), &ctx).await.unwrap_err();
        assert!(err.0.starts_with("report.txt: not sent:"), "{err}");
    }
}
