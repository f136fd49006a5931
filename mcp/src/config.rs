//! `[[mcp.servers]]`: which MCP servers the agent may use, how each runs, and who may use it.

use std::collections::BTreeMap;

use nexbot_core::ChatRef;
use serde::{Deserialize, Serialize};

/// The image stdio servers run in unless a server names another: Node and the reference
/// servers, installed when the image is built (`make mcp-image`; nothing is fetched at run time).
pub const DEFAULT_IMAGE: &str = "nexbot-mcp:dev";
/// A call's limit unless the server sets one.
pub const DEFAULT_CALL_TIMEOUT_SECS: u64 = 120;
/// A chat's server container stops after this long without a call.
pub const DEFAULT_IDLE_STOP_SECS: u64 = 600;
/// How long a server gets to start and answer `initialize`.
pub const DEFAULT_START_TIMEOUT_SECS: u64 = 60;
/// Server names are this long at most: `mcp__<server>__<tool>` must fit the 64 characters of
/// a function name.
pub const MAX_SERVER_NAME: usize = 24;

/// `[mcp]`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct McpConfig {
    /// Written as `[[mcp.servers]]` tables (none: nothing written, so a generated file's
    /// `[mcp]` takes the operator's `[[mcp.servers]]` below it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub servers: Vec<ServerConfig>,
}

/// One `[[mcp.servers]]` entry.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Letters, digits, `-` and `_` (no `__`); the tools are `mcp__<name>__<tool>`.
    pub name: String,
    /// A stdio server: the program, run as the main process of its own container.
    #[serde(default)]
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    /// The image of a stdio server's container ([`DEFAULT_IMAGE`] when unset).
    #[serde(default)]
    pub image: Option<String>,
    /// A remote server over Streamable HTTP (not built yet: refused with that said).
    #[serde(default)]
    pub url: Option<String>,
    /// The whole environment of a stdio server (visible to `docker inspect`: never a secret).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub scope: Scope,
    /// Chats other than the owner's that may use it (`telegram:123`, `console:name`; `*` is
    /// every chat). The owner's chats may always.
    #[serde(default)]
    pub allowed_chats: Vec<String>,
    #[serde(default = "default_call_timeout")]
    pub call_timeout_secs: u64,
    #[serde(default = "default_idle_stop")]
    pub idle_stop_secs: u64,
    #[serde(default = "default_start_timeout")]
    pub start_timeout_secs: u64,
}

fn default_call_timeout() -> u64 {
    DEFAULT_CALL_TIMEOUT_SECS
}
fn default_idle_stop() -> u64 {
    DEFAULT_IDLE_STOP_SECS
}
fn default_start_timeout() -> u64 {
    DEFAULT_START_TIMEOUT_SECS
}

/// Whose a server's container is.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// One container per chat that uses it, stopped when idle: nothing one chat's calls leave
    /// in the server (files, memory, a session) reaches another chat.
    #[default]
    Chat,
    /// One container for every chat: for stateless servers the operator trusts across chats.
    Shared,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Chat => "chat",
            Scope::Shared => "shared",
        }
    }
}

impl ServerConfig {
    /// The stdio command line: the program, then its arguments.
    pub fn command_line(&self) -> Vec<String> {
        self.command.iter().cloned().chain(self.args.iter().cloned()).collect()
    }

    pub fn image(&self) -> &str {
        self.image.as_deref().unwrap_or(DEFAULT_IMAGE)
    }

    /// Whether `chat` may use this server (`owner`: the chat is the owner's).
    pub fn allows(&self, chat: &ChatRef, owner: bool) -> bool {
        owner || self.allowed_chats.iter().any(|c| c == "*" || *c == chat.to_string())
    }
}

