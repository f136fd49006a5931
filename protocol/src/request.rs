//! Requests from the host to a subagent, and the checks every request must pass before it is
//! acted on (version, required fields, deadline, secrets).

use std::fmt;

use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use thiserror::Error;

use crate::mcp::{self, McpAnswer, McpToolSpec};
use crate::secrets::{SecretMap, SecretsError};
use crate::version::{negotiate, VersionError, VersionStatus};

/// The `type` of a request. Unknown types are kept so that the answer can name them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum RequestType {
    #[default]
    Ping,
    Execute,
    Cancel,
    /// The host's answer to a task's `mcp_call` (`docs/protocol.md#mcp-tools`). Additive.
    McpResult,
    /// One chunk of a file for the next task's scratch (`docs/protocol-files.md#files`). Additive.
    PutFile,
    Unknown(String),
}

impl RequestType {
    pub fn as_str(&self) -> &str {
        match self {
            Self::Ping => "ping",
            Self::Execute => "execute",
            Self::Cancel => "cancel",
            Self::McpResult => "mcp_result",
            Self::PutFile => "put_file",
            Self::Unknown(other) => other,
        }
    }
}

impl Serialize for RequestType {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for RequestType {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        Ok(match name.as_str() {
            "ping" => Self::Ping,
            "execute" => Self::Execute,
            "cancel" => Self::Cancel,
            "mcp_result" => Self::McpResult,
            "put_file" => Self::PutFile,
            _ => Self::Unknown(name),
        })
    }
}

/// One request line, with the spec's field names. Optional fields that are absent stay absent
/// when serialized, so a minimal 1.0 request (`docs/protocol-history.md#examples`) round-trips
/// unchanged.
#[derive(Clone, Default, Serialize, Deserialize)]
pub struct Request {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    #[serde(rename = "type")]
    pub kind: RequestType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// Soft limit for the task, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
    /// Unix seconds after which the request must not start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secrets: Option<SecretMap>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_opt_secret"
    )]
    pub llm_api_key: Option<SecretString>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm_base_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm_model: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_opt_secret"
    )]
    pub llm_token: Option<SecretString>,
    /// The task's egress credential (`nxp_…`): the subagent presents it to the host's egress
    /// proxy (`Proxy-Authorization: Basic`, user `task`) for every request of this task, its
    /// own and those of the commands it runs, so the proxy serves a request only in the name
    /// of the task that sent it. Issued when the task starts, dead when it ends. Additive
    /// (`docs/protocol.md#requests`); not remembered.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_opt_secret"
    )]
    pub egress_token: Option<SecretString>,
    /// The model's context window in tokens, when the host knows it: the subagent fits its
    /// conversation into it before every call (default 32,768). Additive; not remembered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm_context_window: Option<u32>,
    /// Secrets the host's egress proxy fills in, by name and bound hosts; their values never
    /// enter the container. `http_request` sends a request that uses one to the proxy in
    /// absolute form with the placeholder `{{secret:NAME}}` ([`PROXY_PLACEHOLDER`]).
    /// Additive (`docs/protocol-files.md#secrets`); not remembered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_secrets: Option<Vec<ProxySecret>>,
    /// The search backend `search_web` queries (the operator's `[search]`). Additive
    /// (`docs/protocol.md#requests`); absent: `search_web` says it is not configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search_backend: Option<SearchBackend>,
    /// How many commands the subagent's blocked-pattern screen may refuse in this task before
    /// the task is ended ([`DEFAULT_MAX_BLOCKED_COMMANDS`] when absent or 0): a model that keeps
    /// probing the screen is following an injected instruction, not the task. Additive; not
    /// remembered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_blocked_commands: Option<u32>,
    /// The task is one call of this tool, with the task text as its argument, and no agent
    /// loop of the subagent's own: `use_cli` (whose CLI has its loop), which the host uses for
    /// a chat whose agent mode is off, and `run_command` (the text is the command), which the
    /// owner's self-test uses. The tool must be among the granted ones. Additive; an older
    /// subagent ignores it and runs its loop with the tool granted, and one without
    /// `run_command` here refuses it naming the tools it runs directly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_tool: Option<String>,
    /// How many search and fetch calls the task may make ([`search_budget`]: absent or 0 means
    /// [`DEFAULT_SEARCH_BUDGET`], at most [`MAX_SEARCH_BUDGET`]); the next one is refused and
    /// the model told to answer with what it has. Additive; an older subagent has no budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search_budget: Option<u32>,
    /// The MCP tools the task may call besides its own (the delegating chat's, only those the
    /// delegation granted): offered to the model; each call goes to the host as an `mcp_call`.
    /// Additive (`docs/protocol.md#mcp-tools`); an older subagent ignores it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_tools: Option<Vec<McpToolSpec>>,
    /// `mcp_result`: the `call_id` of the `mcp_call` it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// `mcp_result`: the call's result, as the model reads it (exactly one of `result` and
    /// `error`; see [`Request::mcp_answer`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// `mcp_result`: why the call has no result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `ping`: answer with a bare `pong`, without `capabilities` (the image's tool and program
    /// lists, 2.5 KB to write, carry and parse): the health pings' form; the host asks for the
    /// lists once, when it reads them. Additive; an older subagent sends them anyway.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub brief: bool,
    /// `put_file`: the file's plain name in the task's scratch folder
    /// ([`crate::files::check_file_name`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `put_file`: where this chunk starts in the file (the bytes that came before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// `put_file`: the whole file's size in bytes (the same on every chunk).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// `put_file`: the chunk's bytes, base64 (standard alphabet, padded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// `execute`: the files put for this task (`put_file` with its `id`), by name: they are
    /// in its scratch folder when it starts and its model is told so. Additive
    /// (`docs/protocol-files.md#files`); an older subagent ignores it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<Vec<String>>,
    /// `execute`: the host takes files back with the answer: the model gets the
    /// `return_file` tool, and what it returns comes back as `file` lines before a
    /// `success` that names them. Additive; an older subagent ignores it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub return_files: Option<bool>,
    /// `execute`: content hashes (`sha256:…`) of skills the operator allowed despite the
    /// content screen since the container started (`nexbot-ctl skills allow` or the
    /// dashboard), added to the image's `NEXBOT_SKILLS_ALLOW` for this task. Additive; an
    /// older subagent ignores it (and keeps refusing those skills).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skills_allow: Option<Vec<String>>,
}

