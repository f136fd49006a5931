//! Responses from a subagent to the host, and helpers that build them so that every answer
//! carries the version and the echoed ids.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::mcp::McpCall;
use crate::report::{Report, Todo};
use crate::request::RequestError;
use crate::version::PROTOCOL_VERSION;

/// A `result` longer than this is cut and ends with [`TRUNCATED_MARKER`].
pub const MAX_RESULT_BYTES: usize = 1024 * 1024;
pub const TRUNCATED_MARKER: &str = "[TRUNCATED]";

/// One response line: the ids, the version, and a body chosen by `status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    #[serde(default)]
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    #[serde(default)]
    pub version: String,
    #[serde(flatten)]
    pub body: ResponseBody,
    /// On a final answer (`success`, `error`, `timeout`): what the subagent cleaned after the
    /// task, before answering. Added in 1.0 (additive, docs/protocol-history.md "Version history"):
    /// a host must treat its absence as "not known to be clean".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scrub: Option<Scrub>,
    /// On a final answer to an `execute` that ran: the names in the request's `tools` that
    /// this subagent does not offer, so it ran without them. Added in 1.0 (additive,
    /// docs/protocol-history.md "Version history"); absent means none were dropped (or an older
    /// subagent that does not say).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped_tools: Vec<String>,
}

/// The subagent's account of the clean-up after a task: every other process ended (also one
/// whose leader thread exited while others run) and reaped, the System V IPC objects removed,
/// its scratch, `/tmp`, `/dev/shm` and `/dev/mqueue` emptied, and the subagent itself is
/// pid 1 (no init a task could take over). `clean` is false when anything is left; the host
/// then does not reuse the container.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scrub {
    pub clean: bool,
    /// Processes ended.
    #[serde(default)]
    pub killed: u32,
    /// Directory entries removed (top level of each wiped folder), plus System V IPC objects.
    #[serde(default)]
    pub removed: u32,
    /// What is left, in words, when not clean.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub left: Option<String>,
    /// How long the scrub took, in microseconds, timed in the subagent (0 from one older
    /// than this field, and then not written: an older answer round-trips unchanged): the
    /// clean room's share of the time between two tasks.
    #[serde(default, skip_serializing_if = "untimed")]
    pub micros: u64,
    /// Processes the kernel killed for memory while the task ran (the container's cgroup
    /// `oom_kill` count's rise; 0, and not written, when none or when the subagent cannot
    /// read it, or from one older than this field). Above 0 the host condemns the container
    /// and the task fails as OOM-killed, whatever the answer says.
    #[serde(default, skip_serializing_if = "none_killed")]
    pub oom_kills: u32,
}

/// No memory kill counted (`oom_kills` 0).
fn none_killed(kills: &u32) -> bool {
    *kills == 0
}

