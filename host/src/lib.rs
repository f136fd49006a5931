//! The host daemon: the main agent, its channels (Telegram, console), tools, state, scheduler
//! and control API. It decides what to do; risky work is delegated to the subagent pool in
//! `nexbot-docker`, and the host itself never runs a model-chosen command.

pub mod egress;
