//! The subagent binary driven over pipes, one test binary: protocol rules, agent runs
//! against the scripted LLM, and the sanitizer corpus.
//!
//! Every file here is a module of this one harness (`cargo test -p nexbot-subagent --test suite`),
//! so the crate is linked once; helpers shared by several files are modules too.

mod common;

mod agent;
mod files;
mod mcp_grants;
mod protocol;
mod sanitizer_corpus;
