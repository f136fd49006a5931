//! What a chat keeps between its turns: its sessions and their history, its todos, and its
//! settings (tables `sessions`, `history`, `todos`, `chat_settings`).
//!
//! Why together: a session is a chat's conversation, and its history, todos and settings are
//! read and written by the same turn; the token sums over history are counted in [`crate::usage`].

use rusqlite::{params, OptionalExtension};

use nexbot_core::{ChatRef, Usage};

use crate::{unix_now, Store, StoreError};

/// The per-chat setting `/agent` keeps: `on` (the default) or `off`.
pub const AGENT_MODE_SETTING: &str = "agent_mode";

/// The per-chat setting of which coding CLI answers the chat while its agent mode is off
/// (`/agent cli <name>`): a name of [`AGENT_CLIS`], or `none` (the default: the model alone).
pub const AGENT_CLI_SETTING: &str = "agent_cli";

/// The coding CLIs a chat can choose: the ones the CLI image variant carries (`use_cli`).
pub const AGENT_CLIS: &[&str] = &["qwen"];

/// A message of a session's history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryEntry {
    pub role: String,
    pub content: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Todo {
    pub id: i64,
    pub text: String,
    pub done: bool,
}

impl Store {
    /// The chat's active session, created on first use.
    pub async fn active_session(&self, chat: &ChatRef) -> Result<i64, StoreError> {
        let chat = chat.to_string();
        self.call(move |c| {
            let found = c
                .query_row(
                    "SELECT id FROM sessions WHERE chat_id = ?1 AND active = 1 ORDER BY id DESC",
                    [&chat],
                    |r| r.get(0),
                )
                .optional()?;
            match found {
                Some(id) => Ok(id),
                None => {
                    c.execute(
                        "INSERT INTO sessions (chat_id, created_at) VALUES (?1, ?2)",
                        params![chat, unix_now()],
                    )?;
                    Ok(c.last_insert_rowid())
                }
            }
        })
        .await
    }

    /// Closes the chat's active session and opens a fresh one (history starts empty).
    pub async fn new_session(&self, chat: &ChatRef) -> Result<i64, StoreError> {
        let chat = chat.to_string();
        self.call(move |c| {
            let tx = c.transaction()?;
            tx.execute("UPDATE sessions SET active = 0 WHERE chat_id = ?1", [&chat])?;
            tx.execute(
                "INSERT INTO sessions (chat_id, created_at) VALUES (?1, ?2)",
                params![chat, unix_now()],
            )?;
            let id = tx.last_insert_rowid();
            tx.commit()?;
            Ok(id)
        })
        .await
    }

