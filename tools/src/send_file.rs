//! The `send_file` tool (alias `send_file_to_user`, the protocol's name): sends a file of the
//! chat's room to the chat — a document in Telegram; the console prints where the file is.
//!
//! Why the file tools' confinement: the path is the model's, so it is untrusted input. It is
//! resolved by the same [`Confinement`](super::files::Confinement) as `read_file`: inside the
//! chat's own room (relative, no `..`, symlinks resolved and kept inside), so another chat's
//! files and the daemon's are out of reach, and the owner's personal notes go only to the
//! owner's chat. Sending a file is reading it out of the host, so whatever `read_file` may not
//! show, this may not send. The size is checked before any upload (Telegram takes at most
//! 50 MB from a bot), so a too-large file fails at once with a clear error.

use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::files::in_room;
use crate::rooms::Rooms;
use nexbot_agent::channel::OutboundFile;
use nexbot_agent::confirm::Step;
use nexbot_agent::tools::{success, ToolContext, ToolError, ToolResult, TypedTool};

/// The largest file sent: what the Telegram Bot API accepts from a bot.
pub const MAX_SEND_BYTES: u64 = 50 * 1024 * 1024;
/// The longest caption (Telegram's limit for media captions).
pub const MAX_CAPTION_CHARS: usize = 1024;
/// An upload of the largest file over a slow link still fits.
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(300);

#[derive(Debug)]
pub struct SendFile {
    rooms: Arc<Rooms>,
    max_bytes: u64,
}

