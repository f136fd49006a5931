//! The agent's web browser: `[browser]`'s settings, the MCP server they make (Playwright's,
//! with Debian's Chromium, in a hardened container of each chat's own), and `/browser`.
//!
//! Why an MCP server and not a DevTools client of our own (issue 49, `docs/browser.md`): a
//! Rust DevTools client (`chromiumoxide`) speaks over a WebSocket, which needs a port, and was
//! not measured beside it; Playwright's MCP server gives the model what it needs (an accessibility
//! snapshot with element references, click and type by reference, tabs, waits, screenshots,
//! downloads) from a maintained project, drives Chromium over `--remote-debugging-pipe` (no
//! DevTools port anywhere), and through the existing MCP machinery gets every wall at once: a
//! container per chat started on first use and stopped when idle, the chat's room mounted (its
//! profile, so a login survives a restart, and its downloads), the egress proxy as its only
//! way out under the chat's own identity (`mcp:browser@<chat>`: the policy, the questions in
//! `ask` mode, the audit), results wrapped as data, `/stop` and deadlines, grants to delegated
//! tasks. This crate only says how that server runs and lets a person forget its profile.

mod command;
mod secrets;

use std::path::Path;

use nexbot_mcp::{ServerConfig, ServerLimits, ServerScope};
use serde::{Deserialize, Serialize};

pub use command::BrowserCommand;
pub use secrets::SecretTyping;

/// The MCP server's name: the model's tools are `mcp__browser__browser_navigate` and so on.
pub const SERVER: &str = "browser";
/// The image `make browser-image` builds: Node, Playwright's MCP server and Chromium.
pub const DEFAULT_IMAGE: &str = "nexbot-browser:dev";
/// Where the chat's room is in the browser's container.
pub const ROOM_MOUNT: &str = "/room";
/// The browser's own folder in a chat's room: its profile (cookies, local storage, logins)
/// and what it writes besides the downloads. `/browser reset` removes it.
pub const STATE_DIR: &str = ".browser";
/// Where the browser's downloads land in the chat's room.
pub const DOWNLOADS_DIR: &str = "downloads";
/// The program of the image that starts the server (`docker/browser/nexbot-browser.mjs`).
const LAUNCHER: &str = "nexbot-browser";
/// Its `/tmp` (Chromium's caches and shared files live there), MiB.
const TMP_MB: u64 = 256;

/// `[browser]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BrowserConfig {
    /// Off unless turned on: it needs the sandbox and `make browser-image`.
    pub enabled: bool,
    pub image: String,
    /// Chats besides the owner's that may use it (`telegram:ID`, `console:NAME`, or `*`).
    pub allowed_chats: Vec<String>,
    /// Each action's limit (open a page, click, wait for text), seconds.
    pub action_timeout_secs: u64,
    /// A chat's browser stops after this long without an action; its profile stays.
    pub idle_stop_secs: u64,
    /// How long its container gets to start and list its tools, seconds.
    pub start_timeout_secs: u64,
    /// Memory of a chat's browser container (Chromium and Node), MiB.
    pub memory_mb: u64,
    /// Processes and threads of a chat's browser container (Chromium runs dozens).
    pub pids: u64,
}

impl Default for BrowserConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            image: DEFAULT_IMAGE.to_owned(),
            allowed_chats: Vec::new(),
            action_timeout_secs: 90,
            idle_stop_secs: 600,
            start_timeout_secs: 60,
            memory_mb: 1024,
            pids: 512,
        }
    }
}

impl BrowserConfig {
    /// The MCP server that runs the browser, when it is on.
    pub fn server(&self) -> Option<ServerConfig> {
        self.enabled.then(|| ServerConfig {
            name: SERVER.to_owned(),
            command: Some(LAUNCHER.to_owned()),
            args: vec!["--room".to_owned(), ROOM_MOUNT.to_owned()],
            image: Some(self.image.clone()),
            url: None,
            headers: Default::default(),
            env: Default::default(),
            scope: ServerScope::Chat,
            room: Some(ROOM_MOUNT.to_owned()),
            allowed_chats: self.allowed_chats.clone(),
            call_timeout_secs: self.action_timeout_secs,
            idle_stop_secs: self.idle_stop_secs,
            start_timeout_secs: self.start_timeout_secs,
            limits: ServerLimits {
                memory_mb: Some(self.memory_mb),
                pids: Some(self.pids),
                tmp_mb: Some(TMP_MB),
            },
        })
    }