/// The block limit of a task whose request names none ([`Request::max_blocked_commands`]).
pub const DEFAULT_MAX_BLOCKED_COMMANDS: u32 = 3;

/// The block limit a request asks for: its `max_blocked_commands`, absent or 0 meaning the
/// default.
pub fn block_limit(requested: Option<u32>) -> u32 {
    requested.filter(|n| *n > 0).unwrap_or(DEFAULT_MAX_BLOCKED_COMMANDS)
}

/// The search budget of a task whose request names none ([`Request::search_budget`]): room
/// for a few searches and the pages they lead to (the bundled `web-research` skill fetches at
/// most 8 pages).
pub const DEFAULT_SEARCH_BUDGET: u32 = 20;
/// The largest search budget a request may ask for; more is cut to it.
pub const MAX_SEARCH_BUDGET: u32 = 100;

/// The search budget a request asks for: its `search_budget`, absent or 0 meaning the default,
/// at most [`MAX_SEARCH_BUDGET`].
pub fn search_budget(requested: Option<u32>) -> u32 {
    requested.filter(|n| *n > 0).unwrap_or(DEFAULT_SEARCH_BUDGET).min(MAX_SEARCH_BUDGET)
}

/// Where `search_web` sends its queries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchBackend {
    /// `searxng` (a SearXNG instance's JSON API) or `brave` (the Brave Search API).
    pub kind: String,
    /// The backend's search endpoint, e.g. `http://searxng:8080/search`.
    pub url: String,
    /// The proxy-mode secret (one of `proxy_secrets`) that holds the backend's API key; the
    /// subagent sends its placeholder and the egress proxy fills it in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_secret: Option<String>,
}

/// The tools an `execute` may run directly ([`Request::run_tool`]).
pub const DIRECT_TOOLS: &[&str] = &["use_cli", "run_command"];

/// A secret the egress proxy fills in for its hosts (`Request::proxy_secrets`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProxySecret {
    pub name: String,
    /// The bindings the value may be sent to, as the egress writes them
    /// (`https://api.github.com:443 header:authorization`: scheme, host, port, the places in
    /// the request), or a bare host pattern (a legacy binding: anywhere in its requests).
    pub hosts: Vec<String>,
}