/// A scrub nobody timed (`micros` 0).
fn untimed(micros: &u64) -> bool {
    *micros == 0
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum ResponseBody {
    Pong {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        capabilities: Option<Capabilities>,
    },
    Success {
        result: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Usage>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        iterations: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        duration_ms: Option<u64>,
        /// Search and fetch calls the task made against its search budget
        /// (`execute.search_budget`). Additive; absent from an older subagent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        searches: Option<u32>,
        /// Todo items (`update_todos`) still open when the model gave its final answer after
        /// the completion check asked once more. Additive; absent means none (or an older
        /// subagent).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        open_todos: Vec<Todo>,
        /// The files the task returned (`return_file`), by name: each came whole in `file`
        /// lines before this answer. Additive (`docs/protocol-files.md#files`); absent means none.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        files: Vec<String>,
    },
    Error {
        error: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        report: Option<Report>,
    },
    Timeout {
        error: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        report: Option<Report>,
    },
    Progress {
        event: ProgressEvent,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
    /// While an `execute` runs: the model called a granted MCP tool (`execute.mcp_tools`); the
    /// task waits for the host's `mcp_result` with this `call_id`. Not final. Additive: only a
    /// host that granted MCP tools gets one (`docs/protocol.md#mcp-tools`).
    #[serde(rename = "mcp_call")]
    McpCall {
        call_id: String,
        tool: String,
        #[serde(default)]
        arguments: Map<String, Value>,
    },
    /// Before the `success` of an `execute` with `return_files`: one chunk of a file the
    /// task returned, `data` the base64 of its bytes at `offset`, `size` the whole file's.
    /// Not final. Additive (`docs/protocol-files.md#files`).
    File { name: String, offset: u64, size: u64, data: String },
}

/// What a `pong` may tell the host about the subagent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    pub tools: Vec<String>,
    pub busy: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// The programs on the image's `PATH` (sorted), against which the host checks a skill's
    /// `requires`. Added in 1.0 without a version change: older subagents leave it out, and
    /// the host then treats every skill with `requires` as ineligible.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub programs: Option<Vec<String>>,
}

/// Token usage, as a response's `usage` carries it (the shared type of `nexbot-core`).
pub use nexbot_core::Usage;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProgressEvent {
    Iteration,
    ToolCall,
    ToolResult,
}

impl Response {
    fn new(id: &str, correlation_id: Option<&str>, body: ResponseBody) -> Self {
        Self {
            id: id.to_owned(),
            correlation_id: correlation_id.map(str::to_owned),
            version: PROTOCOL_VERSION.to_owned(),
            body,
            scrub: None,
            dropped_tools: Vec::new(),
        }
    }

    pub fn pong(
        id: &str,
        correlation_id: Option<&str>,
        capabilities: Option<Capabilities>,
    ) -> Self {
        Self::new(id, correlation_id, ResponseBody::Pong { capabilities })
    }

    /// A success; `result` is cut to [`MAX_RESULT_BYTES`] by [`truncate_result`].
    pub fn success(
        id: &str,
        correlation_id: Option<&str>,
        result: String,
        usage: Usage,
        iterations: u32,
        duration_ms: u64,
    ) -> Self {
        Self::new(
            id,
            correlation_id,
            ResponseBody::Success {
                result: truncate_result(result),
                usage: Some(usage),
                iterations: Some(iterations),
                duration_ms: Some(duration_ms),
                searches: None,
                open_todos: Vec::new(),
                files: Vec::new(),
            },
        )
    }

    /// One chunk of returned file `name` (`size` bytes in all): `data` is the base64 of its
    /// bytes at `offset` ([`crate::TaskFile::chunks`]).
    pub fn file(
        id: &str,
        correlation_id: Option<&str>,
        name: &str,
        offset: u64,
        size: u64,
        data: String,
    ) -> Self {
        Self::new(
            id,
            correlation_id,
            ResponseBody::File { name: name.to_owned(), offset, size, data },
        )
    }

    pub fn error(
        id: &str,
        correlation_id: Option<&str>,
        error: impl Into<String>,
        report: Option<Report>,
    ) -> Self {
        Self::new(id, correlation_id, ResponseBody::Error { error: error.into(), report })
    }

    pub fn timeout(
        id: &str,
        correlation_id: Option<&str>,
        error: impl Into<String>,
        report: Report,
    ) -> Self {
        Self::new(
            id,
            correlation_id,
            ResponseBody::Timeout { error: error.into(), report: Some(report) },
        )
    }

    pub fn progress(
        id: &str,
        correlation_id: Option<&str>,
        event: ProgressEvent,
        tool: Option<String>,
        detail: Option<String>,
    ) -> Self {
        Self::new(id, correlation_id, ResponseBody::Progress { event, tool, detail })
    }

    /// A task's `call` of a granted MCP tool (its `task_id` is the line's `id`).
    pub fn mcp_call(correlation_id: Option<&str>, call: McpCall) -> Self {
        let McpCall { task_id, call_id, tool, arguments } = call;
        Self::new(&task_id, correlation_id, ResponseBody::McpCall { call_id, tool, arguments })
    }

    /// The MCP call this line asks for, when it is an `mcp_call`.
    pub fn as_mcp_call(&self) -> Option<McpCall> {
        match &self.body {
            ResponseBody::McpCall { call_id, tool, arguments } => Some(McpCall {
                task_id: self.id.clone(),
                call_id: call_id.clone(),
                tool: tool.clone(),
                arguments: arguments.clone(),
            }),
            _ => None,
        }
    }

    /// The error response for a request that failed validation.
    pub fn from_request_error(err: &RequestError) -> Self {
        Self::error(&err.id, err.correlation_id.as_deref(), err.to_string(), None)
    }

    /// `true` for the statuses that end a request (everything but `progress` and
    /// `mcp_call`).
    pub fn is_final(&self) -> bool {
        !matches!(
            self.body,
            ResponseBody::Progress { .. }
                | ResponseBody::McpCall { .. }
                | ResponseBody::File { .. }
        )
    }

    pub fn status(&self) -> &'static str {
        match self.body {
            ResponseBody::Pong { .. } => "pong",
            ResponseBody::Success { .. } => "success",
            ResponseBody::Error { .. } => "error",
            ResponseBody::Timeout { .. } => "timeout",
            ResponseBody::Progress { .. } => "progress",
            ResponseBody::McpCall { .. } => "mcp_call",
            ResponseBody::File { .. } => "file",
        }
    }
}

