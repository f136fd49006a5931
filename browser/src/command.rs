//! `/browser`: what this chat's browser keeps, and `/browser reset`, which forgets it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use nexbot_commands::{ChatCommand, CommandContext};
use nexbot_core::{BoxFuture, ChatRef};
use nexbot_mcp_host::McpServers;

use crate::{state_dir, DOWNLOADS_DIR, SERVER};

/// `/browser [reset]`, for the chat it is typed in (its own browser and profile only).
#[derive(Debug)]
pub struct BrowserCommand {
    mcp: Arc<McpServers>,
    /// Where the chats' rooms are (`<workspace>/chats`).
    rooms: PathBuf,
}

impl BrowserCommand {
    pub fn new(mcp: Arc<McpServers>, rooms: PathBuf) -> Self {
        Self { mcp, rooms }
    }

    fn room(&self, chat: &ChatRef) -> PathBuf {
        self.rooms.join(nexbot_tools::rooms::room_name(chat))
    }

    /// Stops the chat's browser, then removes its profile: an open browser would write it
    /// back.
    async fn reset(&self, chat: &ChatRef) -> String {
        let stopped = match self
            .mcp
            .stop_for_chat(SERVER, chat, "its chat reset it (/browser reset)")
            .await
        {
            Ok(stopped) => stopped,
            Err(e) => return format!("The browser could not be stopped: {e}"),
        };
        let state = state_dir(&self.room(chat));
        let removed = tokio::task::spawn_blocking(move || forget(&state)).await;
        match removed {
            Ok(Ok(0)) if !stopped => "This chat's browser keeps nothing: there was nothing to \
                                      forget."
                .to_owned(),
            Ok(Ok(files)) => format!(
                "Forgot this chat's browser: its cookies, logins, open tabs and history \
                 ({files} files){}. Its downloads stay in {DOWNLOADS_DIR}/.",
                if stopped { ", and stopped it" } else { "" }
            ),
            Ok(Err(e)) => {
                tracing::warn!(%chat, "/browser reset: {e}");
                format!("The browser's profile could not be removed: {e}")
            }
            Err(e) => format!("The browser's profile could not be removed: {e}"),
        }
    }

    fn status(&self, chat: &ChatRef) -> String {
        let state = state_dir(&self.room(chat));
        let (files, bytes) = measure(&state);
        let kept = match files {
            0 => "it keeps nothing yet".to_owned(),
            n => format!(
                "its profile (cookies, logins, history) is {n} files, {} KB",
                bytes.div_ceil(1024)
            ),
        };
        format!(
            "This chat's browser starts when the agent first uses it and stops after a while \
             without use; {kept}. Downloads land in {DOWNLOADS_DIR}/. /browser reset forgets \
             its logins."
        )
    }
}

impl ChatCommand for BrowserCommand {
    fn name(&self) -> &'static str {
        "browser"
    }

    fn summary(&self) -> &'static str {
        "this chat's web browser; /browser reset forgets its logins"
    }

    fn run<'a>(&'a self, ctx: CommandContext<'a>) -> BoxFuture<'a, String> {
        Box::pin(async move {
            match ctx.args {
                "" => self.status(ctx.chat),
                "reset" => self.reset(ctx.chat).await,
                other => format!("Unknown: /browser {other}. Try /browser or /browser reset."),
            }
        })
    }
}

/// Removes `dir` and what is in it; how many files it held.
fn forget(dir: &Path) -> std::io::Result<usize> {
    let (files, _) = measure(dir);
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(files),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(e),
    }
}

/// Files under `dir` (not following links) and their bytes.
fn measure(dir: &Path) -> (usize, u64) {
    let mut found = (0, 0);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&at) else { continue };
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else { continue };
            if kind.is_dir() {
                stack.push(entry.path());
            } else {
                found.0 += 1;
                found.1 += entry.metadata().map_or(0, |m| m.len());
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forgetting_counts_what_it_removed_and_a_missing_folder_is_nothing() {
        let dir =
            std::env::temp_dir().join(format!("nexbot-browser-forget-{}", std::process::id()));
        let profile = dir.join("profile/Default");
        std::fs::create_dir_all(&profile).unwrap();
        std::fs::write(profile.join("Cookies"), b"session=1").unwrap();
        std::fs::write(dir.join("profile/Local State"), b"{}").unwrap();
        assert_eq!(measure(&dir), (2, 11));
        assert_eq!(forget(&dir).unwrap(), 2);
        assert!(!dir.exists());
        assert_eq!(forget(&dir).unwrap(), 0);
    }
}
