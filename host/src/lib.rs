//! The host daemon (`nexbot`): the composition root that wires the agent (`nexbot-agent`) to
//! its channels (console and Telegram), its tools, the store, the scheduler, the vault, the
//! control API and the sandbox. The agent decides; the host carries out, and never runs a
//! model-chosen command itself: risky work is delegated to the subagent pool in
//! `nexbot-docker`, reached through `nexbot-egress`.
//!
//! - [`cli`]: the `nexbot` program, its commands (`bin/nexbot.rs` only calls it: the async
//!   code it runs is compiled once, in this crate). [`app`]: the daemon's life cycle (start and
//!   stop order). [`runtime`]: builds the agent with every tool from the config.
//! - [`config`]: TOML + `NEXBOT_*` environment, secrets from the environment only.
//! - [`workspace`]: `nexbot init` (the bootstrap files and the prompt are
//!   [`agent::workspace`]'s). [`rooms`]: one folder per chat, the file tools' root.
//! - [`tools`]: the host's tools (files in the chat's room, memory, todos, messages, skills,
//!   schedules, and delegation from [`delegation`]) on [`agent::tools`]'s trait.
//! - [`inbox`] (files users send, voice heard) and [`voice`] (answers spoken) are
//!   `nexbot-channels`'.
//! - [`bus`]: queues and per-chat turns (admitted by [`agent::turns`]). [`commands`]
//!   (`nexbot-commands`): the chat commands every channel shares; [`status`]: the lines
//!   `/status` shows; [`memory`]: an older `MEMORY.md` imported once; [`disk`]: the data
//!   directory's free space, degraded when low.
//! - [`channels`]: the outbound router and the console of `nexbot chat` (`nexbot-channels`), and
//!   Telegram from `nexbot-telegram`, wired in `channels::telegram`.
//! - [`scheduler`] (`nexbot-scheduler`): scheduled jobs and the heartbeat, run as turns of
//!   their chat; wired in [`app`].
//! - [`delegation`] (`nexbot-delegation`): a delegated task from the main agent's side (the
//!   seams to the pool, the tool, [`deadlines`], [`skill_grants`]); [`pool_runner`]: the pool
//!   behind it, and the limits it is planned with.
//! - [`sandbox`]: network + egress + pool started together and stopped in order.
//!   [`decoys`]: the decoy secrets' alarm (the owner told, the task stopped). [`selftest`]:
//!   the owner's attacks on the walls (`/selftest`, `nexbot doctor --attack`) wired in.
//! - [`control_api`]: `nexbot-control-api` (the operator's API for `nexbot-ctl`, `/metrics`
//!   and the dashboard) wired in; [`reload`]: the config read again on `nexbot-ctl reload`
//!   and SIGHUP; [`status`]: `nexbot-core`'s board of running parts; [`instance`]: one daemon per data directory. [`doctor`]: checks, each with its fix.
//!
//! The crates the host wires are re-exported as its modules: [`agent`] (with
//! [`exits`], [`llm`], [`skills`], [`spend`]), [`egress`], [`mcp`] (`nexbot-mcp-host`: the MCP
//! servers in the sandbox), [`store`] and [`vault`] (the
//! secrets vault, over [`store`]'s sealed rows); [`approvals`] is `nexbot-approvals` with the
//! commands its buttons press.

pub mod app;
pub mod approvals;
pub mod audit_head;
pub mod bus;
pub mod channels;
pub mod cli;
pub mod config;
pub mod control_api;
pub mod decoys;
pub mod disk;
pub mod doctor;
pub mod egress_node;
pub mod images;
pub mod instance;
pub mod interrupted;
pub mod memory;
pub mod pool_runner;
pub mod reload;
pub mod remote_skills;
pub mod runtime;
pub mod sandbox;
pub mod selftest;

pub mod tools;
pub mod workspace;

pub use nexbot_core::status;
pub use nexbot_core::BoxFuture;

pub use nexbot_agent as agent;
pub use nexbot_agent::{exits, llm, skills, spend};
pub use nexbot_channels::{inbox, voice};
pub use nexbot_commands as commands;
pub use nexbot_delegation as delegation;
pub use nexbot_delegation::{deadlines, skill_grants};
pub use nexbot_egress as egress;
pub use nexbot_mcp_host as mcp;
pub use nexbot_scheduler as scheduler;
pub use nexbot_store as store;
pub use nexbot_tools::rooms;
pub use nexbot_vault as vault;