impl SendFile {
    pub fn new(rooms: Arc<Rooms>) -> Self {
        Self { rooms, max_bytes: MAX_SEND_BYTES }
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
    async fn checked(&self, raw: String, ctx: &ToolContext) -> Result<(PathBuf, u64), ToolError> {
        let max = self.max_bytes;
        in_room(&self.rooms, ctx, move |confinement| {
            let path = confinement.existing(&raw)?;
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
    }
}

impl TypedTool for SendFile {
    type Args = Args;
    const NAME: &'static str = "send_file";
    // Its answer is about what it sent, nothing from outside the chat.
    const READS_OUTSIDE: bool = false;
    const DESCRIPTION: &'static str =
        "Send a file of this chat's folder to the user in this chat (a document in Telegram), \
         with an optional caption. `path` is relative to the folder; at most 50 MB. Returns the \
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
        let (path, bytes) = self.checked(args.path, ctx).await?;
        // `agent.confirm` may ask the user first (a large file leaves the host for good).
        let step = Step::SendFile { path: raw.clone(), bytes };
        if let Err(refused) = ctx.confirm.confirm(&ctx.chat, step).await {
            return Err(ToolError::new(format!("{raw}: not sent: {refused}")));
        }
        // Opened and checked again after the wait: what is sent is what is in the room now,
        // read through this handle (kept open until the send ends).
        let raw_open = raw.clone();
        let checked_path = path.clone();
        let handle = in_room(&self.rooms, ctx, move |confinement| {
            confinement.open(&raw_open, &checked_path, false)
        })
        .await?;
        let contents = Some(PathBuf::from(format!("/proc/self/fd/{}", handle.as_raw_fd())));
        let file = OutboundFile { chat: ctx.chat.clone(), path, caption, contents };
        let sent = tokio::select! {
            () = ctx.cancel.cancelled() => return Err(ToolError::new("cancelled")),
            sent = ctx.channel.send_file(file) => sent,
        };
        // Open until here: the channel read the bytes through it.
        drop(handle);
        match sent {
            Ok(id) => Ok(success(json!({
                "sent": raw, "bytes": bytes, "message_id": id.map(|id| id.0),
            }))),
            Err(e) => Err(ToolError::new(format!("{raw}: not sent: {e}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nexbot_agent::tools::Tool;

    struct Fixture {
        dir: PathBuf,
        tool: SendFile,
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    /// Chat `console:test`'s room with files of its own and a link out, next to the daemon's
    /// database, the owner's notes and another chat's room.
    fn fixture(max_bytes: u64) -> Fixture {
        let dir = std::env::temp_dir().join(format!("nxh-sendfile-{}", uuid::Uuid::new_v4()));
        let data = dir.join("data");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(data.join("nexbot.db"), "database").unwrap();
        std::fs::write(data.join("USER.md"), "the owner's facts").unwrap();
        let chat = nexbot_core::ChatRef::console("test").unwrap();
        let rooms = Rooms::open(&data, &chat, &crate::rooms::Keep::default()).unwrap();
        let other = rooms.confinement(&nexbot_core::ChatRef::Telegram(7), false).unwrap();
        std::fs::write(other.root().join("theirs.txt"), "another chat's").unwrap();
        let ws = rooms.confinement(&chat, true).unwrap().root().to_owned();
        std::fs::create_dir_all(ws.join("sub")).unwrap();
        std::fs::write(ws.join("report.txt"), "the report").unwrap();
        std::fs::write(ws.join("big.bin"), vec![0u8; 64]).unwrap();
        std::fs::write(ws.join("empty.txt"), "").unwrap();
        std::os::unix::fs::symlink(data.join("nexbot.db"), ws.join("escape")).unwrap();
        std::os::unix::fs::symlink(other.root().join("theirs.txt"), ws.join("theirs")).unwrap();
        Fixture { dir, tool: SendFile { rooms: Arc::new(rooms), max_bytes } }
    }

    /// Swaps the room's `sub` folder for a link to another chat's room while the user is
    /// asked (what something else writing in the room could do in that wait).
    #[derive(Debug)]
    struct SwapWhileAsking {
        room: PathBuf,
        other: PathBuf,
    }

    impl nexbot_agent::confirm::Confirm for SwapWhileAsking {
        fn confirm<'a>(
            &'a self,
            _: &'a nexbot_core::ChatRef,
            _: Step,
        ) -> nexbot_core::BoxFuture<'a, Result<(), nexbot_agent::confirm::Refused>> {
            Box::pin(async move {
                std::fs::rename(self.room.join("sub"), self.room.join("sub-was")).unwrap();
                std::os::unix::fs::symlink(&self.other, self.room.join("sub")).unwrap();
                Ok(())
            })
        }
    }

    /// Reads what it is asked to send, as a channel does.
    #[derive(Debug, Default)]
    struct Reading(std::sync::Mutex<Vec<Vec<u8>>>);

    impl nexbot_agent::channel::Channel for Reading {
        fn send(
            &self,
            _: nexbot_agent::channel::OutboundMessage,
        ) -> nexbot_core::BoxFuture<
            '_,
            Result<Option<nexbot_agent::channel::MessageId>, nexbot_agent::channel::ChannelError>,
        > {
            Box::pin(async { Ok(None) })
        }

        fn send_file(
            &self,
            file: OutboundFile,
        ) -> nexbot_core::BoxFuture<
            '_,
            Result<Option<nexbot_agent::channel::MessageId>, nexbot_agent::channel::ChannelError>,
        > {
            let bytes =
                std::fs::read(file.contents.as_ref().unwrap_or(&file.path)).unwrap_or_default();
            self.0.lock().unwrap().push(bytes);
            Box::pin(async { Ok(None) })
        }
    }

    #[tokio::test]
    async fn a_folder_swapped_while_the_user_is_asked_sends_nothing_of_another_chat() {
        let f = fixture(1024);
        let rooms = &f.tool.rooms;
        let chat = nexbot_core::ChatRef::console("test").unwrap();
        let room = rooms.confinement(&chat, true).unwrap().root().to_owned();
        let other = rooms.confinement(&nexbot_core::ChatRef::Telegram(7), false).unwrap();
        std::fs::write(room.join("sub/theirs.txt"), "mine").unwrap();
        let channel = Arc::new(Reading::default());
        let mut ctx = ToolContext::for_tests();
        ctx.channel = channel.clone();
        ctx.confirm = Arc::new(SwapWhileAsking { room, other: other.root().to_owned() });
        let err = f.tool.call(json!({"path": "sub/theirs.txt"}), &ctx).await.unwrap_err();
        assert!(err.message().contains("refused"), "{err}");
        assert!(channel.0.lock().unwrap().is_empty(), "something was sent");
    }

    #[tokio::test]
    async fn files_are_confined_like_the_file_tools_and_bounded() {
        let f = fixture(32);
        let ctx = ToolContext::for_tests();
        let mut stranger = ToolContext::for_tests();
        stranger.owner = false;
        let cases = [
            (json!({"path": "missing.txt"}), &ctx, "missing.txt: no such file or directory"),
            (json!({"path": "nexbot.db"}), &ctx, "nexbot.db: no such file or directory"),
            (json!({"path": "../telegram_7/theirs.txt"}), &ctx, "`..` is refused"),
            (json!({"path": "theirs"}), &ctx, "outside this chat's folder"),
            (json!({"path": "../outside.txt"}), &ctx, "`..` is refused"),
            (json!({"path": "/etc/passwd"}), &ctx, "absolute paths are refused"),
            (json!({"path": "escape"}), &ctx, "outside this chat's folder"),
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
            assert!(err.message().contains(why), "{args}: {err}");
        }
        // A good file reaches the channel (none runs here, and that is said with the path).
        let err = f.tool.call(json!({"path": "report.txt"}), &ctx).await.unwrap_err();
        assert!(err.message().starts_with("report.txt: not sent:"), "{err}");
    }
}
