//! The protocol's integration tests, one test binary: the seed examples, the decoder
//! against arbitrary input, and secrets that never leak.
//!
//! Every file here is a module of this one harness (`cargo test -p nexbot-protocol --test suite`),
//! so the crate is linked once; helpers shared by several files are modules too.

mod decoder_fuzz;
mod mcp_grants;
mod secrets_never_leak;
mod seed_examples;