/// The placeholder of a proxy-mode secret as it goes to the egress proxy: `{{secret:NAME}}`.
pub fn proxy_placeholder(name: &str) -> String {
    format!("{{{{secret:{name}}}}}")
}

/// [`proxy_placeholder`]'s form, for documentation.
pub const PROXY_PLACEHOLDER: &str = "{{secret:NAME}}";

impl fmt::Debug for Request {
    /// Secrets and keys show as present/absent (names only for secrets), never as values.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Request")
            .field("version", &self.version)
            .field("id", &self.id)
            .field("correlation_id", &self.correlation_id)
            .field("kind", &self.kind)
            .field("task", &self.task)
            .field("context", &self.context)
            .field("tools", &self.tools)
            .field("timeout", &self.timeout)
            .field("deadline", &self.deadline)
            .field("secrets", &self.secrets)
            .field("llm_api_key", &self.llm_api_key.as_ref().map(|_| "[set]"))
            .field("llm_base_url", &self.llm_base_url)
            .field("llm_model", &self.llm_model)
            .field("llm_token", &self.llm_token.as_ref().map(|_| "[set]"))
            .field("egress_token", &self.egress_token.as_ref().map(|_| "[set]"))
            .field("llm_context_window", &self.llm_context_window)
            .field("proxy_secrets", &self.proxy_secrets)
            .field("search_backend", &self.search_backend)
            .field("max_blocked_commands", &self.max_blocked_commands)
            .field("run_tool", &self.run_tool)
            .field("search_budget", &self.search_budget)
            .field("mcp_tools", &self.mcp_tools.as_ref().map(|t| mcp_names(t)))
            .field("brief", &self.brief)
            .field("call_id", &self.call_id)
            .field("result", &self.result.as_ref().map(|r| format!("{} bytes", r.len())))
            .field("error", &self.error.as_ref().map(|e| format!("{} bytes", e.len())))
            .field("name", &self.name)
            .field("offset", &self.offset)
            .field("size", &self.size)
            .field("data", &self.data.as_ref().map(|d| format!("{} base64 bytes", d.len())))
            .field("files", &self.files)
            .field("return_files", &self.return_files)
            .field("skills_allow", &self.skills_allow)
            .finish()
    }
}

/// Why a request was refused. Carries what could be read of the request so the error
/// response can echo its `id` and `correlation_id`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{kind}")]
pub struct RequestError {
    pub id: String,
    pub correlation_id: Option<String>,
    pub kind: RequestErrorKind,
}