impl McpConfig {
    /// Every problem of the section, each naming the field (`mcp.servers[0].name: ...`).
    pub fn validate(&self) -> Result<(), String> {
        let mut problems = Vec::new();
        for (i, server) in self.servers.iter().enumerate() {
            let at = format!("mcp.servers[{i}]");
            if let Err(why) = check_name(&server.name) {
                problems.push(format!("{at}.name: {why}"));
            }
            if self.servers[..i].iter().any(|s| s.name == server.name) {
                problems.push(format!("{at}.name: {:?} is used twice", server.name));
            }
            match (&server.command, &server.url) {
                (Some(command), None) if command.trim().is_empty() => {
                    problems.push(format!("{at}.command: empty"))
                }
                (Some(_), None) => {}
                (None, Some(_)) => problems.push(format!(
                    "{at}.url: remote MCP servers (Streamable HTTP) are not supported yet; run \
                     the server as a stdio server (command, args, image) instead"
                )),
                (Some(_), Some(_)) => {
                    problems.push(format!("{at}: set command (stdio) or url (remote), not both"))
                }
                (None, None) => problems
                    .push(format!("{at}: set command (a stdio server, run in its own container)")),
            }
            for chat in &server.allowed_chats {
                if chat != "*" && chat.parse::<ChatRef>().is_err() {
                    problems.push(format!(
                        "{at}.allowed_chats: {chat:?} is not a chat (telegram:ID, console:NAME \
                         or *)"
                    ));
                }
            }
            for (field, value) in [
                ("call_timeout_secs", server.call_timeout_secs),
                ("start_timeout_secs", server.start_timeout_secs),
            ] {
                if value == 0 || value > 3600 {
                    problems.push(format!("{at}.{field}: {value} is not within 1..=3600"));
                }
            }
            if server.idle_stop_secs <= server.call_timeout_secs {
                problems.push(format!(
                    "{at}.idle_stop_secs: {} must be longer than call_timeout_secs ({}), or an \
                     idle stop could end a call",
                    server.idle_stop_secs, server.call_timeout_secs
                ));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }

    pub fn server(&self, name: &str) -> Option<&ServerConfig> {
        self.servers.iter().find(|s| s.name == name)
    }
}

fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_SERVER_NAME {
        return Err(format!("{name:?} must be 1 to {MAX_SERVER_NAME} characters"));
    }
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        return Err(format!("{name:?} may hold only letters, digits, - and _"));
    }
    if name.contains("__") || name.starts_with('_') || name.ends_with('_') {
        return Err(format!(
            "{name:?}: `__` separates it from its tools' names in mcp__server__tool"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<McpConfig, String> {
        #[derive(Deserialize)]
        struct Root {
            mcp: McpConfig,
        }
        let root: Root = toml_like(text)?;
        root.mcp.validate()?;
        Ok(root.mcp)
    }

    /// The tests read JSON: this crate has no TOML parser (the host's config has).
    fn toml_like<T: serde::de::DeserializeOwned>(json: &str) -> Result<T, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn a_stdio_server_has_defaults_and_the_owner_always_may() {
        let config = parse(r#"{"mcp":{"servers":[{"name":"everything","command":"mcp-server-everything","args":["stdio"]}]}}"#).unwrap();
        let server = &config.servers[0];
        assert_eq!(server.scope, Scope::Chat);
        assert_eq!(server.image(), DEFAULT_IMAGE);
        assert_eq!(server.command_line(), ["mcp-server-everything", "stdio"]);
        let other = "telegram:7".parse::<ChatRef>().unwrap();
        assert!(server.allows(&other, true));
        assert!(!server.allows(&other, false));
    }

    #[test]
    fn allowed_chats_name_chats_or_every_chat() {
        let config = parse(r#"{"mcp":{"servers":[{"name":"a","command":"x","allowed_chats":["telegram:7"]},{"name":"b","command":"x","allowed_chats":["*"]}]}}"#).unwrap();
        let seven = "telegram:7".parse::<ChatRef>().unwrap();
        let eight = "telegram:8".parse::<ChatRef>().unwrap();
        assert!(config.servers[0].allows(&seven, false));
        assert!(!config.servers[0].allows(&eight, false));
        assert!(config.servers[1].allows(&eight, false));
    }

    #[test]
    fn bad_servers_are_refused_naming_the_field() {
        for (json, expect) in [
            (r#"[{"name":"a__b","command":"x"}]"#, "mcp.servers[0].name"),
            (r#"[{"name":"a b","command":"x"}]"#, "mcp.servers[0].name"),
            (r#"[{"name":"a","command":"x"},{"name":"a","command":"y"}]"#, "used twice"),
            (r#"[{"name":"a"}]"#, "set command"),
            (r#"[{"name":"a","url":"https://example.com/mcp"}]"#, "not supported yet"),
            (r#"[{"name":"a","command":"x","allowed_chats":["nope"]}]"#, "allowed_chats"),
            (r#"[{"name":"a","command":"x","call_timeout_secs":0}]"#, "call_timeout_secs"),
            (r#"[{"name":"a","command":"x","idle_stop_secs":60}]"#, "longer than call_timeout"),
        ] {
            let err = parse(&format!(r#"{{"mcp":{{"servers":{json}}}}}"#)).unwrap_err();
            assert!(err.contains(expect), "{json}: {err}");
        }
        let err = parse(r#"{"mcp":{"servers":[{"name":"a","command":"x","bogus":1}]}}"#);
        assert!(err.unwrap_err().contains("bogus"));
    }
}
