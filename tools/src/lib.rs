//! The main agent's tools in a chat's room: files and search confined to the chat's folder
//! ([`rooms`]), memory, todos, messages, the skills it may read, and questions to the user.
//!
//! Why a crate of its own: nothing model-chosen may run on the host, and these tools are where
//! the model's arguments meet the host's disk and chats. This crate's `clippy.toml` refuses
//! starting a process, and its dependencies hold no channel, no Docker and no egress, so both
//! rules are the compiler's, not a reading of the sources. The tools that need the daemon's
//! parts (delegation to the sandbox, schedules) stay in `nexbot-host`.

pub mod ask_user;
pub mod files;
pub mod manage_message;
pub mod memory;
pub mod rooms;
pub mod search;
pub mod send_file;
pub mod send_message;
pub mod skills;
pub mod tasks;
