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

pub mod agent;
pub mod hooks;
pub mod llm;
pub mod logging;
pub mod net;
pub mod output;
pub mod redaction;
pub mod sanitizer;
pub mod scrub;
pub mod secrets;
pub mod server;
pub mod task;
pub mod tools;
pub mod warm;