    /// What is wrong with the section, naming the key (`browser.memory_mb`), given the MCP
    /// servers the operator configured.
    pub fn problems(&self, servers: &[ServerConfig]) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        if !self.enabled {
            return problems;
        }
        if self.image.trim().is_empty() {
            problems.push(("browser.image", "empty".to_owned()));
        }
        if servers.iter().any(|s| s.name == SERVER) {
            problems.push((
                "browser.enabled",
                format!(
                    "an [[mcp.servers]] entry is already named {SERVER:?}; rename it, or leave \
                     the browser off"
                ),
            ));
        }
        if self.memory_mb < 256 {
            problems.push((
                "browser.memory_mb",
                format!("{} is below 256: Chromium does not start in less", self.memory_mb),
            ));
        }
        if self.pids < 64 {
            problems.push((
                "browser.pids",
                format!("{} is below 64: Chromium runs dozens of threads", self.pids),
            ));
        }
        // The rest (timeouts, allowed chats, limits' bounds) is the MCP server's own check.
        if let Some(server) = self.server() {
            let checked = nexbot_mcp::McpConfig { servers: vec![server] };
            if let Err(why) = checked.validate() {
                problems.push(("browser", why.replace("mcp.servers[0].", "")));
            }
        }
        problems
    }
}

/// The browser's own folder in the room at `room`.
pub fn state_dir(room: &Path) -> std::path::PathBuf {
    room.join(STATE_DIR)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_by_default_and_on_it_is_a_chat_scoped_server_with_the_room_and_room_to_run() {
        let config = BrowserConfig::default();
        assert!(config.server().is_none());
        assert!(config.problems(&[]).is_empty());
        let on = BrowserConfig { enabled: true, ..BrowserConfig::default() };
        let server = on.server().unwrap();
        assert_eq!(server.scope, ServerScope::Chat, "a browser per chat");
        assert_eq!(server.room.as_deref(), Some(ROOM_MOUNT));
        assert_eq!(server.command_line(), ["nexbot-browser", "--room", "/room"]);
        assert_eq!(server.image(), DEFAULT_IMAGE);
        assert_eq!(server.limits.memory_mb, Some(1024));
        assert!(server.env.is_empty(), "nothing in its environment but the proxy the host adds");
        assert!(on.problems(&[]).is_empty(), "{:?}", on.problems(&[]));
    }

    #[test]
    fn bad_settings_are_refused_naming_the_key() {
        let on = BrowserConfig { enabled: true, ..BrowserConfig::default() };
        let taken = on.server().unwrap();
        let keys = |config: &BrowserConfig, servers: &[ServerConfig]| -> Vec<String> {
            config.problems(servers).into_iter().map(|(key, why)| format!("{key}: {why}")).collect()
        };
        assert!(keys(&on, &[taken])[0].starts_with("browser.enabled: an [[mcp.servers]]"));
        let small = BrowserConfig { memory_mb: 64, pids: 16, ..on.clone() };
        let found = keys(&small, &[]);
        assert!(found.iter().any(|p| p.starts_with("browser.memory_mb: 64")), "{found:?}");
        assert!(found.iter().any(|p| p.starts_with("browser.pids: 16")), "{found:?}");
        let stuck = BrowserConfig { action_timeout_secs: 900, idle_stop_secs: 600, ..on.clone() };
        assert!(keys(&stuck, &[])[0].contains("idle_stop_secs"), "{:?}", keys(&stuck, &[]));
        let stranger = BrowserConfig { allowed_chats: vec!["nobody".into()], ..on };
        assert!(keys(&stranger, &[])[0].contains("allowed_chats"));
    }

    #[test]
    fn an_unknown_key_is_refused() {
        let err = serde_json::from_str::<BrowserConfig>(r#"{"enabled":true,"port":9222}"#);
        assert!(err.unwrap_err().to_string().contains("port"));
    }
}
