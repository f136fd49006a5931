//! The host's integration tests, one test binary: the `nexbot` binary and runtime end to
//! end (CLI, chat, bus, hooks, deployment, delegation through the sandbox) and the egress
//! listener seen from containers on the shared internal test network.
//!
//! Every file here is a module of this one harness (`cargo test -p nexbot-host --test suite`),
//! so the crate is linked once; helpers shared by several files are modules too.

// The daemon's tests and benches drive `nexbot` (and docker, kill) as processes; the crate's
// clippy config refuses that to the daemon's own code only.
#![allow(clippy::disallowed_methods)]

mod common;
mod egress_support;

mod browser;
mod chat_tools;
mod control;
mod egress_dns;
mod egress_docker;
mod egress_fairness;
mod egress_pool;
mod host_approvals;
mod host_audit;
mod host_bus;
mod host_chat;
mod host_cli;
mod host_crash;
mod host_ctl_secrets;
mod host_decoys;
mod host_delegation;
mod host_deploy;
mod host_disk;
mod host_hooks;
mod host_llm;
mod host_llmock;
mod host_mcp_ops;
mod host_memory;
mod host_owner_questions;
mod host_remote;
mod host_scheduler;
mod host_search;
mod host_secrets;
mod host_selftest;
mod host_skill_grants;
mod host_skills;
mod host_use_cli;
mod mcp;
mod mcp_grants;
mod mcp_room_owner;
mod rooms;
mod telegram;
mod telegram_files;
mod telegram_voice;
mod web;
