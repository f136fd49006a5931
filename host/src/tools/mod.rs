//! The main agent's tools that need the daemon's parts: schedules (the scheduler), and
//! delegation to the sandbox (`nexbot-delegation`'s, re-exported here). The tools of a chat's room — files,
//! search, memory, todos, messages, skills, questions — are `nexbot-tools`' and the trait and
//! registry `nexbot-agent`'s; both are re-exported here. None of them starts a process
//! (`clippy.toml` of each crate).

pub use nexbot_agent::tools::*;
pub use nexbot_tools::{
    ask_user, files, manage_message, memory, search, send_file, send_message, skills, tasks,
};

pub use nexbot_delegation::{delegate, mcp_grants};
pub mod schedule;

#[cfg(test)]
mod names_tests;
