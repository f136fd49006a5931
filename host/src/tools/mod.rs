//! The main agent's tools, as the host carries them out: files in the chat's room, memory,
//! todos, messages, skills, schedules, and delegation to the sandbox. The trait they implement
//! and the registry are `nexbot-agent`'s ([`nexbot_agent::tools`], re-exported here). None of
//! these tools runs a shell command on the host.

pub use nexbot_agent::tools::*;

pub mod ask_user;
pub mod delegate;
pub mod files;
pub mod manage_message;
pub mod memory;
pub mod schedule;
pub mod search;
pub mod send_file;
pub mod send_message;
pub mod skills;
pub mod tasks;

#[cfg(test)]
mod names_tests;
