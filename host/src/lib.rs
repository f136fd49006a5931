//! The host daemon: the main agent, its channels (console and Telegram), tools, state
//! and the message bus. It decides what to do; risky work is delegated to the subagent pool in
//! `nexbot-docker`, and the host itself never runs a model-chosen command.
//!
//! - [`config`]: TOML + `NEXBOT_*` environment, secrets from the environment only.
//! - [`workspace`]: bootstrap files, `nexbot init`, the system prompt.
//! - [`llm`]: the OpenAI-compatible provider with retries.
//! - [`agent`]: the tool-calling loop, its hooks, and [`agent::channel::Channel`], the chat
//!   operations it needs (it knows no concrete channel).
//! - [`tools`]: file tools confined to the workspace, memory, todos, delegation, send_message.
//! - [`store`]: SQLite state (and the Telegram update ledger). [`bus`]: queues and per-chat
//!   turns. [`commands`]: `/start`, `/help`, `/new`, `/stop`, `/status`, `/agent`, `/secret`,
//!   shared by every channel; [`status`]: the lines `/status` shows.
//! - [`channels`]: the outbound router and the channels (the console of `nexbot chat`, and
//!   Telegram from `nexbot-telegram`, wired in `channels::telegram`).
//! - [`deadlines`]: every limit of a delegated task, computed in one place.
//! - [`delegation`]: the seams to the container pool; [`pool_runner`]: the pool behind it.
//! - [`egress`] (the `nexbot-egress` crate): the sandbox's only way out — forward proxy and LLM
//!   relay with per-task tokens.
//! - [`sandbox`]: network + egress + pool started together and stopped in order.
//! - [`control_api`]: the operator's API for `nexbot-ctl` on a Unix socket, and `/metrics`;
//!   [`instance`]: one daemon per data directory.
//! - [`app`]: the daemon's life cycle (start and stop order). [`runtime`]: builds the agent.
//!   [`doctor`]: checks.

pub mod agent;
pub mod app;
pub mod approvals;
pub mod bus;
pub mod channels;
pub mod commands;
pub mod config;
pub mod control_api;
pub mod deadlines;
pub mod delegation;
pub mod doctor;
pub mod exits;
pub mod instance;
pub mod llm;
pub mod pool_runner;
pub mod rooms;
pub mod runtime;
pub mod sandbox;
pub mod scheduler;
pub mod skills;
pub mod spend;
pub mod status;
pub mod store;
pub mod tools;
pub mod vault;
pub mod workspace;

pub use nexbot_core::BoxFuture;

#[cfg(test)]
mod architecture_tests;

pub use nexbot_egress as egress;
