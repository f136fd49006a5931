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
    /// A remote server over Streamable HTTP (`http://` or `https://`), reached through the
    /// egress proxy like any destination (its policy, approvals and audit).
    #[serde(default)]
    pub url: Option<String>,
    /// Headers of every request to a remote server. A value may carry `{{secret:NAME}}`: an
    /// operator secret in proxy mode, filled in by the egress proxy where its binding allows
    /// (`nexbot-ctl secrets set NAME --operator --host HOST`); the host never sees the value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// The whole environment of a stdio server (visible to `docker inspect`: never a secret).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub scope: ServerScope,
    /// A stdio server with `scope = "chat"` may get its chat's room (the folder the chat's
    /// file tools work in) at this path in its container, read and written: e.g.
    /// `@modelcontextprotocol/server-filesystem` with `args = ["/room"]` and `room = "/room"`
    /// works on the chat's own files and nothing else. The probe that reads its tool list
    /// sees an empty folder there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub room: Option<String>,
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
    /// A stdio server's container limits where the pool's (`[subagent]`'s memory, processes
    /// and `/tmp`) do not fit it: a browser needs more. `limits = { memory_mb = 1024 }`.
    #[serde(default, skip_serializing_if = "ServerLimits::is_unset")]
    pub limits: ServerLimits,
}

/// `limits`: each replaces the pool's for this server's containers when set.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ServerLimits {
    /// Memory, MiB (no swap beyond it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    /// Processes and threads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<u64>,
    /// Its `/tmp`, MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmp_mb: Option<u64>,
}

impl ServerLimits {
    pub fn is_unset(&self) -> bool {
        *self == ServerLimits::default()
    }

    /// What is wrong with them, naming the field (`limits.memory_mb: ...`).
    fn check(&self) -> Result<(), String> {
        let within = |field: &str, value: Option<u64>, min: u64, max: u64| match value {
            Some(v) if v < min || v > max => {
                Err(format!("limits.{field}: {v} is not within {min}..={max}"))
            }
            _ => Ok(()),
        };
        within("memory_mb", self.memory_mb, 8, 1024 * 1024)?;
        within("pids", self.pids, 8, 1 << 22)?;
        within("tmp_mb", self.tmp_mb, 1, 1024 * 1024)
    }
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
pub enum ServerScope {
    /// One container per chat that uses it, stopped when idle: nothing one chat's calls leave
    /// in the server (files, memory, a session) reaches another chat.
    #[default]
    Chat,
    /// One container for every chat: for stateless servers the operator trusts across chats.
    Shared,
}

impl ServerScope {
    pub fn as_str(self) -> &'static str {
        match self {
            ServerScope::Chat => "chat",
            ServerScope::Shared => "shared",
        }
    }
}

impl ServerConfig {
    /// The stdio command line: the program, then its arguments.
    pub fn command_line(&self) -> Vec<String> {
        self.command.iter().cloned().chain(self.args.iter().cloned()).collect()
    }

    /// Whether it is a remote server (`url`), reached over Streamable HTTP.
    pub fn is_remote(&self) -> bool {
        self.url.is_some()
    }

    pub fn image(&self) -> &str {
        self.image.as_deref().unwrap_or(DEFAULT_IMAGE)
    }

