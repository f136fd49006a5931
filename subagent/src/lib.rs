//! `nexbot-subagent`: the program inside every sandbox container.
//!
//! It speaks the host ⇄ subagent protocol (`docs/protocol.md`) as JSON lines on stdin/stdout,
//! runs one task at a time as a tool-calling agent against an OpenAI-compatible endpoint, and
//! logs JSON lines on stderr. The crate is a library plus a thin `main.rs` so that the pieces
//! (sanitizer, tools, secrets) can be unit-tested on their own; the protocol itself is tested
//! end to end by driving the real binary over pipes (`tests/`).
//!
//! - [`server`]: the stdin reader, dispatch, and the one task slot.
//! - [`output`]: the single stdout writer, so response lines never interleave.
//! - [`logging`]: the JSON log layer for `tracing` (stderr), with secret redaction.
//! - [`redaction`]: the process-wide "what must never be printed" set shared by both.
//! - [`llm`]: where the LLM settings come from (request fields, then environment), and the
//!   `nexbot-llm` client they make.
//! - [`hooks`]: the task loop's hooks (completion check, safety, search budget, timeout
//!   report) on the contract the main agent uses too.
//! - [`warm`]: what a first task would build lazily, built before the first ping is answered.
//! - [`agent`]: the task loop — bounded iterations and tokens (API `usage`, else
//!   `nexbot-llm`'s estimate), the conversation fitted into the context window before every
//!   call (`nexbot_llm::context::fit_keeping`: the system prompt, the task and the last call's
//!   results stay), soft timeout → `timeout` with a report, cancel → `error` with a report, the
//!   `update_todos` planning tool. Every hook event goes to [`hooks`]'s four, in the seeds'
//!   order; the events, results and "first non-continue wins" are `nexbot_core::hooks`.
//! - [`tools`]: one registry table (name, description, schema, handler) whose names are
//!   `nexbot_protocol::SUBAGENT_TOOLS`, the one list the host reads too (a test holds them
//!   equal): `web_fetch`, `http_request`, `run_command` (blocked-pattern screen, process-group
//!   kill, head+tail output cap; at the request's `max_blocked_commands` refusals the task ends
//!   with an `error`), the file tools confined to scratch, `search_files`/`search_text` over
//!   `nexbot-fsearch`, `read_skill` through `nexbot-skill` (the host's strictness and screen),
//!   `use_cli` (`tools/cli.rs`: a coding CLI run like `run_command`'s children, its model only
//!   through the relay with the task's token; offered only when the image has the CLI). The
//!   request's `tools` whitelists them; names it does not offer are dropped and reported; an
//!   alias (`nexbot_protocol::TOOL_ALIASES`) is read as its tool, only the canonical name is
//!   offered.
//! - [`programs`]: the small programs of the image in this binary (`pdftotext`, `imgconv`), run
//!   by the name it is started under.
//! - [`mcp`]: the MCP tools a task was granted (`execute.mcp_tools`): offered to the model,
//!   each call asked of the host (`mcp_call`) and its answer awaited (`mcp_result`), bounded
//!   by the task's deadline and cancel.
//! - [`secrets`]: the task's stdin-mode secrets (zeroized at task end, expiring after
//!   [`secrets::SECRET_TTL`]); `$NAME` / `{{secret:NAME}}` filled only at execution;
//!   `run_command` gets a secret only in that child's environment.
//! - [`sanitizer`]: external text wrapped in `<<<EXTERNAL_CONTENT ...>>>` with a "data, not
//!   instructions" note; injection patterns scored and neutralized span by span.
//! - [`net`]: the network tools' client (rustls with web roots, proxy from `HTTP(S)_PROXY` /
//!   `NO_PROXY`, hickory DNS because static glibc cannot resolve in a scratch image, no idle
//!   connections kept); it presents the task's egress credential as `Proxy-Authorization`,
//!   and puts it into the proxy variables of the commands it runs.
//! - [`oom`]: the kernel's memory kills during a task, counted in its answer's scrub.
//! - [`scrub`]: the clean room between tasks (not dumpable, pid 1, every other process killed
//!   and scratch, `/tmp`, `/dev/shm`, `/dev/mqueue` and System V IPC emptied before the answer).

pub mod agent;
pub mod hooks;
pub mod implant;
pub mod llm;
pub mod logging;
pub mod mcp;
pub mod net;
pub mod oom;
pub mod output;
pub mod programs;
pub mod redaction;
pub mod sanitizer;
pub mod scrub;
pub mod secrets;
pub mod server;
pub mod task;
pub mod tools;
pub mod warm;