/// The reason behind a [`RequestError`]; its `Display` is the text sent back to the host.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RequestErrorKind {
    #[error(transparent)]
    Version(#[from] VersionError),
    #[error("unknown request type: {0}")]
    UnknownType(String),
    #[error("missing field: {0}")]
    MissingField(&'static str),
    #[error("request expired")]
    Expired,
    #[error("secrets validation: {0}")]
    Secrets(#[from] SecretsError),
    #[error("{0}")]
    ProxySecret(String),
    #[error("mcp tool {0:?}: {1}")]
    McpTool(String, &'static str),
    #[error("mcp_result needs exactly one of result and error")]
    McpAnswer,
    #[error("{0}")]
    File(String),
}

impl Request {
    pub fn ping(id: impl Into<String>) -> Self {
        Self {
            version: crate::PROTOCOL_VERSION.to_owned(),
            id: id.into(),
            kind: RequestType::Ping,
            ..Self::default()
        }
    }

    /// A [`Request::ping`] answered by a bare `pong` ([`Request::brief`]): the health pings.
    pub fn brief_ping(id: impl Into<String>) -> Self {
        Self { brief: true, ..Self::ping(id) }
    }

    pub fn execute(id: impl Into<String>, task: impl Into<String>) -> Self {
        Self {
            version: crate::PROTOCOL_VERSION.to_owned(),
            id: id.into(),
            kind: RequestType::Execute,
            task: Some(task.into()),
            ..Self::default()
        }
    }

    pub fn cancel(id: impl Into<String>) -> Self {
        Self {
            version: crate::PROTOCOL_VERSION.to_owned(),
            id: id.into(),
            kind: RequestType::Cancel,
            ..Self::default()
        }
    }

    /// The host's `answer` to call `call_id` of task `task_id`.
    pub fn mcp_result(
        task_id: impl Into<String>,
        call_id: impl Into<String>,
        answer: McpAnswer,
    ) -> Self {
        let (result, error) = match answer {
            McpAnswer::Result(text) => (Some(text), None),
            McpAnswer::Error(text) => (None, Some(text)),
        };
        Self {
            version: crate::PROTOCOL_VERSION.to_owned(),
            id: task_id.into(),
            kind: RequestType::McpResult,
            call_id: Some(call_id.into()),
            result,
            error,
            ..Self::default()
        }
    }

    /// One chunk of `name` (`size` bytes in all) for task `task_id`'s scratch: `data` is the
    /// base64 of the bytes at `offset` ([`crate::TaskFile::chunks`]).
    pub fn put_file(
        task_id: impl Into<String>,
        name: impl Into<String>,
        offset: u64,
        size: u64,
        data: String,
    ) -> Self {
        Self {
            version: crate::PROTOCOL_VERSION.to_owned(),
            id: task_id.into(),
            kind: RequestType::PutFile,
            name: Some(name.into()),
            offset: Some(offset),
            size: Some(size),
            data: Some(data),
            ..Self::default()
        }
    }

    /// An `mcp_result`'s answer: its `result` or its `error` (`None` unless exactly one is
    /// there, which [`Request::validate`] refuses).
    pub fn mcp_answer(&self) -> Option<McpAnswer> {
        match (&self.result, &self.error) {
            (Some(text), None) => Some(McpAnswer::Result(text.clone())),
            (None, Some(text)) => Some(McpAnswer::Error(text.clone())),
            _ => None,
        }
    }

    /// Runs every check the spec puts on a request before it is acted on, in the order a
    /// peer would want to hear about them: version, type, required fields, deadline, secrets.
    /// `now_unix` is the current time in unix seconds (see [`unix_now`]).
    pub fn validate(&self, now_unix: i64) -> Result<VersionStatus, RequestError> {
        let fail = |kind: RequestErrorKind| RequestError {
            id: self.id.clone(),
            correlation_id: self.correlation_id.clone(),
            kind,
        };
        let status = negotiate(&self.version).map_err(|e| fail(e.into()))?;
        match &self.kind {
            RequestType::Unknown(name) => {
                return Err(fail(RequestErrorKind::UnknownType(name.clone())))
            }
            RequestType::Ping => return Ok(status),
            RequestType::Execute
            | RequestType::Cancel
            | RequestType::McpResult
            | RequestType::PutFile
                if self.id.is_empty() =>
            {
                return Err(fail(RequestErrorKind::MissingField("id")))
            }
            RequestType::Cancel => return Ok(status),
            RequestType::McpResult => {
                if self.call_id.as_deref().is_none_or(str::is_empty) {
                    return Err(fail(RequestErrorKind::MissingField("call_id")));
                }
                if self.mcp_answer().is_none() {
                    return Err(fail(RequestErrorKind::McpAnswer));
                }
                return Ok(status);
            }
            RequestType::PutFile => {
                let name =
                    self.name.as_deref().ok_or(fail(RequestErrorKind::MissingField("name")))?;
                crate::files::check_file_name(name).map_err(|e| fail(RequestErrorKind::File(e)))?;
                for (field, missing) in [
                    ("offset", self.offset.is_none()),
                    ("size", self.size.is_none()),
                    ("data", self.data.is_none()),
                ] {
                    if missing {
                        return Err(fail(RequestErrorKind::MissingField(field)));
                    }
                }
                return Ok(status);
            }
            RequestType::Execute => {}
        }
        if self.task.as_deref().is_none_or(|t| t.trim().is_empty()) {
            return Err(fail(RequestErrorKind::MissingField("task")));
        }
        if self.deadline.is_some_and(|d| d > 0 && d < now_unix) {
            return Err(fail(RequestErrorKind::Expired));
        }
        if let Some(secrets) = &self.secrets {
            secrets.validate().map_err(|e| fail(e.into()))?;
        }
        for proxied in self.proxy_secrets.iter().flatten() {
            let problem = if !crate::secrets::is_valid_secret_name(&proxied.name) {
                Some("its name is not [A-Z_][A-Z0-9_]*")
            } else if proxied.hosts.is_empty() {
                Some("it is bound to no host")
            } else if self.secrets.as_ref().is_some_and(|s| s.get(&proxied.name).is_some()) {
                Some("it is also in `secrets`")
            } else {
                None
            };
            if let Some(problem) = problem {
                return Err(fail(RequestErrorKind::ProxySecret(format!(
                    "proxy secret {:?}: {problem}",
                    proxied.name
                ))));
            }
        }
        if let Some(specs) = &self.mcp_tools {
            mcp::check_specs(specs)
                .map_err(|(name, why)| fail(RequestErrorKind::McpTool(name, why)))?;
        }
        if let Some(files) = &self.files {
            if files.len() > crate::files::MAX_FILES {
                return Err(fail(RequestErrorKind::File(format!(
                    "a task takes at most {} files, not {}",
                    crate::files::MAX_FILES,
                    files.len()
                ))));
            }
            for (i, name) in files.iter().enumerate() {
                crate::files::check_file_name(name).map_err(|e| fail(RequestErrorKind::File(e)))?;
                if files[..i].contains(name) {
                    return Err(fail(RequestErrorKind::File(format!(
                        "file {name:?} is named twice"
                    ))));
                }
            }
        }
        Ok(status)
    }
}

/// The names of `specs`, for `Debug` (descriptions and schemas are long).
fn mcp_names(specs: &[McpToolSpec]) -> Vec<&str> {
    specs.iter().map(|s| s.name.as_str()).collect()
}

/// Current unix time in seconds, as [`Request::validate`] wants it.
pub use nexbot_core::unix_now;

/// Serializes an optional secret string as its plain value: for wire fields such as
/// `llm_api_key` whose whole purpose is to carry a secret to the peer.
fn serialize_opt_secret<S: Serializer>(
    value: &Option<SecretString>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match value {
        Some(secret) => serializer.serialize_some(secret.expose_secret()),
        None => serializer.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use secrecy::ExposeSecret;

    fn parse(json: &str) -> Request {
        serde_json::from_str(json).expect(json)
    }

    #[test]
    fn a_brief_ping_says_so_on_the_wire_and_a_plain_one_does_not() {
        let brief = serde_json::to_string(&Request::brief_ping("b")).unwrap();
        assert!(brief.contains(r#""brief":true"#), "{brief}");
        assert!(parse(&brief).brief);
        let plain = serde_json::to_string(&Request::ping("p")).unwrap();
        assert!(!plain.contains("brief"), "{plain}");
        assert!(!parse(r#"{"type":"ping"}"#).brief);
    }

    #[test]
    fn unknown_type_is_kept_and_rejected_with_id() {
        let req = parse(r#"{"type":"explode","id":"x1","correlation_id":"c"}"#);
        let err = req.validate(0).unwrap_err();
        assert_eq!(err.id, "x1");
        assert_eq!(err.correlation_id.as_deref(), Some("c"));
        assert_eq!(err.to_string(), "unknown request type: explode");
    }

    #[test]
    fn version_rules_apply_to_requests() {
        assert_eq!(parse(r#"{"type":"ping"}"#).validate(0), Ok(VersionStatus::Current));
        assert_eq!(
            parse(r#"{"type":"ping","version":"0.9"}"#).validate(0),
            Ok(VersionStatus::Deprecated)
        );
        let err = parse(r#"{"type":"ping","version":"7.1","id":"p"}"#).validate(0).unwrap_err();
        assert_eq!(err.to_string(), "unsupported protocol version: 7.1");
        assert_eq!(err.id, "p");
    }

    #[test]
    fn execute_and_cancel_need_an_id() {
        let err = parse(r#"{"type":"execute","task":"t"}"#).validate(0).unwrap_err();
        assert_eq!(err.to_string(), "missing field: id");
        let err = parse(r#"{"type":"cancel"}"#).validate(0).unwrap_err();
        assert_eq!(err.to_string(), "missing field: id");
        assert!(parse(r#"{"type":"ping"}"#).validate(0).is_ok());
    }

    #[test]
    fn execute_needs_a_task() {
        let err = parse(r#"{"type":"execute","id":"a","task":"  "}"#).validate(0).unwrap_err();
        assert_eq!(err.to_string(), "missing field: task");
    }

    #[test]
    fn expired_deadline_is_refused() {
        let req = parse(r#"{"type":"execute","id":"a","task":"t","deadline":100}"#);
        assert_eq!(req.validate(101).unwrap_err().to_string(), "request expired");
        assert!(req.validate(100).is_ok());
        assert!(req.validate(99).is_ok());
    }

    #[test]
    fn bad_secrets_are_refused_with_id() {
        let req = parse(r#"{"type":"execute","id":"a","task":"t","secrets":{"lower":"v"}}"#);
        let err = req.validate(0).unwrap_err();
        assert_eq!(err.id, "a");
        assert!(err.to_string().starts_with("secrets validation: invalid secret name"));
    }

    #[test]
    fn a_secret_under_8_bytes_is_refused_with_its_name() {
        let req = parse(
            r#"{"type":"execute","id":"a","correlation_id":"c","task":"t",
                "secrets":{"LONG":"long-enough","PIN":"1234"}}"#,
        );
        let err = req.validate(0).unwrap_err();
        assert_eq!((err.id.as_str(), err.correlation_id.as_deref()), ("a", Some("c")));
        let text = err.to_string();
        assert!(text.starts_with("secrets validation: secret PIN is too short: 4 bytes"), "{text}");
        assert!(!text.contains("1234"), "{text}");
        // Pings and cancels carry no secrets to check.
        assert!(parse(r#"{"type":"ping","secrets":{"PIN":"1"}}"#).validate(0).is_ok());
    }

    #[test]
    fn debug_never_shows_keys_or_secret_values() {
        let req = parse(
            r#"{"type":"execute","id":"a","task":"t","secrets":{"API_KEY":"value-one"},
                "llm_api_key":"value-two","llm_token":"value-three","egress_token":"value-four"}"#,
        );
        let dbg = format!("{req:?} {req:#?}");
        assert!(dbg.contains("API_KEY"));
        assert_eq!(req.egress_token.as_ref().unwrap().expose_secret(), "value-four");
        for v in ["value-one", "value-two", "value-three", "value-four"] {
            assert!(!dbg.contains(v), "{v} leaked into {dbg}");
        }
        assert_eq!(req.llm_token.as_ref().unwrap().expose_secret(), "value-three");
    }

    #[test]
    fn the_block_limit_is_additive_and_defaults_to_three() {
        // An old host's request has no field: the default holds, and nothing new is written.
        let old = parse(r#"{"type":"execute","id":"a","task":"t"}"#);
        assert_eq!(old.max_blocked_commands, None);
        assert_eq!(block_limit(old.max_blocked_commands), DEFAULT_MAX_BLOCKED_COMMANDS);
        assert!(!serde_json::to_string(&old).unwrap().contains("max_blocked_commands"));
        let new = parse(r#"{"type":"execute","id":"a","task":"t","max_blocked_commands":5}"#);
        assert_eq!(block_limit(new.max_blocked_commands), 5);
        assert!(serde_json::to_string(&new).unwrap().contains(r#""max_blocked_commands":5"#));
        assert_eq!(block_limit(Some(0)), 3, "0 means the default, never 'end at once'");
    }

    #[test]
    fn the_search_budget_is_additive_defaults_and_is_capped() {
        let old = parse(r#"{"type":"execute","id":"a","task":"t"}"#);
        assert_eq!(search_budget(old.search_budget), DEFAULT_SEARCH_BUDGET);
        assert!(!serde_json::to_string(&old).unwrap().contains("search_budget"));
        let new = parse(r#"{"type":"execute","id":"a","task":"t","search_budget":3}"#);
        assert_eq!(search_budget(new.search_budget), 3);
        assert!(serde_json::to_string(&new).unwrap().contains(r#""search_budget":3"#));
        assert_eq!(search_budget(Some(0)), DEFAULT_SEARCH_BUDGET, "0 means the default");
        assert_eq!(search_budget(Some(u32::MAX)), MAX_SEARCH_BUDGET);
    }

    #[test]
    fn wrong_field_type_is_a_parse_error() {
        assert!(serde_json::from_str::<Request>(r#"{"type":"execute","timeout":"soon"}"#).is_err());
    }
}
