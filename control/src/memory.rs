//! A chat's long-term memory for the operator (`nexbot-ctl memory ls|search|rm`, the
//! dashboard's Memory page): bodies and paths.

use serde::{Deserialize, Serialize};

/// The memory's paths.
pub mod memory_paths {
    /// `GET ?chat=CHAT[&q=WORDS][&limit=N]`: the chat's newest entries, or those matching `q`
    /// best first ([`super::MemoryList`]).
    pub const MEMORY: &str = "/v1/memory";
    /// `POST` a [`super::MemoryForget`]: removes one entry, or all of the chat's.
    pub const MEMORY_FORGET: &str = "/v1/memory/forget";
}

/// One entry as the operator sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryEntry {
    pub id: i64,
    pub text: String,
    /// `operator`, `user` or `data` (from outside the chat's own words).
    pub trust: String,
    /// Where it came from, in words.
    pub source: String,
    /// Unix seconds.
    pub created_at: i64,
    pub uses: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryList {
    pub chat: String,
    pub entries: Vec<MemoryEntry>,
    /// The chat's whole memory: entries, characters, entries from outside.
    pub total: u64,
    pub bytes: u64,
    pub outside: u64,
}

/// `POST /v1/memory/forget`: entry `id` of `chat`, or every entry with `all`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryForget {
    pub chat: String,
    #[serde(default)]
    pub id: Option<i64>,
    #[serde(default)]
    pub all: bool,
}