/// Cuts `result` to at most [`MAX_RESULT_BYTES`] (on a character boundary), ending it with
/// [`TRUNCATED_MARKER`] when anything was cut.
pub fn truncate_result(mut result: String) -> String {
    if result.len() <= MAX_RESULT_BYTES {
        return result;
    }
    let mut cut = MAX_RESULT_BYTES - TRUNCATED_MARKER.len();
    while !result.is_char_boundary(cut) {
        cut -= 1;
    }
    result.truncate(cut);
    result.push_str(TRUNCATED_MARKER);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_helper_stamps_the_version_and_ids() {
        let responses = [
            Response::pong("a", Some("c"), None),
            Response::success("a", Some("c"), "r".into(), Usage::default(), 1, 2),
            Response::error("a", Some("c"), "e", None),
            Response::progress("a", Some("c"), ProgressEvent::ToolCall, Some("t".into()), None),
        ];
        for r in responses {
            let v = serde_json::to_value(&r).unwrap();
            assert_eq!(v["version"], "1.0");
            assert_eq!(v["id"], "a");
            assert_eq!(v["correlation_id"], "c");
            assert_eq!(v["status"], r.status());
        }
    }

    #[test]
    fn success_carries_usage_iterations_duration() {
        let usage = Usage { prompt_tokens: 10, completion_tokens: 5 };
        let v =
            serde_json::to_value(Response::success("a", None, "ok".into(), usage, 3, 42)).unwrap();
        assert_eq!(v["usage"]["prompt_tokens"], 10);
        assert_eq!(v["usage"]["completion_tokens"], 5);
        assert_eq!(v["iterations"], 3);
        assert_eq!(v["duration_ms"], 42);
        assert!(v.get("correlation_id").is_none());
    }

    #[test]
    fn progress_event_names() {
        let v = serde_json::to_value(Response::progress(
            "a",
            None,
            ProgressEvent::ToolResult,
            None,
            Some("d".into()),
        ))
        .unwrap();
        assert_eq!(v["event"], "tool_result");
        assert!(!Response::progress("a", None, ProgressEvent::Iteration, None, None).is_final());
    }

    #[test]
    fn long_results_are_truncated_with_marker() {
        let big = "ж".repeat(MAX_RESULT_BYTES);
        let out = truncate_result(big);
        assert!(out.len() <= MAX_RESULT_BYTES);
        assert!(out.ends_with(TRUNCATED_MARKER));
        let exact = "a".repeat(MAX_RESULT_BYTES);
        assert_eq!(truncate_result(exact.clone()), exact);
        let r =
            Response::success("a", None, "b".repeat(MAX_RESULT_BYTES + 1), Usage::default(), 0, 0);
        match r.body {
            ResponseBody::Success { result, .. } => assert!(result.ends_with(TRUNCATED_MARKER)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn dropped_tools_are_sent_only_when_there_are_some() {
        let mut r = Response::success("a", None, "ok".into(), Usage::default(), 1, 1);
        let v = serde_json::to_value(&r).unwrap();
        assert!(v.get("dropped_tools").is_none(), "{v}");
        r.dropped_tools = vec!["web_search".into()];
        let text = serde_json::to_string(&r).unwrap();
        assert!(text.contains(r#""dropped_tools":["web_search"]"#), "{text}");
        assert_eq!(serde_json::from_str::<Response>(&text).unwrap(), r);
        let old: Response =
            serde_json::from_str(r#"{"id":"a","status":"success","result":"ok"}"#).unwrap();
        assert!(old.dropped_tools.is_empty());
    }

    #[test]
    fn unknown_status_does_not_parse() {
        assert!(serde_json::from_str::<Response>(r#"{"id":"a","status":"weird"}"#).is_err());
    }
}
