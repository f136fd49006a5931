//! Delegation: a delegated task from the main agent's side — its record in the store, the
//! chat's secrets handed over by name, the turn's cancellation reaching it, every limit it
//! runs under, and what the model reads of its result (`delegate_to_sub_agent`).
//!
//! Why a crate of its own: the daemon's composition root (`nexbot-host`) only wires it. It
//! knows no Docker and no channel: the container pool is behind [`SubagentRunner`], the
//! relay's per-task tokens and the proxy's grants behind [`LlmAccess`], the questions a task
//! asks behind [`TaskQuestions`]; the host plugs in `nexbot-docker`'s pool and the egress
//! (`pool_runner.rs`, `sandbox.rs`). So what a task is given and what comes back of it is
//! decided in one place that can be read and tested alone.
//!
//! - [`delegate`]: the delegation tool (`delegate_to_sub_agent`, alias `spawn`), and
//!   [`delegate::SecretSource`], the chat's secrets by name.
//! - the seams (this module's root): [`SubagentRunner`], [`LlmAccess`], [`TaskQuestions`],
//!   [`SubagentOutcome`] and [`SubagentError`].
//! - [`deadlines`]: every limit of a delegated task, computed in one place from
//!   [`deadlines::TaskLimits`] (the host builds them from its configuration).
//! - [`mcp_grants`]: the chat's MCP tools a delegation grants its task, called here.
//! - [`skill_grants`]: the destinations the skills a turn read declare, granted to its tasks.
//! - [`decoy_traps`]: the tasks given a decoy secret, for the alarm when one is sent.

pub mod deadlines;
pub mod decoy_traps;
pub mod delegate;
pub mod mcp_grants;
mod seams;
pub mod skill_grants;

pub use seams::*;