    /// The last `limit` messages of a session, oldest first.
    pub async fn history(
        &self,
        session_id: i64,
        limit: usize,
    ) -> Result<Vec<HistoryEntry>, StoreError> {
        self.call(move |c| {
            let mut stmt = c.prepare(
                "SELECT role, content FROM (SELECT id, role, content FROM history
                 WHERE session_id = ?1 ORDER BY id DESC LIMIT ?2) ORDER BY id",
            )?;
            let rows = stmt.query_map(params![session_id, limit as i64], |r| {
                Ok(HistoryEntry { role: r.get(0)?, content: r.get(1)? })
            })?;
            rows.collect()
        })
        .await
    }

    /// Stores one finished turn: the user's message and the answer, with the turn's usage.
    pub async fn append_turn(
        &self,
        session_id: i64,
        user: &str,
        assistant: &str,
        usage: Usage,
    ) -> Result<(), StoreError> {
        let (user, assistant) = (user.to_owned(), assistant.to_owned());
        self.call(move |c| {
            let tx = c.transaction()?;
            let now = unix_now();
            tx.execute(
                "INSERT INTO history (session_id, role, content, created_at)
                 VALUES (?1, 'user', ?2, ?3)",
                params![session_id, user, now],
            )?;
            tx.execute(
                "INSERT INTO history (session_id, role, content, prompt_tokens,
                 completion_tokens, created_at) VALUES (?1, 'assistant', ?2, ?3, ?4, ?5)",
                params![
                    session_id,
                    assistant,
                    usage.prompt_tokens as i64,
                    usage.completion_tokens as i64,
                    now
                ],
            )?;
            tx.commit()
        })
        .await
    }

    pub async fn add_todo(&self, session_id: i64, text: &str) -> Result<i64, StoreError> {
        let text = text.to_owned();
        self.call(move |c| {
            c.execute(
                "INSERT INTO todos (session_id, text, created_at) VALUES (?1, ?2, ?3)",
                params![session_id, text, unix_now()],
            )?;
            Ok(c.last_insert_rowid())
        })
        .await
    }

    pub async fn todos(&self, session_id: i64) -> Result<Vec<Todo>, StoreError> {
        self.call(move |c| {
            let mut stmt =
                c.prepare("SELECT id, text, done FROM todos WHERE session_id = ?1 ORDER BY id")?;
            let rows = stmt.query_map([session_id], |r| {
                Ok(Todo { id: r.get(0)?, text: r.get(1)?, done: r.get(2)? })
            })?;
            rows.collect()
        })
        .await
    }

    /// Marks a todo done; `false` when the session has no such todo.
    pub async fn complete_todo(&self, session_id: i64, id: i64) -> Result<bool, StoreError> {
        self.call(move |c| {
            c.execute(
                "UPDATE todos SET done = 1 WHERE session_id = ?1 AND id = ?2",
                params![session_id, id],
            )
            .map(|n| n > 0)
        })
        .await
    }

    pub async fn remove_todo(&self, session_id: i64, id: i64) -> Result<bool, StoreError> {
        self.call(move |c| {
            c.execute(
                "DELETE FROM todos WHERE session_id = ?1 AND id = ?2",
                params![session_id, id],
            )
            .map(|n| n > 0)
        })
        .await
    }

    pub async fn clear_todos(&self, session_id: i64) -> Result<usize, StoreError> {
        self.call(move |c| c.execute("DELETE FROM todos WHERE session_id = ?1", [session_id])).await
    }

    pub async fn setting(&self, chat: &ChatRef, key: &str) -> Result<Option<String>, StoreError> {
        let (chat, key) = (chat.to_string(), key.to_owned());
        self.call(move |c| {
            c.query_row(
                "SELECT value FROM chat_settings WHERE chat_id = ?1 AND key = ?2",
                params![chat, key],
                |r| r.get(0),
            )
            .optional()
        })
        .await
    }

    /// Whether the chat's agent mode (`/agent`) is on — the default — or off.
    pub async fn agent_mode_on(&self, chat: &ChatRef) -> bool {
        !matches!(self.setting(chat, AGENT_MODE_SETTING).await, Ok(Some(v)) if v == "off")
    }

    /// The coding CLI the chat chose for agent mode off, if any ([`AGENT_CLI_SETTING`]).
    pub async fn agent_cli(&self, chat: &ChatRef) -> Option<String> {
        match self.setting(chat, AGENT_CLI_SETTING).await {
            Ok(Some(name)) if AGENT_CLIS.contains(&name.as_str()) => Some(name),
            _ => None,
        }
    }

    pub async fn set_setting(
        &self,
        chat: &ChatRef,
        key: &str,
        value: &str,
    ) -> Result<(), StoreError> {
        let (chat, key, value) = (chat.to_string(), key.to_owned(), value.to_owned());
        self.call(move |c| {
            c.execute(
                "INSERT INTO chat_settings (chat_id, key, value) VALUES (?1, ?2, ?3)
                 ON CONFLICT (chat_id, key) DO UPDATE SET value = excluded.value",
                params![chat, key, value],
            )
            .map(drop)
        })
        .await
    }
}
