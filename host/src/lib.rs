//! The host daemon: the main agent, its channels (console now; Telegram later), tools, state
//! and the message bus. It decides what to do; risky work is delegated to the subagent pool in
//! `nexbot-docker`, and the host itself never runs a model-chosen command.
//!
//! - [`config`]: TOML + `NEXBOT_*` environment, secrets from the environment only.
//! - [`workspace`]: bootstrap files, `nexbot init`, the system prompt.
//! - [`llm`]: the OpenAI-compatible provider with retries.
//! - [`agent`]: the tool-calling loop and its hooks.
//! - [`tools`]: file tools confined to the workspace, memory, todos, delegation, send_message.
//! - [`store`]: SQLite state. [`bus`]: queues and per-chat turns. [`console`]: `nexbot chat`.
//! - [`subagent`]: the seams to the container pool; [`pool_runner`]: the pool behind it.
//! - [`egress`] (the `nexbot-egress` crate): the sandbox's only way out — forward proxy and LLM
//!   relay with per-task tokens.
//! - [`sandbox`]: network + egress + pool started together and stopped in order.
//! - [`runtime`]: wiring. [`doctor`]: checks.

pub mod agent;
pub mod bus;
pub mod config;
pub mod console;
pub mod doctor;
pub mod llm;
pub mod pool_runner;
pub mod runtime;
pub mod sandbox;
pub mod store;
pub mod subagent;
pub mod tools;
pub mod workspace;

pub use nexbot_egress as egress;
