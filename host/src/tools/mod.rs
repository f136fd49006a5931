//! The main agent's tools, re-exported from where each lives: schedules (`nexbot-scheduler`'s
//! `schedule_task`), delegation to the sandbox (`nexbot-delegation`'s). The tools of a chat's room — files,
//! search, memory, todos, messages, skills, questions — are `nexbot-tools`' and the trait and
//! registry `nexbot-agent`'s; both are re-exported here. None of them starts a process
//! (`clippy.toml` of each crate).

pub use nexbot_agent::tools::*;
pub use nexbot_tools::{
    ask_user, files, manage_message, memory, search, send_file, send_message, skills, tasks,
};

pub use nexbot_delegation::{delegate, mcp_grants};
pub use nexbot_scheduler::tool as schedule;

#[cfg(test)]
mod names_tests;