    /// What to do when the engine has no [`ServerConfig::image`], for `doctor` and the
    /// degraded part `mcp` alike: build the bundled one, pull or build any other.
    pub fn missing_image_fix(&self) -> String {
        // The project's own images (`nexbot-mcp:dev`, `nexbot-browser:dev`) each have a make
        // target of that name.
        let image = self.image();
        match image.strip_prefix("nexbot-").and_then(|rest| rest.strip_suffix(":dev")) {
            Some(kind) if kind.chars().all(|c| c.is_ascii_lowercase()) => {
                format!("build it with `make {kind}-image`")
            }
            _ => format!("pull or build {image} on the engine"),
        }
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
                (Some(_), None) => {
                    if server.room.is_some() && server.scope != ServerScope::Chat {
                        problems.push(format!(
                            "{at}.room: a shared server serves every chat, so it gets no chat's \
                             room; set scope = \"chat\" (one container per chat)"
                        ));
                    }
                    if !server.headers.is_empty() {
                        problems.push(format!(
                            "{at}.headers: only a remote server (url) sends headers; a stdio \
                             server's settings go in env"
                        ));
                    }
                }
                (None, Some(url)) => problems.extend(
                    check_remote(server)
                        .err()
                        .map(|why| format!("{at}.{why}"))
                        .into_iter()
                        .chain(check_url(url).err().map(|why| format!("{at}.url: {why}"))),
                ),
                (Some(_), Some(_)) => {
                    problems.push(format!("{at}: set command (stdio) or url (remote), not both"))
                }
                (None, None) => problems.push(format!(
                    "{at}: set command (a stdio server, run in its own container) or url (a \
                     remote server over Streamable HTTP)"
                )),
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
            if let Err(why) = server.limits.check() {
                problems.push(format!("{at}.{why}"));
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

/// What a remote server may not set (it runs no container), or a bad header; the field first.
fn check_remote(server: &ServerConfig) -> Result<(), String> {
    if !server.args.is_empty()
        || server.image.is_some()
        || !server.env.is_empty()
        || server.room.is_some()
        || !server.limits.is_unset()
    {
        return Err(
            "url: a remote server runs no container; drop args, image, env, room and limits".into(),
        );
    }
    for (name, value) in &server.headers {
        let Ok(header) = http::HeaderName::from_bytes(name.as_bytes()) else {
            return Err(format!("headers: {name:?} is not an HTTP header name"));
        };
        if RESERVED_HEADERS.contains(&header.as_str()) {
            return Err(format!(
                "headers: {name} is the MCP client's or the proxy's own; it cannot be set"
            ));
        }
        if http::HeaderValue::from_str(value).is_err() {
            return Err(format!("headers.{name}: not a valid header value"));
        }
    }
    Ok(())
}

/// Headers the transport or the proxy sets itself.
const RESERVED_HEADERS: &[&str] = &[
    "accept",
    "content-type",
    "content-length",
    "host",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
    "proxy-authorization",
    "connection",
    "transfer-encoding",
];

fn check_url(url: &str) -> Result<(), String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("{url:?} is not a URL ({e})"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err(format!("{url:?} must start with http:// or https://"));
    }
    match uri.authority() {
        None => Err(format!("{url:?} names no host")),
        Some(authority) if authority.as_str().contains('@') => {
            Err(format!("{url:?}: put credentials in headers, not in the URL"))
        }
        Some(_) => Ok(()),
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
        assert_eq!(server.scope, ServerScope::Chat);
        assert_eq!(server.image(), DEFAULT_IMAGE);
        assert_eq!(server.command_line(), ["mcp-server-everything", "stdio"]);
        let other = "telegram:7".parse::<ChatRef>().unwrap();
        assert!(server.allows(&other, true));
        assert!(!server.allows(&other, false));
    }

    #[test]
    fn a_server_may_have_limits_of_its_own() {
        let config = parse(r#"{"mcp":{"servers":[{"name":"b","command":"x","limits":{"memory_mb":1024,"pids":512}}]}}"#).unwrap();
        let limits = config.servers[0].limits;
        assert_eq!((limits.memory_mb, limits.pids, limits.tmp_mb), (Some(1024), Some(512), None));
        let unset = parse(r#"{"mcp":{"servers":[{"name":"b","command":"x"}]}}"#).unwrap();
        assert!(unset.servers[0].limits.is_unset());
    }

    #[test]
    fn a_missing_image_of_the_projects_own_is_built_by_its_make_target() {
        let mut server: ServerConfig = toml_like(r#"{"name":"b","command":"x"}"#).unwrap();
        assert_eq!(server.missing_image_fix(), "build it with `make mcp-image`");
        server.image = Some("nexbot-browser:dev".into());
        assert_eq!(server.missing_image_fix(), "build it with `make browser-image`");
        server.image = Some("ghcr.io/x/y:1".into());
        assert_eq!(server.missing_image_fix(), "pull or build ghcr.io/x/y:1 on the engine");
    }

    #[test]
    fn a_chat_scoped_stdio_server_may_get_its_chats_room() {
        let config = parse(r#"{"mcp":{"servers":[{"name":"files","command":"mcp-server-filesystem","args":["/room"],"room":"/room"}]}}"#).unwrap();
        assert_eq!(config.servers[0].room.as_deref(), Some("/room"));
    }

    /// Who a server runs as is the daemon's choice, never the config's (never root: the
    /// daemon's own user, or the pool's for a root daemon), so `user` is refused as unknown.
    #[test]
    fn a_servers_user_cannot_be_set() {
        for user in ["0", "0:0", "1000:1000"] {
            let json = format!(
                r#"{{"mcp":{{"servers":[{{"name":"files","command":"x","room":"/room","user":"{user}"}}]}}}}"#
            );
            assert!(parse(&json).unwrap_err().contains("user"), "{user}");
        }
    }

    #[test]
    fn a_remote_server_has_a_url_and_headers() {
        let config = parse(r#"{"mcp":{"servers":[{"name":"gh","url":"https://api.example.com/mcp","headers":{"Authorization":"Bearer {{secret:GH_TOKEN}}"},"scope":"shared"}]}}"#).unwrap();
        let server = &config.servers[0];
        assert!(server.is_remote());
        assert_eq!(server.headers["Authorization"], "Bearer {{secret:GH_TOKEN}}");
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
            (r#"[{"name":"a","url":"ftp://example.com/mcp"}]"#, "mcp.servers[0].url"),
            (r#"[{"name":"a","url":"https://u:p@example.com/"}]"#, "not in the URL"),
            (r#"[{"name":"a","url":"https://x/","image":"i"}]"#, "runs no container"),
            (r#"[{"name":"a","url":"https://x/","headers":{"Accept":"x"}}]"#, "own"),
            (r#"[{"name":"a","url":"https://x/","headers":{"a b":"x"}}]"#, "header name"),
            (r#"[{"name":"a","url":"https://x/","headers":{"X":"a\nb"}}]"#, "headers.X"),
            (r#"[{"name":"a","command":"x","headers":{"X":"y"}}]"#, "only a remote"),
            (r#"[{"name":"a","url":"https://x/","room":"/room"}]"#, "runs no container"),
            (r#"[{"name":"a","command":"x","room":"/room","scope":"shared"}]"#, "no chat's room"),
            (r#"[{"name":"a","command":"x","allowed_chats":["nope"]}]"#, "allowed_chats"),
            (r#"[{"name":"a","command":"x","call_timeout_secs":0}]"#, "call_timeout_secs"),
            (r#"[{"name":"a","command":"x","idle_stop_secs":60}]"#, "longer than call_timeout"),
            (r#"[{"name":"a","command":"x","limits":{"memory_mb":4}}]"#, "limits.memory_mb"),
            (r#"[{"name":"a","command":"x","limits":{"pids":2}}]"#, "limits.pids"),
            (r#"[{"name":"a","command":"x","limits":{"tmp_mb":0}}]"#, "limits.tmp_mb"),
            (r#"[{"name":"a","command":"x","limits":{"cpus":2}}]"#, "cpus"),
            (r#"[{"name":"a","url":"https://x/","limits":{"pids":64}}]"#, "runs no container"),
        ] {
            let err = parse(&format!(r#"{{"mcp":{{"servers":{json}}}}}"#)).unwrap_err();
            assert!(err.contains(expect), "{json}: {err}");
        }
        let err = parse(r#"{"mcp":{"servers":[{"name":"a","command":"x","bogus":1}]}}"#);
        assert!(err.unwrap_err().contains("bogus"));
    }
}
